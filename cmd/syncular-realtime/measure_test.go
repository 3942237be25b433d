package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestMeasureIdleSockets (SSP2_TIER_MEASURE=N, loopback, bounded) opens N
// idle sockets on one instance and reports heap and goroutines per
// socket. Clients and server share the process, so the figure is an
// upper bound of the server's share (docs/REALTIME.md sizes the tasks
// with it).
func TestMeasureIdleSockets(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SSP2_TIER_MEASURE"))
	if n <= 0 {
		t.Skip("set SSP2_TIER_MEASURE=<sockets> to measure")
	}
	n = min(n, 5000)
	st := newStack(t)
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
	start := time.Now()
	base := "ws" + strings.TrimPrefix(in.url, "http") + "/realtime?token="
	var tok string
	for i := range n {
		if i%500 == 0 { // under the per-actor connection cap
			tok = url.QueryEscape(st.token(fmt.Sprintf("idle-%d", i/500)))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, _, err := websocket.Dial(ctx, base+tok+fmt.Sprintf("&clientId=idle-%d", i), nil)
		cancel()
		if err != nil {
			t.Fatalf("socket %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	opened := time.Since(start)
	time.Sleep(time.Second)
	mem1, g1 := snap()
	t.Logf("%d idle sockets opened in %v; heap+stacks %.1f KiB and %.1f goroutines per socket (clients included); server counts %d",
		n, opened.Round(time.Millisecond), float64(mem1-mem0)/1024/float64(n), float64(g1-g0)/float64(n), in.ws.Connections())
}
