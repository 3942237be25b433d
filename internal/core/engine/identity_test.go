package engine_test

import (
	"context"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// §1.5: the clientId → actor binding is created atomically; actors
// racing the first request of a clientId cannot both pass it.
func TestClientBindingRace(t *testing.T) {
	enginetest.RunBindRace(t, memstore.New(), memstore.NewSegments(), 4)
}

// §1.5/§2.3: a push outcome is never replayed to another actor, even when
// the clientId's record is gone (an epoch rotation deletes client records
// but keeps outcomes) and the other actor binds the clientId anew. The
// outcome here is a conflict whose serverRow comes from a scope the
// second actor cannot read.
func TestOutcomeNotReplayedToAnotherActor(t *testing.T) {
	h := newHarness(t, enginetest.Options{})
	h.Grants.Set("alice", projects("p1", "secret"))
	h.Grants.Set("bob", projects("p1"))
	a := h.Client("tenant", "alice", "device")
	wantApplied(t, a.Push("seed", up("tasks", "s1", a.Task("s1", "secret", "classified", false), 0)))
	res := a.Push("c1", up("tasks", "s1", a.Task("s1", "secret", "edit", false), 7))
	if res.Status != wire.PushRejected || len(res.Results) != 1 || res.Results[0].Status != wire.OpConflict || len(res.Results[0].ServerRow) == 0 {
		t.Fatalf("setup: want a conflict with a serverRow, got %+v", res)
	}
	if err := h.Store.RotateEpoch(context.Background(), "tenant", "epoch-2", h.Clock.Now()); err != nil {
		t.Fatal(err)
	}
	b := h.Client("tenant", "bob", "device")
	resp, err := b.Send(b.Request([]wire.PushCommit{cmt("c1", up("tasks", "b1", b.Task("b1", "p1", "bob", false), 0))}, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	var gotErr *wire.ErrorFrame
	for _, f := range resp.Frames {
		switch f := f.(type) {
		case *wire.PushResult:
			t.Fatalf("bob received a result for alice's idempotency key: %+v", f)
		case *wire.ErrorFrame:
			gotErr = f
		}
	}
	if gotErr == nil || gotErr.Code != string(syncerr.InvalidClientID) {
		t.Fatalf("want sync.invalid_client_id, got %+v", gotErr)
	}
	if _, ok := h.ServerRows("tenant", "tasks")["b1"]; ok {
		t.Fatal("bob's commit applied")
	}
}
