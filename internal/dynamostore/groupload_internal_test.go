package dynamostore

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/memstore"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// TestGroupCommitRate measures commits/s of one partition at 1, 8 and
// 32 writers on DynamoDB Local, with group commit off (every queued
// commit lands alone in its turn) and on, GROUP_RUNS runs each (default
// 3) of SSP2_LOAD_SECONDS each (default 3). Each writer is its own
// engine over the shared table, as separate Lambda instances are, and
// writes its own rows (one upsert per commit). Numbers only: it asserts
// nothing about time (docs/SCALE.md has the measured table).
func TestGroupCommitRate(t *testing.T) {
	if os.Getenv("SSP2_LOAD") == "" {
		t.Skip("load measurements: set SSP2_LOAD=1")
	}
	secs := envInt("SSP2_LOAD_SECONDS", 3)
	runs := envInt("GROUP_RUNS", 3)
	client := testenv.DynamoDB(t).Client(t)
	table := testenv.UniqueName(t, "grouprate")
	if err := CreateTable(context.Background(), client, table); err != nil {
		t.Fatal(err)
	}
	st := New(client, table, Options{})
	groupRate(t, st, 1, -1, true, time.Second) // warm-up, not reported
	ks := []int{1, 8, 32}
	if w := envInt("GROUP_WRITERS", 0); w > 0 {
		ks = []int{w}
	}
	for _, k := range ks {
		for run := range runs {
			for _, off := range []bool{true, false} {
				groupRate(t, st, k, run, off, time.Duration(secs)*time.Second)
			}
		}
	}
}

// landings counts the head transactions that landed commits and the
// commits they landed: commits per transaction is how many commits a
// partition lands per turn, the ceiling's multiplier whatever the
// machine's load.
type landings struct {
	*Store
	txs, commits atomic.Int64
}

func (l *landings) Commit(ctx context.Context, partition string, req *store.CommitRequest) error {
	err := l.Store.Commit(ctx, partition, req)
	if err == nil {
		l.txs.Add(1)
		l.commits.Add(1)
	}
	return err
}

func (l *landings) CommitGroup(ctx context.Context, partition string, reqs []*store.CommitRequest) (int, error) {
	n, err := l.Store.CommitGroup(ctx, partition, reqs)
	if n > 0 {
		l.txs.Add(1)
		l.commits.Add(int64(n))
	}
	return n, err
}

func groupRate(t *testing.T, base *Store, k, run int, off bool, d time.Duration) {
	st := &landings{Store: base}
	mode := "group"
	if run < 0 {
		mode = "warm"
	}
	if off && run >= 0 {
		mode = "alone"
	}
	p := fmt.Sprintf("gr-%d-%d-%s", k, run, mode)
	segs := memstore.NewSegments()
	clients := make([]*enginetest.Client, k)
	for i := range clients {
		h := enginetest.New(t, st, segs, enginetest.Options{NoGroupCommit: off})
		h.Grants.Set("alice", engine.ScopeMap{"project_id": {"p1"}})
		clients[i] = h.Client(p, "alice", fmt.Sprintf("w%02d", i))
		id := fmt.Sprintf("bind%02d", i)
		if r := clients[i].Push("bind", enginetest.Upsert("tasks", id, clients[i].Task(id, "p1", "x", false), 0)); r.Status != wire.PushApplied {
			t.Fatal(r)
		}
	}
	st.txs.Store(0)
	st.commits.Store(0)
	mctx, capacity := WithCapacity(context.Background())
	var commits, failed atomic.Int64
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
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	u := capacity.Snapshot()
	t.Logf("%2d writers, run %d, %-5s: %5d commits in %.1fs = %6.1f commits/s, %.2f round trips/commit, %.2f commits/transaction, %d not applied",
		k, run+1, mode, commits.Load(), el, float64(commits.Load())/el, float64(u.RoundTrips)/float64(max(commits.Load(), 1)),
		float64(st.commits.Load())/float64(max(st.txs.Load(), 1)), failed.Load())
}
