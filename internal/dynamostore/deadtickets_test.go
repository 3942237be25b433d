package dynamostore_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// skipCounter is the DynamoDB store with the commit queue's skips
// counted. A waiter reads the waiting marks (WaitingTickets) only after
// the turn has stood still for a lease, so the distinct turns it is
// asked about are the leases the partition waited out. After each of
// the first `after` live tickets it hands out, it takes `deadAfter`
// more tickets that nobody uses (dead tickets between live ones).
type skipCounter struct {
	*dynamostore.Store
	deadAfter int
	mu        sync.Mutex
	after     int
	dead      []int64        // dead tickets taken
	live      []int64        // tickets handed to live writers
	stalls    map[int64]bool // turns waited out for a lease
	skipped   atomic.Int64   // tickets skips moved the turn past
}

func (c *skipCounter) SkipTurn(ctx context.Context, partition string, from, to, nowUs int64, dead store.DeadTickets) (bool, error) {
	ok, err := c.Store.SkipTurn(ctx, partition, from, to, nowUs, dead)
	if ok {
		c.skipped.Add(to - from)
	}
	return ok, err
}

func (c *skipCounter) WaitingTickets(ctx context.Context, partition string, turn int64) ([]int64, error) {
	c.mu.Lock()
	c.stalls[turn] = true
	c.mu.Unlock()
	return c.Store.WaitingTickets(ctx, partition, turn)
}

func (c *skipCounter) TakeTicket(ctx context.Context, partition string) (int64, error) {
	c.mu.Lock() // one ticket and the dead ones after it at a time
	defer c.mu.Unlock()
	t, err := c.Store.TakeTicket(ctx, partition)
	if err != nil {
		return t, err
	}
	c.live = append(c.live, t)
	if c.after > 0 {
		c.after--
		for range c.deadAfter {
			d, err := c.Store.TakeTicket(ctx, partition)
			if err != nil {
				return 0, err
			}
			c.dead = append(c.dead, d)
		}
	}
	return t, nil
}

// Issue 20 item 7: writers that took a ticket and died (crashed, or
// their request ended before their turn) freeze the partition for one
// lease in total, not one lease each: queued in one run in front of live
// writers, or in runs between them, the live writers all commit, exactly
// once and gapless (§2.1), the turn is skipped past every dead ticket,
// and only one turn is waited out for a lease.
func TestDeadTicketsCostOneLease(t *testing.T) {
	for _, tc := range []struct {
		name             string
		front, deadAfter int
	}{
		{"run in front", 8, 0},
		{"runs between live writers", 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) { deadTickets(t, tc.front, tc.deadAfter) })
	}
}

func deadTickets(t *testing.T, front, deadAfter int) {
	ctx := context.Background()
	c := ddbClient(t)
	base := dynamostore.New(c, newTable(t, c), dynamostore.Options{})
	const writers = 4
	s := &skipCounter{Store: base, stalls: map[int64]bool{}}
	h := enginetest.New(t, s, memstore.NewSegments(), enginetest.Options{})
	h.Grants.Set("alice", engine.ScopeMap{"project_id": {"p1"}})
	clients := make([]*enginetest.Client, writers)
	for i := range clients {
		clients[i] = h.Client("q", "alice", fmt.Sprintf("w%d", i))
		mustApply(t, clients[i], fmt.Sprintf("warm%d", i), fmt.Sprintf("warm%d", i))
	}
	hd0 := wantHead(t, base, "q", writers, 0)
	// The queue in use (its turn moved just now), then the dead tickets:
	// taken, never used, never passed.
	turn := activeQueue(t, base, "q")
	s.mu.Lock()
	for range front {
		d, err := base.TakeTicket(ctx, "q")
		if err != nil {
			t.Fatal(err)
		}
		s.dead = append(s.dead, d)
	}
	s.after, s.deadAfter = writers-1, deadAfter
	s.mu.Unlock()
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
	s.mu.Lock()
	stalls, last := len(s.stalls), slices.Max(s.live)
	// The dead tickets a live writer waited behind: those before the
	// last live ticket (later ones block nobody yet).
	var dead int64
	for _, d := range s.dead {
		if d < last {
			dead++
		}
	}
	s.mu.Unlock()
	if hd.MaxCommitSeq != hd0.MaxCommitSeq+writers {
		t.Fatalf("head at commitSeq %d, want %d (every live writer once)", hd.MaxCommitSeq, hd0.MaxCommitSeq+writers)
	}
	if hd.Turn < last || last < turn+dead+1 {
		t.Fatalf("turn %d, last live ticket %d, want the turn past it, behind %d dead tickets", hd.Turn, last, dead)
	}
	skipped := s.skipped.Load()
	t.Logf("%d dead tickets, %d live writers: %s until all committed; %d turns waited out for a lease, skips moved the turn past %d tickets", dead, writers, took, stalls, skipped)
	if skipped < dead {
		t.Fatalf("skips moved the turn past %d tickets, want at least the %d dead ones", skipped, dead)
	}
	if stalls > 1 {
		t.Fatalf("the partition waited out %d leases for %d dead tickets, want one", stalls, dead)
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

// A skip records the dead tickets it found on the head, where every
// read of the head returns them; a pass or a commit leaves the record,
// and a later skip with none leaves it too.
func TestSkipRecordsDeadTickets(t *testing.T) {
	ctx := context.Background()
	s, p := queueStore(t)
	for range 9 {
		if _, err := s.TakeTicket(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	dead := store.NewDeadTickets([]int64{4, 5, 7})
	if ok, err := s.SkipTurn(ctx, p, 0, 2, 1000, dead); err != nil || !ok {
		t.Fatalf("skip 0→2: %v %v", ok, err)
	}
	h := wantHead(t, s, p, 0, 2)
	if h.Dead != dead || fmt.Sprint(h.Dead.List()) != "[4 5 7]" {
		t.Fatalf("dead tickets on the head %+v (%v), want [4 5 7]", h.Dead, h.Dead.List())
	}
	if err := s.PassTurn(ctx, p, 3, 2000); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.SkipTurn(ctx, p, 3, 5, 3000, store.DeadTickets{}); err != nil || !ok {
		t.Fatalf("skip 3→5: %v %v", ok, err)
	}
	if h := wantHead(t, s, p, 0, 5); h.Dead != dead {
		t.Fatalf("dead tickets %v after a pass and a skip without any, want the record kept", h.Dead.List())
	}
}
