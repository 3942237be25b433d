package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// queueStore is a fresh table with partition p created.
func queueStore(t *testing.T) (*dynamostore.Store, string) {
	t.Helper()
	c := ddbClient(t)
	s := dynamostore.New(c, newTable(t, c), dynamostore.Options{})
	if _, err := s.TouchPartition(context.Background(), "p", baseMs, "ep"); err != nil {
		t.Fatal(err)
	}
	return s, "p"
}

// insertReq is the commit at head `expected` writing row ids (version 1,
// payload "<id>@<seq>") under clientCommitId cc.
func insertReq(expected int64, cc string, ids ...string) *store.CommitRequest {
	seq := expected + 1
	req := &store.CommitRequest{
		ExpectedMaxSeq: expected,
		Commit:         store.Commit{Seq: seq, CreatedAtMs: baseMs + seq, ActorID: "actor", ClientID: "client", ClientCommitID: cc},
		Outcome:        store.Outcome{Applied: true, CommitSeq: seq, Result: []byte(cc), RecordedAtMs: baseMs},
	}
	for _, id := range ids {
		payload := []byte(id + "@" + strconv.FormatInt(seq, 10))
		req.Rows = append(req.Rows, store.RowWrite{Table: "tasks", Row: store.Row{RowID: id, Version: 1, Payload: payload, CommitSeq: seq}})
		req.Commit.Changes = append(req.Commit.Changes, store.Change{Table: "tasks", RowID: id, Op: wire.OpUpsert, RowVersion: 1, Row: payload})
	}
	return req
}

func wantHead(t *testing.T, s *dynamostore.Store, p string, mx, turn int64) store.Head {
	t.Helper()
	h, ok, err := s.Head(context.Background(), p)
	if err != nil || !ok {
		t.Fatalf("head: ok=%v err=%v", ok, err)
	}
	if h.MaxCommitSeq != mx || h.Turn != turn {
		t.Fatalf("head maxCommitSeq %d turn %d, want %d and %d", h.MaxCommitSeq, h.Turn, mx, turn)
	}
	return h
}

// A head read in the same BatchGetItem as rows is not a snapshot with
// them: a row can predate the head's last commit. A commit built on such
// a head carries the rows as read (CommitRequest.ReadRows) and must fail,
// writing nothing, when any of them changed (lost update otherwise) —
// inline, for a read row it does not write, and on the large-commit path.
func TestCommitChecksRowsAsRead(t *testing.T) {
	ctx := context.Background()
	s, p := queueStore(t)
	if err := s.Commit(ctx, p, insertReq(0, "c1", "a")); err != nil {
		t.Fatal(err)
	}
	// The evaluation read a (seq 1) and b (absent); then commit 2 inserts b.
	read := []store.RowRead{{Table: "tasks", RowID: "a", Present: true, CommitSeq: 1}, {Table: "tasks", RowID: "b"}}
	if err := s.Commit(ctx, p, insertReq(1, "c2", "b")); err != nil {
		t.Fatal(err)
	}
	// A commit at the newer head (2) on the stale read of b.
	req := insertReq(2, "c3", "b")
	req.ReadRows = read
	if err := s.Commit(ctx, p, req); !errors.Is(err, store.ErrHeadMoved) {
		t.Fatalf("commit over a changed read row: %v, want ErrHeadMoved", err)
	}
	wantHead(t, s, p, 2, 0)
	rows, err := s.GetRows(ctx, p, "tasks", []string{"b"})
	if err != nil || rows["b"] == nil || string(rows["b"].Payload) != "b@2" {
		t.Fatalf("row b after the refused commit: %+v %v, want commit 2's", rows["b"], err)
	}
	if o, _ := s.GetOutcome(ctx, p, "client", "c3", baseMs); o != nil {
		t.Fatalf("the refused commit recorded an outcome: %+v", o)
	}
	// A read row the commit does not write is checked too.
	req = insertReq(2, "c3", "c")
	req.ReadRows = read
	if err := s.Commit(ctx, p, req); !errors.Is(err, store.ErrHeadMoved) {
		t.Fatalf("commit over a changed row it only read: %v, want ErrHeadMoved", err)
	}
	// A live row whose commitSeq changed.
	req = insertReq(2, "c3", "c")
	req.ReadRows = []store.RowRead{{Table: "tasks", RowID: "b", Present: true, CommitSeq: 1}}
	if err := s.Commit(ctx, p, req); !errors.Is(err, store.ErrHeadMoved) {
		t.Fatalf("commit over a row rewritten since read: %v, want ErrHeadMoved", err)
	}
	wantHead(t, s, p, 2, 0)
	// Rows still as read: the commit lands.
	req = insertReq(2, "c3", "c", "a")
	req.ReadRows = []store.RowRead{{Table: "tasks", RowID: "a", Present: true, CommitSeq: 1}, {Table: "tasks", RowID: "b", Present: true, CommitSeq: 2}, {Table: "tasks", RowID: "c"},
		{Table: "tasks", RowID: "\xff"}} // no item can have this key: absent for good, not checked
	if err := s.Commit(ctx, p, req); err != nil {
		t.Fatalf("commit over unchanged rows: %v", err)
	}
	wantHead(t, s, p, 3, 0)

	// Large commit (rows materialized after the log transaction): the
	// checks ride in the log transaction, so nothing is logged either.
	ids := make([]string, 120)
	for i := range ids {
		ids[i] = fmt.Sprintf("big%03d", i)
	}
	if err := s.Commit(ctx, p, insertReq(3, "c4", "d")); err != nil {
		t.Fatal(err)
	}
	req = insertReq(4, "c5", ids...)
	req.ReadRows = []store.RowRead{{Table: "tasks", RowID: "d"}} // read before commit 4 wrote it
	if err := s.Commit(ctx, p, req); !errors.Is(err, store.ErrHeadMoved) {
		t.Fatalf("large commit over a changed read row: %v, want ErrHeadMoved", err)
	}
	wantHead(t, s, p, 4, 0)
	n := 0
	if err := s.ReadLog(ctx, p, 4, 10, func(*store.Commit) bool { n++; return true }); err != nil || n != 0 {
		t.Fatalf("log after the refused large commit: %d commits, %v", n, err)
	}
	req.ReadRows = []store.RowRead{{Table: "tasks", RowID: "d", Present: true, CommitSeq: 4}}
	if err := s.Commit(ctx, p, req); err != nil {
		t.Fatalf("large commit over unchanged rows: %v", err)
	}
	wantHead(t, s, p, 5, 0)
}

// The queue's turn: tickets are handed out in order, a queued commit
// lands only in its turn and takes it, a passed turn moves once, a skip
// moves it past stalled holders, and a skipped holder's commit fails
// with the head showing the turn (so it lines up again).
func TestCommitQueueTurns(t *testing.T) {
	ctx := context.Background()
	s, p := queueStore(t)
	for want := int64(1); want <= 4; want++ {
		got, err := s.TakeTicket(ctx, p)
		if err != nil || got != want {
			t.Fatalf("ticket %d: %d, %v", want, got, err)
		}
	}
	// Ticket 2 before ticket 1's turn: refused, the head shows turn 0.
	req := insertReq(0, "t2", "x")
	req.Ticket, req.TurnAtUs, req.TurnGapUs = 2, 1000, 10
	var hm *store.HeadMovedError
	if err := s.Commit(ctx, p, req); !errors.As(err, &hm) || hm.Head.Turn != 0 || hm.Head.MaxCommitSeq != 0 {
		t.Fatalf("commit out of turn: %v (head %+v), want a HeadMovedError at turn 0", err, hm)
	}
	wantHead(t, s, p, 0, 0)
	req = insertReq(0, "t1", "x")
	req.Ticket, req.TurnAtUs, req.TurnGapUs = 1, 1000, 10
	if err := s.Commit(ctx, p, req); err != nil {
		t.Fatalf("commit in turn: %v", err)
	}
	h := wantHead(t, s, p, 1, 1)
	if h.TurnAtUs != 1000 || h.TurnGapUs != 10 {
		t.Fatalf("turn timing %d/%d, want 1000/10", h.TurnAtUs, h.TurnGapUs)
	}
	// Ticket 2 passes (rejected): once; passing again is a no-op.
	for range 2 {
		if err := s.PassTurn(ctx, p, 2, 2000); err != nil {
			t.Fatal(err)
		}
	}
	wantHead(t, s, p, 1, 2)
	// Ticket 3 stalled: ticket 4's holder skips it.
	if ok, err := s.SkipTurn(ctx, p, 2, 3, 3000, store.DeadTickets{}); err != nil || !ok {
		t.Fatalf("skip: %v %v", ok, err)
	}
	if ok, err := s.SkipTurn(ctx, p, 2, 3, 3000, store.DeadTickets{}); err != nil || ok {
		t.Fatalf("second skip from a moved turn: %v %v, want false", ok, err)
	}
	req = insertReq(1, "t3", "y")
	req.Ticket = 3
	if err := s.Commit(ctx, p, req); !errors.As(err, &hm) || hm.Head.Turn != 3 {
		t.Fatalf("skipped holder's commit: %v, want a HeadMovedError showing turn 3", err)
	}
	req = insertReq(1, "t4", "y")
	req.Ticket = 4
	if err := s.Commit(ctx, p, req); err != nil {
		t.Fatalf("commit of ticket 4 in turn: %v", err)
	}
	wantHead(t, s, p, 2, 4)
	// A commit outside the queue still lands beside it, turn unchanged.
	if err := s.Commit(ctx, p, insertReq(2, "free", "z")); err != nil {
		t.Fatal(err)
	}
	wantHead(t, s, p, 3, 4)
}

// A queued commit keeps the writer fence (§ rolling upgrades): an old
// writer holding its turn is still refused and the turn stays.
func TestQueuedCommitStillFenced(t *testing.T) {
	ctx := context.Background()
	s, p := queueStore(t)
	if err := s.RaiseWriterFence(ctx, p, 5); err != nil {
		t.Fatal(err)
	}
	tk, err := s.TakeTicket(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	req := insertReq(0, "old", "x")
	req.Ticket, req.WriterVersion = tk, 4
	if err := s.Commit(ctx, p, req); !errors.Is(err, store.ErrWriterFenced) {
		t.Fatalf("fenced writer's queued commit: %v, want ErrWriterFenced", err)
	}
	wantHead(t, s, p, 0, 0)
	req = insertReq(0, "new", "x")
	req.Ticket, req.WriterVersion = tk, 5
	if err := s.Commit(ctx, p, req); err != nil {
		t.Fatalf("current writer's queued commit: %v", err)
	}
	wantHead(t, s, p, 1, tk)
}

// queueHarness is an engine over a fresh table whose clients push to
// partition "q".
func queueHarness(t *testing.T) (*dynamostore.Store, *enginetest.Harness) {
	return queueHarnessWith(t, dynamostore.Options{})
}

func queueHarnessWith(t *testing.T, opts dynamostore.Options) (*dynamostore.Store, *enginetest.Harness) {
	t.Helper()
	c := ddbClient(t)
	s := dynamostore.New(c, newTable(t, c), opts)
	h := enginetest.New(t, s, memstore.NewSegments(), enginetest.Options{})
	h.Grants.Set("alice", engine.ScopeMap{"project_id": {"p1"}})
	return s, h
}

func mustApply(t *testing.T, c *enginetest.Client, cc, id string) {
	t.Helper()
	if r := c.Push(cc, enginetest.Upsert("tasks", id, c.Task(id, "p1", cc, false), 0)); r.Status != wire.PushApplied {
		t.Fatalf("push %s: %+v", cc, r)
	}
}

// Writers contending on one partition through the engine (each its own
// client; the queue engages after lost races; one writer's commits name
// more rows than are read with the head): every commit lands
// exactly once, commitSeqs are gapless (§2.1), and a row every commit
// updates ends at exactly one version per commit — a commit evaluated on
// a stale read would repeat a version (§2.2).
func TestQueuedPushesLandOnce(t *testing.T) {
	s, h := queueHarness(t)
	const writers, each = 6, 8
	clients := make([]*enginetest.Client, writers)
	for i := range clients {
		clients[i] = h.Client("q", "alice", fmt.Sprintf("w%d", i))
	}
	mustApply(t, clients[0], "seed", "hot")
	var wg sync.WaitGroup
	seqs := make(chan int64, writers*each)
	for i, c := range clients {
		wg.Go(func() {
			for n := range each {
				cc := fmt.Sprintf("w%d-%d", i, n)
				ops := []wire.Operation{enginetest.Upsert("tasks", cc, c.Task(cc, "p1", "own", false), 0)}
				if i == 0 {
					// More rows than ride with the head: the head is read
					// before them.
					for k := range 38 {
						id := fmt.Sprintf("%s-%02d", cc, k)
						ops = append(ops, enginetest.Upsert("tasks", id, c.Task(id, "p1", "own", false), 0))
					}
				}
				ops = append(ops, enginetest.Upsert("tasks", "hot", c.Task("hot", "p1", cc, false), -1))
				r := c.Push(cc, ops...)
				if r.Status != wire.PushApplied || !r.CommitSeq.Present {
					t.Errorf("push %s: %+v", cc, r)
					return
				}
				seqs <- r.CommitSeq.Value
			}
		})
	}
	wg.Wait()
	close(seqs)
	got := map[int64]bool{}
	for q := range seqs {
		if got[q] {
			t.Errorf("commitSeq %d answered twice", q)
		}
		got[q] = true
	}
	ctx := context.Background()
	hd, _, err := s.Head(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	total := int64(1 + writers*each)
	if hd.MaxCommitSeq != total || len(got) != writers*each {
		t.Fatalf("head %d with %d distinct answers, want %d commits", hd.MaxCommitSeq, len(got), total)
	}
	var prev int64
	ids := map[string]bool{}
	if err := s.ReadLog(ctx, "q", 0, total, func(c *store.Commit) bool {
		if c.Seq != prev+1 {
			t.Errorf("log seq %d after %d", c.Seq, prev)
		}
		prev = c.Seq
		if ids[c.ClientCommitID] {
			t.Errorf("clientCommitId %s logged twice", c.ClientCommitID)
		}
		ids[c.ClientCommitID] = true
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if prev != total {
		t.Fatalf("log ends at %d, want %d", prev, total)
	}
	rows, err := s.GetRows(ctx, "q", "tasks", []string{"hot"})
	if err != nil {
		t.Fatal(err)
	}
	if v := rows["hot"].Version; v != total {
		t.Fatalf("hot row at version %d after %d commits that each upserted it, want %d", v, total, total)
	}
	t.Logf("turn %d after %d commits", hd.Turn, total)
}

// activeQueue makes the partition's queue look in use (a turn moved just
// now) and returns the turn.
func activeQueue(t *testing.T, s *dynamostore.Store, p string) int64 {
	t.Helper()
	ctx := context.Background()
	tk, err := s.TakeTicket(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PassTurn(ctx, p, tk, time.Now().UnixMicro()); err != nil {
		t.Fatal(err)
	}
	return tk
}

// A ticket holder that crashed (took a ticket, never committed or
// passed) holds the next writer up for the lease and no longer.
func TestQueueSkipsCrashedHolder(t *testing.T) {
	ctx := context.Background()
	s, h := queueHarness(t)
	c := h.Client("q", "alice", "w")
	mustApply(t, c, "warm", "warm")
	turn := activeQueue(t, s, "q")
	if _, err := s.TakeTicket(ctx, "q"); err != nil { // the crashed holder's
		t.Fatal(err)
	}
	start := time.Now()
	mustApply(t, c, "after-crash", "x")
	took := time.Since(start)
	if took < 1500*time.Millisecond || took > 5*time.Second {
		t.Errorf("push behind a crashed holder took %s, want about the 2 s lease", took)
	}
	hd, _, err := s.Head(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if hd.Turn != turn+2 {
		t.Fatalf("turn %d, want %d (crashed holder skipped, the push took its own)", hd.Turn, turn+2)
	}
}

// A queued writer whose evaluation ends in a rejection passes its turn:
// the next writer does not wait for a lease.
func TestQueuedRejectionPassesTurn(t *testing.T) {
	ctx := context.Background()
	s, h := queueHarness(t)
	c := h.Client("q", "alice", "w")
	mustApply(t, c, "warm", "row")
	turn := activeQueue(t, s, "q")
	start := time.Now()
	// baseVersion 7 against version 1: a conflict, recorded as rejected.
	r := c.Push("stale", enginetest.Upsert("tasks", "row", c.Task("row", "p1", "stale", false), 7))
	if r.Status != wire.PushRejected {
		t.Fatalf("stale update: %+v, want rejected", r)
	}
	hd, _, err := s.Head(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if hd.Turn != turn+1 {
		t.Fatalf("turn %d after the rejection, want %d (passed)", hd.Turn, turn+1)
	}
	mustApply(t, c, "next", "next")
	if took := time.Since(start); took > time.Second {
		t.Errorf("rejection and next push took %s: the turn waited out a lease", took)
	}
	hd, _, err = s.Head(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if hd.Turn != turn+2 {
		t.Fatalf("turn %d after the next push, want %d", hd.Turn, turn+2)
	}
}

// Issue 11: a push reads head and rows in one round trip. A warm
// client's 1-op insert is that BatchGetItem (head, schema marker, row)
// and the commit transaction; it was three (head, then rows, then commit).
// Issue 23: with small commits (the default, fast.go) the commit is 5
// calls instead of the transaction (read, head update, outcome and row
// puts, log put: a new partition writes no scope copy, scopeindex.go),
// and the rows are still read with the head, the previous small commit's
// writes taken from the head.
func TestPushReadsHeadAndRowsInOneRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  dynamostore.Options
		trips int
		wcu   float64
	}{
		{"transaction", dynamostore.Options{TransactionalCommits: true}, 2, 8},
		{"small commits", dynamostore.Options{}, 1 + 5, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, h := queueHarnessWith(t, tc.opts)
			c := h.Client("q", "alice", "w")
			mustApply(t, c, "warm", "warm")
			mctx, capacity := dynamostore.WithCapacity(context.Background())
			c.Ctx = mctx
			mustApply(t, c, "insert", "row")
			c.Ctx = nil
			if u := capacity.Snapshot(); u.RoundTrips != tc.trips || u.EstWCU > tc.wcu {
				t.Fatalf("1-op insert: %d round trips, %.1f WCU; want %d and ≤%.0f", u.RoundTrips, u.EstWCU, tc.trips, tc.wcu)
			}
		})
	}
}
