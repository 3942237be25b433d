package migrate_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/migrate"
	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

const notesV1 = `{"version": 1, "tables": [{"name": "notes", "primaryKey": "id",
  "columns": [{"name": "id", "type": "string", "nullable": false},
              {"name": "owner", "type": "string", "nullable": false},
              {"name": "body", "type": "string", "nullable": false}],
  "scopes": ["owner:{owner}"]}]}`

// notesV2 adds a words column (filled by a host hook).
var notesV2 = strings.Replace(strings.Replace(notesV1, `"version": 1`, `"version": 2`, 1),
	`{"name": "body", "type": "string", "nullable": false}`,
	`{"name": "body", "type": "string", "nullable": false}, {"name": "words", "type": "integer", "nullable": true}`, 1)

func notesSchema(t *testing.T) *schema.Schema {
	t.Helper()
	v2, err := schema.Parse([]byte(notesV2))
	if err != nil {
		t.Fatal(err)
	}
	v1, err := schema.Parse([]byte(notesV1))
	if err != nil {
		t.Fatal(err)
	}
	s, err := schema.Merge(v2, v1)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// seedNotes writes rows in schema 1's layout, as a build of schema 1
// did: without column versions (a row from before they existed) for
// the first, with them for the rest.
func seedNotes(t *testing.T, b migrate.Backend, s *schema.Schema, p string, bodies ...string) {
	t.Helper()
	ctx := context.Background()
	if _, err := b.TouchPartition(ctx, p, 1, "e-"+p); err != nil {
		t.Fatal(err)
	}
	v1, _ := s.Versions[1].Table("notes")
	for i, body := range bodies {
		id := fmt.Sprintf("n%d", i)
		payload, err := v1.Codec.Append(nil, []rowcodec.Value{{Str: id}, {Str: "o1"}, {Str: body}})
		if err != nil {
			t.Fatal(err)
		}
		var cv []int64
		if i > 0 {
			cv = []int64{1, 1, 1}
		}
		h, _, _ := b.Head(ctx, p)
		seq := h.MaxCommitSeq + 1
		scopes := wire.StoredScopes{{Key: "owner", Value: "o1"}}
		req := &store.CommitRequest{ExpectedMaxSeq: h.MaxCommitSeq, WriterVersion: 1,
			Commit:  store.Commit{Seq: seq, CreatedAtMs: 1, ActorID: "a", ClientID: "c", ClientCommitID: id, Changes: []store.Change{{Table: "notes", RowID: id, Op: wire.OpUpsert, RowVersion: 1, Row: payload, Scopes: scopes}}},
			Rows:    []store.RowWrite{{Table: "notes", Row: store.Row{RowID: id, Version: 1, ColumnVersions: cv, Payload: payload, Scopes: scopes, CommitSeq: seq}}},
			Outcome: store.Outcome{Applied: true, CommitSeq: seq, RecordedAtMs: 1, ActorID: "a"}}
		if err := b.Commit(ctx, p, req); err != nil {
			t.Fatal(err)
		}
	}
}

func onePart(p string) func(context.Context, func(string) bool) error {
	return func(_ context.Context, fn func(string) bool) error { fn(p); return nil }
}

func now() int64 { return 1_780_000_000_000 }

// wordCount is a host hook: words = number of words of body.
func wordCount(_ context.Context, table string, row migrate.Values) (migrate.Values, error) {
	if table != "notes" {
		return nil, fmt.Errorf("unexpected table %s", table)
	}
	n := int64(len(strings.Fields(row["body"].Str)))
	if w := row["words"]; !w.Null && w.Int == n {
		return nil, nil
	}
	return migrate.Values{"words": {Int: n}}, nil
}

// A Go hook registered for a SYNC_CHECKPOINTS checkpoint rewrites its
// source table's rows in place, from schema 1's layout into schema 2's,
// as the rows' next versions; a re-run writes nothing.
func TestBackfillHookRewritesRows(t *testing.T) {
	ctx := context.Background()
	s := notesSchema(t)
	b := memstore.New()
	seedNotes(t, b, s, "p", "one two three", "", "a b")
	decls, err := migrate.Declarations(s, "words=notes", migrate.Hooks{"words": wordCount})
	if err != nil || len(decls) != 1 || decls[0].Transform == nil {
		t.Fatalf("declarations: %+v %v", decls, err)
	}
	plan := migrate.Plan{Version: 2, Checkpoints: decls, Partitions: onePart("p"), Now: now}
	pr, err := migrate.Run(ctx, b, plan, migrate.RunOptions{Backfill: true, BatchRows: 2}, nil)
	if err != nil || pr.Activated != 1 || pr.Rows != 3 || pr.Batches != 2 {
		t.Fatalf("run: %+v %v", pr, err)
	}
	v2, _ := s.Versions[2].Table("notes")
	rows, err := b.GetRows(ctx, "p", "notes", []string{"n0", "n1", "n2"})
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]int64{"n0": 3, "n1": 0, "n2": 2} {
		r := rows[id]
		vals, err := v2.Codec.Decode(r.Payload, nil)
		if err != nil || vals[3].Int != want || r.Version != 2 {
			t.Fatalf("row %s: %+v v%d %v, want words %d at version 2", id, vals, r.Version, err, want)
		}
		// §2.2: the written column and the column new to the layout take
		// the row's new version; the others keep theirs.
		if len(r.ColumnVersions) != 4 || r.ColumnVersions[2] != 1 || r.ColumnVersions[3] != 2 {
			t.Fatalf("row %s column versions %v", id, r.ColumnVersions)
		}
		if len(r.Scopes) != 1 || r.Scopes[0].Value != "o1" {
			t.Fatalf("row %s scopes %v", id, r.Scopes)
		}
	}
	head, _, _ := b.Head(ctx, "p")
	plan.Checkpoints[0].Name = "words-again"
	if pr, err := migrate.Run(ctx, b, plan, migrate.RunOptions{Backfill: true}, nil); err != nil || pr.Rows != 0 || pr.Activated != 1 {
		t.Fatalf("re-run: %+v %v", pr, err)
	}
	if h, _, _ := b.Head(ctx, "p"); h.MaxCommitSeq != head.MaxCommitSeq {
		t.Fatalf("a re-run committed: head %d → %d", head.MaxCommitSeq, h.MaxCommitSeq)
	}
}

// A hook that fails, or sets a column a backfill may not write, stops
// the backfill before its batch writes anything; the checkpoint stays
// pending.
func TestBackfillHookRefused(t *testing.T) {
	ctx := context.Background()
	s := notesSchema(t)
	for name, hook := range map[string]migrate.RowHook{
		"error": func(context.Context, string, migrate.Values) (migrate.Values, error) {
			return nil, errors.New("host refused")
		},
		"scope column": func(context.Context, string, migrate.Values) (migrate.Values, error) {
			return migrate.Values{"owner": {Str: "o2"}}, nil
		},
		"primary key": func(context.Context, string, migrate.Values) (migrate.Values, error) {
			return migrate.Values{"id": {Str: "x"}}, nil
		},
		"unknown column": func(context.Context, string, migrate.Values) (migrate.Values, error) {
			return migrate.Values{"nope": {Str: "x"}}, nil
		},
		"bad value": func(context.Context, string, migrate.Values) (migrate.Values, error) {
			return migrate.Values{"body": {Null: true}}, nil // body is NOT NULL
		},
	} {
		t.Run(name, func(t *testing.T) {
			b := memstore.New()
			seedNotes(t, b, s, "p", "x y")
			decls, err := migrate.Declarations(s, "h=notes", migrate.Hooks{"h": hook})
			if err != nil {
				t.Fatal(err)
			}
			pr, err := migrate.Run(ctx, b, migrate.Plan{Version: 2, Checkpoints: decls, Partitions: onePart("p"), Now: now},
				migrate.RunOptions{Backfill: true}, nil)
			if err == nil || pr.Activated != 0 || pr.Rows != 0 {
				t.Fatalf("run: %+v %v, want an error and nothing written", pr, err)
			}
			if h, _, _ := b.Head(ctx, "p"); h.MaxCommitSeq != 1 {
				t.Fatalf("head %d, want 1 (nothing committed)", h.MaxCommitSeq)
			}
			if g, _ := b.ReadGate(ctx, "p"); len(g.Pending) != 1 {
				t.Fatalf("checkpoint not pending after a failed backfill: %+v", g)
			}
		})
	}
}

func TestDeclarationsRefused(t *testing.T) {
	s := notesSchema(t)
	withBackfill, err := schema.Parse([]byte(strings.TrimSuffix(strings.TrimSpace(notesV2), "}") +
		`, "backfills": [{"name": "w", "table": "notes", "set": [{"column": "words", "default": 0}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		sch   *schema.Schema
		env   string
		hooks migrate.Hooks
		want  string
	}{
		{"hook without a declaration", s, "", migrate.Hooks{"x": wordCount}, `registered for "x"`},
		{"declared twice", withBackfill, "w=notes", nil, "declared by both"},
		{"hook on an unknown table", s, "h=tasks", migrate.Hooks{"h": wordCount}, `table "tasks"`},
		{"bad SYNC_CHECKPOINTS", s, "nonsense", nil, "SYNC_CHECKPOINTS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := migrate.Declarations(tc.sch, tc.env, tc.hooks); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
	// The schema's backfill and a hook of its name compose.
	decls, err := migrate.Declarations(withBackfill, "", migrate.Hooks{"w": wordCount})
	if err != nil || len(decls) != 1 || decls[0].Transform == nil || decls[0].Sources[0] != "notes" {
		t.Fatalf("%+v %v", decls, err)
	}
}

// A client write racing the backfill, to a row the scan already
// rewrote, is caught up before activation: the row ends rewritten from
// the client's values, and nothing the client wrote is lost.
func TestBackfillCatchesUpRacingRewrites(t *testing.T) {
	ctx := context.Background()
	s := notesSchema(t)
	b := memstore.New()
	seedNotes(t, b, s, "p", "a", "b c", "d e f", "g")
	decls, err := migrate.Declarations(s, "words=notes", migrate.Hooks{"words": wordCount})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.Step(ctx, b, migrate.Plan{Version: 2, Checkpoints: decls, Partitions: onePart("p"), Now: now}); err != nil {
		t.Fatal(err)
	}
	v2, _ := s.Versions[2].Table("notes")
	checks := 0
	pr, err := migrate.RunBackfill(ctx, b, "p", decls[0], migrate.BackfillOptions{BatchRows: 2, Now: now, Deadline: func() bool {
		checks++
		if checks == 2 { // after the batch that rewrote n0 and n1
			rows, _ := b.GetRows(ctx, "p", "notes", []string{"n0"})
			old := rows["n0"]
			payload, _ := v2.Codec.Append(nil, []rowcodec.Value{{Str: "n0"}, {Str: "o1"}, {Str: "now five words in here"}, {Null: true}})
			h, _, _ := b.Head(ctx, "p")
			seq := h.MaxCommitSeq + 1
			scopes := old.Scopes
			if err := b.Commit(ctx, "p", &store.CommitRequest{ExpectedMaxSeq: h.MaxCommitSeq, WriterVersion: 2,
				Commit:  store.Commit{Seq: seq, CreatedAtMs: 2, ActorID: "a", ClientID: "c", ClientCommitID: "late", Changes: []store.Change{{Table: "notes", RowID: "n0", Op: wire.OpUpsert, RowVersion: old.Version + 1, Row: payload, Scopes: scopes}}},
				Rows:    []store.RowWrite{{Table: "notes", Row: store.Row{RowID: "n0", Version: old.Version + 1, ColumnVersions: []int64{1, 1, 3, 3}, Payload: payload, Scopes: scopes, CommitSeq: seq}}},
				Outcome: store.Outcome{Applied: true, CommitSeq: seq, RecordedAtMs: 2, ActorID: "a"}}); err != nil {
				t.Error(err)
			}
		}
		return false
	}})
	if err != nil || pr.Activated != 1 {
		t.Fatalf("backfill: %+v %v", pr, err)
	}
	rows, _ := b.GetRows(ctx, "p", "notes", []string{"n0"})
	vals, err := v2.Codec.Decode(rows["n0"].Payload, nil)
	if err != nil || vals[2].Str != "now five words in here" || vals[3].Null || vals[3].Int != 5 || rows["n0"].Version != 4 {
		t.Fatalf("n0 after the catch-up: %+v v%d %v", vals, rows["n0"].Version, err)
	}
}

// raceScan is a backend whose first ScanRows runs a client write right
// after reading: the batch holds rows the write has made stale.
type raceScan struct {
	migrate.Backend
	write func()
}

func (r *raceScan) ScanRows(ctx context.Context, partition, table, after string, hasAfter bool, fn func(*store.Row) bool) error {
	err := r.Backend.ScanRows(ctx, partition, table, after, hasAfter, fn)
	if w := r.write; w != nil {
		r.write = nil
		w()
	}
	return err
}

// A client write landing between a batch's reads and its commit makes
// the batch re-read and re-plan (§2.1: the commit is conditioned
// on that head): the backfill never writes a value computed from the
// row before the client's write over it.
func TestBackfillBatchNeverOverwritesRacingWrite(t *testing.T) {
	ctx := context.Background()
	s := notesSchema(t)
	mem := memstore.New()
	seedNotes(t, mem, s, "p", "one", "two words")
	decls, err := migrate.Declarations(s, "words=notes", migrate.Hooks{"words": wordCount})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.Step(ctx, mem, migrate.Plan{Version: 2, Checkpoints: decls, Partitions: onePart("p"), Now: now}); err != nil {
		t.Fatal(err)
	}
	v2, _ := s.Versions[2].Table("notes")
	b := &raceScan{Backend: mem}
	b.write = func() {
		rows, _ := mem.GetRows(ctx, "p", "notes", []string{"n1"})
		old := rows["n1"]
		payload, _ := v2.Codec.Append(nil, []rowcodec.Value{{Str: "n1"}, {Str: "o1"}, {Str: "three words now"}, {Int: 3}})
		h, _, _ := mem.Head(ctx, "p")
		seq := h.MaxCommitSeq + 1
		if err := mem.Commit(ctx, "p", &store.CommitRequest{ExpectedMaxSeq: h.MaxCommitSeq, WriterVersion: 2,
			Commit:  store.Commit{Seq: seq, CreatedAtMs: 2, ActorID: "a", ClientID: "c", ClientCommitID: "race", Changes: []store.Change{{Table: "notes", RowID: "n1", Op: wire.OpUpsert, RowVersion: 2, Row: payload, Scopes: old.Scopes}}},
			Rows:    []store.RowWrite{{Table: "notes", Row: store.Row{RowID: "n1", Version: 2, ColumnVersions: []int64{1, 1, 2, 2}, Payload: payload, Scopes: old.Scopes, CommitSeq: seq}}},
			Outcome: store.Outcome{Applied: true, CommitSeq: seq, RecordedAtMs: 2, ActorID: "a"}}); err != nil {
			t.Error(err)
		}
	}
	pr, err := migrate.RunBackfill(ctx, b, "p", decls[0], migrate.BackfillOptions{BatchRows: 10, Now: now})
	if err != nil || pr.Activated != 1 || pr.Rows != 1 {
		t.Fatalf("backfill: %+v %v (want only n0 rewritten: the client already set n1)", pr, err)
	}
	rows, _ := mem.GetRows(ctx, "p", "notes", []string{"n0", "n1"})
	for id, want := range map[string]string{"n0": "one", "n1": "three words now"} {
		vals, err := v2.Codec.Decode(rows[id].Payload, nil)
		if err != nil || vals[2].Str != want || vals[3].Int != int64(len(strings.Fields(want))) || rows[id].Version != 2 {
			t.Fatalf("%s: %+v v%d %v", id, vals, rows[id].Version, err)
		}
	}
}
