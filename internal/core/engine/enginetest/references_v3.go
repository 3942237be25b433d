package enginetest

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// unreferencedSchema is ReferenceSchema before its references were
// declared: the same tables and columns, so rows written under it can
// name parents that do not exist.
var unreferencedSchema = regexp.MustCompile(`,\s*"references": \[[^\]]*\]`).ReplaceAllString(ReferenceSchema, "")

// runReferencesSparse covers what only version-3 payloads can express
// (§2.4 "Sparse rows", §6.2 column versions and tombstones) against the
// §6.11 rules.
func runReferencesSparse(t *testing.T, newStore func(t *testing.T) store.Store, newSegs func() store.SegmentStore) {
	grant := func(h *Harness) {
		h.Grants.Set("alice", engine.ScopeMap{"project_id": {"*"}})
	}
	setup := func(t *testing.T) (*Harness, *Client, store.Store) {
		st := newStore(t)
		h := New(t, st, newSegs(), Options{Schema: ReferenceSchema})
		grant(h)
		part := fmt.Sprintf("refs3-%s-%d", t.Name(), h.Clock.Now())
		return h, h.ClientV3(part, "alice", "a"), st
	}
	status := func(t *testing.T, r *wire.PushResult, want wire.PushStatus) {
		t.Helper()
		if r.Status != want {
			t.Fatalf("commit %s: status %d %+v, want %d", r.ClientCommitID, r.Status, r.Results, want)
		}
	}
	patch := func(c *Client, id string, base int64, cols Cols) wire.Operation {
		cols["id"] = S(id)
		return Upsert("items", id, c.Patch("items", cols), base)
	}

	t.Run("patch-without-reference-column-is-not-rechecked", func(t *testing.T) {
		// A row written before the reference was declared names a parent
		// that does not exist. A patch that leaves the column out does not
		// present it, so §6.11 does not re-check it; presenting it does.
		h, a, st := setup(t)
		old := New(t, st, newSegs(), Options{Schema: unreferencedSchema})
		grant(old)
		legacy := old.ClientV3(a.Partition, "alice", "legacy")
		status(t, legacy.Push("l1", legacy.ItemOp("i1", Parents{Restrict: "ghost"})), wire.PushApplied)

		status(t, a.Push("c1", patch(a, "i1", -1, Cols{"label": S("renamed")})), wire.PushApplied)
		if r := h.StoredRow(a.Partition, "items", "i1"); r.Values["label"].Str != "renamed" || r.Values["restrict_parent"].Str != "ghost" {
			t.Fatalf("after the patch: %+v", r.Values)
		}
		res, det, _ := a.PushDetailed("c2", patch(a, "i1", -1, Cols{"restrict_parent": S("ghost")}))
		if res.Status != wire.PushRejected || res.Results[0].Code != string(syncerr.ReferenceViolation) || det == nil ||
			det.Entries[0].DetailsJSON != `{"fieldPaths":["restrict_parent"],"reason":"missing_parent","references":{"parent":"projects","row":"ghost"}}` {
			t.Fatalf("patch presenting the dangling reference: %+v %+v", res.Results, det)
		}
		// Presenting NULL clears it without a parent check.
		status(t, a.Push("c3", patch(a, "i1", -1, Cols{"restrict_parent": Null()})), wire.PushApplied)
		// A version-2 client sends full rows: every column is presented
		// and checked.
		v2 := h.ClientV(wire.Version2, a.Partition, "alice", "v2")
		res, _, _ = v2.PushDetailed("d1", v2.ItemOp("i1", Parents{Cascade: "ghost"}))
		if res.Status != wire.PushRejected || res.Results[0].Code != string(syncerr.ConstraintViolation) {
			t.Fatalf("version-2 full row naming a missing parent: %+v", res.Results)
		}
	})

	t.Run("violation-attributed-to-the-presenting-operation", func(t *testing.T) {
		// The candidate value comes from op 0; op 1 patches another column
		// of the same row. The violation is op 0's.
		_, a, _ := setup(t)
		status(t, a.Push("c1", a.ProjectOp("p1"), a.ItemOp("i1", Parents{Restrict: "p1"})), wire.PushApplied)
		res, det, _ := a.PushDetailed("c2",
			patch(a, "i1", -1, Cols{"nullify_parent": S("nope")}),
			patch(a, "i1", -1, Cols{"label": S("x")}))
		if res.Status != wire.PushRejected || res.Results[0].OpIndex != 0 || det == nil || det.Entries[0].OpIndex != 0 {
			t.Fatalf("result %+v details %+v, want the violation at op 0", res.Results, det)
		}
		// Pointing it at an existing parent in a patch applies.
		status(t, a.Push("c3", patch(a, "i1", -1, Cols{"nullify_parent": S("p1")})), wire.PushApplied)
	})

	t.Run("set-null-restamps-only-the-reference-column", func(t *testing.T) {
		h, a, _ := setup(t)
		status(t, a.Push("c1", a.ProjectOp("p1"), a.ProjectOp("p2"), a.ItemOp("i1", Parents{Nullify: "p1"})), wire.PushApplied)
		status(t, a.Push("c2", patch(a, "i1", 1, Cols{"label": S("v2")})), wire.PushApplied)
		status(t, a.Push("c3", Delete("projects", "p1")), wire.PushApplied)
		r := h.StoredRow(a.Partition, "items", "i1")
		// Columns: id, project_id, label, restrict_parent, cascade_parent,
		// nullify_parent. §2.2: the SET NULL write is version 3 and
		// restamps nullify_parent only; label keeps 2, the rest 1.
		if r.Version != 3 || !slices.Equal(r.ColumnVersions, []int64{1, 1, 2, 1, 1, 3}) || !r.Values["nullify_parent"].Null {
			t.Fatalf("after SET NULL: version %d column versions %v values %+v", r.Version, r.ColumnVersions, r.Values)
		}
		// A row stored before column versions existed (every column at
		// its row version, written straight to the store here) gets them
		// on the SET NULL write: the others stay at the old version.
		seedLegacyItem(t, h, a.Partition, "i2", 5, "p2")
		status(t, a.Push("c3b", Delete("projects", "p2")), wire.PushApplied)
		if r := h.StoredRow(a.Partition, "items", "i2"); r.Version != 6 || !slices.Equal(r.ColumnVersions, []int64{5, 5, 5, 5, 5, 6}) || !r.Values["nullify_parent"].Null {
			t.Fatalf("legacy row after SET NULL: version %d column versions %v values %+v", r.Version, r.ColumnVersions, r.Values)
		}
		// A writer that saw version 2 still patches label without a
		// conflict, but conflicts on the column the cascade wrote.
		status(t, a.Push("c4", patch(a, "i1", 2, Cols{"label": S("v4")})), wire.PushApplied)
		res := a.Push("c5", patch(a, "i1", 2, Cols{"nullify_parent": Null(), "label": S("v5")}))
		if res.Status != wire.PushRejected || res.Results[0].Status != wire.OpConflict {
			t.Fatalf("patch of the nulled column from version 2: %+v", res.Results)
		}
		want := rowcodec.PresenceBitmap(6, []bool{false, false, true, false, false, true})
		if cc := res.Results[0].ConflictColumns; !slices.Equal(cc, want) {
			t.Errorf("conflictColumns %v, want %v (label rewritten at 4, nullify_parent at 3)", cc, want)
		}
	})

	t.Run("cascade-leaves-tombstones", func(t *testing.T) {
		h, a, _ := setup(t)
		status(t, a.Push("c1", a.ProjectOp("p1"), a.ItemOp("i1", Parents{Cascade: "p1"}), a.NoteOp("n1", "i1")), wire.PushApplied)
		res := a.Push("c2", Delete("projects", "p1"))
		status(t, res, wire.PushApplied)
		for _, k := range [][2]string{{"projects", "p1"}, {"items", "i1"}, {"notes", "n1"}} {
			r := h.StoredRow(a.Partition, k[0], k[1])
			if r == nil || !r.Deleted || r.CommitSeq != res.CommitSeq.Value {
				t.Fatalf("%s/%s after the cascade: %+v, want a tombstone of commit %d", k[0], k[1], r, res.CommitSeq.Value)
			}
		}
		// §6.2 delete precedence applies to cascaded deletes too: an
		// unversioned upsert does not recreate the row, baseVersion 0 does.
		status(t, a.Push("c3", a.ProjectOp("p2")), wire.PushApplied)
		r := a.Push("c4", a.ItemOp("i1", Parents{Cascade: "p2"}))
		if r.Status != wire.PushRejected || r.Results[0].Code != string(syncerr.RowDeleted) {
			t.Fatalf("unversioned upsert over a cascaded tombstone: %+v", r.Results)
		}
		op := a.ItemOp("i1", Parents{Cascade: "p2"})
		op.BaseVersion = wire.Some(int64(0))
		status(t, a.Push("c5", op), wire.PushApplied)
	})
}

// seedLegacyItem commits an items row straight to the store the way rows
// were stored before column versions existed (ColumnVersions nil), at
// version, in parent's project with nullify_parent naming parent and its
// index entry.
func seedLegacyItem(t *testing.T, h *Harness, partition, id string, version int64, parent string) {
	t.Helper()
	seedItem(t, h, partition, parent, id, version, Parents{Nullify: parent})
}

// SeededItem is an items row of ReferenceSchema written by SeedItems.
type SeededItem struct {
	Project, ID string
	Parents     Parents
}

func seedItem(t *testing.T, h *Harness, partition, project, id string, version int64, p Parents) {
	t.Helper()
	SeedItems(t, h, partition, version, SeededItem{project, id, p})
}

// SeedItems commits items rows straight to the store in one commit (no
// push, so no §3.4 or §6.11 check: rows as an older server could have
// stored them), at version without column versions, with the
// reference-index entries of their parents.
func SeedItems(t testing.TB, h *Harness, partition string, version int64, items ...SeededItem) {
	t.Helper()
	ctx := context.Background()
	head, ok, err := h.Store.Head(ctx, partition)
	if err != nil || !ok {
		t.Fatalf("head: %v %v", ok, err)
	}
	st, _ := h.Schema.Versions[h.Schema.Latest].Table("items")
	seq := head.MaxCommitSeq + 1
	req := &store.CommitRequest{
		ExpectedMaxSeq: head.MaxCommitSeq,
		Commit:         store.Commit{Seq: seq, ActorID: "seed", ClientID: "seed", ClientCommitID: fmt.Sprintf("seed-%d", seq)},
		Outcome:        store.Outcome{Applied: true, CommitSeq: seq, Result: []byte{0}},
	}
	for _, it := range items {
		p := it.Parents
		payload, err := st.Codec.Append(nil, []rowcodec.Value{S(it.ID), S(it.Project), S("legacy"), opt(p.Restrict), opt(p.Cascade), opt(p.Nullify)})
		if err != nil {
			t.Fatal(err)
		}
		for _, ref := range [][2]string{{"restrict_parent", p.Restrict}, {"cascade_parent", p.Cascade}, {"nullify_parent", p.Nullify}} {
			if ref[1] != "" {
				req.RefWrites = append(req.RefWrites, store.RefWrite{RefEntry: store.RefEntry{ChildTable: "items", Column: ref[0], ParentID: ref[1], ChildID: it.ID}})
			}
		}
		scopes := wire.StoredScopes{{Key: "project_id", Value: it.Project}}
		req.Commit.Changes = append(req.Commit.Changes, store.Change{Table: "items", RowID: it.ID, Op: wire.OpUpsert, RowVersion: version, Scopes: scopes, Row: payload})
		req.Rows = append(req.Rows, store.RowWrite{Table: "items", Row: store.Row{RowID: it.ID, Version: version, Scopes: scopes, Payload: payload}})
	}
	if err := h.Store.Commit(ctx, partition, req); err != nil {
		t.Fatalf("seed %d items: %v", len(items), err)
	}
}
