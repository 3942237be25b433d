package localrun

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// The runner's garbage collector paces by a heap floor. With the default
// GOGC=100 the next collection is due when the heap reaches twice the
// live heap, and the live heap of a runner is small (a few MB before its
// in-memory store fills): a collection every few hundred requests, each
// paying fixed costs (stopping the world twice, scanning every
// connection's goroutine stack, sweeping) that dwarf the marking of so
// small a heap — about an eighth of a quiet request's CPU under load.
//
// gcTuner sets GOGC from the live heap so the heap goal is live +
// max(floor − live, floor/2, live/2): the floor while the live heap is
// small, then headroom of half the floor, and for a heap past the floor
// half the live heap (GOGC=50). No memory limit is set, so a store that
// outgrows the floor never makes the collector thrash. The trade is
// resident memory for CPU while the heap is small (up to about the floor
// more than GOGC=100 would keep), and CPU for resident memory once the
// in-memory store is large: the store's data is mostly pointer-free
// strings (memstore keeps commits encoded), so marking a large heap is
// cheap, while the default's headroom of a whole live heap would make
// resident memory grow at twice the rate of the data.

// gcGoalPercent is the GOGC that puts the heap goal at live +
// max(floor − live, floor/2, live/2) for a live heap of live bytes.
func gcGoalPercent(live, floor uint64) int {
	const maxPercent = 10_000
	if floor == 0 {
		return 100
	}
	headroom := max(floor/2, live/2)
	if live < floor {
		headroom = max(headroom, floor-live)
	}
	if live == 0 || headroom/live >= maxPercent/100 {
		return maxPercent // an (almost) empty heap: the goal is the floor
	}
	return int(headroom * 100 / live)
}

// runGCTuner re-derives GOGC from the live heap every interval until ctx
// ends, then restores the default. The live heap changes only as the
// store grows, so a coarse interval is enough; the update is skipped when
// the percent moves by less than a tenth.
func runGCTuner(ctx context.Context, floor uint64, interval time.Duration) {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	current := -1
	apply := func() {
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return
		}
		p := gcGoalPercent(sample[0].Value.Uint64(), floor)
		if current < 0 || p*10 < current*9 || p*10 > current*11 {
			debug.SetGCPercent(p)
			current = p
		}
	}
	apply()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			debug.SetGCPercent(100)
			return
		case <-t.C:
			apply()
		}
	}
}
