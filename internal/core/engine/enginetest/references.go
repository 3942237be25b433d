package enginetest

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// ReferenceSchema is the §6.11 fixture: projects is the parent and items
// the child, with one reference column per ON DELETE action; notes hang
// off items through a CASCADE reference, so a cascade recurses. Every
// table shares the scope pattern, as §6.11 requires.
const ReferenceSchema = `{
  "version": 1,
  "tables": [
    {"name": "projects", "primaryKey": "project_id", "scopes": [{"pattern": "project:{project_id}"}],
     "columns": [
       {"name": "project_id", "type": "string", "nullable": false},
       {"name": "title", "type": "string", "nullable": false}]},
    {"name": "items", "primaryKey": "id", "scopes": [{"pattern": "project:{project_id}"}],
     "columns": [
       {"name": "id", "type": "string", "nullable": false},
       {"name": "project_id", "type": "string", "nullable": false},
       {"name": "label", "type": "string", "nullable": false},
       {"name": "restrict_parent", "type": "string", "nullable": true},
       {"name": "cascade_parent", "type": "string", "nullable": true},
       {"name": "nullify_parent", "type": "string", "nullable": true}],
     "references": [
       {"column": "restrict_parent", "parentTable": "projects", "onDelete": "RESTRICT"},
       {"column": "cascade_parent", "parentTable": "projects", "onDelete": "CASCADE"},
       {"column": "nullify_parent", "parentTable": "projects", "onDelete": "SET NULL"}]},
    {"name": "notes", "primaryKey": "id", "scopes": [{"pattern": "project:{project_id}"}],
     "columns": [
       {"name": "id", "type": "string", "nullable": false},
       {"name": "project_id", "type": "string", "nullable": false},
       {"name": "item_id", "type": "string", "nullable": true}],
     "references": [{"column": "item_id", "parentTable": "items", "onDelete": "CASCADE"}]}
  ]
}`

// Parents of an item row; "" is NULL.
type Parents struct{ Restrict, Cascade, Nullify string }

func opt(s string) rowcodec.Value {
	if s == "" {
		return rowcodec.Value{Null: true}
	}
	return rowcodec.Value{Str: s}
}

// ProjectOp upserts a projects row of ReferenceSchema (every column
// present: a full row, or from wire version 3 a sparse row with every
// presence bit set).
func (c *Client) ProjectOp(id string) wire.Operation {
	return Upsert("projects", id, c.Row("projects", Cols{"project_id": S(id), "title": S("P " + id)}), -1)
}

// Project is the project an item with these parents lives in: the first
// parent named, else p1. A child carries its parent's scope values
// (§6.11 as this server enforces it), and a project's scope value is its
// own id.
func (p Parents) Project() string {
	for _, id := range []string{p.Restrict, p.Cascade, p.Nullify} {
		if id != "" {
			return id
		}
	}
	return "p1"
}

// ItemOp upserts an items row of ReferenceSchema in project p.Project().
func (c *Client) ItemOp(id string, p Parents) wire.Operation {
	return c.ItemIn(p.Project(), id, p)
}

// ItemIn upserts an items row of ReferenceSchema in project project.
func (c *Client) ItemIn(project, id string, p Parents) wire.Operation {
	return Upsert("items", id, c.Row("items", Cols{"id": S(id), "project_id": S(project), "label": S("item " + id),
		"restrict_parent": opt(p.Restrict), "cascade_parent": opt(p.Cascade), "nullify_parent": opt(p.Nullify)}), -1)
}

// NoteOp upserts a notes row of ReferenceSchema in project p1.
func (c *Client) NoteOp(id, item string) wire.Operation {
	return c.NoteIn("p1", id, item)
}

// NoteIn upserts a notes row of ReferenceSchema in project project.
func (c *Client) NoteIn(project, id, item string) wire.Operation {
	return Upsert("notes", id, c.Row("notes", Cols{"id": S(id), "project_id": S(project), "item_id": opt(item)}), -1)
}

// PushDetailed sends one commit and returns its PUSH_RESULT, the
// PUSH_RESULT_DETAILS companion (nil when absent) and the raw response.
func (c *Client) PushDetailed(commitID string, ops ...wire.Operation) (*wire.PushResult, *wire.PushResultDetails, []byte) {
	c.H.T.Helper()
	m := c.Request([]wire.PushCommit{{ClientCommitID: commitID, Operations: ops}}, nil, nil)
	req, err := wire.Encode(m)
	if err != nil {
		c.H.T.Fatalf("encode request: %v", err)
	}
	var out bytes.Buffer
	ctx := c.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	if _, err := c.H.Engine.HandleSync(ctx, engine.Auth{Partition: c.Partition, ActorID: c.Actor}, req, engine.SyncOptions{Mode: engine.ModeSync}, &out); err != nil {
		c.H.T.Fatalf("push %s: %v", commitID, err)
	}
	resp, err := wire.Decode(out.Bytes())
	if err != nil {
		c.H.T.Fatalf("push %s: response does not decode: %v", commitID, err)
	}
	var res *wire.PushResult
	var det *wire.PushResultDetails
	for _, f := range resp.Frames {
		switch v := f.(type) {
		case *wire.PushResult:
			res = v
		case *wire.PushResultDetails:
			det = v
		}
	}
	if res == nil {
		c.H.T.Fatalf("push %s: no PUSH_RESULT", commitID)
	}
	return res, det, out.Bytes()
}

// RunReferences runs the §6.11 / Appendix B.19 scenarios (conformance
// catalog references/*) on an engine over the store newStore returns;
// every subtest uses its own partition.
//
// Every scenario runs once per wire version 2 and 3 (v2/ and v3/
// subtests): the version-3 clients send sparse rows (every column present
// here; the v3-sparse subtests cover partial ones), and a version-2 client sees
// sync.reference_violation as sync.constraint_violation (§10.2 of its
// catalog), with the same PUSH_RESULT_DETAILS (§6.3.1 exists in v2).
func RunReferences(t *testing.T, newStore func(t *testing.T) store.Store, newSegs func() store.SegmentStore) {
	for _, v := range []uint16{wire.Version2, wire.Version3} {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) { runReferences(t, v, newStore, newSegs) })
	}
	t.Run("v3-sparse", func(t *testing.T) { runReferencesSparse(t, newStore, newSegs) })
}

// violationCode is the code a client of wire version v receives for a
// reference violation.
func violationCode(v uint16) syncerr.Code {
	if v >= wire.Version3 {
		return syncerr.ReferenceViolation
	}
	return syncerr.ConstraintViolation
}

func runReferences(t *testing.T, version uint16, newStore func(t *testing.T) store.Store, newSegs func() store.SegmentStore) {
	setup := func(t *testing.T, lim engine.Limits) (*Harness, *Client, *Client) {
		h := New(t, newStore(t), newSegs(), Options{Schema: ReferenceSchema, Limits: lim})
		h.Grants.Set("alice", engine.ScopeMap{"project_id": {"*"}})
		h.Grants.Set("bob", engine.ScopeMap{"project_id": {"*"}})
		part := fmt.Sprintf("refs-%s-%d", t.Name(), h.Clock.Now())
		return h, h.ClientV(version, part, "alice", "a"), h.ClientV(version, part, "bob", "b")
	}
	applied := func(t *testing.T, r *wire.PushResult) {
		t.Helper()
		if r.Status != wire.PushApplied {
			t.Fatalf("commit %s: status %d %+v, want applied", r.ClientCommitID, r.Status, r.Results)
		}
	}
	rejected := func(t *testing.T, r *wire.PushResult, det *wire.PushResultDetails, opIndex int32, wantJSON string) {
		t.Helper()
		if r.Status != wire.PushRejected || len(r.Results) != 1 {
			t.Fatalf("commit %s: status %d %+v, want one rejected record", r.ClientCommitID, r.Status, r.Results)
		}
		o := r.Results[0]
		if o.OpIndex != opIndex || o.Status != wire.OpError || o.Code != string(violationCode(version)) || o.Retryable {
			t.Fatalf("commit %s: result %+v, want %s at op %d", r.ClientCommitID, o, violationCode(version), opIndex)
		}
		if det == nil || det.ClientCommitID != r.ClientCommitID || len(det.Entries) != 1 ||
			det.Entries[0].OpIndex != opIndex || det.Entries[0].DetailsJSON != wantJSON {
			t.Fatalf("commit %s: details %+v, want op %d %s", r.ClientCommitID, det, opIndex, wantJSON)
		}
	}
	count := func(t *testing.T, h *Harness, c *Client, table string, want int) map[string]RowState {
		t.Helper()
		rows := h.ServerRows(c.Partition, table)
		if len(rows) != want {
			t.Fatalf("%s has %d rows, want %d", table, len(rows), want)
		}
		return rows
	}
	column := func(t *testing.T, c *Client, table string, payload []byte, i int) rowcodec.Value {
		t.Helper()
		vals, err := c.Codec(table).Codec.Decode(payload, nil)
		if err != nil {
			t.Fatal(err)
		}
		return vals[i]
	}

	t.Run("missing-parent-rejects", func(t *testing.T) {
		h, a, _ := setup(t, engine.Limits{})
		applied(t, a.Push("c1", a.ProjectOp("p1")))
		res, det, raw := a.PushDetailed("c2", a.ItemOp("i1", Parents{Restrict: "ghost"}))
		rejected(t, res, det, 0, `{"fieldPaths":["restrict_parent"],"reason":"missing_parent","references":{"parent":"projects","row":"ghost"}}`)
		count(t, h, a, "items", 0)
		// §6.3.1: the details are persisted with the outcome; a replay
		// answers byte-for-byte the same.
		if _, _, again := a.PushDetailed("c2", a.ItemOp("i1", Parents{Restrict: "ghost"})); !bytes.Equal(again, raw) {
			t.Errorf("replayed rejection differs from the original response")
		}
		// Candidate state: a parent staged in the same commit counts, in
		// either operation order.
		applied(t, a.Push("c3", a.ItemOp("i2", Parents{Cascade: "p2"}), a.ProjectOp("p2")))
		applied(t, a.Push("c4", a.ProjectOp("p3"), a.ItemOp("i3", Parents{Nullify: "p3"})))
		// The violation is attributed to the offending operation.
		res, det, _ = a.PushDetailed("c5", a.ProjectOp("p4"), a.ItemOp("i4", Parents{Cascade: "p4"}), a.ItemOp("i5", Parents{Nullify: "nope"}))
		rejected(t, res, det, 2, `{"fieldPaths":["nullify_parent"],"reason":"missing_parent","references":{"parent":"projects","row":"nope"}}`)
		count(t, h, a, "projects", 3)
	})

	t.Run("restrict-blocks-parent-delete", func(t *testing.T) {
		h, a, _ := setup(t, engine.Limits{})
		applied(t, a.Push("c1", a.ProjectOp("p1")))
		applied(t, a.Push("c2", a.ItemOp("i1", Parents{Restrict: "p1"})))
		res, det, _ := a.PushDetailed("c3", Delete("projects", "p1"))
		rejected(t, res, det, 0, `{"reason":"restricted_delete","references":{"child":"items"}}`)
		count(t, h, a, "projects", 1)
		applied(t, a.Push("c4", Delete("items", "i1")))
		applied(t, a.Push("c5", Delete("projects", "p1")))
		count(t, h, a, "projects", 0)
	})

	t.Run("reference-moved-away-releases-parent", func(t *testing.T) {
		h, a, _ := setup(t, engine.Limits{})
		applied(t, a.Push("c1", a.ProjectOp("p1"), a.ProjectOp("p2"), a.ItemOp("i1", Parents{Restrict: "p1"}), a.ItemOp("j1", Parents{Restrict: "p2"})))
		// i1 moves its reference from RESTRICT to SET NULL: p1 is free.
		applied(t, a.Push("c2", a.ItemOp("i1", Parents{Nullify: "p1"})))
		applied(t, a.Push("c3", Delete("projects", "p1")))
		res, det, _ := a.PushDetailed("c4", Delete("projects", "p2"))
		rejected(t, res, det, 0, `{"reason":"restricted_delete","references":{"child":"items"}}`)
		applied(t, a.Push("c5", a.ItemIn("p2", "j1", Parents{}), Delete("projects", "p2")))
		count(t, h, a, "projects", 0)
	})

	t.Run("child-insert-after-parent-delete-rejects", func(t *testing.T) {
		_, a, b := setup(t, engine.Limits{})
		applied(t, a.Push("c1", a.ProjectOp("p1")))
		applied(t, a.Push("c2", Delete("projects", "p1")))
		res, det, _ := b.PushDetailed("b1", b.ItemOp("i1", Parents{Restrict: "p1"}))
		rejected(t, res, det, 0, `{"fieldPaths":["restrict_parent"],"reason":"missing_parent","references":{"parent":"projects","row":"p1"}}`)
	})

	t.Run("cascade-deletes-children-in-commit", func(t *testing.T) {
		h, a, b := setup(t, engine.Limits{})
		applied(t, a.Push("c1", a.ProjectOp("p1"), a.ProjectOp("p2")))
		applied(t, a.Push("c2", a.ItemOp("i1", Parents{Cascade: "p1"}), a.ItemOp("i2", Parents{Cascade: "p1"}),
			a.ItemOp("i3", Parents{Cascade: "p2"}), a.NoteOp("n1", "i1"), a.NoteIn("p2", "n2", "i3")))
		hdr := wire.PullHeader{Accept: wire.AcceptInlineRows}
		items := b.NewReplica("items", "items", Scopes("project_id", "p1", "p2"))
		notes := b.NewReplica("notes", "notes", Scopes("project_id", "p1", "p2"))
		for _, r := range []*Replica{items, notes} {
			if err := r.Sync(hdr, 10); err != nil {
				t.Fatal(err)
			}
		}
		if len(items.Rows) != 3 || len(notes.Rows) != 2 {
			t.Fatalf("bootstrap: %d items, %d notes", len(items.Rows), len(notes.Rows))
		}
		res := a.Push("c3", Delete("projects", "p1"))
		applied(t, res)
		got := count(t, h, a, "items", 1)
		if _, ok := got["i3"]; !ok {
			t.Errorf("the child of another parent was deleted")
		}
		if notes := count(t, h, a, "notes", 1); notes["n2"].Version == 0 {
			t.Errorf("the note of the surviving item was deleted")
		}
		// One commit: the client delete and the appended deletes, each an
		// ordinary change carrying the child's stored scopes (§2.2).
		var commit *store.Commit
		err := h.Store.ReadLog(context.Background(), a.Partition, res.CommitSeq.Value-1, res.CommitSeq.Value, func(c *store.Commit) bool { commit = c; return false })
		if err != nil || commit == nil {
			t.Fatalf("read log: %v", err)
		}
		var seen []string
		for _, ch := range commit.Changes {
			if ch.Op != wire.OpDelete || len(ch.Scopes) != 1 || ch.Scopes[0].Key != "project_id" || ch.Scopes[0].Value != "p1" {
				t.Errorf("change %s/%s: op %d scopes %v, want a delete scoped project_id=p1", ch.Table, ch.RowID, ch.Op, ch.Scopes)
			}
			seen = append(seen, ch.Table+"/"+ch.RowID)
		}
		if fmt.Sprint(seen) != "[projects/p1 items/i1 items/i2 notes/n1]" {
			t.Errorf("commit changes %v, want the parent delete then the cascade in order", seen)
		}
		for _, r := range []*Replica{items, notes} {
			if err := r.Sync(hdr, 10); err != nil {
				t.Fatal(err)
			}
		}
		if _, ok := items.Rows["i3"]; len(items.Rows) != 1 || !ok || len(notes.Rows) != 1 {
			t.Errorf("subscriber after the cascade: items %v, notes %v", items.Rows, notes.Rows)
		}
	})

	t.Run("set-null-clears-child-column", func(t *testing.T) {
		h, a, b := setup(t, engine.Limits{})
		applied(t, a.Push("c1", a.ProjectOp("p1")))
		applied(t, a.Push("c2", a.ItemOp("i1", Parents{Nullify: "p1"})))
		hdr := wire.PullHeader{Accept: wire.AcceptInlineRows}
		items := b.NewReplica("items", "items", Scopes("project_id", "p1"))
		if err := items.Sync(hdr, 10); err != nil {
			t.Fatal(err)
		}
		applied(t, a.Push("c3", Delete("projects", "p1")))
		row := count(t, h, a, "items", 1)["i1"]
		if row.Version != 2 {
			t.Errorf("child version %d, want 2 (the NULL write bumps it)", row.Version)
		}
		if v := column(t, a, "items", row.Payload, 5); !v.Null {
			t.Errorf("nullify_parent = %+v, want NULL", v)
		}
		if v := column(t, a, "items", row.Payload, 2); v.Str != "item i1" {
			t.Errorf("other columns changed: label %+v", v)
		}
		if err := items.Sync(hdr, 10); err != nil {
			t.Fatal(err)
		}
		if got := items.Rows["i1"]; got.Version != 2 || !bytes.Equal(got.Payload, row.Payload) {
			t.Errorf("subscriber row %+v, want the server's version 2 row", got)
		}
		// The cleared reference no longer holds the (recreated) parent.
		// baseVersion 0 recreates a deleted row under either version's
		// rules (§6.2: an unversioned upsert does not, from version 3).
		recreate := a.ProjectOp("p1")
		recreate.BaseVersion = wire.Some(int64(0))
		applied(t, a.Push("c4", recreate))
		applied(t, a.Push("c5", Delete("projects", "p1")))
	})

	t.Run("delete-parent-and-children-together-passes-restrict", func(t *testing.T) {
		h, a, _ := setup(t, engine.Limits{})
		applied(t, a.Push("c1", a.ProjectOp("p1"), a.ProjectOp("p2")))
		applied(t, a.Push("c2", a.ItemOp("i1", Parents{Restrict: "p1"}), a.ItemOp("i2", Parents{Restrict: "p2"})))
		applied(t, a.Push("c3", Delete("items", "i1"), Delete("projects", "p1")))
		applied(t, a.Push("c4", Delete("projects", "p2"), Delete("items", "i2")))
		count(t, h, a, "projects", 0)
		count(t, h, a, "items", 0)
	})

	t.Run("cascade-limit-rejects", func(t *testing.T) {
		h, a, _ := setup(t, engine.Limits{MaxCascadeOperationsPerCommit: 3})
		applied(t, a.Push("c1", a.ProjectOp("p1"), a.ProjectOp("p2")))
		applied(t, a.Push("c2", a.ItemOp("i1", Parents{Cascade: "p1"}), a.ItemOp("i2", Parents{Cascade: "p1"}),
			a.ItemOp("i3", Parents{Cascade: "p1"}), a.ItemOp("i4", Parents{Cascade: "p1"}),
			a.ItemOp("j1", Parents{Cascade: "p2"}), a.ItemOp("j2", Parents{Nullify: "p2"}), a.ItemOp("j3", Parents{Cascade: "p2"})))
		res, det, _ := a.PushDetailed("c3", a.ProjectOp("p9"), Delete("projects", "p1"))
		rejected(t, res, det, 1, `{"reason":"cascade_limit"}`)
		count(t, h, a, "items", 7)
		count(t, h, a, "projects", 2)
		// Exactly the cap (two deletes and one SET NULL) applies.
		applied(t, a.Push("c4", Delete("projects", "p2")))
		count(t, h, a, "items", 5)
	})
}
