package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
)

// rawExists reports whether the item (pk, sk) exists, read directly.
func rawExists(t *testing.T, c *dynamodb.Client, table, pk, sk string) bool {
	t.Helper()
	out, err := c.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(table), ConsistentRead: aws.Bool(true), Key: dynamostore.Key(pk, sk),
	})
	if err != nil {
		t.Fatalf("raw read: %v", err)
	}
	return out.Item != nil
}

// TestSmallCommitCrash (issue 23): a small commit (fast.go) whose writer
// stops after its head update (wave 2), or after its outcome, row and
// scope-copy puts but before its log item (wave 3), is durable and
// settled by whoever comes next: a pull's ReadLog passes it whole and
// GetRows sees its row (both from the head, writing nothing), a scan or a
// bootstrap sees its row after writing it whole, its retry is a replay
// (§2.3) that finds its outcome, a rejection of its key is refused, and
// the next commit lands after it and marks it applied in its own head
// update. Each reader starts from the same crash, on a fresh partition;
// afterwards the head is consistent (appliedSeq = maxCommitSeq, or the
// pending commit on it) and a log item exists only with the commit's
// outcome and row (its last write).
func TestSmallCommitCrash(t *testing.T) {
	for _, wave := range []string{"head", "puts"} {
		for _, reader := range []string{"ReadLog", "GetRows", "ScanRows", "ScanScopedRows", "Retry", "PutRejection", "Commit"} {
			t.Run(wave+"/"+reader, func(t *testing.T) { smallCommitCrash(t, wave, reader) })
		}
	}
}

func smallCommitCrash(t *testing.T, wave, reader string) {
	crash := errors.New("injected crash")
	opts := dynamostore.Options{AfterLogWrite: func() error { return crash }}
	if wave == "puts" {
		opts = dynamostore.Options{AfterSmallWrites: func() error { return crash }}
	}
	s, c, table, p := setup(t, opts)
	ctx := context.Background()
	req := commitOf(0, "small", up("r1", 1, []byte("v1")))
	if err := s.Commit(ctx, p, req); !errors.Is(err, crash) {
		t.Fatalf("Commit: %v, want the injected crash", err)
	}
	logPK, log1 := dynamostore.PartitionPK(p)+"#L", fmt.Sprintf("%020d", 1)
	rowPK, outPK := dynamostore.PartitionPK(p)+"#T#tasks", dynamostore.PartitionPK(p)+"#O#client"
	if mx, ap := rawHead(t, c, table, p); mx != "1" || ap != "0" {
		t.Fatalf("after the crash mx=%s ap=%s, want 1/0", mx, ap)
	}
	if rawExists(t, c, table, logPK, log1) {
		t.Fatal("the log item was written before the crash")
	}
	if got := rawExists(t, c, table, rowPK, "Rr1"); got != (wave == "puts") {
		t.Fatalf("row written before the crash: %v", got)
	}
	s2 := dynamostore.New(ddbClient(t), table, dynamostore.Options{}) // another instance
	switch reader {
	case "ReadLog":
		var got []*store.Commit
		if err := s2.ReadLog(ctx, p, 0, 1, func(c *store.Commit) bool { got = append(got, c); return true }); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Seq != 1 || got[0].ClientCommitID != "small" || len(got[0].Changes) != 1 ||
			string(got[0].Changes[0].Row) != "v1" || got[0].CreatedAtMs != baseMs+1 || got[0].ActorID != "actor" {
			t.Fatalf("ReadLog after the crash: %+v", got)
		}
		if rawExists(t, c, table, logPK, log1) {
			t.Error("ReadLog wrote the pending commit: it reads it from the head")
		}
	case "GetRows":
		got, err := s2.GetRows(ctx, p, "tasks", []string{"r1"})
		if err != nil || got["r1"] == nil || string(got["r1"].Payload) != "v1" || got["r1"].CommitSeq != 1 {
			t.Fatalf("GetRows after the crash: %v %v", got, err)
		}
		if rawExists(t, c, table, logPK, log1) {
			t.Error("GetRows wrote the pending commit: it reads it from the head")
		}
	case "ScanRows":
		var ids []string
		if err := s2.ScanRows(ctx, p, "tasks", "", false, func(r *store.Row) bool {
			ids = append(ids, r.RowID+"@"+fmt.Sprint(r.CommitSeq))
			return true
		}); err != nil || fmt.Sprint(ids) != "[r1@1]" {
			t.Fatalf("ScanRows after the crash: %v %v", ids, err)
		}
	case "ScanScopedRows":
		var ids []string
		if err := s2.ScanScopedRows(ctx, p, "tasks", "org", []string{"o1"}, nil, 0, func(_ string, r *store.Row) bool {
			ids = append(ids, r.RowID)
			return true
		}); err != nil || len(ids) != 1 || ids[0] != "r1" {
			t.Fatalf("ScanScopedRows after the crash: %v %v", ids, err)
		}
	case "Retry":
		// The client retries: the engine evaluates on the head it reads
		// (maxCommitSeq 1) and commits again; the store finds the first
		// commit on the head and answers its outcome.
		err := s2.Commit(ctx, p, commitOf(1, "small", up("r1", 2, []byte("v2"))))
		if !errors.Is(err, store.ErrOutcomeExists) {
			t.Fatalf("retry of the crashed commit: %v, want ErrOutcomeExists", err)
		}
		o, err := s2.GetOutcome(ctx, p, "client", "small", baseMs)
		if err != nil || o == nil || o.CommitSeq != 1 || string(o.Result) != "ok:small" {
			t.Fatalf("outcome of the crashed commit: %+v %v", o, err)
		}
	case "PutRejection":
		err := s2.PutRejection(ctx, p, "client", "small", store.Outcome{Result: []byte("rejected")}, store.WriterCheck{})
		if !errors.Is(err, store.ErrOutcomeExists) {
			t.Fatalf("rejecting the crashed commit's key: %v, want ErrOutcomeExists", err)
		}
	case "Commit":
		// The engine reads the head before it commits (which also brings
		// the table's store-format level to this instance, formats.go).
		if _, err := s2.TouchPartition(ctx, p, baseMs+2, "epoch"); err != nil {
			t.Fatal(err)
		}
		if err := s2.Commit(ctx, p, commitOf(1, "next", up("r2", 1, []byte("w")))); err != nil {
			t.Fatalf("next commit: %v", err)
		}
		var seqs []int64
		if err := s2.ReadLog(ctx, p, 0, 2, func(c *store.Commit) bool { seqs = append(seqs, c.Seq); return true }); err != nil || fmt.Sprint(seqs) != "[1 2]" {
			t.Fatalf("log after the next commit: %v %v", seqs, err)
		}
		if mx, ap := rawHead(t, c, table, p); mx != "2" || ap != "1" {
			t.Fatalf("after the next commit mx=%s ap=%s, want 2/1 (its head update marks 1 applied)", mx, ap)
		}
		got, err := s2.GetRows(ctx, p, "tasks", []string{"r1", "r2"})
		if err != nil || got["r1"] == nil || got["r1"].CommitSeq != 1 || got["r2"] == nil || got["r2"].CommitSeq != 2 {
			t.Fatalf("rows after the next commit: %v %v", got, err)
		}
	}
	// (L): a log item is the commit's last write.
	if rawExists(t, c, table, logPK, log1) {
		if !rawExists(t, c, table, rowPK, "Rr1") || !rawExists(t, c, table, outPK, "Osmall") {
			t.Errorf("%s: log item 1 exists without its row or outcome", reader)
		}
	}
}

// TestSmallCommitsMarkApplied: in a run of small commits no write moves
// appliedSeq by itself; each commit's head update marks the one before
// it applied, so the head always shows the last one pending, and every
// reader sees every commit.
func TestSmallCommitsMarkApplied(t *testing.T) {
	s, c, table, p := setup(t, dynamostore.Options{})
	ctx := context.Background()
	for i := range int64(5) {
		mctx, capacity := dynamostore.WithCapacity(ctx)
		if err := s.Commit(mctx, p, commitOf(i, fmt.Sprint("c", i), up(fmt.Sprint("r", i), 1, []byte("v")))); err != nil {
			t.Fatal(err)
		}
		u := capacity.Snapshot()
		// A new partition writes no scope copies (scopeindex.go, adaptive):
		// head, outcome, row and log, 1 WCU each.
		if u.EstWCU != 4 || u.RoundTrips != 5 {
			t.Errorf("commit %d: %.1f WCU in %d calls, want 4 in 5 (read, head, 2 puts, log)", i+1, u.EstWCU, u.RoundTrips)
		}
		if mx, ap := rawHead(t, c, table, p); mx != fmt.Sprint(i+1) || ap != fmt.Sprint(i) {
			t.Fatalf("after commit %d: mx=%s ap=%s", i+1, mx, ap)
		}
	}
	n := 0
	if err := s.ScanScopedRows(ctx, p, "tasks", "org", []string{"o1"}, nil, 0, func(string, *store.Row) bool { n++; return true }); err != nil || n != 5 {
		t.Fatalf("scoped scan: %d rows, %v", n, err)
	}
}

// TestTransactionalCommitAfterSmall: a commit that cannot be small (here
// 100 rows, a large commit) meeting a small commit pending on the head
// that this Store read settles it first (a head read, its log item's
// read, the update moving appliedSeq: 3 calls, 1 WCU) instead of sending
// a transaction its condition refuses, which would be charged whole.
func TestTransactionalCommitAfterSmall(t *testing.T) {
	s, _, _, p := setup(t, dynamostore.Options{})
	ctx := context.Background()
	big := func(expected int64, id, prefix string) *store.CommitRequest {
		var ws []store.RowWrite
		for i := range 100 {
			ws = append(ws, up(fmt.Sprintf("%s%03d", prefix, i), 1, payload(100)))
		}
		return commitOf(expected, id, ws...)
	}
	measure := func(req *store.CommitRequest) dynamostore.Usage {
		t.Helper()
		mctx, capacity := dynamostore.WithCapacity(ctx)
		if err := s.Commit(mctx, p, req); err != nil {
			t.Fatal(err)
		}
		return capacity.Snapshot()
	}
	if err := s.Commit(ctx, p, commitOf(0, "small", up("r1", 1, []byte("v1")))); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetRows(ctx, p, "tasks", []string{"a000"}); err != nil { // the engine's read before evaluating
		t.Fatal(err)
	}
	afterSmall := measure(big(1, "big1", "a"))
	if _, err := s.GetRows(ctx, p, "tasks", []string{"b000"}); err != nil {
		t.Fatal(err)
	}
	afterLarge := measure(big(2, "big2", "b"))
	t.Logf("after a small commit: %d calls, %.1f WCU; after a large one: %d calls, %.1f WCU",
		afterSmall.RoundTrips, afterSmall.EstWCU, afterLarge.RoundTrips, afterLarge.EstWCU)
	if afterSmall.RoundTrips != afterLarge.RoundTrips+3 || afterSmall.EstWCU != afterLarge.EstWCU+1 {
		t.Errorf("settling the small commit cost %d calls and %.1f WCU, want 3 and 1",
			afterSmall.RoundTrips-afterLarge.RoundTrips, afterSmall.EstWCU-afterLarge.EstWCU)
	}
}

// TestSmallCommitReadRowsOverPending: the rows a small commit's
// evaluation read are checked against their state after the commit
// before it (§2.2), also when that commit is still pending on the head
// with its row not written yet (its writer stopped after its head
// update): GetRows answers the pending commit's row, a commit that read
// it so lands, one that read the row as absent (before the pending
// commit) is refused with ErrHeadMoved, and neither reads it wrong.
func TestSmallCommitReadRowsOverPending(t *testing.T) {
	for _, tc := range []struct {
		name    string
		present bool
		want    error
	}{
		{"read after it", true, nil},
		{"read before it", false, store.ErrHeadMoved},
	} {
		t.Run(tc.name, func(t *testing.T) {
			crash := errors.New("injected crash")
			s, _, table, p := setup(t, dynamostore.Options{AfterLogWrite: func() error { return crash }})
			ctx := context.Background()
			if err := s.Commit(ctx, p, commitOf(0, "first", up("r1", 1, []byte("v1")))); !errors.Is(err, crash) {
				t.Fatalf("Commit: %v, want the injected crash", err)
			}
			s2 := dynamostore.New(ddbClient(t), table, dynamostore.Options{})
			got, err := s2.GetRows(ctx, p, "tasks", []string{"r1"})
			if err != nil || got["r1"] == nil || got["r1"].CommitSeq != 1 {
				t.Fatalf("GetRows over the pending commit: %v %v", got, err)
			}
			req := commitOf(1, "second", up("r1", 2, []byte("v2")))
			req.ReadRows = []store.RowRead{{Table: "tasks", RowID: "r1", Present: tc.present}}
			if tc.present {
				req.ReadRows[0].CommitSeq = 1
			}
			err = s2.Commit(ctx, p, req)
			if !errors.Is(err, tc.want) && (tc.want != nil || err != nil) {
				t.Fatalf("Commit: %v, want %v", err, tc.want)
			}
			got, err = s2.GetRows(ctx, p, "tasks", []string{"r1"})
			wantSeq := int64(1)
			if tc.want == nil {
				wantSeq = 2
			}
			if err != nil || got["r1"] == nil || got["r1"].CommitSeq != wantSeq {
				t.Fatalf("row after: %+v %v, want commit %d's", got["r1"], err, wantSeq)
			}
		})
	}
}
