package enginetest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/migrate"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// BackfillSchemaV2 is TodoSchema's next version: tasks gain status (filled
// with a default where NULL) and title_key (derived from the title),
// declared as one backfill of the document.
func BackfillSchemaV2() string {
	doc := strings.Replace(strings.Replace(TodoSchema, `"version": 1`, `"version": 2`, 1),
		`{"name": "priority", "type": "integer", "nullable": true}`,
		`{"name": "priority", "type": "integer", "nullable": true},
       {"name": "status", "type": "string", "nullable": true},
       {"name": "title_key", "type": "string", "nullable": true}`, 1)
	i := strings.LastIndex(doc, "}")
	return doc[:i] + `,
  "backfills": [
    {"name": "tasks-v2", "table": "tasks", "set": [
      {"column": "status", "default": "open"},
      {"column": "title_key", "derive": {"lower": {"column": "title"}}}
    ]}
  ]
}`
}

// BackfillWrites is issue 20 item 2 end to end on one backend: a client
// bootstraps on schema 1; the deploy of schema 2 declares a backfill in
// its schema document; the backfill runs through the entry the deploy
// hook and syncular-admin migrate -backfill use (migrate.Declarations,
// migrate.Run); the client's next pull receives the rewritten rows as
// ordinary commits; the checkpoint is activated only once every row was
// rewritten; a re-run, and a second run of the same rules under a fresh
// checkpoint, write nothing.
func BackfillWrites(t *testing.T, st SchemaBackend, segs store.SegmentStore) {
	ctx := context.Background()
	const part, actor = "tenant-bf", "actor-bf"
	titles := []string{"Buy Milk", "Call BOB", "File Taxes", "Water Plants", "Écrire À Zoé"}

	// Schema 1 serves; a client writes and bootstraps.
	h1 := New(t, st, segs, Options{})
	h1.Grants.Set(actor, rollingScopes)
	c := h1.Client(part, actor, "device-1")
	for i, title := range titles {
		if r := c.Push(fmt.Sprintf("c%d", i), Upsert("tasks", fmt.Sprintf("t%d", i), c.Task(fmt.Sprintf("t%d", i), "p1", title, false), 0)); r.Status != wire.PushApplied {
			t.Fatalf("push %d: %+v", i, r)
		}
	}
	rep := c.NewReplica("s", "tasks", Scopes("project_id", "p1"))
	if err := rep.Sync(wire.PullHeader{Accept: c.Accept}, 8); err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != len(titles) {
		t.Fatalf("bootstrap gave %d rows, want %d", len(rep.Rows), len(titles))
	}
	before := headSeq(t, st, part)

	// The deploy of schema 2 (still serving version 1 clients).
	h2 := New(t, st, segs, Options{Schema: BackfillSchemaV2(), OlderSchemas: []string{TodoSchema}, Checkpoints: []string{"tasks-v2"}})
	h2.Grants.Set(actor, rollingScopes)
	decls, err := migrate.Declarations(h2.Schema, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(decls) != 1 || decls[0].Name != "tasks-v2" || decls[0].Transform == nil {
		t.Fatalf("declarations from the schema: %+v", decls)
	}
	now := h2.Clock.Now
	plan := migrate.Plan{Version: 2, Checkpoints: decls, Partitions: onePartition(part), Now: now}
	if _, err := migrate.Step(ctx, st, plan); err != nil {
		t.Fatal(err)
	}
	// The declaring build serves while its backfill is pending: a new
	// schema-2 client bootstraps rows still stored in schema 1's layout,
	// each decoded in that layout and served in the client's.
	fresh := h2.Client(part, actor, "device-2")
	fresh.Schema = 2
	freshRep := fresh.NewReplica("s", "tasks", Scopes("project_id", "p1"))
	if err := freshRep.Sync(wire.PullHeader{Accept: fresh.Accept}, 8); err != nil {
		t.Fatalf("schema-2 bootstrap before the backfill: %v", err)
	}
	v2tasks := fresh.Codec("tasks")
	for i, title := range titles {
		vals, err := v2tasks.Codec.Decode(freshRep.Rows[fmt.Sprintf("t%d", i)].Payload, nil)
		if err != nil || vals[v2tasks.ColumnIndex("title")].Str != title || !vals[v2tasks.ColumnIndex("status")].Null {
			t.Fatalf("schema-2 row t%d before the backfill: %+v %v", i, vals, err)
		}
	}

	// A run cut off after its first batch leaves the checkpoint
	// backfilling (pending), having written that batch only.
	checks := 0
	pr, err := migrate.RunBackfill(ctx, st, part, decls[0], migrate.BackfillOptions{BatchRows: 2, Now: now,
		Deadline: func() bool { checks++; return checks > 1 }})
	if err != nil || !pr.TimedOutNow || pr.Rows != 2 {
		t.Fatalf("cut-off run: %+v %v", pr, err)
	}
	if cp, _ := st.GetCheckpoint(ctx, part, "tasks-v2"); cp == nil || cp.State != store.CheckpointBackfilling {
		t.Fatalf("checkpoint after a partial backfill: %+v", cp)
	}

	// The driver's entry finishes it.
	pr, err = migrate.Run(ctx, st, plan, migrate.RunOptions{Backfill: true, BatchRows: 2}, nil)
	if err != nil || pr.Activated != 1 || pr.Incomplete != 0 || pr.Rows != int64(len(titles)-2) {
		t.Fatalf("backfill run: %+v %v", pr, err)
	}
	cp, err := st.GetCheckpoint(ctx, part, "tasks-v2")
	if err != nil || cp.State != store.CheckpointActivated {
		t.Fatalf("checkpoint: %+v %v", cp, err)
	}
	after := headSeq(t, st, part)
	// 5 rows at 2 per batch: 3 commits, each rewriting rows once.
	if after != before+3 {
		t.Fatalf("head %d → %d, want 3 backfill commits", before, after)
	}

	// The client, upgraded to schema 2, pulls incrementally and receives
	// every row rewritten: the default where it was NULL, the derived key.
	c.H, c.Schema = h2, 2
	applied := rep.CommitsApplied
	if err := rep.Sync(wire.PullHeader{Accept: c.Accept}, 8); err != nil {
		t.Fatal(err)
	}
	if rep.CommitsApplied-applied != 3 {
		t.Fatalf("pull applied %d commits, want the 3 backfill commits", rep.CommitsApplied-applied)
	}
	tasks := c.Codec("tasks")
	for i, title := range titles {
		id := fmt.Sprintf("t%d", i)
		rs := rep.Rows[id]
		vals, err := tasks.Codec.Decode(rs.Payload, nil)
		if err != nil {
			t.Fatalf("row %s does not decode at schema 2: %v", id, err)
		}
		status, key := vals[tasks.ColumnIndex("status")], vals[tasks.ColumnIndex("title_key")]
		if rs.Version != 2 || status.Null || status.Str != "open" || key.Null || key.Str != strings.ToLower(title) || vals[tasks.ColumnIndex("title")].Str != title {
			t.Fatalf("row %s after the backfill: v%d status=%+v title_key=%+v", id, rs.Version, status, key)
		}
	}
	// The client that bootstrapped before the backfill catches up too.
	if err := freshRep.Sync(wire.PullHeader{Accept: fresh.Accept}, 8); err != nil {
		t.Fatal(err)
	}
	for i := range titles {
		vals, err := v2tasks.Codec.Decode(freshRep.Rows[fmt.Sprintf("t%d", i)].Payload, nil)
		if err != nil || vals[v2tasks.ColumnIndex("status")].Str != "open" {
			t.Fatalf("early schema-2 client's row t%d: %+v %v", i, vals, err)
		}
	}
	// Realtime (§8.2): each backfill commit wakes the subscription's scope
	// key and encodes as a delta a schema-2 socket decodes; so do the
	// commits from before the bump (rows of the old layout).
	regs := []engine.Registration{{ID: "s", Table: "tasks", Effective: rollingScopes}}
	keys := h2.Engine.ScopeKeys(2, regs)
	deltas := 0
	err = h2.Engine.ReadLog(ctx, part, 0, after, func(cm *store.Commit) bool {
		if cm.Seq > before && !slices.ContainsFunc(h2.Engine.CommitScopeKeys(cm), func(k string) bool { return slices.Contains(keys, k) }) {
			t.Errorf("backfill commit %d wakes no subscribed scope key (%v)", cm.Seq, keys)
		}
		b, err := h2.Engine.EncodeDelta(wire.Version2, 2, c.Epoch, regs, cm)
		if err != nil || b == nil {
			t.Errorf("delta of commit %d: %v", cm.Seq, err)
			return false
		}
		m, err := wire.Decode(b)
		if err != nil {
			t.Errorf("delta of commit %d does not decode: %v", cm.Seq, err)
			return false
		}
		for _, f := range m.Frames {
			if wc, ok := f.(*wire.Commit); ok {
				for _, ch := range wc.Changes {
					vals, err := tasks.Codec.Decode(ch.Row.Value, nil)
					if err != nil || (cm.Seq > before && vals[tasks.ColumnIndex("status")].Str != "open") {
						t.Errorf("delta of commit %d, row %s: %+v %v", cm.Seq, ch.RowID, vals, err)
					}
					deltas++
				}
			}
		}
		return true
	})
	if err != nil || deltas != 2*len(titles) {
		t.Fatalf("realtime deltas: %d rows (want %d) %v", deltas, 2*len(titles), err)
	}

	// A client still on schema 1 keeps syncing: the same commits,
	// transcoded to its columns.
	old := h2.Client(part, actor, "device-old")
	oldRep := old.NewReplica("s", "tasks", Scopes("project_id", "p1"))
	if err := oldRep.Sync(wire.PullHeader{Accept: old.Accept}, 8); err != nil {
		t.Fatal(err)
	}
	for i, title := range titles {
		vals, err := old.Codec("tasks").Codec.Decode(oldRep.Rows[fmt.Sprintf("t%d", i)].Payload, nil)
		if err != nil || vals[2].Str != title {
			t.Fatalf("schema-1 client's row t%d: %+v %v", i, vals, err)
		}
	}

	// Re-runs write nothing: the activated checkpoint is not claimed
	// again, and the same rules under a fresh checkpoint find every row
	// already rewritten.
	pr, err = migrate.Run(ctx, st, plan, migrate.RunOptions{Backfill: true, BatchRows: 2}, nil)
	if err != nil || pr.Activated != 1 || pr.Rows != 0 || headSeq(t, st, part) != after {
		t.Fatalf("re-run: %+v %v, head %d (was %d)", pr, err, headSeq(t, st, part), after)
	}
	again := decls[0]
	again.Name = "tasks-v2-again"
	pr, err = migrate.Run(ctx, st, migrate.Plan{Version: 2, Checkpoints: []migrate.Declaration{again}, Partitions: onePartition(part), Now: now},
		migrate.RunOptions{Backfill: true, BatchRows: 2}, nil)
	if err != nil || pr.Activated != 1 || pr.Rows != 0 || headSeq(t, st, part) != after {
		t.Fatalf("same rules, fresh checkpoint: %+v %v, head %d (was %d)", pr, err, headSeq(t, st, part), after)
	}
}

// BackfillConcurrentDrivers runs two drivers of one declared backfill at
// once: every row is rewritten exactly once (§6.4), whichever driver
// lands each batch.
func BackfillConcurrentDrivers(t *testing.T, st SchemaBackend, segs store.SegmentStore) {
	ctx := context.Background()
	const part, actor, n = "tenant-bf2", "actor-bf", 12
	h1 := New(t, st, segs, Options{})
	h1.Grants.Set(actor, rollingScopes)
	c := h1.Client(part, actor, "device-1")
	for i := range n {
		id := fmt.Sprintf("t%02d", i)
		if r := c.Push("c"+id, Upsert("tasks", id, c.Task(id, "p1", "Task "+id, false), 0)); r.Status != wire.PushApplied {
			t.Fatalf("push %s: %+v", id, r)
		}
	}
	h2 := New(t, st, segs, Options{Schema: BackfillSchemaV2(), OlderSchemas: []string{TodoSchema}, Checkpoints: []string{"tasks-v2"}})
	decls, err := migrate.Declarations(h2.Schema, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	plan := migrate.Plan{Version: 2, Checkpoints: decls, Partitions: onePartition(part), Now: h2.Clock.Now}
	if _, err := migrate.Step(ctx, st, plan); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if _, err := migrate.RunBackfill(ctx, st, part, decls[0], migrate.BackfillOptions{BatchRows: 3, Now: h2.Clock.Now}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	// Whichever driver was superseded, one more run finishes and
	// activates.
	if pr, err := migrate.RunBackfill(ctx, st, part, decls[0], migrate.BackfillOptions{BatchRows: 3, Now: h2.Clock.Now}); err != nil || pr.Activated != 1 {
		t.Fatalf("final run: %+v %v", pr, err)
	}
	tasks, _ := h2.Schema.Versions[2].Table("tasks")
	for id, rs := range h2.ServerRows(part, "tasks") {
		vals, err := tasks.Codec.Decode(rs.Payload, nil)
		if err != nil || rs.Version != 2 || vals[tasks.ColumnIndex("status")].Str != "open" {
			t.Fatalf("row %s: v%d %+v %v (want rewritten exactly once)", id, rs.Version, vals, err)
		}
	}
	rewrites := 0
	if err := st.ReadLog(ctx, part, int64(n), headSeq(t, st, part), func(cm *store.Commit) bool {
		rewrites += len(cm.Changes)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if rewrites != n {
		t.Fatalf("the log holds %d backfill changes for %d rows", rewrites, n)
	}
}

func onePartition(p string) func(context.Context, func(string) bool) error {
	return func(_ context.Context, fn func(string) bool) error {
		fn(p)
		return nil
	}
}
