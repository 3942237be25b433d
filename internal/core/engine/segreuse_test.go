package engine_test

import (
	"fmt"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// Issue 11 item 5 / §4.7: a fresh bootstrap after new commits reuses the
// live segments built at an earlier pin (no rebuild), pins at that
// earlier commitSeq, and the commits after it, replayed incrementally,
// bring the replica to the server's state — including changes to rows the
// reused pages hold, deletes and inserts.
func TestBootstrapReusesEarlierPin(t *testing.T) {
	segs := &enginetest.CountingSegments{SegmentStore: memstore.NewSegments()}
	h := enginetest.New(t, memstore.New(), segs, enginetest.Options{})
	grantAll(h, projects("p1"), "alice", "bob", "carol")
	a := h.Client("tenant", "alice", "a")
	for i := range 6 {
		id := fmt.Sprintf("t%d", i)
		wantApplied(t, a.Push(id, up("tasks", id, a.Task(id, "p1", "v1", false), 0)))
	}
	hdr := wire.PullHeader{Accept: acceptExternal, LimitSnapshotRows: 2, MaxSnapshotPages: 10, LimitCommits: 100}
	first := h.Client("tenant", "bob", "b").NewReplica("tasks", "tasks", p1Scopes("p1"))
	if err := first.Sync(hdr, 20); err != nil {
		t.Fatal(err)
	}
	built := segs.Puts()
	if built == 0 || first.Sub.Cursor != 6 {
		t.Fatalf("first bootstrap built %d segments, cursor %d", built, first.Sub.Cursor)
	}

	// New commits after the pages' pin: an update of a row on the first
	// page, a delete, an insert.
	wantApplied(t, a.Push("u", up("tasks", "t0", a.Task("t0", "p1", "v2", false), -1)))
	wantApplied(t, a.Push("d", del("tasks", "t3")))
	wantApplied(t, a.Push("i", up("tasks", "t9", a.Task("t9", "p1", "v1", false), 0)))

	second := h.Client("tenant", "carol", "c").NewReplica("tasks", "tasks", p1Scopes("p1"))
	sec, err := second.Pull(hdr)
	if err != nil {
		t.Fatal(err)
	}
	if !sec.Start.Bootstrap || len(sec.Refs) == 0 || sec.Refs[0].AsOfCommitSeq != 6 || sec.End.NextCursor != 6 {
		t.Fatalf("second bootstrap: want the reused pin 6, got refs %+v end %+v", sec.Refs, sec.End)
	}
	for _, r := range sec.Refs {
		if r.AsOfCommitSeq != sec.End.NextCursor {
			t.Fatalf("§5.1: a descriptor's asOfCommitSeq %d differs from the bootstrap pin %d", r.AsOfCommitSeq, sec.End.NextCursor)
		}
	}
	if segs.Puts() != built {
		t.Fatalf("second bootstrap built %d segments, want every page reused", segs.Puts()-built)
	}
	if err := second.Sync(hdr, 20); err != nil {
		t.Fatal(err)
	}
	if second.CommitsApplied == 0 || second.Sub.Cursor != 9 {
		t.Fatalf("catch-up: %d commits applied, cursor %d; want the 3 commits after the pin, cursor 9", second.CommitsApplied, second.Sub.Cursor)
	}
	wantRows(t, h.ServerRows("tenant", "tasks"), second.Rows, "second replica")
}
