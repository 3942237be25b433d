package store

import "context"

// Lease is a stored auth lease (§7.3.1): the allowed scopes an actor's
// resolver granted at the last authorized round of one
// (partition, clientId), valid until ExpiresAtMs unless revoked.
type Lease struct {
	// ID is the revocation handle and the id the LEASE frame carries;
	// it stays the same across refreshes (§7.3.3).
	ID      string
	ActorID string
	// AllowedScopes is variable → allowed values ("*": any value), the
	// resolver's answer at IssuedAtMs.
	AllowedScopes map[string][]string
	IssuedAtMs    int64
	// ExpiresAtMs is the first instant the lease is no longer valid.
	ExpiresAtMs int64
	// Revoked is durable: a revoked lease never authorizes again, and its
	// ID is never handed out again (§7.3.4).
	Revoked bool
}

// Valid reports whether l may authorize a round at nowMs (§7.3.1).
func (l *Lease) Valid(nowMs int64) bool { return !l.Revoked && nowMs < l.ExpiresAtMs }

// LeaseStore keeps the auth leases of §7.3, one per (partition, clientId).
// It is optional: an engine without one never issues a lease. Every read
// is strongly consistent, so a revocation is seen by the next round.
type LeaseStore interface {
	// Lease returns the lease stored for (partition, clientID), revoked
	// or not; ok is false when there is none.
	Lease(ctx context.Context, partition, clientID string) (l Lease, ok bool, err error)
	// IssueLease issues or slides the lease of (partition, clientID) to
	// l's actor, scopes and times, atomically: the stored ID is kept
	// when the stored lease is of l.ActorID and not revoked; otherwise
	// (none stored, another actor, revoked) l.ID, a fresh id, replaces
	// the record. A concurrent revocation is never undone. It returns
	// the lease as stored.
	IssueLease(ctx context.Context, partition, clientID string, l Lease) (Lease, error)
	// RevokeLease marks the lease of (partition, clientID) revoked when
	// its ID is leaseID; ok is false when the stored lease (if any) has
	// another ID, so nothing was revoked. Revoking twice is ok.
	RevokeLease(ctx context.Context, partition, clientID, leaseID string) (ok bool, err error)
}
