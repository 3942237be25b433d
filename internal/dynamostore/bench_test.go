package dynamostore_test

import (
	"context"
	"fmt"
	"testing"

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
