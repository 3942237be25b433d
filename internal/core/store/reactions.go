package store

import (
	"cmp"
	"context"
)

// PlannedReaction is one durable server reaction planned for a commit
// (SPEC §6.9 "Planned record"). It is stored with the commit it belongs
// to (Commit.Reactions), so it is as atomic as the commit: a store that
// logs the commit logs its reactions.
type PlannedReaction struct {
	Key         string
	Type        string
	Version     int32
	Payload     []byte // normalized JSON
	MaxAttempts int32
}

// ReactionState is where a reaction is in its delivery (§6.9 "Delivery
// state machine").
type ReactionState uint8

// The §6.9 states. Pending and Leased are live; Completed and Dead are
// terminal.
const (
	ReactionPending ReactionState = iota + 1
	ReactionLeased
	ReactionCompleted
	ReactionDead
)

// String names the state as the admin listing shows it.
func (s ReactionState) String() string {
	switch s {
	case ReactionPending:
		return "pending"
	case ReactionLeased:
		return "leased"
	case ReactionCompleted:
		return "completed"
	case ReactionDead:
		return "dead-letter"
	}
	return "unknown"
}

// ReactionID names a reaction within its partition: the source commit and
// the record's position in that commit's plan.
type ReactionID struct {
	Seq   int64
	Index int32
}

// CompareReactionIDs orders reactions as their commits are ordered (and
// by their place in a commit's plan).
func CompareReactionIDs(a, b ReactionID) int {
	if c := cmp.Compare(a.Seq, b.Seq); c != 0 {
		return c
	}
	return cmp.Compare(a.Index, b.Index)
}

// Reaction is the delivery record of one planned reaction.
type Reaction struct {
	ID ReactionID
	PlannedReaction
	ClientID, ClientCommitID string
	State                    ReactionState
	Attempts                 int32
	// DueAtMs is when a pending reaction may be claimed; for a leased one,
	// when its lease expires.
	DueAtMs int64
	// Owner is the lease-owner token of a leased reaction.
	Owner string
	// FinishedAtMs is the completion or dead-letter time.
	FinishedAtMs int64
	// FailureCode and FailureDetails (bounded plain JSON) describe the
	// last failure; raw error text is never stored (§6.9).
	FailureCode    string
	FailureDetails []byte
}

// ReactionStore is the storage of §6.9 reactions beside the commit log.
// Records reach it from the log (Commit.Reactions) through
// EnqueueReactions, which the reaction runner and Prune call: a commit's
// records are never lost between the two, because Prune enqueues the
// records of every commit it removes.
type ReactionStore interface {
	// ReactionCursor is the seq through which the log's records were
	// enqueued (0 at first).
	ReactionCursor(ctx context.Context, partition string) (int64, error)
	// AdvanceReactionCursor moves the cursor from `from` to `to` (> from);
	// ok is false when it was not at `from` any more (another runner moved
	// it: nothing is lost, both enqueue idempotently).
	AdvanceReactionCursor(ctx context.Context, partition string, from, to int64) (ok bool, err error)
	// EnqueueReactions creates each reaction that does not exist yet, in
	// the state given (pending); an existing one is left as it is.
	EnqueueReactions(ctx context.Context, partition string, rs []Reaction) error
	// DueReactions calls fn, oldest first (commit order), with the live
	// reactions of the given types that a worker may claim at nowMs:
	// pending and due, or leased with an expired lease; at most limit.
	DueReactions(ctx context.Context, partition string, types []string, nowMs int64, limit int, fn func(*Reaction) bool) error
	// ClaimReaction leases reaction id to owner until nowMs+leaseMs and
	// increments its Attempts, only while it is still claimable at nowMs;
	// ok false when another worker got it first. One conditional write:
	// concurrent workers get disjoint leases.
	ClaimReaction(ctx context.Context, partition string, id ReactionID, owner string, nowMs, leaseMs int64) (r *Reaction, ok bool, err error)
	// UpdateReaction replaces a leased reaction's state with r (a longer
	// lease, pending again with a later due time, completed or
	// dead-lettered), only while it is still leased to owner; ok false
	// means another worker owns it now (a stale worker cannot alter it).
	UpdateReaction(ctx context.Context, partition, owner string, r *Reaction) (ok bool, err error)
	// HasLiveReactions reports whether any reaction of the partition is
	// pending or leased.
	HasLiveReactions(ctx context.Context, partition string) (bool, error)
	// ResetDeadReaction makes a dead-lettered reaction pending and due at
	// nowMs with no attempts and no failure; ok false when it is not
	// dead-lettered (§6.9 retryDeadLetterReaction).
	ResetDeadReaction(ctx context.Context, partition string, id ReactionID, nowMs int64) (ok bool, err error)
	// PruneReactions deletes at most limit terminal reactions: completed
	// ones finished strictly before completedBefore and dead-lettered ones
	// strictly before deadBefore. It never deletes a live one.
	PruneReactions(ctx context.Context, partition string, completedBefore, deadBefore int64, limit int) (completed, dead int, more bool, err error)
	// ListReactions calls fn for each reaction of the partition, oldest
	// first, until fn returns false.
	ListReactions(ctx context.Context, partition string, fn func(*Reaction) bool) error
	// DueReactionPartitions calls fn with each partition that may have
	// live reactions (a hint set the scheduled runner sweeps), with a
	// token for ClearReactionsDue.
	DueReactionPartitions(ctx context.Context, fn func(partition, token string) bool) error
	// ClearReactionsDue removes partition from the hint set unless it was
	// marked again since token was read.
	ClearReactionsDue(ctx context.Context, partition, token string) error
}
