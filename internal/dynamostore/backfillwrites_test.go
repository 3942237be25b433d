package dynamostore_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/migrate"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// TestBackfillWrites is issue 20 item 2 on DynamoDB Local: the
// declared backfill's rows reach a client as ordinary commits.
func TestBackfillWrites(t *testing.T) {
	c := ddbClient(t)
	t.Run("ClientReceivesBackfill", func(t *testing.T) {
		enginetest.BackfillWrites(t, dynamostore.New(c, newTable(t, c), dynamostore.Options{}), memstore.NewSegments())
	})
	t.Run("ConcurrentDrivers", func(t *testing.T) {
		enginetest.BackfillConcurrentDrivers(t, dynamostore.New(c, newTable(t, c), dynamostore.Options{}), memstore.NewSegments())
	})
}

// TestBackfillThroughput measures a schema backfill rewriting
// BACKFILL_ROWS rows (e.g. 2000; skipped when unset) of one partition on
// DynamoDB Local at 100 rows per batch: wall time, round trips and
// estimated units per rewritten row. It asserts what the run did, never
// how fast.
func TestBackfillThroughput(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("BACKFILL_ROWS"))
	if n <= 0 {
		t.Skip("set BACKFILL_ROWS to measure")
	}
	c := ddbClient(t)
	st := dynamostore.New(c, newTable(t, c), dynamostore.Options{})
	segs := memstore.NewSegments()
	h1 := enginetest.New(t, st, segs, enginetest.Options{})
	h1.Grants.Set("a", engine.ScopeMap{"project_id": {"p1"}})
	cl := h1.Client("p", "a", "d")
	for i := 0; i < n; i += 100 {
		var ops []wire.Operation
		for j := i; j < min(i+100, n); j++ {
			id := fmt.Sprintf("t%06d", j)
			ops = append(ops, enginetest.Upsert("tasks", id, cl.Task(id, "p1", fmt.Sprintf("Task %d", j), false), 0))
		}
		if r, err := cl.PushCommits(enginetest.Commit(fmt.Sprintf("c%d", i), ops...)); err != nil || r[0].Status != wire.PushApplied {
			t.Fatalf("seed: %+v %v", r, err)
		}
	}
	h2 := enginetest.New(t, st, segs, enginetest.Options{Schema: enginetest.BackfillSchemaV2(), OlderSchemas: []string{enginetest.TodoSchema}})
	decls, err := migrate.Declarations(h2.Schema, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := migrate.Step(ctx, st, migrate.Plan{Version: 2, Checkpoints: decls, Partitions: func(_ context.Context, fn func(string) bool) error { fn("p"); return nil }, Now: h2.Clock.Now}); err != nil {
		t.Fatal(err)
	}
	mctx, capa := dynamostore.WithCapacity(ctx)
	start := time.Now()
	pr, err := migrate.RunBackfill(mctx, st, "p", decls[0], migrate.BackfillOptions{BatchRows: 100, Now: h2.Clock.Now})
	el := time.Since(start)
	if err != nil || pr.Activated != 1 || pr.Rows != int64(n) {
		t.Fatalf("backfill: %+v %v", pr, err)
	}
	u := capa.Snapshot()
	t.Logf("rewrote %d rows in %d batches in %v: %.0f rows/s, %.2f round trips/batch, %.2f RCU and %.2f WCU (estimated) per row",
		n, pr.Batches, el.Round(time.Millisecond), float64(n)/el.Seconds(), float64(u.RoundTrips)/float64(pr.Batches), u.EstRCU/float64(n), u.EstWCU/float64(n))
}
