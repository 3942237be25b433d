package localrun

import (
	"testing"

	"github.com/skyfold/syncular-lambda/internal/app"
)

// The heap goal GOGC puts is live × (1 + GOGC/100); the tuner's goal is
// live + max(floor − live, floor/2, live/2).
func TestGCGoalPercent(t *testing.T) {
	const mb = 1 << 20
	floor := uint64(64 * mb)
	for _, c := range []struct {
		live uint64
		want uint64 // heap goal in bytes
	}{
		{4 * mb, 64 * mb},
		{16 * mb, 64 * mb},
		{31 * mb, 64 * mb},
		{32 * mb, 64 * mb},
		{40 * mb, 72 * mb},   // headroom of half the floor
		{64 * mb, 96 * mb},   // at the floor: half of either
		{200 * mb, 300 * mb}, // past it: half the live heap (GOGC=50)
	} {
		p := gcGoalPercent(c.live, floor)
		goal := c.live * uint64(100+p) / 100
		// Integer percent: the goal may fall short by under 1% of live.
		if goal > c.want || goal+c.live/100 < c.want {
			t.Errorf("live %d MiB: GOGC=%d, goal %d MiB, want %d MiB", c.live/mb, p, goal/mb, c.want/mb)
		}
		if p < 50 {
			t.Errorf("live %d MiB: GOGC=%d below 50", c.live/mb, p)
		}
	}
	if p := gcGoalPercent(0, floor); p != 10_000 {
		t.Errorf("empty heap: GOGC=%d, want the cap 10000", p)
	}
	if p := gcGoalPercent(4*mb, 0); p != 100 {
		t.Errorf("no floor: GOGC=%d, want 100", p)
	}
}

func TestGCTuneDefersToOperator(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	if app.OperatorSetGC(env()) {
		t.Error("no GOGC/GOMEMLIMIT: the runner should tune")
	}
	if !app.OperatorSetGC(env("GOGC", "200")) || !app.OperatorSetGC(env("GOMEMLIMIT", "1GiB")) {
		t.Error("GOGC or GOMEMLIMIT set: the operator's setting must win")
	}
}
