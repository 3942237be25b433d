package functions

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// TestPruneThroughput measures how fast the scheduled prune deletes
// log, log-index and tombstone items on DynamoDB Local, with 1, 4 and 16
// registry shards walked at once (docs/SCALE.md, "Lifecycle"). It runs
// only with PRUNE_THROUGHPUT_COMMITS set (commits seeded per run, e.g.
// 4096; PRUNE_THROUGHPUT_PARTITIONS partitions, default 64), and reports
// numbers instead of asserting a rate. Each commit is a one-row insert of
// a scoped 200-byte row (a log item and one log-index entry); every
// fourth also deletes an earlier row (a tombstone). Retention is lowered
// to the newest commit per partition so nearly everything is prunable.
// PRUNE_THROUGHPUT_PARALLEL runs only that many shards at once.
// PRUNE_THROUGHPUT_LATENCY (a Go duration, e.g. 10ms) delays every
// request of the prune run by that much before it reaches DynamoDB Local,
// standing in for the network round trip of a real table, so the run is
// bound by round trips rather than by the local server's CPU.
func TestPruneThroughput(t *testing.T) {
	total, _ := strconv.Atoi(os.Getenv("PRUNE_THROUGHPUT_COMMITS"))
	if total <= 0 {
		t.Skip("set PRUNE_THROUGHPUT_COMMITS to measure prune throughput")
	}
	parts := 64
	if v, _ := strconv.Atoi(os.Getenv("PRUNE_THROUGHPUT_PARTITIONS")); v > 0 {
		parts = v
	}
	latency, _ := time.ParseDuration(os.Getenv("PRUNE_THROUGHPUT_LATENCY"))
	ddb := testenv.DynamoDB(t)
	c := ddb.Client(t)
	slow := ddb.SlowClient(t, latency)
	ctx := context.Background()
	runs := []int{1, 4, 16}
	if v, _ := strconv.Atoi(os.Getenv("PRUNE_THROUGHPUT_PARALLEL")); v > 0 {
		runs = []int{v}
	}
	for _, parallel := range runs {
		table := testenv.UniqueName(t, "prunerate")
		if err := dynamostore.CreateTable(ctx, c, table); err != nil {
			t.Fatal(err)
		}
		st := dynamostore.New(c, table, dynamostore.Options{OutcomeTTL: store.DefaultOutcomeWindow})
		seedStart := time.Now()
		seedPrunable(t, st, parts, total/parts)
		seeded := time.Since(seedStart)
		before := countItems(t, c, table)
		pst := dynamostore.New(slow, table, dynamostore.Options{OutcomeTTL: store.DefaultOutcomeWindow})
		p := keepNewestPruner(t, pst)
		runCtx, used := dynamostore.WithCapacity(ctx)
		start := time.Now()
		res, err := p.Run(runCtx, app.PruneEvent{Parallel: parallel})
		took := time.Since(start)
		if err != nil || !res.Done || res.Failed != 0 {
			t.Fatalf("prune run: %+v, %v", res, err)
		}
		deleted := before - countItems(t, c, table)
		rate := float64(deleted) / took.Seconds()
		u := used.Snapshot()
		t.Logf("latency %v, parallel %2d: %d partitions, %d commits removed, %d items deleted in %.1f s: %.0f items/s total, %.0f items/s per worker; %d round trips (%.1f per 100 items), %.0f WCU (%.2f per item) (seeded %d commits in %.1f s)",
			latency, parallel, res.Partitions, res.Removed, deleted, took.Seconds(), rate, rate/float64(parallel),
			u.RoundTrips, 100*float64(u.RoundTrips)/float64(deleted), u.EstWCU, u.EstWCU/float64(deleted), total, seeded.Seconds())
	}
}

// seedPrunable commits n commits into each of parts partitions, 8
// partitions at a time.
func seedPrunable(t *testing.T, st *dynamostore.Store, parts, n int) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UnixMilli()
	payload := make([]byte, 200)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	errs := make(chan error, parts)
	for i := range parts {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			p := fmt.Sprintf("tenant-%03d", i)
			if _, err := st.TouchPartition(ctx, p, now, "e"); err != nil {
				errs <- err
				return
			}
			scopes := wire.StoredScopes{{Key: "project_id", Value: "p" + strconv.Itoa(i%7)}}
			for seq := int64(1); seq <= int64(n); seq++ {
				id := "r" + strconv.FormatInt(seq, 10)
				req := &store.CommitRequest{
					ExpectedMaxSeq: seq - 1,
					Commit:         store.Commit{Seq: seq, CreatedAtMs: now, ClientID: "c", ClientCommitID: id},
					Outcome:        store.Outcome{Applied: true, CommitSeq: seq, RecordedAtMs: now},
				}
				req.Rows = append(req.Rows, store.RowWrite{Table: "tasks", Row: store.Row{RowID: id, Version: 1, Scopes: scopes, Payload: payload, CommitSeq: seq}})
				req.Commit.Changes = append(req.Commit.Changes, store.Change{Table: "tasks", RowID: id, Op: wire.OpUpsert, Scopes: scopes, RowVersion: 1, Row: payload})
				if seq%4 == 0 {
					old := "r" + strconv.FormatInt(seq-2, 10)
					req.Rows = append(req.Rows, store.RowWrite{Table: "tasks", Delete: true, Row: store.Row{RowID: old, Scopes: scopes, CommitSeq: seq}})
					req.Commit.Changes = append(req.Commit.Changes, store.Change{Table: "tasks", RowID: old, Op: wire.OpDelete, Scopes: scopes})
				}
				if err := st.Commit(ctx, p, req); err != nil {
					errs <- fmt.Errorf("seed %s #%d: %w", p, seq, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func countItems(t *testing.T, c *dynamodb.Client, table string) int {
	t.Helper()
	in := &dynamodb.ScanInput{TableName: aws.String(table), Select: types.SelectCount}
	n := 0
	for {
		out, err := c.Scan(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		n += int(out.Count)
		if len(out.LastEvaluatedKey) == 0 {
			return n
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}
