package dynamostore_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
)

// cutOffClient forwards to a real HTTP client until a request has sent
// its budget of write rounds (a TransactWriteItems call, or the head
// UpdateItem that records a batch written with plain writes); the next
// one cancels the request's context instead, the way a request's
// deadline cuts a roll-forward off between two of its batches (a batch
// of plain writes is then cut after its writes, before its record).
type cutOffClient struct {
	base   dynamodb.HTTPClient
	cancel context.CancelFunc

	mu     sync.Mutex
	budget int
	sent   int
	// puts counts plain writes (PutItem); unrecorded those sent since
	// the last write round that went out (a roll-forward's writes its
	// progress does not record yet).
	puts, unrecorded int
}

func (c *cutOffClient) Do(r *http.Request) (*http.Response, error) {
	target := r.Header.Get("X-Amz-Target")
	if strings.HasSuffix(target, ".TransactWriteItems") || strings.HasSuffix(target, ".UpdateItem") {
		c.mu.Lock()
		over := c.sent >= c.budget
		if !over {
			c.sent++
			c.unrecorded = 0
		}
		c.mu.Unlock()
		if over {
			c.cancel()
			return nil, context.Canceled
		}
	}
	if strings.HasSuffix(target, ".PutItem") {
		c.mu.Lock()
		c.puts++
		c.unrecorded++
		c.mu.Unlock()
	}
	return c.base.Do(r)
}

// writes returns how many write rounds and plain writes c sent, and
// how many of the plain writes after its last write round.
func (c *cutOffClient) writes() (rounds, puts, unrecorded int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent, c.puts, c.unrecorded
}

// boundedRequest is one request's store: a fresh instance whose context
// ends after `budget` write rounds (or 25 s, the API's deadline).
func boundedRequest(t *testing.T, table string, budget int) (*dynamostore.Store, context.Context, func() int) {
	t.Helper()
	s, ctx, cc := boundedRequestClient(t, table, budget)
	return s, ctx, func() int {
		rounds, _, _ := cc.writes()
		return rounds
	}
}

// boundedRequestClient is boundedRequest returning its counting client.
func boundedRequestClient(t *testing.T, table string, budget int) (*dynamostore.Store, context.Context, *cutOffClient) {
	t.Helper()
	base := ddbClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	t.Cleanup(cancel)
	cc := &cutOffClient{base: base.Options().HTTPClient, cancel: cancel, budget: budget}
	c := dynamodb.New(base.Options(), func(o *dynamodb.Options) { o.HTTPClient = cc })
	return dynamostore.New(c, table, dynamostore.Options{}), ctx, cc
}

// TestRollForwardResumes (issue 20 item 8): a 499-operation commit is
// logged and its materialization cut off after two of its batches.
// Every later request is bounded (at most four write rounds, as a
// deadline would cut it); each must keep what it wrote, so a few
// requests finish the commit and the partition takes pushes again. Then
// a second such commit is recovered by bounded prunes alone.
func TestRollForwardResumes(t *testing.T) {
	const ops, budget, maxRequests = 499, 4, 12
	// The partition writes scope copies from its creation: each row and
	// its copy make the 998 writes of three plain batches.
	s, c, table, p := setup(t, dynamostore.Options{ScopeCopiesNewPartitions: true})
	large := func(expected int64, id string) (*store.CommitRequest, []store.RowWrite) {
		var ws []store.RowWrite
		for i := range ops {
			ws = append(ws, up(fmt.Sprintf("r%03d", i), expected+1, randBytes(1024)))
		}
		return commitOf(expected, id, ws...), ws
	}

	// The writer's request ends after the log transaction and two batches.
	req, ws := large(0, "big")
	w, wctx, wc := boundedRequestClient(t, table, 3)
	if err := w.Commit(wctx, p, req); err != nil {
		t.Fatalf("large commit: %v (the log landed, so the push is applied)", err)
	}
	// What a roll-forward may redo: the writes sent after the writer's
	// last recorded batch. Each row and its scope copy are one write.
	_, allPuts, redoable := wc.writes()
	planned := 2 * ops
	if mx, ap := rawHead(t, c, table, p); mx != "1" || ap != "0" {
		t.Fatalf("after the cut-off materialization mx=%s ap=%s, want 1/0", mx, ap)
	}

	// recoverWith runs bounded requests of one kind until one succeeds.
	recoverWith := func(what string, run func(context.Context, *dynamostore.Store) error) {
		t.Helper()
		start := time.Now()
		for i := 1; i <= maxRequests; i++ {
			rs, ctx, rc := boundedRequestClient(t, table, budget)
			t0 := time.Now()
			err := run(ctx, rs)
			rounds, puts, unrecorded := rc.writes()
			allPuts, redoable = allPuts+puts, redoable+unrecorded
			t.Logf("%s request %d: %d write rounds, %d plain writes, %v, err=%v", what, i, rounds, puts, time.Since(t0).Round(time.Millisecond), err)
			if err == nil {
				t.Logf("%s: a %d-operation commit recovered after %d requests, %v", what, ops, i, time.Since(start).Round(time.Millisecond))
				return
			}
		}
		t.Fatalf("%s: partition still wedged after %d requests of at most %d write rounds each", what, maxRequests, budget)
	}

	// Later pushes (each updates one row of the large commit).
	recoverWith("push", func(ctx context.Context, rs *dynamostore.Store) error {
		return rs.Commit(ctx, p, commitOf(1, "next", up("r000", 2, []byte("after"))))
	})
	// Resumed where it stopped: no write the progress recorded was made
	// twice, only those after a cut-off request's last record.
	if allPuts > planned+redoable {
		t.Fatalf("%d plain writes for a commit of %d, %d of them unrecorded at a cut-off: recorded writes were redone", allPuts, planned, redoable)
	}
	t.Logf("%d plain writes for a commit of %d (%d redone after a cut-off)", allPuts, planned, allPuts-planned)
	checkRows := func(seq int64, ws []store.RowWrite, except map[string][]byte) {
		t.Helper()
		if mx, ap := rawHead(t, c, table, p); mx != ap {
			t.Fatalf("appliedSeq %s did not catch up with maxCommitSeq %s", ap, mx)
		}
		ids := make([]string, len(ws))
		for i := range ws {
			ids[i] = ws[i].Row.RowID
		}
		got, err := s.GetRows(context.Background(), p, "tasks", ids)
		if err != nil || len(got) != len(ws) {
			t.Fatalf("GetRows: %d rows, %v", len(got), err)
		}
		for _, w := range ws {
			r := got[w.Row.RowID]
			want, wseq := w.Row.Payload, seq
			if b, ok := except[w.Row.RowID]; ok {
				want, wseq = b, seq+1
			}
			if r == nil || !bytes.Equal(r.Payload, want) || r.CommitSeq != wseq {
				t.Fatalf("row %s: %+v, want the payload of commit %d", w.Row.RowID, r, wseq)
			}
		}
		n := 0
		if err := s.ScanScopedRows(context.Background(), p, "tasks", "org", []string{"o1"}, nil, 0, func(string, *store.Row) bool { n++; return true }); err != nil || n != len(ws) {
			t.Fatalf("scope copies: %d, want %d (%v)", n, len(ws), err)
		}
	}
	checkRows(1, ws, map[string][]byte{"r000": []byte("after")})

	// A second large commit, cut off right after its log; only prunes
	// (the scheduled job) come by.
	req, ws = large(2, "big2")
	w, wctx, _ = boundedRequest(t, table, 1)
	if err := w.Commit(wctx, p, req); err != nil {
		t.Fatalf("second large commit: %v", err)
	}
	if mx, ap := rawHead(t, c, table, p); mx != "3" || ap != "2" {
		t.Fatalf("after the cut-off materialization mx=%s ap=%s, want 3/2", mx, ap)
	}
	recoverWith("prune", func(ctx context.Context, rs *dynamostore.Store) error {
		n, err := rs.Prune(ctx, p, 3)
		if err == nil && n != 3 {
			return fmt.Errorf("pruned %d commits, want 3", n)
		}
		return err
	})
	checkRows(3, ws, nil)
	if h, _, err := s.Head(context.Background(), p); err != nil || h.HorizonSeq != 3 {
		t.Fatalf("horizon after prune: %+v %v", h, err)
	}
	if err := s.Commit(context.Background(), p, commitOf(3, "after-prune", up("r001", 5, []byte("x")))); err != nil {
		t.Fatalf("push after the prune: %v", err)
	}
}

// TestRollForwardConcurrentRollers: several instances finish one cut-off
// large commit at once; each batch lands once and in order (the progress
// on the head), and every row and scope copy ends at the commit's values.
func TestRollForwardConcurrentRollers(t *testing.T) {
	s, c, table, p := setup(t, dynamostore.Options{})
	var ws []store.RowWrite
	for i := range 300 {
		ws = append(ws, up(fmt.Sprintf("r%03d", i), 1, randBytes(512)))
	}
	w, wctx, _ := boundedRequest(t, table, 1)
	if err := w.Commit(wctx, p, commitOf(0, "big", ws...)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rs := dynamostore.New(ddbClient(t), table, dynamostore.Options{})
			_, errs[i] = rs.GetRows(context.Background(), p, "tasks", []string{"r000"})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("roller %d: %v", i, err)
		}
	}
	if mx, ap := rawHead(t, c, table, p); mx != "1" || ap != "1" {
		t.Fatalf("mx=%s ap=%s after the roll-forward", mx, ap)
	}
	got := map[string]*store.Row{}
	if err := s.ScanRows(context.Background(), p, "tasks", "", false, func(r *store.Row) bool { got[r.RowID] = r; return true }); err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := s.ScanScopedRows(context.Background(), p, "tasks", "org", []string{"o1"}, nil, 0, func(string, *store.Row) bool { n++; return true }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ws) || n != len(ws) {
		t.Fatalf("%d rows and %d scope copies, want %d", len(got), n, len(ws))
	}
	for _, w := range ws {
		if r := got[w.Row.RowID]; r == nil || !bytes.Equal(r.Payload, w.Row.Payload) || r.CommitSeq != 1 {
			t.Fatalf("row %s: %+v", w.Row.RowID, r)
		}
	}
}
