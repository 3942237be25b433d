package dynamostore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
)

// commitOf builds a commit request of upserts (rows derived from changes
// the way the engine does).
func commitOf(expected int64, commitID string, writes ...store.RowWrite) *store.CommitRequest {
	seq := expected + 1
	req := &store.CommitRequest{
		ExpectedMaxSeq: expected,
		Commit:         store.Commit{Seq: seq, CreatedAtMs: baseMs + seq, ActorID: "actor", ClientID: "client", ClientCommitID: commitID},
		Outcome:        store.Outcome{Applied: true, CommitSeq: seq, Result: []byte("ok:" + commitID), RecordedAtMs: baseMs},
	}
	for _, w := range writes {
		w.Row.CommitSeq = seq
		req.Rows = append(req.Rows, w)
		req.Commit.Changes = append(req.Commit.Changes, w.Change())
	}
	return req
}

func up(id string, version int64, payload []byte) store.RowWrite {
	return store.RowWrite{Table: "tasks", Row: store.Row{RowID: id, Version: version, Payload: payload,
		Scopes: wire.StoredScopes{{Key: "org", Value: "o1"}}}}
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// rawHead reads the head item's maxCommitSeq and appliedSeq directly.
func rawHead(t *testing.T, c *dynamodb.Client, table, p string) (mx, ap string) {
	t.Helper()
	out, err := c.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: dynamostore.Key(dynamostore.PartitionPK(p), "HEAD"),
	})
	if err != nil || out.Item == nil {
		t.Fatalf("raw head: %v", err)
	}
	return out.Item["mx"].(*types.AttributeValueMemberN).Value, out.Item["ap"].(*types.AttributeValueMemberN).Value
}

func setup(t *testing.T, opts dynamostore.Options) (*dynamostore.Store, *dynamodb.Client, string, string) {
	c := ddbClient(t)
	table := newTable(t, c)
	s := dynamostore.New(c, table, opts)
	p := "p-" + t.Name()
	if _, err := s.TouchPartition(context.Background(), p, baseMs, "epoch"); err != nil {
		t.Fatal(err)
	}
	return s, c, table, p
}

// Test500Ops4KB: ~2 MB of changes: the log is chunked over several items
// and the rows are materialized after the log transaction.
func Test500Ops4KB(t *testing.T) {
	s, c, table, p := setup(t, dynamostore.Options{})
	ctx := context.Background()
	var ws []store.RowWrite
	for i := range 500 {
		ws = append(ws, up(fmt.Sprintf("r%03d", i), 1, randBytes(4096)))
	}
	req := commitOf(0, "big", ws...)
	ctx, usage := dynamostore.WithCapacity(ctx)
	if err := s.Commit(ctx, p, req); err != nil {
		t.Fatal(err)
	}
	u := usage.Snapshot()
	t.Logf("500×4KB commit: %d round trips, %.0f WCU reported, %.0f WCU estimated", u.RoundTrips, u.WCU, u.EstWCU)
	if mx, ap := rawHead(t, c, table, p); mx != "1" || ap != "1" {
		t.Errorf("head mx=%s ap=%s after a finished large commit", mx, ap)
	}
	ids := make([]string, 500)
	for i := range ids {
		ids[i] = ws[i].Row.RowID
	}
	got, err := s.GetRows(ctx, p, "tasks", ids)
	if err != nil || len(got) != 500 {
		t.Fatalf("GetRows: %d rows, %v", len(got), err)
	}
	for _, w := range ws {
		if r := got[w.Row.RowID]; r == nil || !bytes.Equal(r.Payload, w.Row.Payload) || r.CommitSeq != 1 {
			t.Fatalf("row %s wrong", w.Row.RowID)
		}
	}
	var logged *store.Commit
	if err := s.ReadLog(ctx, p, 0, 1, func(c *store.Commit) bool { logged = c; return true }); err != nil || logged == nil {
		t.Fatalf("ReadLog: %v", err)
	}
	if len(logged.Changes) != 500 || !bytes.Equal(logged.Changes[499].Row, ws[499].Row.Payload) {
		t.Errorf("log lost changes: %d", len(logged.Changes))
	}
}

// TestCrashAfterLogWrite: the committer dies between the log transaction
// and row materialization; a new instance's reads finish the commit.
func TestCrashAfterLogWrite(t *testing.T) {
	for _, reader := range []string{"GetRows", "ScanRows", "Commit"} {
		t.Run(reader, func(t *testing.T) {
			crash := errors.New("injected crash")
			s, c, table, p := setup(t, dynamostore.Options{AfterLogWrite: func() error { return crash }})
			ctx := context.Background()
			var ws []store.RowWrite
			for i := range 150 { // > 100 actions: the large path
				ws = append(ws, up(fmt.Sprintf("r%03d", i), 1, []byte(fmt.Sprint("v", i))))
			}
			if err := s.Commit(ctx, p, commitOf(0, "big", ws...)); !errors.Is(err, crash) {
				t.Fatalf("Commit: %v, want the injected crash", err)
			}
			if mx, ap := rawHead(t, c, table, p); mx != "1" || ap != "0" {
				t.Fatalf("after crash mx=%s ap=%s, want 1/0", mx, ap)
			}
			s2 := dynamostore.New(ddbClient(t), table, dynamostore.Options{})
			switch reader {
			case "GetRows":
				got, err := s2.GetRows(ctx, p, "tasks", []string{"r000", "r149"})
				if err != nil || len(got) != 2 {
					t.Fatalf("GetRows after crash: %v %v", got, err)
				}
			case "ScanRows":
				n := 0
				if err := s2.ScanRows(ctx, p, "tasks", "", false, func(*store.Row) bool { n++; return true }); err != nil || n != 150 {
					t.Fatalf("ScanRows after crash: %d rows, %v", n, err)
				}
			case "Commit":
				// The next commit must finish the first one, then apply.
				// A delete carries the deleted row's scopes (store.RowWrite).
				if err := s2.Commit(ctx, p, commitOf(1, "next", store.RowWrite{Table: "tasks", Delete: true, Row: store.Row{RowID: "r000", Scopes: up("r000", 0, nil).Row.Scopes}}, up("r001", 2, []byte("v1b")))); err != nil {
					t.Fatalf("second Commit: %v", err)
				}
			}
			mx, ap := rawHead(t, c, table, p)
			if mx != ap {
				t.Errorf("appliedSeq %s did not catch up with maxCommitSeq %s", ap, mx)
			}
			// Replaying the log must give what is stored: nothing lost,
			// nothing applied twice.
			h, _, _ := s2.Head(ctx, p)
			want := replay(t, s2, p, h.MaxCommitSeq)
			var got []string
			if err := s2.ScanRows(ctx, p, "tasks", "", false, func(r *store.Row) bool {
				w, ok := want[r.RowID]
				if !ok || w.Version != r.Version || !bytes.Equal(w.Payload, r.Payload) || w.CommitSeq != r.CommitSeq {
					t.Errorf("row %s: stored %+v, replay %+v", r.RowID, r, w)
				}
				got = append(got, r.RowID)
				return true
			}); err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Errorf("%d rows stored, replay has %d", len(got), len(want))
			}
			// The roll-forward wrote the scope copies with the rows, and
			// the log index landed with the log: a scope-keyed bootstrap
			// sees exactly the live rows, and the scoped log read finds
			// every commit.
			live := 0
			for _, w := range want {
				if !w.Deleted {
					live++
				}
			}
			scoped := 0
			if err := s2.ScanScopedRows(ctx, p, "tasks", "org", []string{"o1"}, nil, 0, func(v string, r *store.Row) bool {
				if w, ok := want[r.RowID]; !ok || w.Deleted || v != "o1" || w.Version != r.Version || !bytes.Equal(w.Payload, r.Payload) {
					t.Errorf("scope copy %s (%s): %+v, replay %+v", r.RowID, v, r, w)
				}
				scoped++
				return true
			}); err != nil {
				t.Fatal(err)
			}
			if scoped != live {
				t.Errorf("ScanScopedRows after the roll-forward: %d rows, want the %d live rows", scoped, live)
			}
			var seqs []int64
			if _, err := s2.ReadLogScoped(ctx, p, "tasks", "org", []string{"o1"}, 0, h.MaxCommitSeq, func(c *store.Commit) bool {
				seqs = append(seqs, c.Seq)
				return true
			}); err != nil {
				t.Fatal(err)
			}
			if int64(len(seqs)) != h.MaxCommitSeq {
				t.Errorf("ReadLogScoped after the roll-forward: commits %v, want 1..%d", seqs, h.MaxCommitSeq)
			}
			if o, err := s2.GetOutcome(ctx, p, "client", "big", baseMs); err != nil || o == nil || o.CommitSeq != 1 {
				t.Errorf("outcome of the crashed commit: %+v %v", o, err)
			}
		})
	}
}

// TestTransactionEdges commits around the 100-action boundary (head +
// outcome + one log item + rows) and checks each applies fully. With
// small commits on, commits of up to 99 rows of one log item go without
// a transaction (fast.go), so the boundary is the transactional path's.
func TestTransactionEdges(t *testing.T) {
	s, c, table, p := setup(t, dynamostore.Options{TransactionalCommits: true})
	ctx := context.Background()
	// The same sizes as small commits first, in a partition of their
	// own: every row written, the commit pending or applied.
	small := dynamostore.New(c, table, dynamostore.Options{})
	sp := p + "-small"
	if _, err := small.TouchPartition(ctx, sp, baseMs, "epoch"); err != nil {
		t.Fatal(err)
	}
	for i, n := range []int{96, 97, 98, 99, 100} {
		var ws []store.RowWrite
		for j := range n {
			ws = append(ws, up(fmt.Sprintf("n%d-%03d", n, j), 1, []byte("x")))
		}
		if err := small.Commit(ctx, sp, commitOf(int64(i), fmt.Sprint("edge", n), ws...)); err != nil {
			t.Fatalf("small, %d rows: %v", n, err)
		}
		got, err := small.GetRows(ctx, sp, "tasks", []string{fmt.Sprintf("n%d-000", n), fmt.Sprintf("n%d-%03d", n, n-1)})
		if err != nil || len(got) != 2 || got[fmt.Sprintf("n%d-000", n)].CommitSeq != int64(i+1) {
			t.Errorf("small, %d rows: %v %v", n, got, err)
		}
	}
	seq := int64(0)
	for _, n := range []int{96, 97, 98, 99, 100} {
		var ws []store.RowWrite
		for i := range n {
			ws = append(ws, up(fmt.Sprintf("n%d-%03d", n, i), 1, []byte("x")))
		}
		if err := s.Commit(ctx, p, commitOf(seq, fmt.Sprint("edge", n), ws...)); err != nil {
			t.Fatalf("%d rows: %v", n, err)
		}
		seq++
		rows := 0
		if err := s.ScanRows(ctx, p, "tasks", fmt.Sprintf("n%d-", n), true, func(r *store.Row) bool {
			if r.CommitSeq == seq {
				rows++
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if rows != n {
			t.Errorf("%d-row commit materialized %d rows", n, rows)
		}
		if mx, ap := rawHead(t, c, table, p); mx != ap {
			t.Errorf("%d rows: mx=%s ap=%s", n, mx, ap)
		}
	}
	// Bytes rather than actions: 11 rows of 350 KB (3.85 MB of rows plus
	// as much log) cannot share a transaction with the log; the log alone
	// still fits.
	var ws []store.RowWrite
	for i := range 11 {
		ws = append(ws, up(fmt.Sprintf("big-%02d", i), 1, randBytes(350*1024)))
	}
	if err := s.Commit(ctx, p, commitOf(seq, "bytes-edge", ws...)); err != nil {
		t.Fatalf("11×350 KB: %v", err)
	}
	seq++
	got, err := s.GetRows(ctx, p, "tasks", []string{"big-00", "big-10"})
	if err != nil || len(got) != 2 || !bytes.Equal(got["big-10"].Payload, ws[10].Row.Payload) {
		t.Fatalf("11×350 KB rows: %v", err)
	}
	// A log over one transaction's 4 MB is refused as too large, and
	// leaves nothing behind.
	ws = ws[:0]
	for i := range 13 {
		ws = append(ws, up(fmt.Sprintf("huge-%02d", i), 1, randBytes(350*1024)))
	}
	if err := s.Commit(ctx, p, commitOf(seq, "too-big", ws...)); !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("4.5 MB commit: %v, want ErrTooLarge", err)
	}
	if h, _, _ := s.Head(ctx, p); h.MaxCommitSeq != seq {
		t.Errorf("refused commit moved the head to %d", h.MaxCommitSeq)
	}
}

// TestRowItemLimit: a row just under the item limit is stored; one of
// ~400 KB is refused with store.ErrTooLarge, never a raw AWS error.
func TestRowItemLimit(t *testing.T) {
	s, _, _, p := setup(t, dynamostore.Options{})
	ctx := context.Background()
	ok := randBytes(399 * 1024)
	if err := s.Commit(ctx, p, commitOf(0, "fits", up("fits", 1, ok))); err != nil {
		t.Fatalf("399 KB row: %v", err)
	}
	got, err := s.GetRows(ctx, p, "tasks", []string{"fits"})
	if err != nil || got["fits"] == nil || !bytes.Equal(got["fits"].Payload, ok) {
		t.Fatalf("399 KB row did not round-trip: %v", err)
	}
	err = s.Commit(ctx, p, commitOf(1, "too-big", up("small", 1, []byte("s")), up("big", 1, randBytes(400*1024))))
	if !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("400 KB row: %v, want ErrTooLarge", err)
	}
	if h, _, _ := s.Head(ctx, p); h.MaxCommitSeq != 1 {
		t.Errorf("refused commit moved the head to %d", h.MaxCommitSeq)
	}
	if m, _ := s.GetRows(ctx, p, "tasks", []string{"small"}); len(m) != 0 {
		t.Errorf("refused commit wrote a row")
	}
	if o, _ := s.GetOutcome(ctx, p, "client", "too-big", baseMs); o != nil {
		t.Errorf("refused commit recorded an outcome")
	}
}

// TestInjectiveKeys: names containing the separator never collide.
func TestInjectiveKeys(t *testing.T) {
	c := ddbClient(t)
	s := dynamostore.New(c, newTable(t, c), dynamostore.Options{})
	ctx := context.Background()
	type pt struct{ p, table string }
	cases := []pt{{"a", "b#T#c"}, {"a#T#b", "c"}, {"a%23", "x"}, {"a#", "x"}, {"a#L", "x"}, {"a", "x"}}
	for i, c := range cases {
		if _, err := s.TouchPartition(ctx, c.p, baseMs, "e"); err != nil {
			t.Fatal(err)
		}
		h, _, _ := s.Head(ctx, c.p)
		if err := s.Commit(ctx, c.p, commitOf(h.MaxCommitSeq, fmt.Sprint("k", i), store.RowWrite{Table: c.table, Row: store.Row{RowID: "r", Version: 1, Payload: []byte(fmt.Sprint(i))}})); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range cases {
		var got []string
		if err := s.ScanRows(ctx, c.p, c.table, "", false, func(r *store.Row) bool { got = append(got, string(r.Payload)); return true }); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, []string{fmt.Sprint(i)}) {
			t.Errorf("partition %q table %q sees %v", c.p, c.table, got)
		}
	}
}
