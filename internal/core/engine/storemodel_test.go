package engine_test

import (
	"context"
	"slices"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// The store model of the wire-3 spec (§2.2) under version-2 pushes: an
// insert stamps every column at version 1, a full-row upsert restamps
// every column at the new version, a delete leaves a tombstone, and a
// later insert of the same id is an insert again (the tombstone reads as
// an absent row for the version-2 rules).
func TestStoreModelUnderV2Pushes(t *testing.T) {
	st := memstore.New()
	h := enginetest.New(t, st, memstore.NewSegments(), enginetest.Options{})
	h.Grants.Set("alice", projects("p1"))
	a := h.Client("tenant", "alice", "a")
	ctx := context.Background()
	row := func() *store.Row {
		t.Helper()
		m, err := st.GetRows(ctx, "tenant", "tasks", []string{"t1"})
		if err != nil || m["t1"] == nil {
			t.Fatalf("GetRows: %v %v", m, err)
		}
		return m["t1"]
	}
	const columns = 5 // tasks: id, project_id, title, done, priority

	wantApplied(t, a.Push("c1", up("tasks", "t1", a.Task("t1", "p1", "x", false), 0)))
	if r := row(); r.Deleted || r.Version != 1 || !slices.Equal(r.ColumnVersions, slices.Repeat([]int64{1}, columns)) {
		t.Errorf("after insert: %+v, want version 1 with every column at 1", r)
	}
	wantApplied(t, a.Push("c2", up("tasks", "t1", a.Task("t1", "p1", "y", true), 1)))
	// A version-2 upsert writes every column but the primary key (never
	// restamped, §2.2) and the scope column (kept from the stored row, §3.4
	// rule 5 of the old spec).
	if r := row(); r.Deleted || r.Version != 2 || !slices.Equal(r.ColumnVersions, []int64{1, 1, 2, 2, 2}) {
		t.Errorf("after upsert: %+v, want version 2 with id and project_id at 1, the rest at 2", r)
	}
	wantApplied(t, a.Push("c3", enginetest.Delete("tasks", "t1")))
	if r := row(); !r.Deleted || r.CommitSeq != 3 {
		t.Errorf("after delete: %+v, want a tombstone at commit 3", r)
	}
	// A version-2 delete of a row already deleted is a no-op (§6.2 of the
	// old spec: absent-row delete), so the tombstone stays at 3.
	wantApplied(t, a.Push("c4", enginetest.Delete("tasks", "t1")))
	if r := row(); !r.Deleted || r.CommitSeq != 3 {
		t.Errorf("after a second delete: %+v, want the tombstone of commit 3", r)
	}
	// A stale base version against the tombstone is row_missing, as for
	// an absent row; baseVersion 0 re-inserts at version 1.
	if r := a.Push("c5", up("tasks", "t1", a.Task("t1", "p1", "z", false), 2)); r.Status != wire.PushRejected {
		t.Errorf("upsert with baseVersion 2 over a tombstone: %+v, want rejected", r)
	}
	wantApplied(t, a.Push("c6", up("tasks", "t1", a.Task("t1", "p1", "z", false), 0)))
	if r := row(); r.Deleted || r.Version != 1 || !slices.Equal(r.ColumnVersions, slices.Repeat([]int64{1}, columns)) {
		t.Errorf("after re-insert: %+v, want a live row at version 1", r)
	}
}
