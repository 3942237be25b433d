// Package migratetest runs the migration step and the backfill runner
// against a backend, so memstore and dynamostore share the scenarios.
package migratetest

import (
	"context"
	"fmt"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/migrate"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// Run runs every scenario on a fresh backend (the marker is table-wide).
func Run(t *testing.T, newBackend func(t *testing.T) migrate.Backend) {
	for _, sc := range []struct {
		name string
		fn   func(*testing.T, migrate.Backend)
	}{
		{"StepIdempotent", stepIdempotent},
		{"ResumedAfterTimeout", resumedAfterTimeout},
		{"SupersededOwnerWritesNothing", supersededOwner},
		{"CatchesUpRacingWrites", catchesUp},
	} {
		t.Run(sc.name, func(t *testing.T) { sc.fn(t, newBackend(t)) })
	}
}

func now() int64 { return 1_780_000_000_000 }

// project copies a tasks row into tasks_proj (a derived projection).
func project(_ context.Context, table string, r *store.Row) ([]store.RowWrite, error) {
	return []store.RowWrite{{Table: "tasks_proj", Row: store.Row{RowID: r.RowID, Version: 1, Payload: r.Payload, Scopes: r.Scopes}}}, nil
}

func partitions(names ...string) func(context.Context, func(string) bool) error {
	return func(_ context.Context, fn func(string) bool) error {
		for _, n := range names {
			if !fn(n) {
				break
			}
		}
		return nil
	}
}

// seed creates partition p with n tasks rows (one commit each), written
// by a version-1 writer.
func seed(t *testing.T, b migrate.Backend, p string, n int) {
	t.Helper()
	ctx := context.Background()
	if _, err := b.TouchPartition(ctx, p, now(), "epoch-"+p); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		write(t, b, p, 1, fmt.Sprintf("t%03d", i))
	}
}

func write(t *testing.T, b migrate.Backend, p string, wv int64, id string) {
	t.Helper()
	ctx := context.Background()
	h, _, err := b.Head(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	seq := h.MaxCommitSeq + 1
	payload := []byte("row " + id)
	req := &store.CommitRequest{
		ExpectedMaxSeq: h.MaxCommitSeq,
		Commit: store.Commit{Seq: seq, CreatedAtMs: now(), ActorID: "a", ClientID: "c", ClientCommitID: fmt.Sprintf("w%d", seq),
			Changes: []store.Change{{Table: "tasks", RowID: id, Op: wire.OpUpsert, RowVersion: 1, Row: payload}}},
		Rows:          []store.RowWrite{{Table: "tasks", Row: store.Row{RowID: id, Version: 1, Payload: payload, CommitSeq: seq}}},
		Outcome:       store.Outcome{Applied: true, CommitSeq: seq, RecordedAtMs: now(), ActorID: "a"},
		WriterVersion: wv,
	}
	if err := b.Commit(ctx, p, req); err != nil {
		t.Fatalf("commit %s: %v", id, err)
	}
}

func plan(names ...string) migrate.Plan {
	return migrate.Plan{Version: 2, Checkpoints: []migrate.Declaration{{Name: "proj", Sources: []string{"tasks"}}}, Partitions: partitions(names...), Now: now}
}

func projected(t *testing.T, b migrate.Backend, p string) []string {
	t.Helper()
	var ids []string
	if err := b.ScanRows(context.Background(), p, "tasks_proj", "", false, func(r *store.Row) bool {
		ids = append(ids, r.RowID)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return ids
}

func stepIdempotent(t *testing.T, b migrate.Backend) {
	ctx := context.Background()
	seed(t, b, "a", 1)
	seed(t, b, "b", 1)
	for range 2 {
		pr, err := migrate.Step(ctx, b, plan("a", "b"))
		if err != nil {
			t.Fatal(err)
		}
		if pr.Marker != 2 || pr.Fenced != 2 || pr.Declared != 2 {
			t.Fatalf("step progress %+v", pr)
		}
	}
	for _, p := range []string{"a", "b"} {
		g, err := b.ReadGate(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if g.StoredSchema != 2 || g.WriterFence != 2 || len(g.Pending) != 1 {
			t.Fatalf("gate of %s after the step: %+v", p, g)
		}
	}
	// Roll forward only: an older step does not lower anything.
	if _, err := migrate.Step(ctx, b, migrate.Plan{Version: 1, Partitions: partitions("a"), Now: now}); err == nil {
		t.Fatal("a step below the stored marker succeeded")
	}
	if m, _ := b.SchemaMarker(ctx); m != 2 {
		t.Fatalf("marker %d after an older step", m)
	}
}

func resumedAfterTimeout(t *testing.T, b migrate.Backend) {
	ctx := context.Background()
	seed(t, b, "a", 7)
	if _, err := migrate.Step(ctx, b, plan("a")); err != nil {
		t.Fatal(err)
	}
	checks := 0
	pr, err := migrate.Backfill(ctx, b, "a", "proj", project, migrate.BackfillOptions{BatchRows: 3, Now: now,
		Deadline: func() bool { checks++; return checks > 1 }}) // time out after one batch
	if err != nil || !pr.TimedOutNow || pr.Batches != 1 {
		t.Fatalf("first run: %+v %v", pr, err)
	}
	c, _ := b.GetCheckpoint(ctx, "a", "proj")
	if c.State != store.CheckpointBackfilling || c.Cursor == "" || c.ObservedRows != 3 {
		t.Fatalf("checkpoint after the timeout: %+v", c)
	}
	if g, _ := b.ReadGate(ctx, "a"); len(g.Pending) != 1 {
		t.Fatal("a half-done checkpoint is not pending")
	}
	pr, err = migrate.Backfill(ctx, b, "a", "proj", project, migrate.BackfillOptions{BatchRows: 3, Now: now})
	if err != nil || pr.Activated != 1 || pr.Batches != 2 {
		t.Fatalf("resumed run: %+v %v", pr, err)
	}
	if ids := projected(t, b, "a"); len(ids) != 7 {
		t.Fatalf("projection has %d rows, want 7: %v", len(ids), ids)
	}
	// 7 seed commits + 3 batches: nothing applied twice.
	if h, _, _ := b.Head(ctx, "a"); h.MaxCommitSeq != 10 {
		t.Fatalf("head %d, want 10", h.MaxCommitSeq)
	}
	var wv []int64
	_ = b.ReadLog(ctx, "a", 7, 10, func(c *store.Commit) bool { wv = append(wv, c.WriterVersion); return true })
	for _, v := range wv {
		if v != 2 {
			t.Fatalf("backfill commits recorded writer versions %v, want 2", wv)
		}
	}
	if g, _ := b.ReadGate(ctx, "a"); len(g.Pending) != 0 {
		t.Fatal("activated checkpoint still pending")
	}
	// Running it again is a no-op.
	if pr, err := migrate.Backfill(ctx, b, "a", "proj", project, migrate.BackfillOptions{Now: now}); err != nil || pr.Activated != 1 || pr.Batches != 0 {
		t.Fatalf("re-run after activation: %+v %v", pr, err)
	}
}

func supersededOwner(t *testing.T, b migrate.Backend) {
	ctx := context.Background()
	seed(t, b, "a", 6)
	if _, err := migrate.Step(ctx, b, plan("a")); err != nil {
		t.Fatal(err)
	}
	var second migrate.Progress
	var headAfterSecond int64
	checks := 0
	first, err := migrate.Backfill(ctx, b, "a", "proj", project, migrate.BackfillOptions{BatchRows: 2, Now: now,
		Deadline: func() bool {
			checks++
			if checks == 2 { // a second invocation takes over mid-run
				var err error
				second, err = migrate.Backfill(ctx, b, "a", "proj", project, migrate.BackfillOptions{BatchRows: 2, Now: now})
				if err != nil {
					t.Error(err)
				}
				h, _, _ := b.Head(ctx, "a")
				headAfterSecond = h.MaxCommitSeq
			}
			return false
		}})
	if err != nil || !first.Superseded || first.Batches != 1 || first.Activated != 0 {
		t.Fatalf("superseded run: %+v %v", first, err)
	}
	if second.Activated != 1 {
		t.Fatalf("second run: %+v", second)
	}
	if h, _, _ := b.Head(ctx, "a"); h.MaxCommitSeq != headAfterSecond {
		t.Fatalf("the superseded owner wrote after being superseded: head %d → %d", headAfterSecond, h.MaxCommitSeq)
	}
	if ids := projected(t, b, "a"); len(ids) != 6 {
		t.Fatalf("projection %v", ids)
	}
}

func catchesUp(t *testing.T, b migrate.Backend) {
	ctx := context.Background()
	seed(t, b, "a", 4)
	if _, err := migrate.Step(ctx, b, plan("a")); err != nil {
		t.Fatal(err)
	}
	checks := 0
	pr, err := migrate.Backfill(ctx, b, "a", "proj", project, migrate.BackfillOptions{BatchRows: 2, Now: now,
		Deadline: func() bool {
			checks++
			if checks == 2 {
				write(t, b, "a", 2, "t000-late") // sorts before the cursor: only a catch-up sees it
			}
			return false
		}})
	if err != nil || pr.Activated != 1 {
		t.Fatalf("backfill: %+v %v", pr, err)
	}
	if ids := projected(t, b, "a"); len(ids) != 5 {
		t.Fatalf("projection %v, want the late row too", ids)
	}
}
