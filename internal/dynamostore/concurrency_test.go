package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
)

const baseMs int64 = 1_700_000_000_000

// instance is one simulated Lambda instance: its own SDK client and Store.
func instance(t testing.TB, table string, opts dynamostore.Options) *dynamostore.Store {
	return dynamostore.New(ddbClient(t), table, opts)
}

// pushCounter runs the engine's optimistic loop (push.go) for one commit:
// read the head, read the rows, evaluate (increment the shared counter
// row and the client's own row), Commit with ExpectedMaxSeq; re-run on
// ErrHeadMoved. It returns store.ErrOutcomeExists for a duplicate.
func pushCounter(ctx context.Context, s store.Store, p, clientID, commitID string) (int64, error) {
	for attempt := 0; attempt < 500; attempt++ {
		h, ok, err := s.Head(ctx, p)
		if err != nil || !ok {
			return 0, fmt.Errorf("head: ok=%v err=%v", ok, err)
		}
		rows, err := s.GetRows(ctx, p, "tasks", []string{"counter", clientID})
		if err != nil {
			return 0, err
		}
		seq := h.MaxCommitSeq + 1
		var writes []store.RowWrite
		var changes []store.Change
		for _, id := range []string{"counter", clientID} {
			n, v := int64(1), int64(1)
			if r := rows[id]; r != nil {
				prev, _ := strconv.ParseInt(string(r.Payload), 10, 64)
				n, v = prev+1, r.Version+1
			}
			payload := []byte(strconv.FormatInt(n, 10))
			writes = append(writes, store.RowWrite{Table: "tasks", Row: store.Row{RowID: id, Version: v, Payload: payload, CommitSeq: seq}})
			changes = append(changes, store.Change{Table: "tasks", RowID: id, Op: wire.OpUpsert, RowVersion: v, Row: payload})
		}
		err = s.Commit(ctx, p, &store.CommitRequest{
			ExpectedMaxSeq: h.MaxCommitSeq,
			Commit:         store.Commit{Seq: seq, CreatedAtMs: baseMs + seq, ActorID: "actor", ClientID: clientID, ClientCommitID: commitID, Changes: changes},
			Rows:           writes,
			Outcome:        store.Outcome{Applied: true, CommitSeq: seq, Result: []byte(commitID), RecordedAtMs: baseMs},
		})
		switch {
		case errors.Is(err, store.ErrHeadMoved):
			continue
		case err != nil:
			return 0, err
		}
		return seq, nil
	}
	return 0, errors.New("too many lost races")
}

// replay folds the log sequentially into row states.
func replay(t *testing.T, s store.Store, p string, through int64) map[string]store.Row {
	t.Helper()
	rows := map[string]store.Row{}
	err := s.ReadLog(context.Background(), p, 0, through, func(c *store.Commit) bool {
		for _, ch := range c.Changes {
			if ch.Op == wire.OpDelete {
				delete(rows, ch.RowID)
				continue
			}
			rows[ch.RowID] = store.Row{RowID: ch.RowID, Version: ch.RowVersion, Payload: ch.Row, CommitSeq: c.Seq}
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// checkConverged verifies a gapless log 1..total with each idempotency
// key once, outcomes at their seq, and stored rows equal to a sequential
// replay of the log (so no update was lost or applied twice).
func checkConverged(t *testing.T, s store.Store, p string, total int64) {
	t.Helper()
	ctx := context.Background()
	h, _, err := s.Head(ctx, p)
	if err != nil || h.MaxCommitSeq != total {
		t.Fatalf("head %+v err %v, want MaxCommitSeq %d", h, err, total)
	}
	next := int64(1)
	keys := map[[2]string]int64{}
	err = s.ReadLog(ctx, p, 0, total, func(c *store.Commit) bool {
		if c.Seq != next {
			t.Errorf("log seq %d, want %d", c.Seq, next)
		}
		next++
		k := [2]string{c.ClientID, c.ClientCommitID}
		if prev, dup := keys[k]; dup {
			t.Errorf("key %v applied twice (seq %d and %d)", k, prev, c.Seq)
		}
		keys[k] = c.Seq
		return true
	})
	if err != nil || next != total+1 {
		t.Fatalf("ReadLog: %v, saw through %d", err, next-1)
	}
	for k, seq := range keys {
		o, err := s.GetOutcome(ctx, p, k[0], k[1], baseMs)
		if err != nil || o == nil || o.CommitSeq != seq {
			t.Errorf("outcome %v: %+v %v, want seq %d", k, o, err, seq)
		}
	}
	want := replay(t, s, p, total)
	got := map[string]store.Row{}
	if err := s.ScanRows(ctx, p, "tasks", "", false, func(r *store.Row) bool { got[r.RowID] = *r; return true }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d rows stored, replay has %d", len(got), len(want))
	}
	for id, w := range want {
		g := got[id]
		if g.Version != w.Version || string(g.Payload) != string(w.Payload) || g.CommitSeq != w.CommitSeq {
			t.Errorf("row %s: stored %+v, replay %+v", id, g, w)
		}
	}
	if c := want["counter"]; string(c.Payload) != strconv.FormatInt(total, 10) || c.Version != total {
		t.Errorf("counter %q v%d, want %d: an increment was lost or doubled", c.Payload, c.Version, total)
	}
}

// TestConcurrentInstances: 8 instances × 50 commits on one partition.
func TestConcurrentInstances(t *testing.T) {
	t.Run("transaction", func(t *testing.T) { concurrentInstances(t, dynamostore.Options{TransactionalCommits: true}) })
	t.Run("small commits", func(t *testing.T) { concurrentInstances(t, dynamostore.Options{}) })
}

func concurrentInstances(t *testing.T, opts dynamostore.Options) {
	const workers, perWorker = 8, 50
	table := newTable(t, ddbClient(t))
	ctx := context.Background()
	p := "concurrent"
	if _, err := instance(t, table, dynamostore.Options{}).TouchPartition(ctx, p, baseMs, "epoch-1"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range workers {
		s := instance(t, table, opts)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				if _, err := pushCounter(ctx, s, p, fmt.Sprintf("client-%d", w), fmt.Sprintf("cc-%d", i)); err != nil {
					t.Errorf("worker %d commit %d: %v", w, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	checkConverged(t, instance(t, table, dynamostore.Options{}), p, workers*perWorker)
}

// TestConcurrentDuplicates delivers every commit id twice, from two
// instances racing each other: exactly one delivery applies, the other
// gets ErrOutcomeExists.
func TestConcurrentDuplicates(t *testing.T) {
	t.Run("transaction", func(t *testing.T) { concurrentDuplicates(t, dynamostore.Options{TransactionalCommits: true}) })
	t.Run("small commits", func(t *testing.T) { concurrentDuplicates(t, dynamostore.Options{}) })
}

func concurrentDuplicates(t *testing.T, opts dynamostore.Options) {
	const pairs, perWorker = 8, 50
	table := newTable(t, ddbClient(t))
	ctx := context.Background()
	p := "duplicates"
	if _, err := instance(t, table, dynamostore.Options{}).TouchPartition(ctx, p, baseMs, "epoch-1"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	applied := map[string]int{}
	dups := 0
	var wg sync.WaitGroup
	for w := range pairs * 2 {
		s := instance(t, table, opts)
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := fmt.Sprintf("client-%d", w/2)
			for i := range perWorker {
				id := fmt.Sprintf("cc-%d", i)
				_, err := pushCounter(ctx, s, p, client, id)
				mu.Lock()
				switch {
				case err == nil:
					applied[client+"/"+id]++
				case errors.Is(err, store.ErrOutcomeExists):
					dups++
				default:
					t.Errorf("%s %s: %v", client, id, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if len(applied) != pairs*perWorker || dups != pairs*perWorker {
		t.Fatalf("%d keys applied, %d duplicates; want %d each", len(applied), dups, pairs*perWorker)
	}
	for k, n := range applied {
		if n != 1 {
			t.Errorf("%s applied %d times", k, n)
		}
	}
	checkConverged(t, instance(t, table, dynamostore.Options{}), p, pairs*perWorker)
}
