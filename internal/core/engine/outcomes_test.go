package engine_test

import (
	"bytes"
	"slices"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// TestRetryAfterOutcomeWindow pins down what a client's retry of an
// applied commit gets once the commit's outcome has outlived the
// idempotency window (store.DefaultOutcomeWindow; docs/OPERATIONS.md,
// "Idempotency window"). Inside the window every retry is the §2.3
// cached replay. After it the retry is evaluated as a new commit under
// the §6.2 rules, never replayed from a half-remembered record:
//   - an insert (baseVersion 0) or a versioned update conflicts with the
//     row its first application wrote (sync.version_conflict, nothing
//     written);
//   - a delete of the row it already deleted is the idempotent absent-row
//     delete (applied, no change);
//   - a last-write-wins upsert (no baseVersion) is applied again, as a new
//     commit with the same values: the same effect as the client writing
//     the row again now.
//
// In every case the log stays gapless and every row consistent; once
// recorded again, the key replays as cached for a new window.
func TestRetryAfterOutcomeWindow(t *testing.T) {
	h := enginetest.New(t, memstore.New(memstore.WithOutcomeTTL(store.DefaultOutcomeWindow)), memstore.NewSegments(), enginetest.Options{})
	grantAll(h, projects("p1"), "alice", "bob")
	a := h.Client("tenant", "alice", "a")
	b := h.Client("tenant", "bob", "b")
	insert := cmt("insert", up("tasks", "t1", a.Task("t1", "p1", "first", false), 0))
	wantApplied(t, mustPushAll(t, a, cmt("mk", up("tasks", "t3", a.Task("t3", "p1", "to delete", false), 0)))[0])
	update := cmt("update", up("tasks", "t1", a.Task("t1", "p1", "edited", false), 1))
	remove := cmt("remove", del("tasks", "t3"))
	blind := cmt("blind", up("tasks", "t2", a.Task("t2", "p1", "alice blind", false), -1))
	first := mustPushAll(t, a, insert, update, remove, blind)
	seqs := make([]int64, len(first))
	for i, r := range first {
		seqs[i] = wantApplied(t, r)
	}
	window := store.DefaultOutcomeWindow.Milliseconds()

	// Inside the window: cached replays, nothing applied.
	h.Clock.Advance(window - 1000)
	for i, r := range mustPushAll(t, a, insert, update, remove, blind) {
		if r.Status != wire.PushCached || r.CommitSeq.Value != seqs[i] {
			t.Fatalf("retry %d inside the window: status %d seq %+v, want cached seq %d", i, r.Status, r.CommitSeq, seqs[i])
		}
	}
	// Bob overwrites t2 after Alice's blind write (last write wins).
	wantApplied(t, b.Push("bob", up("tasks", "t2", b.Task("t2", "p1", "bob later", false), -1)))
	before := head(t, h, "tenant").MaxCommitSeq
	rowsBefore := h.ServerRows("tenant", "tasks")

	// One second past the window: no outcome answers any more.
	h.Clock.Advance(2000)
	wantRejected(t, mustPushAll(t, a, insert)[0], 0, wire.OpConflict, syncerr.VersionConflict)
	wantRejected(t, mustPushAll(t, a, update)[0], 0, wire.OpConflict, syncerr.VersionConflict)
	if got := head(t, h, "tenant").MaxCommitSeq; got != before {
		t.Fatalf("a conflicting late retry moved maxCommitSeq %d -> %d", before, got)
	}
	rm := mustPushAll(t, a, remove)[0]
	if rm.Status != wire.PushApplied || len(rm.Results) != 1 || rm.Results[0].Status != wire.OpApplied {
		t.Fatalf("late retry of a delete: %+v, want the idempotent absent-row delete (applied)", rm)
	}
	rows := h.ServerRows("tenant", "tasks")
	if _, ok := rows["t3"]; ok {
		t.Fatal("the late delete brought t3 back")
	}
	if !sameRow(rows["t1"], rowsBefore["t1"]) {
		t.Fatalf("t1 changed by a conflicting late retry: %+v -> %+v", rowsBefore["t1"], rows["t1"])
	}
	// The blind write lands again as a new commit with Alice's values.
	again := wantApplied(t, mustPushAll(t, a, blind)[0])
	if again <= before {
		t.Fatalf("late blind retry got seq %d, want a new commit after %d", again, before)
	}
	rows = h.ServerRows("tenant", "tasks")
	if want := a.Task("t2", "p1", "alice blind", false); !bytes.Equal(rows["t2"].Payload, want) || rows["t2"].Version != rowsBefore["t2"].Version+1 {
		t.Fatalf("t2 after the late blind retry: %+v, want Alice's values at version %d", rows["t2"], rowsBefore["t2"].Version+1)
	}
	// Recorded again: the key replays as cached for a new window.
	if r := mustPushAll(t, a, blind)[0]; r.Status != wire.PushCached || r.CommitSeq.Value != again {
		t.Fatalf("retry after re-recording: %+v, want cached seq %d", r, again)
	}
	if got, want := logSeqs(t, h, "tenant"), seqRange(1, head(t, h, "tenant").MaxCommitSeq); !slices.Equal(got, want) {
		t.Fatalf("log %v, want gapless %v", got, want)
	}
}

func sameRow(a, b enginetest.RowState) bool {
	return a.Version == b.Version && bytes.Equal(a.Payload, b.Payload)
}

func seqRange(from, through int64) []int64 {
	var out []int64
	for s := from; s <= through; s++ {
		out = append(out, s)
	}
	return out
}
