package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// queueSeen makes the engine of c see partition q's queue in use with a
// learned turn gap of about gap: another instance's queued commit
// records the gap on the head, then c's own push reads it, queues and
// takes the next turn. It returns that turn.
func queueSeen(t *testing.T, s *dynamostore.Store, c *enginetest.Client, gap time.Duration) int64 {
	t.Helper()
	ctx := context.Background()
	mustApply(t, c, "warm", "warm")
	h := wantHead(t, s, "q", 1, 0)
	tk, err := s.TakeTicket(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	req := insertReq(h.MaxCommitSeq, "other", "other")
	req.Ticket, req.TurnAtUs, req.TurnGapUs = tk, time.Now().UnixMicro(), gap.Microseconds()
	if err := s.Commit(ctx, "q", req); err != nil {
		t.Fatal(err)
	}
	mustApply(t, c, "joined", "joined") // queued at once: the turn just moved
	return wantHead(t, s, "q", 3, tk+1).Turn
}

// Ticket first (engine queue.go): an instance that saw the queue in use
// takes its ticket before the request's first read and sleeps until its
// estimated turn, so that read is the one in its turn. Here a holder is
// ahead and passes its turn once the push holds the ticket after it,
// before the learned gap has elapsed: the push costs ticket, head+rows
// read and commit, 3 round trips. Reading first (the code before) found
// the holder's turn, took a ticket, waited and read again: 4.
func TestTicketFirstWhenQueueSeen(t *testing.T) {
	ctx := context.Background()
	db := ddbClient(t)
	table := newTable(t, db)
	s := dynamostore.New(db, table, dynamostore.Options{})
	h := enginetest.New(t, s, memstore.NewSegments(), enginetest.Options{})
	h.Grants.Set("alice", engine.ScopeMap{"project_id": {"p1"}})
	c := h.Client("q", "alice", "w")
	turn := queueSeen(t, s, c, 400*time.Millisecond)
	// Another instance holds the next ticket and passes its turn as soon
	// as the push has taken the ticket after it.
	ahead, err := s.TakeTicket(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if ahead != turn+1 {
		t.Fatalf("ticket %d, want %d", ahead, turn+1)
	}
	passed := make(chan error, 1)
	go func() {
		for range 3000 {
			out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, Key: dynamostore.Key(dynamostore.PartitionPK("q"), "QUEUE"), ConsistentRead: aws.Bool(true)})
			if err != nil {
				passed <- err
				return
			}
			if n, ok := out.Item["tk"].(*types.AttributeValueMemberN); ok && n.Value != strconv.FormatInt(ahead, 10) {
				passed <- s.PassTurn(ctx, "q", ahead, time.Now().UnixMicro())
				return
			}
			time.Sleep(time.Millisecond)
		}
		passed <- errors.New("the push took no ticket")
	}()
	mctx, capacity := dynamostore.WithCapacity(context.Background())
	c.Ctx = mctx
	mustApply(t, c, "second", "second")
	c.Ctx = nil
	if err := <-passed; err != nil {
		t.Fatal(err)
	}
	if u := capacity.Snapshot(); u.RoundTrips != 3 || u.EstWCU > 13 {
		t.Fatalf("queued 1-op insert behind one holder: %d round trips, %.1f WCU; want 3 (ticket, read in turn, commit) and ≤13", u.RoundTrips, u.EstWCU)
	}
	wantHead(t, s, "q", 4, ahead+1)
}

// A request that took its ticket first and then fails before evaluating
// (here the scope resolver is down, §3.2 rule 3) passes its turn, also
// when a holder is still ahead of it: the next writer does not wait out
// the 2 s lease.
func TestTicketFirstFailurePassesTurn(t *testing.T) {
	ctx := context.Background()
	s, h := queueHarness(t)
	c := h.Client("q", "alice", "w")
	turn := queueSeen(t, s, c, 50*time.Millisecond)

	fail := func(cc string) {
		t.Helper()
		h.Grants.Fail(true)
		defer h.Grants.Fail(false)
		m := c.Request([]wire.PushCommit{{ClientCommitID: cc, Operations: []wire.Operation{enginetest.Upsert("tasks", cc, c.Task(cc, "p1", cc, false), 0)}}}, nil, nil)
		if _, err := c.Send(m); err == nil {
			t.Fatalf("push %s with the resolver down: no error", cc)
		}
	}
	// Its turn is next: passed at once.
	start := time.Now()
	fail("fails-next")
	wantHead(t, s, "q", 3, turn+1)
	mustApply(t, c, "after-next", "a")
	wantHead(t, s, "q", 4, turn+2)
	if took := time.Since(start); took > time.Second {
		t.Errorf("failed push and next push took %s: the turn waited out a lease", took)
	}

	// A holder is ahead and passes its turn 100 ms later: the failed
	// request waits for its own turn and passes it.
	ahead, err := s.TakeTicket(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		_ = s.PassTurn(context.Background(), "q", ahead, time.Now().UnixMicro())
	}()
	start = time.Now()
	fail("fails-behind")
	wantHead(t, s, "q", 4, ahead+1)
	mustApply(t, c, "after-behind", "b")
	wantHead(t, s, "q", 5, ahead+2)
	if took := time.Since(start); took > time.Second {
		t.Errorf("failed push behind a holder and next push took %s: the turn waited out a lease", took)
	}
}

// A lone writer that met contention once goes back to racing the head:
// after two of its own queued commits in a row, with nobody else's turn
// between them, its next 1-op insert costs 2 round trips again (a read
// with its rows, the commit), not 3 (ticket, read, commit) for as long as
// it keeps committing within the queue's active window.
func TestLoneWriterLeavesTheQueue(t *testing.T) {
	s, h := queueHarnessWith(t, dynamostore.Options{TransactionalCommits: true}) // round trips of the transaction
	c := h.Client("q", "alice", "w")
	// queueSeen ends with this instance's own queued commit, right after
	// another instance's turn.
	turn := queueSeen(t, s, c, 5*time.Millisecond)
	trips := func(cc string) int {
		t.Helper()
		mctx, capacity := dynamostore.WithCapacity(context.Background())
		c.Ctx = mctx
		mustApply(t, c, cc, cc)
		c.Ctx = nil
		return capacity.Snapshot().RoundTrips
	}
	// The queue was in use a moment ago: the next commit lines up.
	if n := trips("own"); n != 3 {
		t.Errorf("commit after the queue was seen: %d round trips, want 3 (ticket first)", n)
	}
	wantHead(t, s, "q", 4, turn+1)
	// Two own turns in a row: nobody else is queuing.
	for i := range 3 {
		if n := trips(fmt.Sprintf("alone-%d", i)); n != 2 {
			t.Errorf("commit %d of a lone writer: %d round trips, want 2", i, n)
		}
	}
	// Racing the head takes no turn.
	wantHead(t, s, "q", 7, turn+1)
}
