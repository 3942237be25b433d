//go:build !race

// The race detector changes allocation counts (sync.Pool drops items at
// random under it), so these bounds are checked without it.

package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/memstore"
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
	h := enginetest.New(t, memstore.New(), memstore.NewSegments(), enginetest.Options{})
	grantAll(h, projects("p1"), "alice", "bob")
	a := h.Client("tenant", "alice", "a")
	wantApplied(t, a.Push("seed", up("tasks", "t1", a.Task("t1", "p1", "x", false), 0)))
	c := h.Client("tenant", "bob", "b")
	body, err := wire.Encode(c.Request(nil, &wire.PullHeader{Accept: acceptRows}, []wire.Subscription{sub("s", "tasks", "p1", 1)}))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	serve := func() {
		out.Reset()
		rep, err := h.Engine.HandleSync(context.Background(), engine.Auth{Partition: c.Partition, ActorID: c.Actor}, body, engine.SyncOptions{}, &out)
		if err != nil || rep.ErrorCode != "" || rep.CommitsSent != 0 || !rep.Pulled {
			t.Fatalf("quiet pull: %+v %v", rep, err)
		}
	}
	serve() // the client record and caches are warm from here on
	if n := testing.AllocsPerRun(200, serve); n > maxQuietPullAllocs {
		t.Errorf("a quiet pull allocates %v objects; budget %d", n, maxQuietPullAllocs)
	}
}

func TestPushOneOpAllocs(t *testing.T) {
	h := enginetest.New(t, memstore.New(), memstore.NewSegments(), enginetest.Options{})
	h.Grants.Set("alice", projects("p1"))
	c := h.Client("tenant", "alice", "a")
	const runs = 200
	const warm = 20
	bodies := make([][]byte, warm+runs+1)
	for i := range bodies {
		id := fmt.Sprintf("t%d", i%warm)
		b, err := wire.Encode(c.Request([]wire.PushCommit{cmt(fmt.Sprint("c", i), up("tasks", id, c.Task(id, "p1", "row", i%2 == 0), -1))}, nil, nil))
		if err != nil {
			t.Fatal(err)
		}
		bodies[i] = b
	}
	var out bytes.Buffer
	i := 0
	push := func() {
		out.Reset()
		rep, err := h.Engine.HandleSync(context.Background(), engine.Auth{Partition: c.Partition, ActorID: c.Actor}, bodies[i], engine.SyncOptions{}, &out)
		if err != nil || rep.Applied != 1 {
			t.Fatalf("push %d: %+v %v", i, rep, err)
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
