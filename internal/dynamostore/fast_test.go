package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
)

// TestSmallCommitCrash (issue 23): a small commit (fast.go) whose writer
// stops right after its head update is durable and finished by whoever
// comes next: a pull's ReadLog passes it whole, GetRows and a bootstrap
// see its row, its retry is a replay (§2.3) that finds its outcome, a
// rejection of its key is refused, and the next commit lands after it.
// Each reader starts from the same crash, on a fresh partition.
func TestSmallCommitCrash(t *testing.T) {
	for _, reader := range []string{"ReadLog", "GetRows", "ScanScopedRows", "Retry", "PutRejection", "Commit"} {
		t.Run(reader, func(t *testing.T) {
			crash := errors.New("injected crash")
			s, c, table, p := setup(t, dynamostore.Options{SmallCommits: true, AfterLogWrite: func() error { return crash }})
			ctx := context.Background()
			req := commitOf(0, "small", up("r1", 1, []byte("v1")))
			if err := s.Commit(ctx, p, req); !errors.Is(err, crash) {
				t.Fatalf("Commit: %v, want the injected crash", err)
			}
			if mx, ap := rawHead(t, c, table, p); mx != "1" || ap != "0" {
				t.Fatalf("after the crash mx=%s ap=%s, want 1/0", mx, ap)
			}
			s2 := dynamostore.New(ddbClient(t), table, dynamostore.Options{}) // readers finish it whatever their options
			switch reader {
			case "ReadLog":
				var got []*store.Commit
				if err := s2.ReadLog(ctx, p, 0, 1, func(c *store.Commit) bool { got = append(got, c); return true }); err != nil {
					t.Fatal(err)
				}
				if len(got) != 1 || got[0].Seq != 1 || got[0].ClientCommitID != "small" || len(got[0].Changes) != 1 {
					t.Fatalf("ReadLog after the crash: %+v", got)
				}
			case "GetRows":
				got, err := s2.GetRows(ctx, p, "tasks", []string{"r1"})
				if err != nil || got["r1"] == nil || string(got["r1"].Payload) != "v1" || got["r1"].CommitSeq != 1 {
					t.Fatalf("GetRows after the crash: %v %v", got, err)
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
				// The client retries: the engine evaluates on the head it
				// reads (maxCommitSeq 1) and commits again; the store
				// finds the first commit's outcome.
				again := commitOf(1, "small", up("r1", 2, []byte("v2")))
				err := s2.Commit(ctx, p, again)
				var moved *store.HeadMovedError
				if errors.As(err, &moved) {
					err = s2.Commit(ctx, p, commitOf(moved.Head.MaxCommitSeq, "small", up("r1", 2, []byte("v2"))))
				}
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
				if err := s2.Commit(ctx, p, commitOf(1, "next", up("r2", 1, []byte("w")))); err != nil {
					t.Fatalf("next commit: %v", err)
				}
				var seqs []int64
				if err := s2.ReadLog(ctx, p, 0, 2, func(c *store.Commit) bool { seqs = append(seqs, c.Seq); return true }); err != nil || fmt.Sprint(seqs) != "[1 2]" {
					t.Fatalf("log after the next commit: %v %v", seqs, err)
				}
			}
			if mx, ap := rawHead(t, c, table, p); mx != ap {
				t.Fatalf("%s left mx=%s ap=%s", reader, mx, ap)
			}
		})
	}
}
