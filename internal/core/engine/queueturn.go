package engine

import (
	"context"
	"fmt"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// Turn is a held turn of a partition's commit queue, taken by work that
// is not a push but must not race the partition's queued writers: a
// checkpoint activation (issue 20 item 9) conditions its write on the
// head it checked, and on a busy partition every queued commit landing
// in between sends it round again. While the turn is held, queued
// writers wait behind it (a commit in its turn requires Turn = its
// ticket−1); commits that never queued (a lone writer racing the head)
// still land, and the holder's own conditions catch them as before. The
// queue only orders attempts: holding a turn grants nothing, and a
// holder that keeps it past the lease (queueLease) is skipped like any
// stalled one.
type Turn struct {
	qs *queueState
}

// WaitTurn takes a ticket on partition's commit queue and waits for its
// turn, as a queued commit does (marking itself waiting when the line
// stalls, skipping dead tickets after the lease, lining up again when
// skipped). It returns nil, nil when st has no queue. The caller must
// Release the turn.
func WaitTurn(ctx context.Context, st store.Store, partition string) (*Turn, error) {
	q, ok := st.(store.CommitQueue)
	if !ok {
		return nil, nil
	}
	h, _, err := st.Head(ctx, partition)
	if err != nil {
		return nil, fmt.Errorf("engine: read head for the commit turn: %w", err)
	}
	qs := &queueState{q: q, partition: partition, seen: h}
	for polls := 0; ; polls++ {
		if qs.ticket == 0 {
			if err := qs.take(ctx); err != nil {
				return nil, err
			}
		}
		if qs.seen.Turn == qs.ticket-1 {
			return &Turn{qs: qs}, nil
		}
		if polls > maxQueuePolls {
			return nil, syncerr.New(syncerr.RateLimited, "partition is too busy: waited %d reads for a commit turn", maxQueuePolls)
		}
		// A turn past the ticket clears it (notInTurn): take another.
		if err := qs.notInTurn(ctx, qs.seen); err != nil {
			return nil, err
		}
		if err := qs.wait(ctx); err != nil {
			return nil, fmt.Errorf("engine: wait for the commit turn: %w", err)
		}
		if qs.seen, _, err = st.Head(ctx, partition); err != nil {
			return nil, fmt.Errorf("engine: read head for the commit turn: %w", err)
		}
	}
}

// Ticket is the held ticket (0 on a nil Turn).
func (t *Turn) Ticket() int64 {
	if t == nil {
		return 0
	}
	return t.qs.ticket
}

// Release passes the turn to the next ticket (one conditional write, a
// no-op when the turn moved on meanwhile); nil-safe, and it runs even
// when ctx has ended.
func (t *Turn) Release(ctx context.Context) {
	if t == nil {
		return
	}
	t.qs.release(ctx)
}
