package functions

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/memstore"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// TestPruneShardsResume: a pass over the registry cut into bounded runs,
// 4 shards at a time, prunes every partition exactly once (a shard
// finished early waits for the others; an interrupted one resumes after
// its last partition), and the pass after it starts over.
func TestPruneShardsResume(t *testing.T) {
	ddb := testenv.DynamoDB(t)
	c := ddb.Client(t)
	ctx := context.Background()
	table := testenv.UniqueName(t, "pruneshards")
	if err := dynamostore.CreateTable(ctx, c, table); err != nil {
		t.Fatal(err)
	}
	st := dynamostore.New(c, table, dynamostore.Options{})
	const parts, commits = 40, 3
	now := time.Now().UnixMilli()
	for i := range parts {
		p := fmt.Sprintf("team-%02d", i)
		if _, err := st.TouchPartition(ctx, p, now, "e"); err != nil {
			t.Fatal(err)
		}
		for seq := int64(1); seq <= commits; seq++ {
			id := fmt.Sprint(seq)
			if err := st.Commit(ctx, p, &store.CommitRequest{
				ExpectedMaxSeq: seq - 1,
				Commit:         store.Commit{Seq: seq, CreatedAtMs: now, ClientID: "c", ClientCommitID: id, Changes: []store.Change{{Table: "tasks", RowID: id, Op: wire.OpUpsert, RowVersion: 1, Row: []byte(id)}}},
				Rows:           []store.RowWrite{{Table: "tasks", Row: store.Row{RowID: id, Version: 1, Payload: []byte(id), CommitSeq: seq}}},
				Outcome:        store.Outcome{Applied: true, CommitSeq: seq, RecordedAtMs: now},
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	p := keepNewestPruner(t, st)

	visited, removed, runs := 0, 0, 0
	for {
		runs++
		res, err := p.Run(ctx, app.PruneEvent{MaxPartitions: 7, Parallel: 4})
		if err != nil {
			t.Fatalf("run %d: %v", runs, err)
		}
		visited += res.Partitions
		removed += res.Removed
		if res.Done {
			break
		}
		if res.Partitions == 0 || runs > parts {
			t.Fatalf("run %d made no progress: %+v", runs, res)
		}
	}
	if visited != parts || removed != parts*(commits-1) {
		t.Fatalf("a pass in %d bounded runs visited %d partitions and removed %d commits, want %d and %d", runs, visited, removed, parts, parts*(commits-1))
	}
	for i := range parts {
		h, _, err := st.Head(ctx, fmt.Sprintf("team-%02d", i))
		if err != nil || h.HorizonSeq != commits-1 {
			t.Fatalf("team-%02d: horizon %d (%v), want %d", i, h.HorizonSeq, err, commits-1)
		}
	}
	for i := range dynamostore.RegistryShards {
		if cur, _ := st.JobCursor(ctx, app.PruneShardJob(i)); cur != "" {
			t.Fatalf("shard %d left at %q after the pass", i, cur)
		}
	}
	again, err := p.Run(ctx, app.PruneEvent{})
	if err != nil || !again.Done || again.Partitions != parts || again.Removed != 0 {
		t.Fatalf("the next pass: %+v, %v; want all %d partitions visited and nothing removed", again, err, parts)
	}
}

// keepNewestPruner is a prune job over st (the example schema, no
// scopes) whose retention keeps only each partition's newest commit, so
// tests and measurements need not seed the §4.6 floor of 1,000.
func keepNewestPruner(t *testing.T, st *dynamostore.Store) *app.Pruner {
	t.Helper()
	eng, err := engine.New(engine.Config{
		Schema: todo(t), Store: st, Segments: memstore.NewSegments(),
		Resolver: engine.ResolverFunc(func(context.Context, string, string, string) (engine.ScopeMap, error) { return nil, nil }),
	})
	if err != nil {
		t.Fatal(err)
	}
	keep := int64(1)
	return &app.Pruner{Engine: eng, Store: st, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)),
		Retention: &engine.RetentionOverride{MinRetainedCommits: &keep}}
}
