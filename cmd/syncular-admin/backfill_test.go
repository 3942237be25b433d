package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// TestMigrateBackfillFromSchema: syncular-admin migrate -backfill takes
// the transform from the schema document's backfills: rows whose notes
// are NULL get the default, in ordinary commits; a row that has notes
// keeps them; a second run writes nothing.
func TestMigrateBackfillFromSchema(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	raw, err := os.ReadFile("../../examples/todo/schema.json")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Replace(string(raw), `"version": 1`, `"version": 2`, 1)
	i := strings.LastIndex(doc, "}")
	doc = doc[:i] + `, "backfills": [{"name": "notes-default", "table": "tasks", "set": [{"column": "notes", "default": "(none)"}]}]}`
	path := filepath.Join(t.TempDir(), "schema.json")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	sch, err := schema.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	tasks, _ := sch.Versions[2].Table("tasks")
	f.env["SYNC_SCHEMA_PATH"] = path
	f.touch("bf")
	rows := map[string]rowcodec.Value{"a": {Null: true}, "b": {Str: "keep " + payloadMarker}, "c": {Null: true}}
	for _, id := range []string{"a", "b", "c"} {
		vals := []rowcodec.Value{{Str: id}, {Str: "p1"}, {Str: "title " + payloadMarker}, {Bool: false}, {Null: true}, rows[id], {Null: true}, {Int: 1}}
		payload, err := tasks.Codec.Append(nil, vals)
		if err != nil {
			t.Fatal(err)
		}
		h := f.head("bf")
		seq := h.MaxCommitSeq + 1
		req := &store.CommitRequest{ExpectedMaxSeq: h.MaxCommitSeq,
			Commit:  store.Commit{Seq: seq, CreatedAtMs: time.Now().UnixMilli(), ActorID: "actor", ClientID: "seeder", ClientCommitID: id, Changes: []store.Change{{Table: "tasks", RowID: id, Op: wire.OpUpsert, RowVersion: 1, Row: payload}}},
			Rows:    []store.RowWrite{{Table: "tasks", Row: store.Row{RowID: id, Version: 1, Payload: payload, CommitSeq: seq}}},
			Outcome: store.Outcome{Applied: true, CommitSeq: seq, RecordedAtMs: 1}, WriterVersion: 1}
		if err := f.store.Commit(ctx, "bf", req); err != nil {
			t.Fatal(err)
		}
	}
	r := f.run("migrate", "-backfill")
	if r.code != exitOK || !strings.Contains(r.stderr, "1 checkpoint(s) activated, 0 incomplete") {
		t.Fatalf("migrate -backfill: exit %d, %q", r.code, r.stderr)
	}
	if got := f.head("bf").MaxCommitSeq; got != 4 {
		t.Fatalf("head %d after the backfill, want 4 (3 seeds + 1 batch)", got)
	}
	stored, err := f.store.GetRows(ctx, "bf", "tasks", []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"a": "(none)", "b": "keep " + payloadMarker, "c": "(none)"} {
		vals, err := tasks.Codec.Decode(stored[id].Payload, nil)
		if err != nil || vals[5].Str != want {
			t.Fatalf("row %s: notes %+v, want %q (%v)", id, vals[5], want, err)
		}
		if wantV := map[bool]int64{true: 2, false: 1}[want == "(none)"]; stored[id].Version != wantV {
			t.Fatalf("row %s: version %d, want %d", id, stored[id].Version, wantV)
		}
	}
	if r := f.run("migrate", "-backfill"); r.code != exitOK || f.head("bf").MaxCommitSeq != 4 {
		t.Fatalf("re-run: exit %d, head %d", r.code, f.head("bf").MaxCommitSeq)
	}
}
