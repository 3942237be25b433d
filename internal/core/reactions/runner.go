package reactions

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// Delivery is one attempt at one reaction, as a handler receives it.
type Delivery struct {
	Partition      string
	ClientID       string
	ClientCommitID string
	CommitSeq      int64
	Key            string
	Type           string
	Version        int32
	Payload        json.RawMessage
	Attempt        int
	MaxAttempts    int
	// IdempotencyKey is stable across attempts; pass it to any external
	// system that accepts one (§6.9: delivery is at least once).
	IdempotencyKey string

	extend func(ctx context.Context, d time.Duration) error
}

// ExtendLease keeps the reaction leased for d from now, for a handler
// that runs longer than the runner's lease. It fails when another worker
// has taken the reaction over.
func (d *Delivery) ExtendLease(ctx context.Context, by time.Duration) error {
	return d.extend(ctx, by)
}

// Handler runs one reaction type's side effect.
type Handler interface {
	Handle(ctx context.Context, d *Delivery) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, d *Delivery) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, d *Delivery) error { return f(ctx, d) }

// Failure is a handler error with a stable code and optional plain JSON
// details, which is what the store keeps of a failure (never the error
// text). Permanent failures dead-letter at once.
type Failure struct {
	Code      string
	Details   json.RawMessage
	Permanent bool
	Err       error
}

func (f *Failure) Error() string {
	if f.Err != nil {
		return f.Code + ": " + f.Err.Error()
	}
	return f.Code
}

func (f *Failure) Unwrap() error { return f.Err }

// Permanent marks err as a permanent failure: the reaction is
// dead-lettered without further attempts.
func Permanent(code string, err error) error { return &Failure{Code: code, Permanent: true, Err: err} }

// Retryable marks err as a retryable failure with a stable code (an
// ordinary error is retryable too, under code reaction.handler_failed).
func Retryable(code string, err error) error { return &Failure{Code: code, Err: err} }

// Failure codes the runner itself records.
const (
	CodeHandlerFailed = "reaction.handler_failed"
	CodeHandlerPanic  = "reaction.handler_panicked"
	CodeNoHandler     = "reaction.no_handler"
)

// Log is what the runner reads of the commit log.
type Log interface {
	Head(ctx context.Context, partition string) (store.Head, bool, error)
	ReadLog(ctx context.Context, partition string, afterSeq, throughSeq int64, fn func(*store.Commit) bool) error
}

// Runner delivers the reactions of a partition to registered handlers.
// It is safe to run any number of runners at once over one store.
type Runner struct {
	Log      Log
	Store    store.ReactionStore
	Handlers map[string]Handler
	// Lease is how long a claimed reaction stays with its worker before
	// another may take it (default 30 s).
	Lease time.Duration
	// InitialBackoff and MaxBackoff bound the retry delay
	// min(MaxBackoff, InitialBackoff·2^(attempt−1)) (defaults 1 s, 5 min).
	InitialBackoff, MaxBackoff time.Duration
	// Batch is how many due reactions one pass reads (default 25).
	Batch  int
	Now    func() time.Time
	Logger *slog.Logger
}

// Stats counts what one run did.
type Stats struct {
	Enqueued, Completed, Retried, DeadLettered, Skipped int
}

func (r *Runner) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Runner) logger() *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// Enqueue copies the records of every logged commit after the
// partition's reaction cursor, through throughSeq (≤ 0: the head), into
// reaction records, then moves the cursor. Replays are harmless: an
// existing record is never overwritten. Commits below the horizon were
// enqueued by the prune that removed them.
func Enqueue(ctx context.Context, lg Log, rs store.ReactionStore, partition string, throughSeq int64, nowMs int64) (int, error) {
	cursor, err := rs.ReactionCursor(ctx, partition)
	if err != nil {
		return 0, fmt.Errorf("reactions: reading the cursor of %q: %w", partition, err)
	}
	head, ok, err := lg.Head(ctx, partition)
	if err != nil || !ok {
		return 0, err
	}
	if throughSeq <= 0 || throughSeq > head.MaxCommitSeq {
		throughSeq = head.MaxCommitSeq
	}
	from := max(cursor, head.HorizonSeq)
	if throughSeq <= from {
		if from > cursor {
			_, err := rs.AdvanceReactionCursor(ctx, partition, cursor, from)
			return 0, err
		}
		return 0, nil
	}
	var batch []store.Reaction
	n := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := rs.EnqueueReactions(ctx, partition, batch); err != nil {
			return fmt.Errorf("reactions: enqueueing in %q: %w", partition, err)
		}
		n += len(batch)
		batch = batch[:0]
		return nil
	}
	var ferr error
	err = lg.ReadLog(ctx, partition, from, throughSeq, func(c *store.Commit) bool {
		for i, p := range c.Reactions {
			batch = append(batch, store.Reaction{
				ID: store.ReactionID{Seq: c.Seq, Index: int32(i)}, PlannedReaction: p,
				ClientID: c.ClientID, ClientCommitID: c.ClientCommitID,
				State: store.ReactionPending, DueAtMs: nowMs,
			})
		}
		if len(batch) >= 100 {
			ferr = flush()
		}
		return ferr == nil
	})
	if err == nil {
		err = ferr
	}
	if err == nil {
		err = flush()
	}
	if err != nil {
		return n, fmt.Errorf("reactions: reading the log of %q after %d: %w", partition, from, err)
	}
	if _, err := rs.AdvanceReactionCursor(ctx, partition, cursor, throughSeq); err != nil {
		return n, fmt.Errorf("reactions: moving the cursor of %q: %w", partition, err)
	}
	return n, nil
}

// RunPartition enqueues what the log holds and delivers every due
// reaction of the partition whose type has a handler, oldest first.
func (r *Runner) RunPartition(ctx context.Context, partition string) (Stats, error) {
	var st Stats
	n, err := Enqueue(ctx, r.Log, r.Store, partition, 0, r.now().UnixMilli())
	st.Enqueued = n
	if err != nil {
		return st, err
	}
	types := make([]string, 0, len(r.Handlers))
	for t := range r.Handlers {
		types = append(types, t)
	}
	sort.Strings(types)
	if len(types) == 0 {
		return st, nil
	}
	owner := newOwner()
	batch := r.Batch
	if batch <= 0 {
		batch = 25
	}
	for ctx.Err() == nil {
		var due []store.Reaction
		err := r.Store.DueReactions(ctx, partition, types, r.now().UnixMilli(), batch, func(x *store.Reaction) bool {
			due = append(due, *x)
			return true
		})
		if err != nil {
			return st, fmt.Errorf("reactions: listing due reactions of %q: %w", partition, err)
		}
		if len(due) == 0 {
			return st, nil
		}
		for i := range due {
			if err := r.deliver(ctx, partition, owner, due[i].ID, &st); err != nil {
				return st, err
			}
		}
		if len(due) < batch {
			return st, nil
		}
	}
	return st, ctx.Err()
}

func (r *Runner) lease() time.Duration {
	if r.Lease > 0 {
		return r.Lease
	}
	return 30 * time.Second
}

// deliver claims one reaction, runs its handler and records the outcome.
func (r *Runner) deliver(ctx context.Context, partition, owner string, id store.ReactionID, st *Stats) error {
	lease := r.lease()
	x, ok, err := r.Store.ClaimReaction(ctx, partition, id, owner, r.now().UnixMilli(), lease.Milliseconds())
	if err != nil {
		return fmt.Errorf("reactions: claiming %d/%d in %q: %w", id.Seq, id.Index, partition, err)
	}
	if !ok {
		st.Skipped++
		return nil
	}
	d := &Delivery{
		Partition: partition, ClientID: x.ClientID, ClientCommitID: x.ClientCommitID, CommitSeq: x.ID.Seq,
		Key: x.Key, Type: x.Type, Version: x.Version, Payload: json.RawMessage(x.Payload),
		Attempt: int(x.Attempts), MaxAttempts: int(x.MaxAttempts),
		IdempotencyKey: IdempotencyKey(partition, x.ClientID, x.ClientCommitID, x.Key),
	}
	d.extend = func(ctx context.Context, by time.Duration) error {
		x.DueAtMs = r.now().Add(by).UnixMilli()
		ok, err := r.Store.UpdateReaction(ctx, partition, owner, x)
		if err == nil && !ok {
			err = errors.New("reactions: the lease was taken over by another worker")
		}
		return err
	}
	hctx, cancel := context.WithTimeout(ctx, lease)
	herr := r.call(hctx, d)
	cancel()
	now := r.now()
	r.settle(x, herr, now, st)
	ok, err = r.Store.UpdateReaction(ctx, partition, owner, x)
	if err != nil {
		return fmt.Errorf("reactions: recording %d/%d in %q: %w", id.Seq, id.Index, partition, err)
	}
	if !ok {
		// The lease expired and another worker took it: its outcome counts.
		r.logger().Warn("reactions: lease lost before the outcome was recorded", "partition", partition, "seq", id.Seq, "index", id.Index, "type", x.Type)
	}
	return nil
}

// call runs the handler, turning a panic into a retryable failure.
func (r *Runner) call(ctx context.Context, d *Delivery) (err error) {
	h := r.Handlers[d.Type]
	if h == nil {
		return &Failure{Code: CodeNoHandler, Permanent: true}
	}
	defer func() {
		if p := recover(); p != nil {
			err = &Failure{Code: CodeHandlerPanic}
		}
	}()
	return h.Handle(ctx, d)
}

// settle moves x to its next state after an attempt that ended in herr.
func (r *Runner) settle(x *store.Reaction, herr error, now time.Time, st *Stats) {
	x.Owner = ""
	if herr == nil {
		x.State, x.FinishedAtMs, x.FailureCode, x.FailureDetails = store.ReactionCompleted, now.UnixMilli(), "", nil
		st.Completed++
		r.logger().Info("reaction.completed", "seq", x.ID.Seq, "index", x.ID.Index, "type", x.Type, "attempt", x.Attempts)
		return
	}
	code, details, permanent := CodeHandlerFailed, json.RawMessage(nil), false
	var f *Failure
	if errors.As(herr, &f) {
		code, details, permanent = f.Code, f.Details, f.Permanent
	}
	if len(details) > maxDetailsBytes {
		details = nil
	}
	if details != nil {
		if norm, err := normalizePayload(details); err == nil {
			details = norm
		} else {
			details = nil
		}
	}
	x.FailureCode, x.FailureDetails = code, details
	if permanent || x.Attempts >= x.MaxAttempts {
		x.State, x.FinishedAtMs = store.ReactionDead, now.UnixMilli()
		st.DeadLettered++
		r.logger().Warn("reaction.dead_lettered", "seq", x.ID.Seq, "index", x.ID.Index, "type", x.Type, "attempt", x.Attempts, "code", code)
		return
	}
	x.State, x.DueAtMs = store.ReactionPending, now.Add(r.backoff(int(x.Attempts))).UnixMilli()
	st.Retried++
	r.logger().Info("reaction.retried", "seq", x.ID.Seq, "index", x.ID.Index, "type", x.Type, "attempt", x.Attempts, "code", code)
}

// backoff is min(MaxBackoff, InitialBackoff·2^(attempt−1)).
func (r *Runner) backoff(attempt int) time.Duration {
	initial, most := r.InitialBackoff, r.MaxBackoff
	if initial <= 0 {
		initial = time.Second
	}
	if most <= 0 {
		most = 5 * time.Minute
	}
	d := initial
	for i := 1; i < attempt && d < most; i++ {
		d *= 2
	}
	return min(d, most)
}

// Sweep runs every partition the store marks as having live reactions
// (what a schedule drives for retries and for wakes that were missed),
// and unmarks those left with none.
func (r *Runner) Sweep(ctx context.Context) (Stats, error) {
	type mark struct{ partition, token string }
	var marks []mark
	if err := r.Store.DueReactionPartitions(ctx, func(p, tok string) bool {
		marks = append(marks, mark{p, tok})
		return true
	}); err != nil {
		return Stats{}, fmt.Errorf("reactions: listing partitions with reactions: %w", err)
	}
	var total Stats
	var errs []error
	for _, m := range marks {
		st, err := r.RunPartition(ctx, m.partition)
		total.add(st)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		live, err := r.Store.HasLiveReactions(ctx, m.partition)
		if err == nil && !live {
			err = r.Store.ClearReactionsDue(ctx, m.partition, m.token)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("reactions: unmarking %q: %w", m.partition, err))
		}
	}
	return total, errors.Join(errs...)
}

func (s *Stats) add(o Stats) {
	s.Enqueued += o.Enqueued
	s.Completed += o.Completed
	s.Retried += o.Retried
	s.DeadLettered += o.DeadLettered
	s.Skipped += o.Skipped
}

// newOwner is a fresh opaque lease-owner token for one runner call.
func newOwner() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
