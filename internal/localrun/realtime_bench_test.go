package localrun

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/skyfold/syncular-lambda/internal/app/apptest"
	"github.com/skyfold/syncular-lambda/internal/core/realtime"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// BenchmarkRealtimeFanout measures commit → delta through the local
// runner over real WebSockets: one op is one pushed commit (HTTP /sync)
// and ends when every subscriber of the scope has received its 0x00
// delta. p50/p95 are over every (commit, subscriber) latency, measured
// from just before the push request.
//
//	go test -run '^$' -bench RealtimeFanout -benchtime 20x ./internal/localrun
func BenchmarkRealtimeFanout(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("subscribers=%d", n), func(b *testing.B) { benchFanout(b, n) })
	}
}

func benchFanout(b *testing.B, n int) {
	r := newRTRig(b)
	wtok := r.token("writer")
	wepoch := r.d.Epoch(b, "push", "/sync", wtok, "w")
	rtok := r.token("reader")

	arrivals := make(chan time.Time, n)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("r%d", i)
		epoch := r.d.Epoch(b, "pull", "/pull", rtok, id)
		r.d.Pull(b, rtok, id, epoch, wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows}, tasksSub())
		ws, _, err := r.dial(rtok, id)
		if err != nil {
			b.Fatalf("dial %s: %v", id, err)
		}
		ws.SetReadLimit(1 << 20)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer ws.CloseNow()
			for {
				typ, msg, err := ws.Read(ctx)
				if err != nil {
					return
				}
				if typ == websocket.MessageBinary && len(msg) > 0 && msg[0] == realtime.TagDelta {
					arrivals <- time.Now()
				}
			}
		}()
	}
	// Let every hello go out before the clock starts.
	time.Sleep(200 * time.Millisecond)

	lat := make([]time.Duration, 0, b.N*n)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		id := fmt.Sprintf("t%d", i)
		r.d.Push(b, wtok, "w", wepoch, wire.PushCommit{ClientCommitID: "c" + id, Operations: []wire.Operation{apptest.Upsert("tasks", id, -1, r.d.Task(b, id, "p1", "live"))}})
		timeout := time.After(30 * time.Second)
		for got := 0; got < n; got++ {
			select {
			case at := <-arrivals:
				lat = append(lat, at.Sub(start))
			case <-timeout:
				b.Fatalf("commit %d: %d of %d subscribers received the delta within 30 s", i, got, n)
			}
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.95), "p95-ms")
}
