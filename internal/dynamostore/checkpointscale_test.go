package dynamostore_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/migrate"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/memstore"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// TestCheckpointReleaseScales is issue 20 item 5 for a release that
// declares a backfill checkpoint, on DynamoDB Local with
// CHECKPOINT_SCALE_PARTITIONS registered partitions (default 2000; the
// measured run uses 10000) and the backfill walk at
// CHECKPOINT_SCALE_PARALLEL partitions at once (default
// migrate.DefaultParallel):
//
//   - the declaration step the deploy hook and syncular-admin migrate run
//     (migrate.Step) costs the same round trips with 100 partitions as
//     with all of them;
//   - afterwards, before the walk reached them, partitions gate the
//     checkpoint as declared: the old build is refused, the declaring
//     build serves, and its first write materialises the checkpoint;
//   - the walk over the registry (migrate.Run -backfill, what the hook
//     runs after reporting) materialises, backfills and activates every
//     partition; a re-run finds nothing to do.
//
// It logs wall time and round trips per partition and asserts what the
// runs did, never how fast.
func TestCheckpointReleaseScales(t *testing.T) {
	n := 2000
	if v, err := strconv.Atoi(os.Getenv("CHECKPOINT_SCALE_PARTITIONS")); err == nil && v > 0 {
		n = v
	}
	par := migrate.DefaultParallel
	if v, err := strconv.Atoi(os.Getenv("CHECKPOINT_SCALE_PARALLEL")); err == nil && v > 0 {
		par = v
	}
	ctx := context.Background()
	c := ddbClient(t)
	segs := memstore.NewSegments()
	v2 := enginetest.BackfillSchemaV2()
	sch := enginetest.New(t, memstore.New(), segs, enginetest.Options{Schema: v2, OlderSchemas: []string{enginetest.TodoSchema}}).Schema
	decls, err := migrate.Declarations(sch, "", nil)
	if err != nil || len(decls) != 1 {
		t.Fatalf("declarations: %+v %v", decls, err)
	}
	now := func() int64 { return time.Now().UnixMilli() }

	stepTrips := map[int]int{}
	var big *dynamostore.Store
	for _, size := range []int{100, n} {
		st := dynamostore.New(c, newTable(t, c), dynamostore.Options{})
		start := time.Now()
		testenv.SeedPartitions(t, size, func(ctx context.Context, p string) error {
			_, err := st.TouchPartition(ctx, p, 1, "e")
			return err
		})
		t.Logf("seeded %d partitions in %v", size, time.Since(start).Round(time.Millisecond))
		if size == n {
			big = st
			break
		}
		stepTrips[size] = declareRelease(t, st, decls, now)
	}

	// Two partitions with data, written by the schema-1 build.
	const actor = "actor-s"
	scopes := engine.ScopeMap{"project_id": {"p1"}}
	old := enginetest.New(t, big, segs, enginetest.Options{})
	old.Grants.Set(actor, scopes)
	declaring := enginetest.New(t, big, segs, enginetest.Options{Schema: v2, OlderSchemas: []string{enginetest.TodoSchema}, Checkpoints: migrate.Names(decls)})
	declaring.Grants.Set(actor, scopes)
	live := []string{"live-read", "live-written"}
	olds := map[string]*enginetest.Client{}
	for _, p := range live {
		cl := old.Client(p, actor, "device-old")
		for i := range 3 {
			id := fmt.Sprintf("t%d", i)
			if r := cl.Push("c"+id, enginetest.Upsert("tasks", id, cl.Task(id, "p1", fmt.Sprintf("Task %d", i), false), 0)); r.Status != wire.PushApplied {
				t.Fatalf("seed %s: %+v", p, r)
			}
		}
		olds[p] = cl
	}
	total := n + len(live)

	stepTrips[n] = declareRelease(t, big, decls, now)
	// Marker read, declaration, the realtime tier's registry (one Query,
	// tierlevel.go) and the level raise: none lists a partition.
	if stepTrips[n] != stepTrips[100] || stepTrips[n] > 4 {
		t.Fatalf("declaration round trips: %d with 100 partitions, %d with %d; want equal and at most 4", stepTrips[100], stepTrips[n], total)
	}

	// Before the walk: gated as declared everywhere.
	for _, p := range live {
		rep := olds[p].NewReplica("s", "tasks", enginetest.Scopes("project_id", "p1"))
		err := rep.Sync(wire.PullHeader{Accept: olds[p].Accept}, 8)
		if enginetest.ErrCode(err) != syncerr.ForWire(syncerr.SchemaNotReady, olds[p].Version) {
			t.Fatalf("%s: the schema-1 build served a partition whose checkpoint is declared table-wide: %v", p, err)
		}
	}
	w := declaring.Client("live-written", actor, "device-new")
	if r := w.Push("new1", enginetest.Upsert("tasks", "n1", w.Task("n1", "p1", "New", false), 0)); r.Status != wire.PushApplied {
		t.Fatalf("declaring build's push: %+v", r)
	}
	if cp, err := big.GetCheckpoint(ctx, "live-written", decls[0].Name); err != nil || cp == nil || cp.State != store.CheckpointDeclared {
		t.Fatalf("checkpoint after the declaring build's first write: %+v %v", cp, err)
	}
	for _, p := range []string{"live-read", "p000000"} {
		g, err := big.ReadGate(ctx, p)
		if err != nil || g.Unmaterialized == 0 || len(g.Pending) != 1 || g.WriterFence != 0 {
			t.Fatalf("%s before the walk: %+v %v", p, g, err)
		}
	}

	walk := func(name string) migrate.Progress {
		wctx, capa := dynamostore.WithCapacity(ctx)
		start := time.Now()
		pr, err := migrate.Run(wctx, big, migrate.Plan{Version: 2, Checkpoints: decls, Partitions: big.EachRegisteredPartition, Now: now, Parallel: par},
			migrate.RunOptions{Backfill: true}, nil)
		el := time.Since(start)
		if err != nil || pr.Partitions != total || pr.Fenced != total || pr.Activated != total || pr.Incomplete != 0 {
			t.Fatalf("%s: %+v %v", name, pr, err)
		}
		trips := capa.Snapshot().RoundTrips
		t.Logf("%s, parallel %d: %v for %d partitions, %.0f partitions/s, %.2f round trips/partition, %d rows rewritten",
			name, par, el.Round(time.Millisecond), total, float64(total)/el.Seconds(), float64(trips)/float64(total), pr.Rows)
		return pr
	}
	if pr := walk("backfill walk"); pr.Rows < 6 {
		t.Fatalf("the walk rewrote %d rows, want at least the 6 the schema-1 build wrote", pr.Rows)
	}
	if pr := walk("re-run"); pr.Rows != 0 || pr.Batches != 0 {
		t.Fatalf("a re-run wrote: %+v", pr)
	}

	// Every registered partition is materialised and activated: nothing
	// pends, the fence is the release's.
	var (
		wg     sync.WaitGroup
		next   atomic.Int64
		failed atomic.Value
	)
	names := live
	for i := range n {
		names = append(names, fmt.Sprintf("p%06d", i))
	}
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(names); i = int(next.Add(1)) - 1 {
				g, err := big.ReadGate(ctx, names[i])
				if err != nil || len(g.Pending) != 0 || g.Unmaterialized != 0 || g.WriterFence != 2 {
					failed.CompareAndSwap(nil, fmt.Sprintf("%s after the walk: %+v %v", names[i], g, err))
					return
				}
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f != nil {
		t.Fatal(f)
	}
	rep := olds["live-read"].NewReplica("s2", "tasks", enginetest.Scopes("project_id", "p1"))
	if err := rep.Sync(wire.PullHeader{Accept: olds["live-read"].Accept}, 8); enginetest.ErrCode(err) != syncerr.ForWire(syncerr.SchemaNotReady, olds["live-read"].Version) {
		t.Fatalf("the schema-1 build after the walk: %v", err)
	}
}

// declareRelease runs the declaration step and returns its round trips.
func declareRelease(t *testing.T, st *dynamostore.Store, decls []migrate.Declaration, now func() int64) int {
	t.Helper()
	listed := 0
	cctx, capa := dynamostore.WithCapacity(context.Background())
	start := time.Now()
	pr, err := migrate.Step(cctx, st, migrate.Plan{Version: 2, Checkpoints: decls, Now: now,
		Partitions: func(context.Context, func(string) bool) error { listed++; return nil }})
	if err != nil || pr.Marker != 2 || listed != 0 {
		t.Fatalf("declaration step: %+v %v (registry listed %d times)", pr, err, listed)
	}
	trips := capa.Snapshot().RoundTrips
	t.Logf("declaration step: %d round trips in %v", trips, time.Since(start).Round(time.Microsecond))
	return trips
}
