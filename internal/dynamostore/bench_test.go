package dynamostore_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
)

// Benchmarks against DynamoDB Local. Per operation they report:
//
//	trips/op          requests sent
//	RCU/op, WCU/op    capacity DynamoDB Local reported (ReturnConsumedCapacity)
//	estRCU/op, estWCU/op  capacity from item sizes per the AWS rules
//	                  (consistent reads 4 KB units, per item for Get/BatchGet
//	                  and summed per Query page; writes 1 KB units, ×2 in
//	                  transactions) — the numbers to price on AWS.

func benchSetup(b *testing.B) (*dynamostore.Store, string) {
	c := ddbClient(b)
	s := dynamostore.New(c, newTable(b, c), dynamostore.Options{})
	p := "bench"
	if _, err := s.TouchPartition(context.Background(), p, baseMs, "epoch"); err != nil {
		b.Fatal(err)
	}
	return s, p
}

func report(b *testing.B, u dynamostore.Usage) {
	n := float64(b.N)
	b.ReportMetric(float64(u.RoundTrips)/n, "trips/op")
	b.ReportMetric(u.RCU/n, "RCU/op")
	b.ReportMetric(u.WCU/n, "WCU/op")
	b.ReportMetric(u.EstRCU/n, "estRCU/op")
	b.ReportMetric(u.EstWCU/n, "estWCU/op")
}

func payload(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte('a' + i%26)
	}
	return p
}

// benchPush runs the engine's push path for ops rows: Head, GetRows of
// the touched rows, one Commit.
func benchPush(b *testing.B, ops int) {
	s, p := benchSetup(b)
	ids := make([]string, ops)
	for i := range ids {
		ids[i] = fmt.Sprintf("row-%03d", i)
	}
	ctx, usage := dynamostore.WithCapacity(context.Background())
	b.ResetTimer()
	for b.Loop() {
		h, _, err := s.Head(ctx, p)
		if err != nil {
			b.Fatal(err)
		}
		rows, err := s.GetRows(ctx, p, "tasks", ids)
		if err != nil {
			b.Fatal(err)
		}
		var ws []store.RowWrite
		for _, id := range ids {
			v := int64(1)
			if r := rows[id]; r != nil {
				v = r.Version + 1
			}
			w := up(id, v, payload(200))
			// Eight columns as the engine stamps them after a sparse
			// update: one column still at 1, the rest at the new version.
			w.Row.ColumnVersions = []int64{1, v, v, v, v, v, v, v}
			ws = append(ws, w)
		}
		if err := s.Commit(ctx, p, commitOf(h.MaxCommitSeq, fmt.Sprint("cc", h.MaxCommitSeq), ws...)); err != nil {
			b.Fatal(err)
		}
	}
	report(b, usage.Snapshot())
}

func BenchmarkPush1(b *testing.B)  { benchPush(b, 1) }
func BenchmarkPush50(b *testing.B) { benchPush(b, 50) }

// BenchmarkQuietPull is a pull at the head: TouchPartition only.
func BenchmarkQuietPull(b *testing.B) {
	s, p := benchSetup(b)
	ctx, usage := dynamostore.WithCapacity(context.Background())
	for b.Loop() {
		if _, err := s.TouchPartition(ctx, p, baseMs+1, "unused"); err != nil {
			b.Fatal(err)
		}
	}
	report(b, usage.Snapshot())
}

// BenchmarkIncrementalPull100 reads a window of 100 one-change commits.
func BenchmarkIncrementalPull100(b *testing.B) {
	s, p := benchSetup(b)
	ctx := context.Background()
	for i := range int64(100) {
		if err := s.Commit(ctx, p, commitOf(i, fmt.Sprint("c", i), up(fmt.Sprint("r", i), 1, payload(200)))); err != nil {
			b.Fatal(err)
		}
	}
	cctx, usage := dynamostore.WithCapacity(ctx)
	b.ResetTimer()
	for b.Loop() {
		n := 0
		if err := s.ReadLog(cctx, p, 0, 100, func(*store.Commit) bool { n++; return true }); err != nil || n != 100 {
			b.Fatalf("ReadLog: %d commits, %v", n, err)
		}
	}
	report(b, usage.Snapshot())
}

// BenchmarkScanRows1000 reads one 1,000-row bootstrap page.
func BenchmarkScanRows1000(b *testing.B) {
	s, p := benchSetup(b)
	ctx := context.Background()
	for c := range int64(10) {
		var ws []store.RowWrite
		for i := range 100 {
			ws = append(ws, up(fmt.Sprintf("r%02d%03d", c, i), 1, payload(200)))
		}
		if err := s.Commit(ctx, p, commitOf(c, fmt.Sprint("c", c), ws...)); err != nil {
			b.Fatal(err)
		}
	}
	cctx, usage := dynamostore.WithCapacity(ctx)
	b.ResetTimer()
	for b.Loop() {
		n := 0
		if err := s.ScanRows(cctx, p, "tasks", "", false, func(*store.Row) bool { n++; return n < 1000 }); err != nil || n != 1000 {
			b.Fatalf("ScanRows: %d rows, %v", n, err)
		}
	}
	report(b, usage.Snapshot())
}

// BenchmarkPushDelete1 is a one-op push deleting a stored 200-byte row
// (Head, GetRows, Commit); the row is re-created between iterations
// outside the measured context.
func BenchmarkPushDelete1(b *testing.B) {
	s, p := benchSetup(b)
	ctx := context.Background()
	cctx, usage := dynamostore.WithCapacity(ctx)
	for b.Loop() {
		h, _, err := s.Head(ctx, p)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Commit(ctx, p, commitOf(h.MaxCommitSeq, fmt.Sprint("cc", h.MaxCommitSeq), up("row", 1, payload(200)))); err != nil {
			b.Fatal(err)
		}
		h, _, err = s.Head(cctx, p)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.GetRows(cctx, p, "tasks", []string{"row"}); err != nil {
			b.Fatal(err)
		}
		del := store.RowWrite{Table: "tasks", Delete: true, Row: store.Row{RowID: "row", Scopes: up("row", 1, nil).Row.Scopes}}
		if err := s.Commit(cctx, p, commitOf(h.MaxCommitSeq, fmt.Sprint("cc", h.MaxCommitSeq), del)); err != nil {
			b.Fatal(err)
		}
	}
	report(b, usage.Snapshot())
}

// TestCommitLatency (SSP2_LATENCY=1; issue 23) measures a 1-op push's
// store calls (the head and row read, then Commit) with small commits
// and with every commit in one transaction, interleaved on two
// partitions of one table so both see the same machine load, and logs
// the p50 and p90 of each. It asserts nothing about time.
func TestCommitLatency(t *testing.T) {
	if os.Getenv("SSP2_LATENCY") == "" {
		t.Skip("SSP2_LATENCY=1 measures commit latency on DynamoDB Local")
	}
	c := ddbClient(t)
	table := newTable(t, c)
	ctx := context.Background()
	modes := []struct {
		name string
		s    *dynamostore.Store
		p    string
		seq  int64
		took []time.Duration
	}{
		{name: "small", s: dynamostore.New(c, table, dynamostore.Options{}), p: "small"},
		{name: "transaction", s: dynamostore.New(c, table, dynamostore.Options{TransactionalCommits: true}), p: "tx"},
	}
	for i := range modes {
		if _, err := modes[i].s.TouchPartition(ctx, modes[i].p, baseMs, "epoch"); err != nil {
			t.Fatal(err)
		}
	}
	const n = 300
	for i := range n {
		for j := range modes {
			m := &modes[j]
			id := fmt.Sprintf("r%04d", i)
			start := time.Now()
			rows, h, _, err := m.s.GetRowsHead(ctx, m.p, "tasks", []string{id})
			if err != nil {
				t.Fatal(err)
			}
			req := commitOf(h.MaxCommitSeq, "c"+id, up(id, 1, payload(200)))
			req.ReadRows = []store.RowRead{{Table: "tasks", RowID: id, Present: rows[id] != nil}}
			if err := m.s.Commit(ctx, m.p, req); err != nil {
				t.Fatal(err)
			}
			m.took = append(m.took, time.Since(start))
		}
	}
	for _, m := range modes {
		slices.Sort(m.took)
		t.Logf("%-11s 1-op push, %d commits: p50 %v, p90 %v", m.name, n, m.took[n/2], m.took[n*9/10])
	}
}
