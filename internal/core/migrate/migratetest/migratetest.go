// Package migratetest runs the migration step and the backfill runner
// against a backend, so memstore and dynamostore share the scenarios.
package migratetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

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
		{"StepWithoutCheckpointsTouchesNoPartition", stepWithoutCheckpoints},
		{"ResumedAfterTimeout", resumedAfterTimeout},
		{"SupersededOwnerWritesNothing", supersededOwner},
		{"CatchesUpRacingWrites", catchesUp},
		{"ActivatesOnABusyPartition", activatesOnBusyPartition},
		{"ActivatesAheadOfQueuedWriters", activatesAheadOfQueuedWriters},
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
	if err := b.Commit(ctx, p, writeRequest(h, wv, id)); err != nil {
		t.Fatalf("commit %s: %v", id, err)
	}
}

// writeRequest is the commit of one tasks row id on head h.
func writeRequest(h store.Head, wv int64, id string) *store.CommitRequest {
	seq := h.MaxCommitSeq + 1
	payload := []byte("row " + id)
	return &store.CommitRequest{
		ExpectedMaxSeq: h.MaxCommitSeq,
		Commit: store.Commit{Seq: seq, CreatedAtMs: now(), ActorID: "a", ClientID: "c", ClientCommitID: fmt.Sprintf("w%d", seq),
			Changes: []store.Change{{Table: "tasks", RowID: id, Op: wire.OpUpsert, RowVersion: 1, Row: payload}}},
		Rows:          []store.RowWrite{{Table: "tasks", Row: store.Row{RowID: id, Version: 1, Payload: payload, CommitSeq: seq}}},
		Outcome:       store.Outcome{Applied: true, CommitSeq: seq, RecordedAtMs: now(), ActorID: "a"},
		WriterVersion: wv,
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

// stepIdempotent: a step with checkpoints declares them table-wide,
// O(1) in partitions (the registry is not listed); every partition gates
// them as declared until it materialises them, which raises its fence;
// repeating either changes nothing.
func stepIdempotent(t *testing.T, b migrate.Backend) {
	ctx := context.Background()
	seed(t, b, "a", 1)
	seed(t, b, "b", 1)
	listed := 0
	pl := plan("a", "b")
	pl.Partitions = func(context.Context, func(string) bool) error { listed++; return nil }
	for range 2 {
		pr, err := migrate.Step(ctx, b, pl)
		if err != nil {
			t.Fatal(err)
		}
		if pr.Marker != 2 || pr.Declared != 1 || pr.Partitions != 0 || listed != 0 {
			t.Fatalf("step progress %+v (registry listed %d times)", pr, listed)
		}
	}
	for _, p := range []string{"a", "b"} {
		g, err := b.ReadGate(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if g.StoredSchema != 2 || g.Unmaterialized == 0 || len(g.Pending) != 1 || g.Pending[0] != (store.PendingCheckpoint{Name: "proj", SchemaVersion: 2}) {
			t.Fatalf("gate of %s after the step: %+v", p, g)
		}
	}
	// An older build's commit is refused once the partition materialised
	// the declaration: the fence came with it.
	var token int64
	for range 2 {
		h, err := b.MaterializeCheckpoints(ctx, "a", now())
		if err != nil {
			t.Fatal(err)
		}
		g := h.Gate
		if g.WriterFence != 2 || g.Unmaterialized != 0 || len(g.Pending) != 1 || token != 0 && g.Token != token {
			t.Fatalf("gate after materialising: %+v (token before %d)", g, token)
		}
		token = g.Token
	}
	if c, err := b.GetCheckpoint(ctx, "a", "proj"); err != nil || c == nil || c.State != store.CheckpointDeclared || c.SchemaVersion != 2 {
		t.Fatalf("materialised checkpoint: %+v %v", c, err)
	}
	h, _, _ := b.Head(ctx, "a")
	old := &store.CommitRequest{ExpectedMaxSeq: h.MaxCommitSeq, WriterVersion: 1,
		Commit:  store.Commit{Seq: h.MaxCommitSeq + 1, CreatedAtMs: now(), ActorID: "a", ClientID: "c", ClientCommitID: "old"},
		Outcome: store.Outcome{Applied: true, CommitSeq: h.MaxCommitSeq + 1, RecordedAtMs: now(), ActorID: "a"}}
	if err := b.Commit(ctx, "a", old); !errors.Is(err, store.ErrWriterFenced) {
		t.Fatalf("version-1 commit after materialising: %v, want ErrWriterFenced", err)
	}
	// Roll forward only: an older step does not lower anything.
	if _, err := migrate.Step(ctx, b, migrate.Plan{Version: 1, Partitions: partitions("a"), Now: now}); err == nil {
		t.Fatal("a step below the stored marker succeeded")
	}
	if m, _ := b.SchemaMarker(ctx); m != 2 {
		t.Fatalf("marker %d after an older step", m)
	}
}

// stepWithoutCheckpoints: a release that declares no checkpoint moves
// the marker and nothing else (O(1) in partitions: the registry is not
// even listed), so a build of the previous version keeps committing;
// partitions are fenced lazily by the new build's own writes.
func stepWithoutCheckpoints(t *testing.T, b migrate.Backend) {
	ctx := context.Background()
	seed(t, b, "a", 1)
	listed := 0
	pr, err := migrate.Step(ctx, b, migrate.Plan{Version: 2, Now: now, Partitions: func(context.Context, func(string) bool) error {
		listed++
		return nil
	}})
	if err != nil || pr.Marker != 2 || pr.Partitions != 0 || listed != 0 {
		t.Fatalf("step: %+v %v (registry listed %d times)", pr, err, listed)
	}
	if g, err := b.ReadGate(ctx, "a"); err != nil || g.WriterFence != 0 || len(g.Pending) != 0 {
		t.Fatalf("gate of an existing partition after a code-only step: %+v %v", g, err)
	}
	write(t, b, "a", 1, "after-step")
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

// busyPartition lands a source commit right before each of the first
// busy activation attempts, whichever way the runner activates (the
// separate ActivateCheckpoint, or an activating advance): a partition
// whose writers keep committing while the backfill tries to finish.
type busyPartition struct {
	migrate.Backend
	t     *testing.T
	busy  int
	tries int
}

func (b *busyPartition) race() {
	b.tries++
	if b.tries <= b.busy {
		write(b.t, b.Backend, "a", 2, fmt.Sprintf("busy-%02d", b.tries))
	}
}

func (b *busyPartition) ActivateCheckpoint(ctx context.Context, p, name string, epoch, nowMs int64) (store.ActivationOutcome, error) {
	b.race()
	return b.Backend.ActivateCheckpoint(ctx, p, name, epoch, nowMs)
}

func (b *busyPartition) AdvanceCheckpoint(ctx context.Context, p string, a store.CheckpointAdvance, nowMs int64) (bool, error) {
	if a.Activate {
		b.race()
	}
	return b.Backend.AdvanceCheckpoint(ctx, p, a, nowMs)
}

// activatesOnBusyPartition (issue 20: activation under a lock): source
// commits racing a dozen activation attempts in a row do not leave the
// checkpoint incomplete, and the activated projection covers every one of
// them (the activation is conditioned on the head it caught up to).
func activatesOnBusyPartition(t *testing.T, b migrate.Backend) {
	ctx := context.Background()
	seed(t, b, "a", 3)
	if _, err := migrate.Step(ctx, b, plan("a")); err != nil {
		t.Fatal(err)
	}
	busy := &busyPartition{Backend: b, t: t, busy: 12}
	pr, err := migrate.Backfill(ctx, busy, "a", "proj", project, migrate.BackfillOptions{Now: now})
	if err != nil || pr.Activated != 1 || pr.Incomplete != 0 {
		t.Fatalf("backfill on a busy partition: %+v %v (after %d racing commits)", pr, err, min(busy.tries, busy.busy))
	}
	if ids := projected(t, b, "a"); len(ids) != 3+busy.busy {
		t.Fatalf("projection has %d rows, want %d: %v", len(ids), 3+busy.busy, ids)
	}
	if c, _ := b.GetCheckpoint(ctx, "a", "proj"); c == nil || c.State != store.CheckpointActivated {
		t.Fatalf("checkpoint %+v", c)
	}
}

// queuedWriters lands, before each of the first busy activating
// advances, a source commit the way a queued writer does (issue 11): it
// takes a ticket and commits in its turn with it, at once when the turn
// is free, else from the background as soon as the turn comes.
type queuedWriters struct {
	migrate.Backend
	store.CommitQueue
	t            *testing.T
	busy, tries  int
	atOnce, held int
	wg           sync.WaitGroup
}

func (b *queuedWriters) AdvanceCheckpoint(ctx context.Context, p string, a store.CheckpointAdvance, nowMs int64) (bool, error) {
	if a.Activate && b.tries < b.busy {
		b.tries++
		b.queue(p, fmt.Sprintf("queued-%02d", b.tries))
	}
	return b.Backend.AdvanceCheckpoint(ctx, p, a, nowMs)
}

func (b *queuedWriters) queue(p, id string) {
	ctx := context.Background()
	tk, err := b.TakeTicket(ctx, p)
	if err != nil {
		b.t.Fatal(err)
	}
	commit := func() (bool, error) {
		h, _, err := b.Head(ctx, p)
		if err != nil || h.Turn != tk-1 {
			if err == nil && h.Turn >= tk {
				err = fmt.Errorf("ticket %d was skipped (turn %d)", tk, h.Turn)
			}
			return false, err
		}
		req := writeRequest(h, 2, id)
		req.Ticket, req.TurnAtUs = tk, time.Now().UnixMicro()
		return true, b.Commit(ctx, p, req)
	}
	if ok, err := commit(); ok || err != nil {
		if err != nil {
			b.t.Errorf("queued write %s: %v", id, err)
		}
		b.atOnce++
		return
	}
	b.held++
	b.wg.Go(func() {
		for range 2000 {
			if ok, err := commit(); ok || err != nil {
				if err != nil {
					b.t.Errorf("queued write %s: %v", id, err)
				}
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		b.t.Errorf("queued write %s never got its turn", id)
	})
}

// activatesAheadOfQueuedWriters (issue 20 item 9, activation under the
// commit-queue turn): on a store with a commit queue, a queued writer
// lands before every activation attempt, more of them than the runner
// has rounds. The activation still completes, because after its first
// round it holds the partition's turn: the writers queued behind it wait
// and land after it, every one of them (the turn is passed on). A store
// without a queue has nothing to hold (ActivatesOnABusyPartition covers
// the race there).
func activatesAheadOfQueuedWriters(t *testing.T, b migrate.Backend) {
	q, ok := b.(store.CommitQueue)
	if !ok {
		t.Skip("the store has no commit queue")
	}
	ctx := context.Background()
	seed(t, b, "a", 3)
	if _, err := migrate.Step(ctx, b, plan("a")); err != nil {
		t.Fatal(err)
	}
	qw := &queuedWriters{Backend: b, CommitQueue: q, t: t, busy: 12}
	pr, err := migrate.Backfill(ctx, qw, "a", "proj", project, migrate.BackfillOptions{Now: now, MaxCatchUps: 4})
	qw.wg.Wait()
	if err != nil || pr.Activated != 1 || pr.Incomplete != 0 {
		t.Fatalf("backfill behind queued writers: %+v %v (%d writes landed at once, %d waited behind the activation)", pr, err, qw.atOnce, qw.held)
	}
	if c, _ := b.GetCheckpoint(ctx, "a", "proj"); c == nil || c.State != store.CheckpointActivated {
		t.Fatalf("checkpoint %+v", c)
	}
	if qw.held == 0 {
		t.Fatalf("no queued writer waited behind the activation (%d landed at once)", qw.atOnce)
	}
	ids := make([]string, qw.tries)
	for i := range ids {
		ids[i] = fmt.Sprintf("queued-%02d", i+1)
	}
	if rows, err := b.GetRows(ctx, "a", "tasks", ids); err != nil || len(rows) != len(ids) {
		t.Fatalf("queued writers' rows: %d of %d, %v", len(rows), len(ids), err)
	}
	t.Logf("%d queued writes landed at once, %d waited behind the activation", qw.atOnce, qw.held)
}
