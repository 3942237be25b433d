package storetest

import (
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// testClientRegistration: the §8.1 registration travels with the client
// record and is replaced with it.
func testClientRegistration(t *testing.T, e *partitionT) {
	e.touch()
	c := store.Client{ClientID: "client-r", ActorID: "actor-r", Cursor: 3, UpdatedAtMs: baseMs, WireVersion: wire.Version3, Registration: `{"subs":[{"id":"s1"}]}`}
	if err := e.s.PutClient(e.ctx, e.p, &c); err != nil {
		t.Fatal(err)
	}
	got, err := e.s.GetClient(e.ctx, e.p, "client-r")
	if err != nil || got == nil || *got != c {
		t.Fatalf("GetClient: %+v, %v; want %+v", got, err, c)
	}
	if all := e.clients(); all["client-r"] != c {
		t.Errorf("ListClients: %+v, want %+v", all["client-r"], c)
	}
}

// testAckCursor pins the newer spec's §8.2 ack persistence rules: only
// the cursor and timestamp move, both monotonically; the record's actor
// and the partition's current epoch guard the write; a missing record is
// never created.
func testAckCursor(t *testing.T, e *partitionT) {
	h := e.touch()
	get := func() store.Client {
		t.Helper()
		c, err := e.s.GetClient(e.ctx, e.p, "client-k")
		if err != nil || c == nil {
			t.Fatalf("GetClient: %+v, %v", c, err)
		}
		return *c
	}
	ack := func(actor, epoch string, cursor, now int64) bool {
		t.Helper()
		ok, err := e.s.AckCursor(e.ctx, e.p, "client-k", actor, epoch, cursor, now)
		if err != nil {
			t.Fatalf("AckCursor: %v", err)
		}
		return ok
	}
	if ack("actor-k", h.LogEpoch, 5, baseMs) {
		t.Error("AckCursor on a missing record reported a write")
	}
	if c, err := e.s.GetClient(e.ctx, e.p, "client-k"); err != nil || c != nil {
		t.Fatalf("AckCursor created a record: %+v, %v", c, err)
	}
	base := store.Client{ClientID: "client-k", ActorID: "actor-k", Cursor: 4, UpdatedAtMs: baseMs, WireVersion: wire.Version2, Registration: "reg-1"}
	if err := e.s.PutClient(e.ctx, e.p, &base); err != nil {
		t.Fatal(err)
	}
	if !ack("actor-k", h.LogEpoch, 9, baseMs+10) {
		t.Fatal("AckCursor with the right actor and epoch did not pass its guard")
	}
	want := base
	want.Cursor, want.UpdatedAtMs = 9, baseMs+10
	if got := get(); got != want {
		t.Fatalf("after ack: %+v, want %+v", got, want)
	}
	// Lower cursor, later time: the cursor keeps its maximum.
	if !ack("actor-k", h.LogEpoch, 6, baseMs+20) {
		t.Fatal("a lower-cursor ack failed its guard")
	}
	want.UpdatedAtMs = baseMs + 20
	if got := get(); got != want {
		t.Fatalf("after a lower ack: %+v, want %+v (cursor is monotonic)", got, want)
	}
	// Wrong actor and stale epoch write nothing.
	if ack("actor-other", h.LogEpoch, 50, baseMs+30) {
		t.Error("an ack for another actor passed the guard")
	}
	if ack("actor-k", "not-"+h.LogEpoch, 60, baseMs+40) {
		t.Error("an ack from another log epoch passed the guard")
	}
	if got := get(); got != want {
		t.Fatalf("after refused acks: %+v, want %+v", got, want)
	}
}
