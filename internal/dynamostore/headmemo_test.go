package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
)

// insertOf is commitOf for a commit inserting row id, with the engine's
// read-row check that the row was absent when evaluated (§2.2).
func insertOf(expected int64, commitID, id string) *store.CommitRequest {
	req := commitOf(expected, commitID, up(id, 1, []byte("v:"+commitID)))
	req.ReadRows = []store.RowRead{{Table: "tasks", RowID: id}}
	return req
}

// commitLikeEngine commits an insert of row id under key commitID as the
// engine's push does (engine/pushpipe.go): expecting maxCommitSeq
// expected, and after a lost race again on the head the race returned
// (HeadMovedError), or on the head read afresh (ErrHeadMoved). It ends in
// nil (the commit landed) or ErrOutcomeExists (the key has a commit);
// any other error fails the test. attempts counts the Commit calls.
func commitLikeEngine(t *testing.T, s *dynamostore.Store, p string, expected int64, commitID, id string) (attempts int, err error) {
	t.Helper()
	ctx := context.Background()
	for attempts = 1; attempts <= 8; attempts++ {
		err = s.Commit(ctx, p, insertOf(expected, commitID, id))
		var hm *store.HeadMovedError
		switch {
		case err == nil || errors.Is(err, store.ErrOutcomeExists):
			return attempts, err
		case errors.As(err, &hm):
			expected = hm.Head.MaxCommitSeq
		case errors.Is(err, store.ErrHeadMoved):
			h, _, herr := s.Head(ctx, p)
			if herr != nil {
				t.Errorf("head after a lost race: %v", herr)
				return attempts, herr
			}
			expected = h.MaxCommitSeq
		default:
			t.Errorf("commit %s: %v (a lost race must end as a retry, never as an error)", commitID, err)
			return attempts, err
		}
	}
	t.Errorf("commit %s: still losing after %d attempts", commitID, attempts)
	return attempts, err
}

// checkLog asserts the partition's log is exactly the commits ids at
// seqs 1..len(ids) (§2.1 gapless), each key with one outcome naming its
// seq (§2.3 exactly once), and the head at the last seq.
func checkLog(t *testing.T, s *dynamostore.Store, p string, ids []string) {
	t.Helper()
	ctx := context.Background()
	var got []string
	err := s.ReadLog(ctx, p, 0, int64(len(ids)+5), func(c *store.Commit) bool {
		if c.Seq != int64(len(got)+1) {
			t.Errorf("log: commit %d follows %d", c.Seq, len(got))
		}
		got = append(got, c.ClientCommitID)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("log %v, want %v", got, ids)
	}
	for i, id := range ids {
		o, err := s.GetOutcome(ctx, p, "client", id, baseMs)
		if err != nil || o == nil || !o.Applied || o.CommitSeq != int64(i+1) || string(o.Result) != "ok:"+id {
			t.Errorf("outcome of %s: %+v %v, want applied as commit %d", id, o, err, i+1)
		}
	}
	h, _, err := s.Head(ctx, p)
	if err != nil || h.MaxCommitSeq != int64(len(ids)) {
		t.Errorf("head maxCommitSeq %d (%v), want %d", h.MaxCommitSeq, err, len(ids))
	}
}

// TestSmallCommitFollowsPushHeadRead (issue 23): a one-op small commit
// made right after the push's head and rows read (TouchPartitionRows, as
// the engine makes it) reads no head of its own: its first wave reads
// the outcome key, the previous commit's log item and the row it checks,
// 3 read units, in 5 calls (fast.go; 6 with the partition's scope
// copies on). The next commit of the same Store follows the head its
// predecessor's commit point returned, and does not read that
// predecessor's log item either: this Store wrote it (2 read units).
func TestSmallCommitFollowsPushHeadRead(t *testing.T) {
	s, c, table, p := setup(t, dynamostore.Options{})
	ctx := context.Background()
	// The first commit by another instance: its log item is one this
	// Store has not written.
	if err := dynamostore.New(c, table, dynamostore.Options{}).Commit(ctx, p, insertOf(0, "c1", "r1")); err != nil {
		t.Fatal(err)
	}
	measure := func(what string, req *store.CommitRequest, rcu float64) {
		t.Helper()
		mctx, capacity := dynamostore.WithCapacity(ctx)
		if err := s.Commit(mctx, p, req); err != nil {
			t.Fatal(err)
		}
		u := capacity.Snapshot()
		t.Logf("%s: %d calls, %.1f RCU, %.1f WCU", what, u.RoundTrips, u.EstRCU, u.EstWCU)
		// Head, outcome, row and log written: no scope copy in a new
		// partition (scopeindex.go).
		if u.EstRCU != rcu || u.RoundTrips != 5 || u.EstWCU != 4 {
			t.Errorf("%s: %.1f RCU in %d calls, %.1f WCU; want %.0f RCU in 5 calls, 4 WCU", what, u.EstRCU, u.RoundTrips, u.EstWCU, rcu)
		}
	}
	if _, _, _, err := s.TouchPartitionRows(ctx, p, baseMs, "", "tasks", []string{"r2"}); err != nil {
		t.Fatal(err)
	}
	// outcome key (absent), commit E's log item, the row (absent): 1
	// unit each; no head.
	measure("commit after the push's head read", insertOf(1, "c2", "r2"), 3)
	// outcome key and row only: E's log item is this Store's own.
	measure("the next commit of the same Store", insertOf(2, "c3", "r3"), 2)
	checkLog(t, s, p, []string{"c1", "c2", "c3"})
}

// TestSmallCommitStaleHead (issue 23): the head a Store read is stale by
// the time it commits, because another instance committed or counted a
// rejection in between. The commit ends as a lost race (HeadMovedError,
// writing nothing), its retry on the head that race returned lands, and
// the log stays gapless with each key applied once.
func TestSmallCommitStaleHead(t *testing.T) {
	ctx := context.Background()
	t.Run("another commit", func(t *testing.T) {
		a, _, table, p := setup(t, dynamostore.Options{})
		b := dynamostore.New(ddbClient(t), table, dynamostore.Options{})
		if _, err := b.TouchPartition(ctx, p, baseMs, "epoch"); err != nil {
			t.Fatal(err)
		}
		if err := a.Commit(ctx, p, insertOf(0, "a1", "ra1")); err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := a.TouchPartitionRows(ctx, p, baseMs, "", "tasks", []string{"ra2"}); err != nil {
			t.Fatal(err)
		}
		if _, err := commitLikeEngine(t, b, p, 1, "b2", "rb2"); err != nil { // between a's read and its commit
			t.Fatal(err)
		}
		err := a.Commit(ctx, p, insertOf(1, "a2", "ra2"))
		var hm *store.HeadMovedError
		if !errors.As(err, &hm) || hm.Head.MaxCommitSeq != 2 {
			t.Fatalf("commit on the stale head: %v, want HeadMovedError at 2", err)
		}
		if n, err := commitLikeEngine(t, a, p, hm.Head.MaxCommitSeq, "a2", "ra2"); err != nil || n != 1 {
			t.Fatalf("retry: %v after %d attempts, want it to land at once", err, n)
		}
		checkLog(t, a, p, []string{"a1", "b2", "a2"})
	})
	t.Run("a rejection", func(t *testing.T) {
		// maxCommitSeq stays where a read it; the rejection's count (and
		// appliedSeq, which it moves past a's pending commit) do not.
		a, _, table, p := setup(t, dynamostore.Options{})
		b := dynamostore.New(ddbClient(t), table, dynamostore.Options{})
		if err := a.Commit(ctx, p, insertOf(0, "a1", "ra1")); err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := a.TouchPartitionRows(ctx, p, baseMs, "", "tasks", []string{"ra2"}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.TouchPartition(ctx, p, baseMs, "epoch"); err != nil {
			t.Fatal(err)
		}
		if err := b.PutRejection(ctx, p, "client", "refused", store.Outcome{Result: []byte("no"), RecordedAtMs: baseMs}, store.WriterCheck{}); err != nil {
			t.Fatal(err)
		}
		err := a.Commit(ctx, p, insertOf(1, "a2", "ra2"))
		t.Logf("commit on the stale head: %v", err)
		var hm *store.HeadMovedError
		if err != nil && (!errors.As(err, &hm) || hm.Head.MaxCommitSeq != 1) {
			t.Fatalf("commit on the stale head: %v, want it to land or a HeadMovedError at 1", err)
		}
		if err != nil {
			// The engine's retry, on the head the race returned, without
			// reading it again: it must not follow the stale head again.
			if n, err := commitLikeEngine(t, a, p, 1, "a2", "ra2"); err != nil || n != 1 {
				t.Fatalf("retry: %v after %d attempts, want it to land at once", err, n)
			}
		}
		checkLog(t, a, p, []string{"a1", "a2"})
		if o, err := a.GetOutcome(ctx, p, "client", "refused", baseMs); err != nil || o == nil || o.Applied {
			t.Errorf("the rejection's outcome: %+v %v", o, err)
		}
	})
}

// TestSmallCommitDuplicateRace (issue 23, §2.3): the same (client,
// commit id) pushed through two Stores, each having read the head before
// the other committed, is applied once: when the first commit is
// complete, when its writer stopped after its commit point (the commit
// pending on the head, its outcome not written), and when both race
// freely, round after round.
func TestSmallCommitDuplicateRace(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		crash bool
	}{{"complete", false}, {"pending on the head", true}} {
		t.Run(tc.name, func(t *testing.T) {
			crash := errors.New("stopped after the commit point")
			var opts dynamostore.Options
			if tc.crash {
				opts.AfterLogWrite = func() error { return crash }
			}
			a, _, table, p := setup(t, opts)
			b := dynamostore.New(ddbClient(t), table, dynamostore.Options{})
			if err := b.Commit(ctx, p, insertOf(0, "k0", "r0")); err != nil {
				t.Fatal(err)
			}
			for _, s := range []*dynamostore.Store{a, b} {
				if _, _, _, err := s.TouchPartitionRows(ctx, p, baseMs, "", "tasks", []string{"rk"}); err != nil {
					t.Fatal(err)
				}
			}
			if err := a.Commit(ctx, p, insertOf(1, "k", "rk")); err != nil && !(tc.crash && errors.Is(err, crash)) {
				t.Fatal(err)
			}
			if _, err := commitLikeEngine(t, b, p, 1, "k", "rk"); !errors.Is(err, store.ErrOutcomeExists) {
				t.Fatalf("the duplicate: %v, want ErrOutcomeExists", err)
			}
			checkLog(t, b, p, []string{"k0", "k"})
		})
	}
	t.Run("free race", func(t *testing.T) {
		a, _, table, p := setup(t, dynamostore.Options{})
		b := dynamostore.New(ddbClient(t), table, dynamostore.Options{})
		const rounds = 12
		var ids []string
		for i := range rounds {
			id := fmt.Sprint("k", i)
			ids = append(ids, id)
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for j, s := range []*dynamostore.Store{a, b} {
				wg.Go(func() {
					h, _, _, err := s.TouchPartitionRows(ctx, p, baseMs, "", "tasks", []string{"r" + id})
					if err != nil {
						errs[j] = err
						return
					}
					_, errs[j] = commitLikeEngine(t, s, p, h.MaxCommitSeq, id, "r"+id)
				})
			}
			wg.Wait()
			landed := 0
			for _, err := range errs {
				switch {
				case err == nil:
					landed++
				case !errors.Is(err, store.ErrOutcomeExists):
					t.Fatalf("round %d: %v", i, err)
				}
			}
			if landed != 1 {
				t.Fatalf("round %d: %d of the two duplicates landed, want 1 (%v)", i, landed, errs)
			}
		}
		checkLog(t, a, p, ids)
	})
}
