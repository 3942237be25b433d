package rttier

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestMeasureIdleSockets (SSP2_TIER_MEASURE=N, loopback, bounded) opens N
// idle sockets on one instance and reports heap and goroutines per
// socket. Clients and server share the process, so the figure is an
// upper bound of the server's share (docs/REALTIME.md sizes the tasks
// with it). SSP2_TIER_MEASURE_TLS=1 measures wss:// sockets (TLS ended
// by the tier, ECDSA P-256 certificate) and the CPU time per handshake.
func TestMeasureIdleSockets(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SSP2_TIER_MEASURE"))
	if n <= 0 {
		t.Skip("set SSP2_TIER_MEASURE=<sockets> to measure")
	}
	n = min(n, 5000)
	st := newStack(t)
	tlsOn := os.Getenv("SSP2_TIER_MEASURE_TLS") == "1"
	if tlsOn {
		ca := newTestCA(t, "measure CA")
		chain, key := ca.issue(t, 1, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
		st.tls = &tlsSetup{store: newSecretStore(t, certJSON(t, chain, key)), client: trusting(ca)}
	}
	in := st.start("inst-m")
	snap := func() (uint64, int) {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse + ms.StackInuse, runtime.NumGoroutine()
	}
	mem0, g0 := snap()
	conns := make([]*websocket.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.CloseNow()
		}
	}()
	start, cpu0 := time.Now(), cpuTime(t)
	base := "ws" + strings.TrimPrefix(in.url, "http") + "/realtime?token="
	var tok string
	for i := range n {
		if i%500 == 0 { // under the per-actor connection cap
			tok = url.QueryEscape(st.token(fmt.Sprintf("idle-%d", i/500)))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, _, err := websocket.Dial(ctx, base+tok+fmt.Sprintf("&clientId=idle-%d", i), &websocket.DialOptions{HTTPClient: in.client})
		cancel()
		if err != nil {
			t.Fatalf("socket %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	opened, cpu := time.Since(start), cpuTime(t)-cpu0
	time.Sleep(time.Second)
	mem1, g1 := snap()
	t.Logf("TLS %v: %d idle sockets opened in %v, %.2f ms CPU per connect (both ends, upgrade and hello included); heap+stacks %.1f KiB and %.1f goroutines per socket (clients included); server counts %d",
		tlsOn, n, opened.Round(time.Millisecond), float64(cpu.Microseconds())/1000/float64(n), float64(mem1-mem0)/1024/float64(n), float64(g1-g0)/float64(n), in.ws.Connections())
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
