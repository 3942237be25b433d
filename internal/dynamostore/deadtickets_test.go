package dynamostore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// skipCounter is the DynamoDB store with its stalled-turn skips
// counted: each skip that moves the turn is one lease the queue waited
// out (a turn is skipped only after standing still for a lease).
type skipCounter struct {
	*dynamostore.Store
	moved   atomic.Int64 // skips that moved the turn
	skipped atomic.Int64 // tickets they moved it past
}

func (c *skipCounter) SkipTurn(ctx context.Context, partition string, from, to, nowUs int64) (bool, error) {
	ok, err := c.Store.SkipTurn(ctx, partition, from, to, nowUs)
	if ok {
		c.moved.Add(1)
		c.skipped.Add(to - from)
	}
	return ok, err
}

// Issue 20 item 7: writers that took a ticket and died (crashed, or
// their request ended before their turn) queued in front of live
// writers freeze the partition for one lease in total, not one lease
// each: the live writers all commit, exactly once and gapless (§2.1),
// and the turn is skipped past the dead tickets in one move.
func TestDeadTicketsCostOneLease(t *testing.T) {
	ctx := context.Background()
	c := ddbClient(t)
	base := dynamostore.New(c, newTable(t, c), dynamostore.Options{})
	s := &skipCounter{Store: base}
	h := enginetest.New(t, s, memstore.NewSegments(), enginetest.Options{})
	h.Grants.Set("alice", engine.ScopeMap{"project_id": {"p1"}})
	const dead, writers = 8, 4
	clients := make([]*enginetest.Client, writers)
	for i := range clients {
		clients[i] = h.Client("q", "alice", fmt.Sprintf("w%d", i))
		mustApply(t, clients[i], fmt.Sprintf("warm%d", i), fmt.Sprintf("warm%d", i))
	}
	hd0 := wantHead(t, base, "q", writers, 0)
	// The queue in use (its turn moved just now), then the dead tickets:
	// taken, never used, never passed.
	turn := activeQueue(t, base, "q")
	for range dead {
		if _, err := base.TakeTicket(ctx, "q"); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i, cl := range clients {
		wg.Go(func() {
			cc := fmt.Sprintf("live%d", i)
			r := cl.Push(cc, enginetest.Upsert("tasks", cc, cl.Task(cc, "p1", cc, false), 0))
			if r.Status != wire.PushApplied || !r.CommitSeq.Present {
				t.Errorf("push %s behind dead tickets: %+v", cc, r)
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	hd, _, err := base.Head(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if hd.MaxCommitSeq != hd0.MaxCommitSeq+writers {
		t.Fatalf("head at commitSeq %d, want %d (every live writer once)", hd.MaxCommitSeq, hd0.MaxCommitSeq+writers)
	}
	if hd.Turn < turn+dead+writers {
		t.Fatalf("turn %d, want at least %d (dead tickets skipped, each live writer its own turn)", hd.Turn, turn+dead+writers)
	}
	moved, skipped := s.moved.Load(), s.skipped.Load()
	t.Logf("%d dead tickets, %d live writers: %s until all committed; %d lease skips moved the turn past %d tickets", dead, writers, took, moved, skipped)
	if skipped < dead {
		t.Fatalf("skips moved the turn past %d tickets, want at least the %d dead ones", skipped, dead)
	}
	if moved > 1 {
		t.Fatalf("the partition waited out %d leases for %d dead tickets, want one", moved, dead)
	}
}

// Waiting marks: only the marks made at the turn asked about count as
// live, ascending; marks of tickets the turn has passed are removed; a
// mark for a ticket that is not behind the turn is refused.
func TestWaitingTickets(t *testing.T) {
	ctx := context.Background()
	s, p := queueStore(t)
	for range 9 {
		if _, err := s.TakeTicket(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	marks := []struct{ ticket, turn int64 }{{3, 1}, {7, 2}, {5, 2}, {9, 1}, {4, 2}}
	for _, m := range marks {
		if err := s.MarkWaiting(ctx, p, m.ticket, m.turn); err != nil {
			t.Fatalf("mark %d at %d: %v", m.ticket, m.turn, err)
		}
	}
	if err := s.MarkWaiting(ctx, p, 3, 2); err == nil {
		t.Fatal("mark of ticket 3 behind turn 2 (it is in its turn) accepted")
	}
	got, err := s.WaitingTickets(ctx, p, 2)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[4 5 7]" {
		t.Fatalf("waiting at turn 2: %v, want [4 5 7]", got)
	}
	// At turn 4 the marks of tickets 3 and 4 are gone for good: asked
	// again at their own turn, they are not there.
	if got, err = s.WaitingTickets(ctx, p, 4); err != nil || len(got) != 0 {
		t.Fatalf("waiting at turn 4: %v %v, want none (no mark made at 4)", got, err)
	}
	if got, err = s.WaitingTickets(ctx, p, 2); err != nil || fmt.Sprint(got) != "[5 7]" {
		t.Fatalf("waiting at turn 2 after the turn passed 4: %v %v, want [5 7]", got, err)
	}
	// Taking tickets still works beside the marks.
	if tk, err := s.TakeTicket(ctx, p); err != nil || tk != 10 {
		t.Fatalf("ticket after marks: %d %v, want 10", tk, err)
	}
}
