package engine

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// Commit queue (issue 11). On a store implementing store.CommitQueue a
// writer that lost a race on a partition head, or that finds the queue
// active, takes a ticket and commits only in its turn, instead of every
// writer racing the head and backing off at random. An instance that
// recently saw the queue active takes the ticket before the request's
// first read (ticketFirst, below), so that read can be the one in its
// turn: a queued commit is then ticket, read and commit, 3 round trips,
// plus any read that came before its turn (8 writers on DynamoDB Local:
// ~4.0 round trips per commit, ~5.1 reading first; dynamostore's doc).
// The queue only
// orders attempts: each queued commit still carries its head condition
// (§2.1 gapless commitSeq), so a skipped, crashed or slow holder can
// delay others but never break a commit. Every piece of its state lives
// in the store: writers are separate Lambda instances.
const (
	// queueActiveWindow: a head whose turn moved this recently shows a
	// queue in use, and a new commit joins it directly rather than
	// racing it first.
	queueActiveWindow = 500 * time.Millisecond
	// queueLease: a turn that has not moved for this long belongs to a
	// holder that stalled (crashed, or its request ended while waiting);
	// the next waiter skips it.
	queueLease = 2 * time.Second
	// maxQueuePolls bounds the reads of one commit waiting for its turn.
	maxQueuePolls = 1000
	// maxQueueSleep bounds one wait between reads for the turn.
	maxQueueSleep = 250 * time.Millisecond
	// maxReadChecks: a commit reading at most this many rows takes the
	// head from the rows' own read (store.CommitRequest.ReadRows makes
	// that sound); a larger one reads the head before its rows.
	maxReadChecks = 32
)

// queueState is one commit's place in its partition's queue.
type queueState struct {
	q         store.CommitQueue
	partition string
	// groupable: the store lands published commits in groups.
	groupable bool
	// queued: the commit takes a ticket before its next attempt.
	queued bool
	// ticket held (0: none); seen is the newest head read, whose turn
	// and timing place the ticket.
	ticket int64
	seen   store.Head
	// defaultGap estimates the interval between turns before the head
	// records one: a few of this request's own round trips.
	defaultGap time.Duration
	polls      int
	// readStart is when the last read of head and rows began.
	readStart time.Time
	// turnSince is when this commit first saw the turn at its current
	// value (seenTurn): the lease is measured on the waiter's own clock.
	seenTurn  int64
	turnSince time.Time
	// marked: this waiter marked itself waiting at turn markedTurn.
	marked     bool
	markedTurn int64
	// published: the ticket whose holder published its commit for group
	// commit (groupcommit.go); groupTicket is the last ticket the
	// commit's group landed.
	published   int64
	groupTicket int64
	// pubs: the commits published after ticket pubsFor, read while the
	// commit read its rows (prefetchPublished).
	pubs    chan []*store.CommitRequest
	pubsFor int64
	// lineAtTake: how many tickets were ahead of this one, as far as
	// the commit knew, when it took it.
	lineAtTake int64
}

// commitQueue returns the store's queue, nil when it has none.
func (e *Engine) commitQueue(partition string, entry store.Head) *queueState {
	q, ok := e.store.(store.CommitQueue)
	if !ok {
		return nil
	}
	qs := &queueState{q: q, partition: partition, seen: entry, groupable: e.grouper() != nil}
	// Join directly when the turn moved recently: commits are queuing,
	// unless the queue's last two turns were this instance's own alone.
	if entry.TurnAtUs > 0 && time.Now().UnixMicro()-entry.TurnAtUs < queueActiveWindow.Microseconds() &&
		!e.queueMemo.aloneAt(partition, entry.Turn) {
		qs.queued = true
	}
	return qs
}

// take draws a ticket.
func (qs *queueState) take(ctx context.Context) error {
	start := time.Now()
	t, err := qs.q.TakeTicket(ctx, qs.partition)
	if err != nil {
		return storeErr(err, "take commit ticket")
	}
	qs.ticket = t
	qs.lineAtTake = t - 1 - qs.seen.Turn
	qs.defaultGap = max(3*time.Since(start), time.Millisecond)
	return nil
}

// gap is the expected interval between turns.
func (qs *queueState) gap() time.Duration {
	g := time.Duration(qs.seen.TurnGapUs) * time.Microsecond
	if g <= 0 {
		g = qs.defaultGap
	}
	return min(max(g, 500*time.Microsecond), 250*time.Millisecond)
}

// delay is how long to wait before reading for the turn again: until
// the commits ahead of the ticket are expected to have landed, or half a
// turn when they are late.
func (qs *queueState) delay() time.Duration {
	ahead := qs.ticket - 1 - qs.seen.Turn
	if qs.ticket == 0 || ahead <= 0 {
		return 0
	}
	if qs.groupable && qs.published != qs.ticket {
		return 0 // evaluate now, and publish for group commit
	}
	if qs.published == qs.ticket {
		// Published: the next turn's holder may land it, and the turn
		// then jumps past several tickets at once; look after each turn.
		ahead = 1
	}
	g := qs.gap()
	now := time.Now()
	d := time.Duration(qs.seen.TurnAtUs+ahead*g.Microseconds()-now.UnixMicro()) * time.Microsecond
	// Late: look again in half a turn, less often the longer the turn
	// has not moved (a stalled holder is waited out for queueLease).
	late := g / 2
	if qs.seenTurn == qs.seen.Turn && !qs.turnSince.IsZero() {
		late = max(late, min(now.Sub(qs.turnSince)/8, 200*time.Millisecond))
	}
	// Far back in a long line, look again within maxQueueSleep: an
	// estimate many turns ahead is too rough to sleep through (a holder
	// asleep when its turn comes holds up every commit behind it).
	return min(max(d, late), maxQueueSleep)
}

// wait sleeps delay(), or returns the context's error when it ends first.
func (qs *queueState) wait(ctx context.Context) error {
	return sleep(ctx, qs.delay())
}

// sleep waits d (nothing when d ≤ 0), or returns the context's error
// when it ends first: every wait of a commit (backoff, turn) is bounded
// by its request's deadline.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// stalled records the turn just read and reports that it has not moved
// for a lease, both by the head's record and as this waiter saw it.
func (qs *queueState) stalled() bool {
	now := time.Now()
	if qs.turnSince.IsZero() || qs.seenTurn != qs.seen.Turn {
		qs.seenTurn, qs.turnSince = qs.seen.Turn, now
		return false
	}
	return now.Sub(qs.turnSince) > queueLease && now.UnixMicro()-qs.seen.TurnAtUs > queueLease.Microseconds()
}

// Dead tickets. A writer can take a ticket and never come back (its
// instance crashed, its request ended while it waited early). Each such
// ticket stalls the turn when it comes; skipping them one lease at a
// time makes N dead tickets in a row cost N leases. Instead, a waiter
// that has seen the turn stand still for half a lease marks itself
// waiting at that turn (one write, only while the queue is stalled), and
// the first waiter whose lease runs out moves the turn, in one
// conditional update, to just before the lowest ticket that is marked
// (or its own): every unmarked ticket in between is dead and skipped at
// once. Unmarked tickets further back, between live ones, are recorded
// dead on the head in that update, and the waiter that finds the turn
// just before one skips it without a lease: dead tickets cost one lease
// in total wherever they sit in the line. A live waiter behind the stall
// has had half a lease to mark itself; one that did not (a slow reader)
// fails its turn condition and lines up again, as any skipped holder
// does (the queue only orders attempts: no commit depends on it).

// notInTurn handles a read that found the turn elsewhere: the ticket
// was skipped as stalled (line up again), the tickets ahead are known
// dead (skip them now), the turn has stood still for a lease (skip the
// dead tickets ahead), or it is late (mark the ticket waiting).
func (qs *queueState) notInTurn(ctx context.Context, head store.Head) error {
	if head.Turn >= qs.ticket {
		qs.ticket = 0
		return nil
	}
	skipped, err := qs.skipKnownDead(ctx, head)
	if err != nil {
		return storeErr(err, "skip dead commit tickets")
	}
	switch {
	case skipped:
	case qs.stalled():
		if err := qs.skipStalled(ctx, head.Turn); err != nil {
			return storeErr(err, "skip a stalled commit turn")
		}
	default:
		if err := qs.markIfLate(ctx); err != nil {
			return storeErr(err, "mark a commit ticket waiting")
		}
	}
	return nil
}

// markIfLate marks the commit's ticket waiting once the turn it waits
// behind has stood still for half a lease, once per turn value.
func (qs *queueState) markIfLate(ctx context.Context) error {
	turn := qs.seen.Turn
	if qs.ticket <= turn+1 || qs.seenTurn != turn || qs.turnSince.IsZero() ||
		time.Since(qs.turnSince) <= queueLease/2 || qs.marked && qs.markedTurn == turn {
		return nil
	}
	if err := qs.q.MarkWaiting(ctx, qs.partition, qs.ticket, turn); err != nil {
		return err
	}
	qs.marked, qs.markedTurn = true, turn
	return nil
}

// skipStalled moves a turn that has stood still for a lease past its
// holder and every dead ticket after it, up to the lowest ticket marked
// waiting at that turn, or this commit's own (see "Dead tickets"). The
// unmarked tickets between that live one and the highest live ticket
// are dead too: they are recorded on the head (store.Head.Dead) with
// the move, with the earlier record's still ahead, so they are skipped
// at once when the turn reaches them (skipKnownDead).
func (qs *queueState) skipStalled(ctx context.Context, turn int64) error {
	live, err := qs.q.WaitingTickets(ctx, qs.partition, turn)
	if err != nil {
		return err
	}
	first := qs.ticket
	for _, t := range live {
		// A marked turn+1 came into its turn and stalled in it: it is
		// skipped like any holder that stalls.
		if t > turn+1 && t < first {
			first = t
			break
		}
	}
	to := max(first-1, turn+1)
	// Behind the lowest live ticket, an unmarked ticket below a marked
	// one (or this commit's own) was taken before it: dead as well.
	last := qs.ticket
	marked := make(map[int64]bool, len(live)+1)
	marked[qs.ticket] = true
	for _, t := range live {
		marked[t] = true
		last = max(last, t)
	}
	var dead []int64
	for t := to + 2; t < last && len(dead) < 63; t++ {
		if !marked[t] {
			dead = append(dead, t)
		}
	}
	return qs.skip(ctx, turn, to, mergeDead(qs.seen.Dead.List(), dead, to))
}

// skipKnownDead skips, without waiting for a lease, the run of tickets
// after the turn that an earlier skip recorded dead; false when the
// ticket after the turn is not one of them.
func (qs *queueState) skipKnownDead(ctx context.Context, h store.Head) (bool, error) {
	to := h.Turn
	for h.Dead.Has(to+1) && to+1 < qs.ticket {
		to++
	}
	if to == h.Turn {
		return false, nil
	}
	return true, qs.skip(ctx, h.Turn, to, mergeDead(h.Dead.List(), nil, to))
}

// skip moves the turn from `from` to `to`, recording dead.
func (qs *queueState) skip(ctx context.Context, from, to int64, dead store.DeadTickets) error {
	now := time.Now().UnixMicro()
	moved, err := qs.q.SkipTurn(ctx, qs.partition, from, to, now, dead)
	if err != nil {
		return err
	}
	if moved {
		qs.seen.Turn, qs.seen.TurnAtUs = to, now
	}
	return nil
}

// mergeDead is the set of the dead tickets of a and b above the turn
// `to`.
func mergeDead(a, b []int64, to int64) store.DeadTickets {
	var out []int64
	for _, t := range append(slices.Clone(a), b...) {
		if t > to {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return store.NewDeadTickets(slices.Compact(out))
}

// turnGap is the smoothed time a turn takes, recorded with a commit
// taking its turn now. A holder that read for its turn before it came
// (polls > 0) saw the previous commit issued at seen.TurnAtUs and then
// did nothing but catch it, read and evaluate: that interval is one turn
// without anyone's idle wait in it. A holder whose first read found its
// turn may have slept past it, so it only lets the estimate decay
// (1/16), which keeps probing for a faster pace; a gap that counted the
// waits would lengthen every wait after it. The first estimate is about
// two of the holder's own round trips (read and commit).
func (qs *queueState) turnGap(now time.Time) int64 {
	prev := qs.seen.TurnGapUs
	if prev > 0 {
		if qs.polls == 0 {
			return max(prev*15/16, 1)
		}
		d := now.UnixMicro() - qs.seen.TurnAtUs
		if d <= 0 || d > queueLease.Microseconds() {
			return prev
		}
		// One late sample moves the estimate by at most a quarter.
		return (3*prev + min(d, 2*prev)) / 4
	}
	d := 2 * now.Sub(qs.readStart).Microseconds()
	if qs.readStart.IsZero() || d <= 0 || d > queueLease.Microseconds() {
		return prev
	}
	return d
}

// release passes a held turn the commit did not use (rejection, replay,
// refusal, error), so the next ticket need not wait out the lease. It
// runs even when the request's context has ended.
func (qs *queueState) release(ctx context.Context) {
	if qs == nil || qs.ticket == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	// A failure leaves the turn to the lease.
	_ = qs.q.PassTurn(ctx, qs.partition, qs.ticket, time.Now().UnixMicro())
	qs.ticket = 0
}

// Ticket first. A queued commit that reads before taking its ticket
// spends that read: the turn comes later, and it reads again. An instance
// that recently saw a partition's queue in use (queueMemo) therefore
// takes the ticket before the request's first read, sleeps until its
// estimated turn, and lets that first read (Engine.touch) be the read in
// its turn: ticket, read, commit. The memory is per engine (per Lambda
// instance) and only picks when to take the ticket; the queue's state
// stays in the store.
const queueMemoSize = 1024

// queueMemo remembers, per partition, the newest turn this instance saw.
type queueMemo struct {
	mu sync.Mutex
	m  map[string]memoTurn
}

type memoTurn struct {
	turn, atUs, gapUs int64
	// own: this instance's queued commit took the turn. alone: so did
	// the turn before it, with nobody else's turn between: the queue is
	// in use only by this instance, a lone writer that once met
	// contention, and its next commit goes back to racing the head (2
	// round trips) rather than lining up behind nobody (3). A writer
	// that loses that race lines up again.
	own, alone bool
}

// note records the turn of a head this instance read or wrote.
func (m *queueMemo) note(partition string, h store.Head) {
	if h.TurnAtUs <= 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = make(map[string]memoTurn)
	}
	old, ok := m.m[partition]
	if ok && (old.turn > h.Turn || old.turn == h.Turn && old.atUs >= h.TurnAtUs) {
		return
	}
	if !ok && len(m.m) >= queueMemoSize {
		// Evict the partition whose turn this instance saw move longest ago.
		var oldest string
		var at int64
		for p, t := range m.m {
			if oldest == "" || t.atUs < at {
				oldest, at = p, t.atUs
			}
		}
		delete(m.m, oldest)
	}
	m.m[partition] = memoTurn{turn: h.Turn, atUs: h.TurnAtUs, gapUs: h.TurnGapUs}
}

// noteOwn records the turn this instance's queued commit just took.
func (m *queueMemo) noteOwn(partition string, ticket, atUs, gapUs int64) {
	m.mu.Lock()
	prev, ok := m.m[partition]
	m.mu.Unlock()
	m.note(partition, store.Head{Turn: ticket, TurnAtUs: atUs, TurnGapUs: gapUs})
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, ok2 := m.m[partition]; ok2 && t.turn == ticket {
		t.own, t.alone = true, ok && prev.own && prev.turn == ticket-1
		m.m[partition] = t
	}
}

// aloneAt reports whether turn is one of this instance's own that
// followed another of its own (memoTurn.alone).
func (m *queueMemo) aloneAt(partition string, turn int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.m[partition]
	return ok && t.alone && t.turn == turn
}

// active returns the remembered turn when it moved within
// queueActiveWindow (the rule commitQueue applies to a head it reads).
func (m *queueMemo) active(partition string, now time.Time) (memoTurn, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.m[partition]
	if !ok || t.alone || now.UnixMicro()-t.atUs >= queueActiveWindow.Microseconds() {
		return memoTurn{}, false
	}
	return t, true
}

// ticketFirst takes a ticket before the request's first read when this
// instance saw the partition's queue in use, and sleeps until the turn
// before it is expected to pass. nil: no early ticket.
func (e *Engine) ticketFirst(ctx context.Context, partition string) (*queueState, error) {
	q, ok := e.store.(store.CommitQueue)
	if !ok {
		return nil, nil
	}
	t, ok := e.queueMemo.active(partition, time.Now())
	if !ok {
		return nil, nil
	}
	qs := &queueState{q: q, partition: partition, queued: true, groupable: e.grouper() != nil,
		seen: store.Head{Turn: t.turn, TurnAtUs: t.atUs, TurnGapUs: t.gapUs}}
	if err := qs.take(ctx); err != nil {
		return nil, err
	}
	ahead := qs.ticket - 1 - t.turn
	if ahead <= 0 {
		return qs, nil
	}
	d := time.Duration(t.atUs+ahead*qs.gap().Microseconds()-time.Now().UnixMicro()) * time.Microsecond
	if d <= 0 {
		return qs, nil
	}
	if err := sleep(ctx, min(d, maxQueueSleep)); err != nil {
		qs.releaseUnused(ctx, e.store)
		return nil, storeErr(err, "wait for the commit turn")
	}
	return qs, nil
}

// adopt makes an early ticket the commit's queue state, given the head
// the request's first read returned. A read that did not find the turn
// was an early read: the prefetched rows are read again in the turn.
func (qs *queueState) adopt(rs *reqState) {
	qs.seen = rs.head
	qs.readStart = time.Time{}
	if rs.head.Turn == qs.ticket-1 {
		return
	}
	rs.prefetch = nil
	qs.polls++
	qs.stalled() // start the lease clock on the turn seen
	if rs.head.Turn >= qs.ticket {
		qs.ticket = 0 // skipped as stalled: line up again
	}
}

// releaseUnused passes an early ticket the request never took to a
// commit (it failed before: authorization, gate, epoch, limits, …). Its
// turn may not have come yet; passing it then is a no-op, so it waits
// for the turn, reading the head, for at most a lease (the time the
// queue would otherwise lose to it), then passes it. It runs even when
// the request's context has ended.
func (qs *queueState) releaseUnused(ctx context.Context, st store.Store) {
	if qs == nil || qs.ticket == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), queueLease)
	defer cancel()
	defer func() { qs.ticket = 0 }()
	for {
		moved, err := qs.q.SkipTurn(ctx, qs.partition, qs.ticket-1, qs.ticket, time.Now().UnixMicro(), store.DeadTickets{})
		if err != nil || moved {
			return
		}
		h, ok, err := st.Head(ctx, qs.partition)
		if err != nil || !ok || h.Turn >= qs.ticket {
			return
		}
		if h.Turn == qs.ticket-1 {
			continue // the turn came between the two calls
		}
		qs.seen = h
		d := min(max(time.Duration(qs.ticket-1-h.Turn)*qs.gap()/2, time.Millisecond), maxQueueSleep)
		if sleep(ctx, d) != nil {
			return
		}
	}
}
