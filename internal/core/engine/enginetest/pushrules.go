package enginetest

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/crdt"
	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// Stores builds a fresh store pair for one scenario, so the push-rule
// suite runs unchanged on memstore and on DynamoDB Local.
type Stores func(t testing.TB) (store.Store, store.SegmentStore)

// PushRulesSchema is the tasks fixture of the conformance catalog plus a
// table whose primary key is its scope column, a crdt column and a
// blob_ref column.
const PushRulesSchema = `{
  "version": 1,
  "tables": [
    {"name": "tasks", "primaryKey": "id",
     "columns": [
       {"name": "id", "type": "string", "nullable": false},
       {"name": "project_id", "type": "string", "nullable": false},
       {"name": "title", "type": "string", "nullable": false},
       {"name": "done", "type": "boolean", "nullable": false},
       {"name": "priority", "type": "integer", "nullable": true}
     ],
     "scopes": ["project:{project_id}"]},
    {"name": "tenants", "primaryKey": "tenant_id",
     "columns": [
       {"name": "tenant_id", "type": "string", "nullable": false},
       {"name": "body", "type": "string", "nullable": false}
     ],
     "scopes": ["tenant:{tenant_id}"]},
    {"name": "notes", "primaryKey": "id",
     "columns": [
       {"name": "id", "type": "string", "nullable": false},
       {"name": "project_id", "type": "string", "nullable": false},
       {"name": "title", "type": "string", "nullable": false},
       {"name": "doc", "type": "crdt", "nullable": true, "crdtType": "yjs-doc"}
     ],
     "scopes": ["project:{project_id}"]},
    {"name": "attachments", "primaryKey": "id",
     "columns": [
       {"name": "id", "type": "string", "nullable": false},
       {"name": "project_id", "type": "string", "nullable": false},
       {"name": "file", "type": "blob_ref", "nullable": true}
     ],
     "scopes": ["project:{project_id}"]}
  ]
}`

// ScopedTasksV2 is served as the latest version of the older-version
// scenario: tasks are scoped by project AND owner. ScopedTasksV1, still
// served, has the owner column but declares only the project pattern.
const (
	ScopedTasksV2 = `{"version": 2, "tables": [
  {"name": "tasks", "primaryKey": "id",
   "columns": [
     {"name": "id", "type": "string", "nullable": false},
     {"name": "project_id", "type": "string", "nullable": false},
     {"name": "owner_id", "type": "string", "nullable": false},
     {"name": "title", "type": "string", "nullable": false}
   ],
   "scopes": ["project:{project_id}", "owner:{owner_id}"]}]}`
	ScopedTasksV1 = `{"version": 1, "tables": [
  {"name": "tasks", "primaryKey": "id",
   "columns": [
     {"name": "id", "type": "string", "nullable": false},
     {"name": "project_id", "type": "string", "nullable": false},
     {"name": "owner_id", "type": "string", "nullable": false},
     {"name": "title", "type": "string", "nullable": false}
   ],
   "scopes": ["project:{project_id}"]}]}`
)

// PushRules runs the wire-3 push rules (§2.2, §2.3, §3.4, §6.1–§6.3) and
// the version-2 rules they must not disturb, through real request bytes.
// Each scenario states its spec source; the catalog names are the
// 0.21+ conformance scenarios they port.
func PushRules(t *testing.T, stores Stores) {
	for _, sc := range append(pushRuleScenarios[:len(pushRuleScenarios):len(pushRuleScenarios)], tombstoneScenarios...) {
		t.Run(sc.name, func(t *testing.T) {
			st, segs := stores(t)
			schema := sc.schema
			if schema == "" {
				schema = PushRulesSchema
			}
			o := Options{Schema: schema, OlderSchemas: sc.older}
			if sc.crdt {
				o.CRDTMergers = crdt.Default()
			}
			h := New(t, st, segs, o)
			sc.run(t, h)
		})
	}
}

type pushRuleScenario struct {
	name   string
	schema string
	older  []string
	// crdt: the engine has the default CRDT mergers (yjs-doc, §5.10.2).
	crdt bool
	run  func(t *testing.T, h *Harness)
}

var p1 = engine.ScopeMap{"project_id": {"p1"}}

// seeded returns two v3 clients of actors a and b allowed p1, after a
// seeded tasks row t1 (version 1).
func seeded(t *testing.T, h *Harness) (a, b *Client) {
	t.Helper()
	h.Grants.Set("actor-a", p1)
	h.Grants.Set("actor-b", p1)
	a = h.ClientV3("tenant", "actor-a", "client-a")
	b = h.ClientV3("tenant", "actor-b", "client-b")
	applied(t, a.Push("seed", Upsert("tasks", "t1", a.Task("t1", "p1", "seed", false), -1)))
	return a, b
}

func applied(t testing.TB, r *wire.PushResult) int64 {
	t.Helper()
	if r.Status != wire.PushApplied || !r.CommitSeq.Present {
		t.Fatalf("commit %s: want applied, got status %d results %+v", r.ClientCommitID, r.Status, r.Results)
	}
	return r.CommitSeq.Value
}

func rejected(t testing.TB, r *wire.PushResult, opIndex int32, st wire.OpResultStatus, code syncerr.Code) wire.OpResult {
	t.Helper()
	if r.Status != wire.PushRejected || r.CommitSeq.Present || len(r.Results) != 1 {
		t.Fatalf("commit %s: want rejected with one record, got status %d results %+v", r.ClientCommitID, r.Status, r.Results)
	}
	got := r.Results[0]
	if got.OpIndex != opIndex || got.Status != st || got.Code != string(code) {
		t.Fatalf("commit %s: want op %d status %d %s, got %+v", r.ClientCommitID, opIndex, st, code, got)
	}
	return got
}

// wantStored checks a stored row's version and named values.
func wantStored(t testing.TB, h *Harness, table, id string, version int64, cols Cols) *Stored {
	t.Helper()
	s := h.StoredRow("tenant", table, id)
	if s == nil || s.Deleted {
		t.Fatalf("%s/%s: want a live row, got %+v", table, id, s)
	}
	if s.Version != version {
		t.Fatalf("%s/%s: server_version %d, want %d", table, id, s.Version, version)
	}
	for name, want := range cols {
		if got := s.Values[name]; !sameValue(got, want) {
			t.Fatalf("%s/%s: column %s = %+v, want %+v", table, id, name, got, want)
		}
	}
	return s
}

func wantAbsent(t testing.TB, h *Harness, table, id string) {
	t.Helper()
	if s := h.StoredRow("tenant", table, id); s != nil && !s.Deleted {
		t.Fatalf("%s/%s: want no live row, got v%d %+v", table, id, s.Version, s.Values)
	}
}

func sameValue(a, b rowcodec.Value) bool {
	return a.Null == b.Null && a.Int == b.Int && a.Float == b.Float && a.Bool == b.Bool && a.Str == b.Str && bytes.Equal(a.Bytes, b.Bytes)
}

// conflictColumns decodes a v3 conflict record's conflictColumns with the
// client's codec and lists the marked column names.
func conflictColumns(t testing.TB, c *Client, table string, r wire.OpResult) []string {
	t.Helper()
	tb := c.Codec(table)
	flags, err := tb.Codec.DecodePresence(r.ConflictColumns)
	if err != nil {
		t.Fatalf("conflictColumns %x: %v", r.ConflictColumns, err)
	}
	var out []string
	for i, f := range flags {
		if f {
			out = append(out, tb.Columns[i].Name)
		}
	}
	return out
}

func serverRowCols(t testing.TB, c *Client, table string, row []byte) Cols {
	t.Helper()
	tb := c.Codec(table)
	vals, err := tb.Codec.Decode(row, nil)
	if err != nil {
		t.Fatalf("serverRow does not decode with the full-row codec of the client's version: %v", err)
	}
	out := Cols{}
	for i, col := range tb.Columns {
		out[col.Name] = vals[i]
	}
	return out
}

func prune(t testing.TB, h *Harness) engine.PruneReport {
	t.Helper()
	zero := int64(0)
	h.Clock.Advance(60 * 60 * 1000)
	rep, err := h.Engine.Prune(context.Background(), "tenant", &engine.RetentionOverride{ActiveWindowMs: &zero, AgeForceMs: &zero, MinRetainedCommits: &zero})
	if err != nil {
		t.Fatalf("prune: %v", err)
	}
	return rep
}

const blobValue = `{"blobId":"sha256:` + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" + `","byteLength":5}`

var pushRuleScenarios = []pushRuleScenario{
	// B.21(a), sparse-rows/disjoint-unversioned-patches-both-land.
	{name: "disjoint-unversioned-patches-both-land", run: func(t *testing.T, h *Harness) {
		a, b := seeded(t, h)
		applied(t, a.Push("a1", Upsert("tasks", "t1", a.Patch("tasks", Cols{"id": S("t1"), "title": S("a-title")}), -1)))
		applied(t, b.Push("b1", Upsert("tasks", "t1", b.Patch("tasks", Cols{"id": S("t1"), "done": B(true)}), -1)))
		s := wantStored(t, h, "tasks", "t1", 3, Cols{"title": S("a-title"), "done": B(true), "project_id": S("p1"), "priority": Null()})
		// §2.2: each patch restamped only the columns it presented.
		if want := []int64{1, 1, 2, 3, 1}; !equalInts(s.ColumnVersions, want) {
			t.Fatalf("column versions %v, want %v", s.ColumnVersions, want)
		}
	}},
	// B.21(b), sparse-rows/disjoint-versioned-patches-both-land.
	{name: "disjoint-versioned-patches-both-land", run: func(t *testing.T, h *Harness) {
		a, b := seeded(t, h)
		applied(t, a.Push("a1", Upsert("tasks", "t1", a.Patch("tasks", Cols{"id": S("t1"), "title": S("a-title")}), 1)))
		// done still carries column_version 1 ≤ baseVersion 1.
		applied(t, b.Push("b1", Upsert("tasks", "t1", b.Patch("tasks", Cols{"id": S("t1"), "done": B(true)}), 1)))
		wantStored(t, h, "tasks", "t1", 3, Cols{"title": S("a-title"), "done": B(true)})
	}},
	// B.21(c), sparse-rows/same-column-versioned-patch-conflicts.
	{name: "same-column-versioned-patch-conflicts", run: func(t *testing.T, h *Harness) {
		a, b := seeded(t, h)
		applied(t, a.Push("a1", Upsert("tasks", "t1", a.Patch("tasks", Cols{"id": S("t1"), "title": S("a-wins")}), 1)))
		r := rejected(t, b.Push("b1", Upsert("tasks", "t1", b.Patch("tasks", Cols{"id": S("t1"), "title": S("b-loses"), "done": B(true)}), 1)), 0, wire.OpConflict, syncerr.VersionConflict)
		if got := conflictColumns(t, b, "tasks", r); !equalStrings(got, []string{"title"}) {
			t.Fatalf("conflictColumns %v, want exactly [title] (done is present but did not move)", got)
		}
		if r.ServerVersion != 2 {
			t.Fatalf("serverVersion %d, want 2", r.ServerVersion)
		}
		if sr := serverRowCols(t, b, "tasks", r.ServerRow); sr["title"].Str != "a-wins" || sr["project_id"].Str != "p1" {
			t.Fatalf("serverRow %+v", sr)
		}
		wantStored(t, h, "tasks", "t1", 2, Cols{"title": S("a-wins"), "done": B(false)})
	}},
	// B.21(d), sparse-rows/crdt-patch-with-stale-base-applies-clean. This
	// server registers no CRDT merger, so the clean apply ends in the
	// documented refusal sync.crdt_merge_failed (§5.10.2) — never a
	// conflict: a crdt column does not enter the baseVersion comparison.
	{name: "crdt-patch-with-stale-base-refused-without-merger", run: func(t *testing.T, h *Harness) {
		h.Grants.Set("actor-a", p1)
		h.Grants.Set("actor-b", p1)
		a := h.ClientV3("tenant", "actor-a", "client-a")
		b := h.ClientV3("tenant", "actor-b", "client-b")
		applied(t, a.Push("seed", Upsert("notes", "n1", a.Row("notes", Cols{"id": S("n1"), "project_id": S("p1"), "title": S("t")}), -1)))
		applied(t, b.Push("b1", Upsert("notes", "n1", b.Patch("notes", Cols{"id": S("n1"), "title": S("b-title")}), 1)))
		doc := rowcodec.Value{Bytes: []byte{1, 2, 3}}
		rejected(t, a.Push("a1", Upsert("notes", "n1", a.Patch("notes", Cols{"id": S("n1"), "doc": doc}), 1)), 0, wire.OpError, syncerr.CrdtMergeFailed)
		wantStored(t, h, "notes", "n1", 2, Cols{"title": S("b-title"), "doc": Null()})
	}},
	// §5.10.3 rule 2 with the yjs-doc merger: each push merges into the
	// stored document; a crdt-only patch from a stale baseVersion applies
	// clean (B.21(d)); bytes that are no Yjs update are refused with
	// sync.crdt_merge_failed and change nothing (§5.10.2). The Yjs bytes
	// are written out by hand from the update format: client 1 inserts
	// "hi" and client 2 inserts "yo" into the root text "t".
	{name: "crdt-patch-merges-into-stored-doc", crdt: true, run: func(t *testing.T, h *Harness) {
		h.Grants.Set("actor-a", p1)
		h.Grants.Set("actor-b", p1)
		a := h.ClientV3("tenant", "actor-a", "client-a")
		b := h.ClientV3("tenant", "actor-b", "client-b")
		hi := []byte{1, 1, 1, 0, 4, 1, 1, 't', 2, 'h', 'i', 0}
		yo := []byte{1, 1, 2, 0, 4, 1, 1, 't', 2, 'y', 'o', 0}
		// Clients in descending order, each with its one item; no deletes.
		both := []byte{2, 1, 2, 0, 4, 1, 1, 't', 2, 'y', 'o', 1, 1, 0, 4, 1, 1, 't', 2, 'h', 'i', 0}
		applied(t, a.Push("seed", Upsert("notes", "n1", a.Row("notes", Cols{"id": S("n1"), "project_id": S("p1"), "title": S("t"), "doc": {Bytes: hi}}), -1)))
		wantStored(t, h, "notes", "n1", 1, Cols{"doc": {Bytes: hi}})
		applied(t, b.Push("b1", Upsert("notes", "n1", b.Patch("notes", Cols{"id": S("n1"), "title": S("b-title")}), 1)))
		applied(t, a.Push("a1", Upsert("notes", "n1", a.Patch("notes", Cols{"id": S("n1"), "doc": {Bytes: yo}}), 1)))
		wantStored(t, h, "notes", "n1", 3, Cols{"title": S("b-title"), "doc": {Bytes: both}})
		// Replaying an update already merged changes nothing (§5.10.3).
		applied(t, b.Push("b2", Upsert("notes", "n1", b.Patch("notes", Cols{"id": S("n1"), "doc": {Bytes: hi}}), -1)))
		wantStored(t, h, "notes", "n1", 4, Cols{"doc": {Bytes: both}})
		rejected(t, a.Push("bad", Upsert("notes", "n1", a.Patch("notes", Cols{"id": S("n1"), "doc": {Bytes: []byte{1, 2, 3}}}), -1)), 0, wire.OpError, syncerr.CrdtMergeFailed)
		wantStored(t, h, "notes", "n1", 4, Cols{"doc": {Bytes: both}})
	}},
	// B.21(f), sparse-rows/present-scope-column-change-rejects (§3.4 rule 5).
	{name: "present-scope-column-change-rejects", run: func(t *testing.T, h *Harness) {
		h.Grants.Set("actor-a", engine.ScopeMap{"project_id": {"p1", "p2"}})
		a := h.ClientV3("tenant", "actor-a", "client-a")
		applied(t, a.Push("seed", Upsert("tasks", "t1", a.Task("t1", "p1", "seed", false), -1)))
		rejected(t, a.Push("move", Upsert("tasks", "t1", a.Task("t1", "p2", "moved", false), -1)), 0, wire.OpError, syncerr.InvalidRequest)
		rejected(t, a.Push("move-patch", Upsert("tasks", "t1", a.Patch("tasks", Cols{"id": S("t1"), "project_id": S("p2")}), 1)), 0, wire.OpError, syncerr.InvalidRequest)
		wantStored(t, h, "tasks", "t1", 1, Cols{"project_id": S("p1"), "title": S("seed")})

		// A version-2 client keeps 0.15.48 behaviour: the scope column is
		// silently kept, the rest of the row applies.
		v2 := h.Client("tenant", "actor-a", "client-v2")
		applied(t, v2.Push("v2-move", Upsert("tasks", "t1", v2.Task("t1", "p2", "v2 title", true), -1)))
		s := wantStored(t, h, "tasks", "t1", 2, Cols{"project_id": S("p1"), "title": S("v2 title"), "done": B(true)})
		if s.Scopes[0].Value != "p1" {
			t.Fatalf("stored scopes %+v", s.Scopes)
		}
	}},
	// sparse-rows/patch-scope-column-matches-stored-local-row: a present
	// scope column equal to the stored value is a no-op, including a
	// primary key that is itself the scope column.
	{name: "patch-scope-column-matches-stored-row", run: func(t *testing.T, h *Harness) {
		h.Grants.Set("actor-a", engine.ScopeMap{"project_id": {"p1"}, "tenant_id": {"t1"}})
		a := h.ClientV3("tenant", "actor-a", "client-a")
		applied(t, a.Push("seed", Upsert("tasks", "t1", a.Task("t1", "p1", "seed", false), -1)))
		applied(t, a.Push("kept", Upsert("tasks", "t1", a.Patch("tasks", Cols{"id": S("t1"), "project_id": S("p1"), "title": S("kept")}), 1)))
		s := wantStored(t, h, "tasks", "t1", 2, Cols{"project_id": S("p1"), "title": S("kept")})
		if len(s.ColumnVersions) != 5 || s.ColumnVersions[1] != 1 {
			t.Fatalf("the equal scope column was restamped: %v", s.ColumnVersions)
		}
		applied(t, a.Push("tenant", Upsert("tenants", "t1", a.Row("tenants", Cols{"tenant_id": S("t1"), "body": S("one")}), -1)))
		applied(t, a.Push("tenant-patch", Upsert("tenants", "t1", a.Patch("tenants", Cols{"tenant_id": S("t1"), "body": S("two")}), 1)))
		wantStored(t, h, "tenants", "t1", 2, Cols{"body": S("two")})
	}},
	// sparse-rows/atomic-mixed-batch (§6.4): one stale sibling rejects
	// the whole commit, earlier siblings roll back.
	{name: "atomic-mixed-batch", run: func(t *testing.T, h *Harness) {
		a, b := seeded(t, h)
		applied(t, a.Push("t2", Upsert("tasks", "t2", a.Task("t2", "p1", "original", false), -1)))
		applied(t, a.Push("batch",
			Upsert("tasks", "t1", a.Patch("tasks", Cols{"id": S("t1"), "title": S("moved")}), 1),
			Upsert("tasks", "t2", a.Patch("tasks", Cols{"id": S("t2"), "priority": I(2)}), 1),
			Upsert("tasks", "event", a.Task("event", "p1", "audit", false), 0)))
		r := rejected(t, b.Push("stale",
			Upsert("tasks", "t2", b.Patch("tasks", Cols{"id": S("t2"), "done": B(true)}), 1),
			Upsert("tasks", "t1", b.Patch("tasks", Cols{"id": S("t1"), "title": S("stale")}), 1),
			Upsert("tasks", "failed-event", b.Task("failed-event", "p1", "audit", false), 0)), 1, wire.OpConflict, syncerr.VersionConflict)
		if got := conflictColumns(t, b, "tasks", r); !equalStrings(got, []string{"title"}) {
			t.Fatalf("conflictColumns %v", got)
		}
		wantStored(t, h, "tasks", "t2", 2, Cols{"done": B(false), "priority": I(2)})
		wantStored(t, h, "tasks", "t1", 2, Cols{"title": S("moved")})
		wantAbsent(t, h, "tasks", "failed-event")
	}},
	// §6.2 step 3: a client cannot hold a version the server never issued.
	{name: "base-version-above-server-version", run: func(t *testing.T, h *Harness) {
		a, _ := seeded(t, h)
		rejected(t, a.Push("future", Upsert("tasks", "t1", a.Patch("tasks", Cols{"id": S("t1"), "title": S("x")}), 2)), 0, wire.OpError, syncerr.InvalidRequest)
		wantStored(t, h, "tasks", "t1", 1, Cols{"title": S("seed")})
	}},
	// §6.2 step 4: baseVersion 0 on an existing row (lost insert race).
	{name: "lost-insert-race-marks-present-columns", run: func(t *testing.T, h *Harness) {
		a, b := seeded(t, h)
		r := rejected(t, b.Push("race", Upsert("tasks", "t1", b.Patch("tasks", Cols{"id": S("t1"), "title": S("mine"), "done": B(true)}), 0)), 0, wire.OpConflict, syncerr.VersionConflict)
		if got := conflictColumns(t, b, "tasks", r); !equalStrings(got, []string{"title", "done"}) {
			t.Fatalf("conflictColumns %v, want every present column except the primary key", got)
		}
		if r.ServerVersion != 1 || serverRowCols(t, b, "tasks", r.ServerRow)["title"].Str != "seed" {
			t.Fatalf("conflict record %+v", r)
		}
		// An actor without the row's scope learns nothing about it.
		h.Grants.Set("mallory", engine.ScopeMap{"project_id": {"p9"}})
		m := h.ClientV3("tenant", "mallory", "client-m")
		rejected(t, m.Push("race-m", Upsert("tasks", "t1", m.Task("t1", "p9", "mine", false), 0)), 0, wire.OpError, syncerr.Forbidden)
		_ = a
	}},
	// §6.2 absent-row table: baseVersion > 0 is row_missing, after payload
	// authorization.
	{name: "versioned-upsert-of-absent-row", run: func(t *testing.T, h *Harness) {
		a, _ := seeded(t, h)
		rejected(t, a.Push("ghost", Upsert("tasks", "ghost", a.Task("ghost", "p1", "x", false), 3)), 0, wire.OpError, syncerr.RowMissing)
		rejected(t, a.Push("ghost-p9", Upsert("tasks", "ghost", a.Task("ghost", "p9", "x", false), 3)), 0, wire.OpError, syncerr.Forbidden)
		// A partial payload cannot be authorized (no scope column).
		rejected(t, a.Push("ghost-partial", Upsert("tasks", "ghost", a.Patch("tasks", Cols{"id": S("ghost"), "title": S("x")}), 3)), 0, wire.OpError, syncerr.Forbidden)
		// No tombstone, no baseVersion: insert only with every column.
		rejected(t, a.Push("ghost-unversioned", Upsert("tasks", "ghost", a.Patch("tasks", Cols{"id": S("ghost"), "project_id": S("p1"), "title": S("x"), "done": B(false)}), -1)), 0, wire.OpError, syncerr.RowMissing)
		wantAbsent(t, h, "tasks", "ghost")
	}},
	// Version-2 clients keep 0.15.48 behaviour, and their writes keep the
	// column versions current for version-3 clients (§2.2).
	{name: "version-2-rules-and-column-versions", run: func(t *testing.T, h *Harness) {
		a, _ := seeded(t, h)
		v2 := h.Client("tenant", "actor-a", "client-v2")
		// Row-level conflict: any baseVersion other than the row's.
		r := rejected(t, v2.Push("v2-stale", Upsert("tasks", "t1", v2.Task("t1", "p1", "x", false), 0)), 0, wire.OpConflict, syncerr.VersionConflict)
		if len(r.ConflictColumns) != 0 {
			t.Fatalf("a version-2 conflict record carries conflictColumns %x", r.ConflictColumns)
		}
		applied(t, v2.Push("v2-full", Upsert("tasks", "t1", v2.Task("t1", "p1", "from v2", false), 1)))
		s := wantStored(t, h, "tasks", "t1", 2, Cols{"title": S("from v2")})
		// The full row restamped every column it carried but the primary
		// key and the (unchanged, immutable) scope column.
		if !equalInts(s.ColumnVersions, []int64{1, 1, 2, 2, 2}) {
			t.Fatalf("column versions after a v2 write: %v", s.ColumnVersions)
		}
		// So a v3 patch from before the v2 write conflicts on its column.
		r = rejected(t, a.Push("v3-stale", Upsert("tasks", "t1", a.Patch("tasks", Cols{"id": S("t1"), "done": B(true)}), 1)), 0, wire.OpConflict, syncerr.VersionConflict)
		if got := conflictColumns(t, a, "tasks", r); !equalStrings(got, []string{"done"}) {
			t.Fatalf("conflictColumns %v", got)
		}
		// Upsert after delete: version 2 simply inserts again at version 1.
		applied(t, v2.Push("v2-del", Delete("tasks", "t1")))
		applied(t, v2.Push("v2-again", Upsert("tasks", "t1", v2.Task("t1", "p1", "again", false), -1)))
		wantStored(t, h, "tasks", "t1", 1, Cols{"title": S("again")})
	}},
	// Issue 9 item 6: no blob storage exists, so a blob reference names a
	// blob the server does not hold (§6.6).
	{name: "blob-ref-values-rejected", run: func(t *testing.T, h *Harness) {
		h.Grants.Set("actor-a", p1)
		a := h.ClientV3("tenant", "actor-a", "client-a")
		v2 := h.Client("tenant", "actor-a", "client-v2")
		file := S(blobValue)
		rejected(t, a.Push("blob", Upsert("attachments", "f1", a.Row("attachments", Cols{"id": S("f1"), "project_id": S("p1"), "file": file}), -1)), 0, wire.OpError, syncerr.BlobNotFound)
		rejected(t, v2.Push("blob-v2", Upsert("attachments", "f1", v2.Row("attachments", Cols{"id": S("f1"), "project_id": S("p1"), "file": file}), -1)), 0, wire.OpError, syncerr.BlobNotFound)
		applied(t, a.Push("no-blob", Upsert("attachments", "f1", a.Row("attachments", Cols{"id": S("f1"), "project_id": S("p1")}), -1)))
		rejected(t, a.Push("blob-patch", Upsert("attachments", "f1", a.Patch("attachments", Cols{"id": S("f1"), "file": file}), -1)), 0, wire.OpError, syncerr.BlobNotFound)
		wantStored(t, h, "attachments", "f1", 1, Cols{"file": Null()})
	}},
	// Issue 9 parity: a CRDT value into a scope the actor lacks is
	// sync.forbidden (authorization first), not crdt_merge_failed.
	{name: "crdt-into-foreign-scope-is-forbidden", run: func(t *testing.T, h *Harness) {
		h.Grants.Set("actor-a", p1)
		h.Grants.Set("mallory", engine.ScopeMap{"project_id": {"p9"}})
		a := h.ClientV3("tenant", "actor-a", "client-a")
		applied(t, a.Push("seed", Upsert("notes", "n1", a.Row("notes", Cols{"id": S("n1"), "project_id": S("p1"), "title": S("t")}), -1)))
		doc := rowcodec.Value{Bytes: []byte{9}}
		for _, m := range []*Client{h.ClientV3("tenant", "mallory", "m3"), h.Client("tenant", "mallory", "m2")} {
			rejected(t, m.Push("upd", Upsert("notes", "n1", m.Row("notes", Cols{"id": S("n1"), "project_id": S("p1"), "title": S("x"), "doc": doc}), -1)), 0, wire.OpError, syncerr.Forbidden)
			rejected(t, m.Push("ins", Upsert("notes", "n2", m.Row("notes", Cols{"id": S("n2"), "project_id": S("p1"), "title": S("x"), "doc": doc}), -1)), 0, wire.OpError, syncerr.Forbidden)
		}
	}},
	// Issue 9 item 1: a client on an older served version whose table
	// declares fewer scope patterns is still authorized, scoped and held to
	// scope-column immutability by the latest version's patterns.
	{name: "older-version-push-uses-current-scope-patterns", schema: ScopedTasksV2, older: []string{ScopedTasksV1}, run: func(t *testing.T, h *Harness) {
		h.Grants.Set("alice", engine.ScopeMap{"project_id": {"p1"}, "owner_id": {"alice"}})
		h.Grants.Set("mallory", engine.ScopeMap{"project_id": {"p1"}, "owner_id": {"mallory"}})
		alice := h.ClientV3("tenant", "alice", "alice-1")
		row := func(c *Client, id, owner, title string) []byte {
			return c.Row("tasks", Cols{"id": S(id), "project_id": S("p1"), "owner_id": S(owner), "title": S(title)})
		}
		applied(t, alice.Push("a1", Upsert("tasks", "t1", row(alice, "t1", "alice", "private"), -1)))
		for _, m := range []*Client{h.Client("tenant", "mallory", "m2"), h.ClientV3("tenant", "mallory", "m3")} {
			m.Schema = 1
			rejected(t, m.Push("upd", Upsert("tasks", "t1", row(m, "t1", "alice", "defaced"), -1)), 0, wire.OpError, syncerr.Forbidden)
			rejected(t, m.Push("del", Delete("tasks", "t1")), 0, wire.OpError, syncerr.Forbidden)
			rejected(t, m.Push("ins", Upsert("tasks", "t2", row(m, "t2", "alice", "planted"), -1)), 0, wire.OpError, syncerr.Forbidden)
			// Its own rows: the owner column is a scope column of the
			// storage version, so it stays immutable.
			applied(t, m.Push("own", Upsert("tasks", "m-"+m.ID, row(m, "m-"+m.ID, "mallory", "mine"), -1)))
		}
		wantStored(t, h, "tasks", "t1", 1, Cols{"title": S("private")})
		wantAbsent(t, h, "tasks", "t2")
		m2 := h.Client("tenant", "mallory", "m2")
		m2.Schema = 1
		applied(t, m2.Push("rehome", Upsert("tasks", "m-m2", row(m2, "m-m2", "alice", "moved?"), -1)))
		s := wantStored(t, h, "tasks", "m-m2", 2, Cols{"owner_id": S("mallory"), "title": S("moved?")})
		if !strings.Contains(scopeText(s.Scopes), "owner_id=mallory") {
			t.Fatalf("stored scopes %s disagree with the row", scopeText(s.Scopes))
		}
		m3 := h.ClientV3("tenant", "mallory", "m3")
		m3.Schema = 1
		rejected(t, m3.Push("rehome", Upsert("tasks", "m-m3", row(m3, "m-m3", "alice", "moved?"), -1)), 0, wire.OpError, syncerr.InvalidRequest)
	}},
	// §2.3: idempotency binds the commit id alone. A retry under the same
	// id with different payload bytes replays the stored result and never
	// applies.
	{name: "idempotent-retry-with-different-payload", run: func(t *testing.T, h *Harness) {
		a, _ := seeded(t, h)
		first := a.Push("c1", Upsert("tasks", "t1", a.Patch("tasks", Cols{"id": S("t1"), "title": S("first")}), 1))
		seq := applied(t, first)
		retry := a.Push("c1", Upsert("tasks", "t1", a.Patch("tasks", Cols{"id": S("t1"), "title": S("changed intent")}), 2))
		if retry.Status != wire.PushCached || !retry.CommitSeq.Present || retry.CommitSeq.Value != seq || len(retry.Results) != 1 {
			t.Fatalf("retry: want cached at seq %d, got %+v", seq, retry)
		}
		wantStored(t, h, "tasks", "t1", 2, Cols{"title": S("first")})

		// A rejected commit replays as itself, byte-for-byte, even when the
		// new bytes would apply.
		orig := a.Push("c2", Upsert("tasks", "t1", a.Patch("tasks", Cols{"id": S("t1"), "project_id": S("p2")}), -1))
		rejected(t, orig, 0, wire.OpError, syncerr.InvalidRequest)
		again := a.Push("c2", Upsert("tasks", "t1", a.Patch("tasks", Cols{"id": S("t1"), "title": S("would apply")}), -1))
		if !bytes.Equal(encodeResult(t, orig), encodeResult(t, again)) {
			t.Fatalf("replayed rejection differs:\n%+v\n%+v", orig, again)
		}
		// A conflict replays with its serverRow and conflictColumns.
		conflict := a.Push("c3", Upsert("tasks", "t1", a.Patch("tasks", Cols{"id": S("t1"), "title": S("stale")}), 1))
		rejected(t, conflict, 0, wire.OpConflict, syncerr.VersionConflict)
		again = a.Push("c3", Upsert("tasks", "t1", a.Patch("tasks", Cols{"id": S("t1"), "done": B(true)}), 2))
		if !bytes.Equal(encodeResult(t, conflict), encodeResult(t, again)) || len(again.Results[0].ConflictColumns) == 0 {
			t.Fatalf("replayed conflict differs:\n%+v\n%+v", conflict, again)
		}
		wantStored(t, h, "tasks", "t1", 2, Cols{"title": S("first"), "done": B(false)})
	}},
}

// tombstoneScenarios are the delete-precedence rules (§2.2, §6.2, B.20).
var tombstoneScenarios = []pushRuleScenario{
	// B.20, delete-precedence/stale-patch-loses-to-delete.
	{name: "stale-patch-loses-to-delete", run: func(t *testing.T, h *Harness) {
		a, b := seeded(t, h)
		applied(t, a.Push("del", Delete("tasks", "t1")))
		if s := h.StoredRow("tenant", "tasks", "t1"); s == nil || !s.Deleted {
			t.Fatalf("the delete left no tombstone: %+v", s)
		}
		rejected(t, b.Push("late", Upsert("tasks", "t1", b.Patch("tasks", Cols{"id": S("t1"), "title": S("too late")}), -1)), 0, wire.OpError, syncerr.RowDeleted)
		// A full unversioned row loses too: delete precedence is about
		// intent, not completeness.
		rejected(t, b.Push("late-full", Upsert("tasks", "t1", b.Task("t1", "p1", "too late", false), -1)), 0, wire.OpError, syncerr.RowDeleted)
		// With a baseVersion the row is simply missing (§6.2 table).
		rejected(t, b.Push("late-based", Upsert("tasks", "t1", b.Task("t1", "p1", "too late", false), 1)), 0, wire.OpError, syncerr.RowMissing)
		wantAbsent(t, h, "tasks", "t1")
	}},
	// §3.4 before §6.2: the tombstone keeps the deleted row's scopes and
	// an upsert is authorized against them first, so an actor without
	// that scope learns only sync.forbidden, never that the rowId exists
	// (was deleted) in another scope.
	{name: "tombstone-authorized-before-row-deleted", run: func(t *testing.T, h *Harness) {
		a, b := seeded(t, h)
		applied(t, a.Push("del", Delete("tasks", "t1")))
		if s := h.StoredRow("tenant", "tasks", "t1"); s == nil || !s.Deleted || scopeText(s.Scopes) != "project_id=p1;" {
			t.Fatalf("tombstone %+v, want one keeping project_id=p1", s.Row)
		}
		h.Grants.Set("mallory", engine.ScopeMap{"project_id": {"p9"}})
		m := h.ClientV3("tenant", "mallory", "client-m")
		rejected(t, m.Push("probe-full", Upsert("tasks", "t1", m.Task("t1", "p9", "mine", false), -1)), 0, wire.OpError, syncerr.Forbidden)
		rejected(t, m.Push("probe-patch", Upsert("tasks", "t1", m.Patch("tasks", Cols{"id": S("t1"), "title": S("x")}), -1)), 0, wire.OpError, syncerr.Forbidden)
		// An actor allowed the deleted row's scope still sees the delete win.
		rejected(t, b.Push("late", Upsert("tasks", "t1", b.Patch("tasks", Cols{"id": S("t1"), "title": S("too late")}), -1)), 0, wire.OpError, syncerr.RowDeleted)
		// Within one commit the staged tombstone keeps the scopes too.
		applied(t, a.Push("again", Upsert("tasks", "t2", a.Task("t2", "p1", "x", false), -1)))
		rejected(t, a.Push("del-then-upsert", Delete("tasks", "t2"), Upsert("tasks", "t2", a.Patch("tasks", Cols{"id": S("t2"), "title": S("y")}), -1)), 1, wire.OpError, syncerr.RowDeleted)
		wantAbsent(t, h, "tasks", "t1")
	}},
	// B.20, delete-precedence/explicit-insert-recreates.
	{name: "explicit-insert-recreates", run: func(t *testing.T, h *Harness) {
		a, _ := seeded(t, h)
		applied(t, a.Push("upd", Upsert("tasks", "t1", a.Patch("tasks", Cols{"id": S("t1"), "title": S("v2")}), -1)))
		applied(t, a.Push("del", Delete("tasks", "t1")))
		// An insert presents every column, even with baseVersion 0.
		rejected(t, a.Push("partial", Upsert("tasks", "t1", a.Patch("tasks", Cols{"id": S("t1"), "title": S("x")}), 0)), 0, wire.OpError, syncerr.RowMissing)
		applied(t, a.Push("recreate", Upsert("tasks", "t1", a.Task("t1", "p1", "recreated", false), 0)))
		s := wantStored(t, h, "tasks", "t1", 1, Cols{"title": S("recreated")})
		if !equalInts(s.ColumnVersions, []int64{1, 1, 1, 1, 1}) {
			t.Fatalf("an insert sets every column version to 1, got %v", s.ColumnVersions)
		}
		// The tombstone went with the insert: deleting and re-deleting
		// behave as on any live row.
		applied(t, a.Push("upd2", Upsert("tasks", "t1", a.Patch("tasks", Cols{"id": S("t1"), "done": B(true)}), -1)))
	}},
	// B.20, delete-precedence/pruned-tombstone-restores-the-insert-rule
	// (§4.6: tombstones prune with the log).
	{name: "pruned-tombstone-restores-the-insert-rule", run: func(t *testing.T, h *Harness) {
		a, b := seeded(t, h)
		applied(t, a.Push("del", Delete("tasks", "t1")))
		rejected(t, b.Push("blocked", Upsert("tasks", "t1", b.Patch("tasks", Cols{"id": S("t1"), "title": S("blocked")}), -1)), 0, wire.OpError, syncerr.RowDeleted)
		rep := prune(t, h)
		if rep.NewHorizon != 2 {
			t.Fatalf("horizon %d, want 2 (past the delete)", rep.NewHorizon)
		}
		if s := h.StoredRow("tenant", "tasks", "t1"); s != nil {
			t.Fatalf("the tombstone survived pruning: %+v", s.Row)
		}
		// Beyond the horizon: a partial payload names an update of nothing,
		// a full unversioned row inserts.
		rejected(t, b.Push("partial", Upsert("tasks", "t1", b.Patch("tasks", Cols{"id": S("t1"), "title": S("x")}), -1)), 0, wire.OpError, syncerr.RowMissing)
		applied(t, a.Push("fresh", Upsert("tasks", "t1", a.Task("t1", "p1", "fresh", false), -1)))
		wantStored(t, h, "tasks", "t1", 1, Cols{"title": S("fresh")})
	}},
}

func encodeResult(t testing.TB, r *wire.PushResult) []byte {
	t.Helper()
	b, err := wire.Encode(&wire.Message{WireVersion: wire.Version3, Kind: wire.KindResponse, Frames: []wire.Frame{&wire.RespHeader{LogEpoch: "e"}, r}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func scopeText(s wire.StoredScopes) string {
	var b strings.Builder
	for _, e := range s {
		b.WriteString(e.Key + "=" + e.Value + ";")
	}
	return b.String()
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
