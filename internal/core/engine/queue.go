package engine

import (
	"context"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// Commit queue (issue 11). On a store implementing store.CommitQueue a
// writer that lost a race on a partition head, or that finds the queue
// active, takes a ticket and commits only in its turn, instead of every
// writer racing the head and backing off at random. The queue only
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
}

// commitQueue returns the store's queue, nil when it has none.
func (e *Engine) commitQueue(partition string, entry store.Head) *queueState {
	q, ok := e.store.(store.CommitQueue)
	if !ok {
		return nil
	}
	qs := &queueState{q: q, partition: partition, seen: entry}
	// Join directly when the turn moved recently: commits are queuing.
	if entry.TurnAtUs > 0 && time.Now().UnixMicro()-entry.TurnAtUs < queueActiveWindow.Microseconds() {
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
	d := qs.delay()
	if d <= 0 {
		return nil
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
