package dynamostore

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/memstore"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// TestLoad reproduces issue 11's measurements against DynamoDB Local
// with the real engine (make load-dynamodb; skipped unless SSP2_LOAD is set).
// Round trips and capacity are exact counts of what was sent (capacity
// estimated from item sizes by the AWS rules); times are indicative of
// DynamoDB Local on this machine, not of AWS. Bounded: SSP2_LOAD_ROWS
// rows (default 100,000), SSP2_LOAD_SECONDS per writer configuration
// (default 2).
func TestLoad(t *testing.T) {
	if os.Getenv("SSP2_LOAD") == "" {
		t.Skip("load measurements: set SSP2_LOAD=1 (make load-dynamodb)")
	}
	rows := envInt("SSP2_LOAD_ROWS", 100_000)
	secs := envInt("SSP2_LOAD_SECONDS", 2)
	ctx := context.Background()
	client := testenv.DynamoDB(t).Client(t)
	table := testenv.UniqueName(t, "load")
	if err := CreateTable(ctx, client, table); err != nil {
		t.Fatal(err)
	}
	st := New(client, table, Options{})
	t.Run("bootstrap", func(t *testing.T) { loadBootstrap(t, st, rows) })
	t.Run("incremental", func(t *testing.T) { loadIncremental(t, st) })
	t.Run("push-and-quiet-pull", func(t *testing.T) { loadPushCost(t, st) })
	t.Run("writers", func(t *testing.T) { loadWriters(t, st, time.Duration(secs)*time.Second) })
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func measureCtx(ctx context.Context, fn func(ctx context.Context)) Usage {
	mctx, c := WithCapacity(ctx)
	fn(mctx)
	return c.Snapshot()
}

// bootstrapAll pulls a fresh subscription until its bootstrap completes
// and returns the rows received and the requests it took.
func bootstrapAll(t *testing.T, c *enginetest.Client, scope string) (rows, requests int) {
	t.Helper()
	sub := wire.Subscription{ID: "s", Table: "tasks", Scopes: enginetest.Scopes("project_id", scope), Cursor: -1}
	for requests < 1000 {
		requests++
		resp, err := c.Send(c.Request(nil, &wire.PullHeader{Accept: wire.AcceptInlineRows}, []wire.Subscription{sub}))
		if err != nil {
			t.Fatal(err)
		}
		sec := enginetest.Sections(t, resp)[0]
		for _, s := range sec.Segments {
			for _, b := range s.Blocks {
				rows += len(b)
			}
		}
		if !sec.End.BootstrapState.Present {
			return rows, requests
		}
		sub.Cursor, sub.BootstrapState = sec.End.NextCursor, sec.End.BootstrapState
	}
	t.Fatal("bootstrap did not finish")
	return
}

// loadBootstrap: n rows in 100 projects (1% each) plus a 10-row project,
// seeded straight into the row layout (row item and scope copy, as a
// commit of a partition with copies on writes them), then a client's
// full bootstrap of one 1% project and of the 10-row one, against the
// old read pattern (the table's row items, filtered) for the same
// project. The partition is created with its copies on and marked
// (Options.ScopeCopiesNewPartitions), as the adaptive trigger and the
// backfill leave a wide partition (TestScopeCopiesAdaptive).
func loadBootstrap(t *testing.T, st *Store, n int) {
	ctx := context.Background()
	st = New(st.db, *st.table, Options{ScopeCopiesNewPartitions: true})
	h := enginetest.New(t, st, memstore.NewSegments(), enginetest.Options{})
	scopes := []string{"tiny"}
	for i := range 100 {
		scopes = append(scopes, fmt.Sprintf("p%03d", i))
	}
	h.Grants.Set("alice", engine.ScopeMap{"project_id": scopes})
	c := h.Client("big", "alice", "device")
	if r := c.Push("warm", enginetest.Upsert("tasks", "warm", c.Task("warm", "tiny", "x", false), 0)); r.Status != wire.PushApplied {
		t.Fatalf("warm-up push %+v", r)
	}
	start := time.Now()
	title := strings.Repeat("a task title of some length ", 5)
	var items []map[string]types.AttributeValue
	seedRow := func(id, project string) {
		w := store.RowWrite{Table: "tasks", Row: store.Row{RowID: id, Version: 1, ColumnVersions: []int64{1, 1, 1, 1, 1},
			Scopes: wire.StoredScopes{{Key: "project_id", Value: project}}, Payload: c.Task(id, project, title, false)}}
		items = append(items, rowItem("big", 1, &w))
		for _, a := range scopeIndexActions(st.table, "big", 1, []store.RowWrite{w}) {
			items = append(items, a.w.Put.Item)
		}
	}
	for i := range n {
		seedRow(fmt.Sprintf("t%07d", i), fmt.Sprintf("p%03d", i%100))
	}
	for i := range 9 {
		seedRow(fmt.Sprintf("tiny%d", i), "tiny")
	}
	batchWriteAll(t, st, items)
	t.Logf("seeded %d rows (+10 in 'tiny') as %d items in %s", n, len(items), time.Since(start).Round(time.Second))

	// The old read pattern: every row item of the table, filtered.
	var matched, bytes int
	old := measureCtx(ctx, func(ctx context.Context) {
		if err := st.ScanRows(ctx, "big", "tasks", "", false, func(r *store.Row) bool {
			if r.Scopes[0].Value == "p007" {
				matched++
				bytes += ItemSize(rowItem("big", 1, &store.RowWrite{Table: "tasks", Row: *r}))
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("1%% scope (%d rows, %d B of row items ≈ %.0f RCU) read the old way (whole table, filtered): %d round trips, %.0f RCU",
		matched, bytes, float64(bytes)/4096, old.RoundTrips, old.EstRCU)
	var got, reqs int
	u := measureCtx(ctx, func(mctx context.Context) {
		c.Ctx = mctx
		got, reqs = bootstrapAll(t, c, "p007")
		c.Ctx = nil
	})
	t.Logf("1%% scope bootstrap: %d rows, %d requests, %d round trips, %.0f RCU, %.0f WCU (%.2f× the matching rows' bytes)",
		got, reqs, u.RoundTrips, u.EstRCU, u.EstWCU, u.EstRCU/(float64(bytes)/4096))
	if got != matched {
		t.Errorf("bootstrap delivered %d rows, the scope has %d", got, matched)
	}
	u = measureCtx(ctx, func(mctx context.Context) {
		c.Ctx = mctx
		got, reqs = bootstrapAll(t, c, "tiny")
		c.Ctx = nil
	})
	t.Logf("10-row scope bootstrap: %d rows, %d requests, %d round trips, %.1f RCU", got, reqs, u.RoundTrips, u.EstRCU)
	if got != 10 {
		t.Errorf("tiny bootstrap delivered %d rows, want 10", got)
	}
}

// batchWriteAll writes items with BatchWriteItem, 8 requests in flight.
func batchWriteAll(t *testing.T, st *Store, items []map[string]types.AttributeValue) {
	t.Helper()
	ctx := context.Background()
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	var failed atomic.Value
	for start := 0; start < len(items); start += 25 {
		batch := items[start:min(len(items), start+25)]
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			reqs := make([]types.WriteRequest, len(batch))
			for i, it := range batch {
				reqs[i] = types.WriteRequest{PutRequest: &types.PutRequest{Item: it}}
			}
			pending := map[string][]types.WriteRequest{*st.table: reqs}
			for len(pending) > 0 {
				out, err := st.db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: pending})
				if err != nil {
					failed.Store(err)
					return
				}
				pending = out.UnprocessedItems
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
}

// loadIncremental: a client of scope X, 1,000 commits to other scopes,
// then one incremental pull of X.
func loadIncremental(t *testing.T, st *Store) {
	ctx := context.Background()
	h := enginetest.New(t, st, memstore.NewSegments(), enginetest.Options{})
	h.Grants.Set("alice", engine.ScopeMap{"project_id": {"x", "other"}})
	c := h.Client("incr", "alice", "device")
	if r := c.Push("x0", enginetest.Upsert("tasks", "x0", c.Task("x0", "x", "in x", false), 0)); r.Status != wire.PushApplied {
		t.Fatal(r)
	}
	sub := []wire.Subscription{{ID: "s", Table: "tasks", Scopes: enginetest.Scopes("project_id", "x"), Cursor: -1}}
	resp, err := c.Send(c.Request(nil, &wire.PullHeader{Accept: c.Accept}, sub))
	if err != nil {
		t.Fatal(err)
	}
	sub[0].Cursor = enginetest.Sections(t, resp)[0].End.NextCursor
	w := h.Client("incr", "alice", "writer")
	for i := range 1000 {
		id := fmt.Sprintf("o%04d", i)
		if r := w.Push(id, enginetest.Upsert("tasks", id, w.Task(id, "other", "elsewhere", false), 0)); r.Status != wire.PushApplied {
			t.Fatal(r)
		}
	}
	if r := w.Push("x1", enginetest.Upsert("tasks", "x1", w.Task("x1", "x", "in x", false), 0)); r.Status != wire.PushApplied {
		t.Fatal(r)
	}
	var commits int
	u := measureCtx(ctx, func(mctx context.Context) {
		c.Ctx = mctx
		resp, err := c.Send(c.Request(nil, &wire.PullHeader{Accept: c.Accept}, sub))
		c.Ctx = nil
		if err != nil {
			t.Fatal(err)
		}
		commits = len(enginetest.Sections(t, resp)[0].Commits)
	})
	t.Logf("incremental pull of scope x after 1,000 commits to other scopes: %d commit(s) delivered, %d round trips, %.0f RCU",
		commits, u.RoundTrips, u.EstRCU)
}

// loadPushCost: a warm client's 1-op insert and a quiet pull.
func loadPushCost(t *testing.T, st *Store) {
	ctx := context.Background()
	h := enginetest.New(t, st, memstore.NewSegments(), enginetest.Options{})
	h.Grants.Set("alice", engine.ScopeMap{"project_id": {"p1"}})
	c := h.ClientV3("cost", "alice", "device")
	c.Push("w", enginetest.Upsert("tasks", "w", c.Task("w", "p1", "x", false), 0))
	u := measureCtx(ctx, func(mctx context.Context) {
		c.Ctx = mctx
		if r := c.Push("i", enginetest.Upsert("tasks", "i", c.Task("i", "p1", "title", false), 0)); r.Status != wire.PushApplied {
			t.Fatal(r)
		}
		c.Ctx = nil
	})
	t.Logf("1-op insert (v3): %d round trips, %.0f RCU, %.0f WCU", u.RoundTrips, u.EstRCU, u.EstWCU)
	sub := []wire.Subscription{{ID: "s", Table: "tasks", Scopes: enginetest.Scopes("project_id", "p1"), Cursor: -1}}
	resp, err := c.Send(c.Request(nil, &wire.PullHeader{Accept: c.Accept}, sub))
	if err != nil {
		t.Fatal(err)
	}
	sub[0].Cursor = enginetest.Sections(t, resp)[0].End.NextCursor
	u = measureCtx(ctx, func(mctx context.Context) {
		c.Ctx = mctx
		if _, err := c.Send(c.Request(nil, &wire.PullHeader{Accept: c.Accept}, sub)); err != nil {
			t.Fatal(err)
		}
		c.Ctx = nil
	})
	t.Logf("quiet pull: %d round trips, %.0f RCU, %.0f WCU", u.RoundTrips, u.EstRCU, u.EstWCU)
}

// loadWriters: k writers, each its own client and its own engine (one
// Lambda instance each: no in-process state is shared between writers,
// only the store), pushing 1-op inserts of distinct rows into one
// partition for d.
func loadWriters(t *testing.T, st *Store, d time.Duration) {
	var base float64
	segs := memstore.NewSegments()
	for _, k := range []int{1, 2, 4, 8, 16, 32} {
		p := fmt.Sprintf("hot-%d", k)
		clients := make([]*enginetest.Client, k)
		for i := range clients {
			h := enginetest.New(t, st, segs, enginetest.Options{})
			h.Grants.Set("alice", engine.ScopeMap{"project_id": {"p1"}})
			clients[i] = h.Client(p, "alice", fmt.Sprintf("w%02d", i))
			if r := clients[i].Push("bind", enginetest.Upsert("tasks", fmt.Sprintf("bind%02d", i), clients[i].Task(fmt.Sprintf("bind%02d", i), "p1", "x", false), 0)); r.Status != wire.PushApplied {
				t.Fatal(r)
			}
		}
		mctx, capacity := WithCapacity(context.Background())
		var commits, rejected atomic.Int64
		deadline := time.Now().Add(d)
		start := time.Now()
		var wg sync.WaitGroup
		for i, c := range clients {
			c.Ctx = mctx
			wg.Go(func() {
				for n := 0; time.Now().Before(deadline); n++ {
					id := fmt.Sprintf("w%02d-%06d", i, n)
					r := c.Push(id, enginetest.Upsert("tasks", id, c.Task(id, "p1", "contended", false), 0))
					if r.Status == wire.PushApplied {
						commits.Add(1)
					} else {
						rejected.Add(1)
					}
				}
			})
		}
		wg.Wait()
		el := time.Since(start).Seconds()
		u := capacity.Snapshot()
		rate := float64(commits.Load()) / el
		if k == 1 {
			base = rate
		}
		t.Logf("%2d writers: %5d commits in %.1fs = %6.1f commits/s (%3.0f%% of 1 writer), %.2f round trips/commit, %d not applied",
			k, commits.Load(), el, rate, 100*rate/base, float64(u.RoundTrips)/float64(max(commits.Load(), 1)), rejected.Load())
	}
}
