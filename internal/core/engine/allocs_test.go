//go:build !race

// The race detector changes allocation counts (sync.Pool drops items at
// random under it), so these bounds are checked without it.

package engine_test

import (
	"bytes"
	"testing"
)

// Allocation budgets of the two most frequent requests over memstore
// (the store's own copies included). They were 47 and 68 before the
// request path was trimmed (10 and 28 after); the bounds leave a little
// room so an unrelated change does not trip them, not room to lose the
// gain.
const (
	maxQuietPullAllocs = 14
	maxPushOneOpAllocs = 34
)

func TestQuietPullAllocs(t *testing.T) {
	h, c, body := quietPullFixture(t)
	var out bytes.Buffer
	serve := func() {
		if rep := handle(t, h, c, body, &out); rep.CommitsSent != 0 || !rep.Pulled {
			t.Fatalf("quiet pull: %+v", rep)
		}
	}
	if n := testing.AllocsPerRun(200, serve); n > maxQuietPullAllocs {
		t.Errorf("a quiet pull allocates %v objects; budget %d", n, maxQuietPullAllocs)
	}
}

func TestPushOneOpAllocs(t *testing.T) {
	const runs = 200
	const warm = 20
	h, c, bodies := onePushFixture(t, warm+runs+1, warm)
	var out bytes.Buffer
	i := 0
	push := func() {
		if rep := handle(t, h, c, bodies[i], &out); rep.Applied != 1 {
			t.Fatalf("push %d: %+v", i, rep)
		}
		i++
	}
	for range warm {
		push() // every row exists from here on: each push is an update
	}
	// AllocsPerRun calls push once more before measuring.
	if n := testing.AllocsPerRun(runs, push); n > maxPushOneOpAllocs {
		t.Errorf("a one-operation push allocates %v objects; budget %d", n, maxPushOneOpAllocs)
	}
}
