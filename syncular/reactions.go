package syncular

import (
	"context"
	"encoding/json"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/reactions"
)

// Change is one row an accepted commit changed, as it is after the
// commit (the candidate state).
type Change struct {
	Table   string
	RowID   string
	Deleted bool
	// Row is the row as a JSON object of its columns; nil for a delete.
	Row json.RawMessage
}

// Commit is an accepted commit as a reaction planner sees it.
type Commit struct {
	Partition      string
	ClientID       string
	ClientCommitID string
	ActorID        string
	Changes        []Change
}

// Reaction is one durable reaction a planner asks for (§6.9): Key is
// unique within the commit (1–256 bytes), Type names the handler (a
// code-like name such as "email.welcome"), Version is positive, Payload
// is plain JSON (at most 64 KiB, 16 levels), MaxAttempts 1–100 (0: 10).
type Reaction struct {
	Key         string
	Type        string
	Version     int32
	Payload     json.RawMessage
	MaxAttempts int
}

// ReactionPlanner plans the reactions of an accepted commit. It runs
// inside the push: no side effects (send nothing, call nothing); an error
// fails the push with a retryable server error and writes nothing.
type ReactionPlanner func(ctx context.Context, c *Commit) ([]Reaction, error)

// Delivery is one attempt at a reaction.
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
	// IdempotencyKey is the same on every attempt; pass it to the
	// external system when it accepts one (delivery is at least once).
	IdempotencyKey string

	extend func(context.Context, time.Duration) error
}

// ExtendLease keeps the reaction with this worker for d more, for a
// handler that runs longer than the lease (30 s).
func (d *Delivery) ExtendLease(ctx context.Context, by time.Duration) error { return d.extend(ctx, by) }

// ReactionHandler performs a reaction's side effect. Return nil when done;
// an error is retried with backoff (1 s doubling to 5 min) until
// MaxAttempts, then dead-lettered; Permanent dead-letters at once.
type ReactionHandler func(ctx context.Context, d *Delivery) error

// Permanent marks a failure that no retry can fix (an unknown version, an
// invalid address): the reaction is dead-lettered at once with code.
func Permanent(code string, err error) error { return reactions.Permanent(code, err) }

// Retryable gives a retryable failure a stable code for the records (the
// error text itself is never stored).
func Retryable(code string, err error) error { return reactions.Retryable(code, err) }

type plannerAdapter struct{ p ReactionPlanner }

func (a plannerAdapter) Plan(ctx context.Context, in *reactions.Input) ([]reactions.Planned, error) {
	c := &Commit{Partition: in.Partition, ClientID: in.ClientID, ClientCommitID: in.ClientCommitID, ActorID: in.ActorID}
	c.Changes = make([]Change, len(in.Changes))
	for i, ch := range in.Changes {
		c.Changes[i] = Change(ch)
	}
	rs, err := a.p(ctx, c)
	if err != nil {
		return nil, err
	}
	out := make([]reactions.Planned, len(rs))
	for i, r := range rs {
		out[i] = reactions.Planned(r)
	}
	return out, nil
}

type handlerAdapter struct{ h ReactionHandler }

func (a handlerAdapter) Handle(ctx context.Context, d *reactions.Delivery) error {
	pub := &Delivery{
		Partition: d.Partition, ClientID: d.ClientID, ClientCommitID: d.ClientCommitID, CommitSeq: d.CommitSeq,
		Key: d.Key, Type: d.Type, Version: d.Version, Payload: d.Payload, Attempt: d.Attempt, MaxAttempts: d.MaxAttempts,
		IdempotencyKey: d.IdempotencyKey, extend: d.ExtendLease,
	}
	return a.h(ctx, pub)
}
