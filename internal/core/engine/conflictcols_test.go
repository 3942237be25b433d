package engine_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// conflictColsSchema: eight columns, the primary key first and the scope
// column second, so conflictColumns is one bitmap byte (§2.4 presence
// layout: column i is bit i of byte i/8, least significant bit first).
const conflictColsSchema = `{
  "version": 1,
  "tables": [
    {"name": "items", "primaryKey": "id",
     "columns": [
       {"name": "id", "type": "string", "nullable": false},
       {"name": "org_id", "type": "string", "nullable": false},
       {"name": "a", "type": "string", "nullable": false},
       {"name": "b", "type": "string", "nullable": true},
       {"name": "c", "type": "integer", "nullable": true},
       {"name": "d", "type": "integer", "nullable": true},
       {"name": "e", "type": "boolean", "nullable": true},
       {"name": "f", "type": "boolean", "nullable": true}
     ],
     "scopes": ["org:{org_id}"]}
  ]
}`

// Issue 24 / §6.2 steps 2, 4, 5 and §6.3: conflictColumns marks the
// present non-crdt columns the rule names, the scope column included.
// A present scope column equal to the stored value is a no-op for the
// write (step 2), not an exemption from the conflict evidence.
func TestConflictColumnsMarkScopeColumns(t *testing.T) {
	item := func(c *enginetest.Client, a string) []byte {
		return c.Row("items", enginetest.Cols{"id": enginetest.S("i1"), "org_id": enginetest.S("o1"), "a": enginetest.S(a),
			"b": enginetest.S("b"), "c": enginetest.I(1), "d": enginetest.I(2), "e": enginetest.B(true), "f": enginetest.B(false)})
	}
	setup := func(t *testing.T) (*enginetest.Harness, *enginetest.Client, *enginetest.Client) {
		h := newHarness(t, enginetest.Options{Schema: conflictColsSchema})
		grantAll(h, engine.ScopeMap{"org_id": {"o1"}}, "alice", "bob")
		a := h.ClientV3("tenant", "alice", "a")
		b := h.ClientV3("tenant", "bob", "b")
		wantApplied(t, a.Push("seed", up("items", "i1", item(a, "seed"), 0)))
		return h, a, b
	}
	wantColumns := func(t *testing.T, r wire.OpResult, want byte) {
		t.Helper()
		if !bytes.Equal(r.ConflictColumns, []byte{want}) {
			t.Fatalf("conflictColumns %08b, want %08b", r.ConflictColumns, want)
		}
	}

	// §6.2 step 4 / §6.3: a lost insert race marks every present non-crdt
	// column except the primary key: all of columns 1–7.
	t.Run("baseVersion 0", func(t *testing.T) {
		_, _, b := setup(t)
		r := wantRejected(t, b.Push("race", up("items", "i1", item(b, "mine"), 0)), 0, wire.OpConflict, syncerr.VersionConflict)
		wantColumns(t, r, 0b1111_1110)
		// A patch presenting the scope column and one more column marks
		// exactly those two.
		r = wantRejected(t, b.Push("race-patch", up("items", "i1", b.Patch("items", enginetest.Cols{"id": enginetest.S("i1"), "org_id": enginetest.S("o1"), "d": enginetest.I(9)}), 0)), 0, wire.OpConflict, syncerr.VersionConflict)
		wantColumns(t, r, 0b0010_0010)
	})

	// §6.2 step 5: the present columns whose column_version exceeds
	// baseVersion. The scope column keeps the version of the insert (an
	// equal value never restamps it), so it marks only when the row's
	// column versions put it past baseVersion: a row stored before column
	// versions existed reads every column at its server_version (§2.2).
	t.Run("stale versioned update", func(t *testing.T) {
		h, a, b := setup(t)
		wantApplied(t, a.Push("a-c", up("items", "i1", a.Patch("items", enginetest.Cols{"id": enginetest.S("i1"), "c": enginetest.I(5)}), 1)))
		full := wantRejected(t, b.Push("stale", up("items", "i1", item(b, "stale"), 1)), 0, wire.OpConflict, syncerr.VersionConflict)
		wantColumns(t, full, 0b0001_0000) // c only: org_id is at version 1 = baseVersion

		legacy(t, h, "items", "i1")
		r := wantRejected(t, b.Push("stale-legacy", up("items", "i1", b.Patch("items", enginetest.Cols{"id": enginetest.S("i1"), "org_id": enginetest.S("o1"), "a": enginetest.S("x")}), 1)), 0, wire.OpConflict, syncerr.VersionConflict)
		wantColumns(t, r, 0b0000_0110) // org_id and a, both at server_version 3 > 1
	})

	// §6.2 step 6: without baseVersion the write applies (no conflict
	// record) and the equal scope column stays a no-op: not restamped, so
	// a later stale patch presenting it does not mark it while every
	// other column that write carried marks.
	t.Run("unversioned", func(t *testing.T) {
		h, a, b := setup(t)
		wantApplied(t, a.Push("lww", up("items", "i1", item(a, "lww"), -1)))
		s := h.StoredRow("tenant", "items", "i1")
		if s == nil || s.Version != 2 || len(s.ColumnVersions) != 8 || s.ColumnVersions[1] != 1 || s.ColumnVersions[2] != 2 {
			t.Fatalf("after an unversioned full row: %+v", s)
		}
		r := wantRejected(t, b.Push("stale", up("items", "i1", item(b, "stale"), 1)), 0, wire.OpConflict, syncerr.VersionConflict)
		wantColumns(t, r, 0b1111_1100)
	})

	// Version 2 has row-level conflicts and no conflictColumns (0.15.48).
	t.Run("wire 2 unaffected", func(t *testing.T) {
		h, _, _ := setup(t)
		v2 := h.Client("tenant", "bob", "v2")
		r := wantRejected(t, v2.Push("race", up("items", "i1", item(v2, "mine"), 0)), 0, wire.OpConflict, syncerr.VersionConflict)
		if len(r.ConflictColumns) != 0 || r.ServerVersion != 1 {
			t.Fatalf("version-2 conflict record %+v", r)
		}
	})
}

// legacy rewrites a stored row as a row written before column versions
// existed (ColumnVersions nil), at a server_version two above its own,
// through an ordinary store commit.
func legacy(t *testing.T, h *enginetest.Harness, table, rowID string) {
	t.Helper()
	ctx := context.Background()
	hd, _, err := h.Store.Head(ctx, "tenant")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := h.Store.GetRows(ctx, "tenant", table, []string{rowID})
	if err != nil || rows[rowID] == nil {
		t.Fatalf("get %s: %v", rowID, err)
	}
	r := *rows[rowID]
	seq := hd.MaxCommitSeq + 1
	r.Version, r.ColumnVersions, r.CommitSeq = r.Version+2, nil, seq
	err = h.Store.Commit(ctx, "tenant", &store.CommitRequest{
		ExpectedMaxSeq: hd.MaxCommitSeq,
		Commit: store.Commit{Seq: seq, ActorID: "legacy", ClientID: "legacy", ClientCommitID: "legacy",
			Changes: []store.Change{{Table: table, RowID: rowID, Op: wire.OpUpsert, RowVersion: r.Version, Scopes: r.Scopes, Row: r.Payload}}},
		Rows:    []store.RowWrite{{Table: table, Row: r}},
		Outcome: store.Outcome{Applied: true, CommitSeq: seq, ActorID: "legacy"},
	})
	if err != nil {
		t.Fatalf("legacy row: %v", err)
	}
}
