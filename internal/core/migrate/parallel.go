package migrate

import (
	"context"
	"sync"
	"sync/atomic"
)

// DefaultParallel is how many partitions Step and Run work on at once
// when the caller sets no Parallel: each partition's step is a few
// sequential round trips, so the walk is bound by latency, not by
// capacity (docs/OPERATIONS.md "Runbook: deploying schema N+1").
const DefaultParallel = 32

// eachPartition runs work on every partition list yields, up to parallel
// at a time. The lister runs on the calling goroutine and feeds the
// workers; it stops being asked for more once a work call returns false
// (stop dispatching: the calls already running finish, none is
// cancelled, so every per-partition step either completed or never
// began). Work calls run concurrently: they synchronise what they share.
func eachPartition(ctx context.Context, list func(ctx context.Context, fn func(string) bool) error, parallel int, work func(part string) bool) error {
	if parallel <= 0 {
		parallel = DefaultParallel
	}
	var stopped atomic.Bool
	parts := make(chan string)
	var wg sync.WaitGroup
	for range parallel {
		wg.Go(func() {
			for p := range parts {
				// Drain without working once stopped.
				if !stopped.Load() && !work(p) {
					stopped.Store(true)
				}
			}
		})
	}
	err := list(ctx, func(p string) bool {
		if stopped.Load() || ctx.Err() != nil {
			return false
		}
		select {
		case parts <- p:
			return true
		case <-ctx.Done():
			return false
		}
	})
	close(parts)
	wg.Wait()
	return err
}
