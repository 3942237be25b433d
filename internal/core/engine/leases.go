package engine

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// Auth leases (§7.3). With Config.Leases and Config.LeaseTTL set, every
// round whose resolver answered (§3.2 rule 3, not a throw) issues or
// slides the lease of its (partition, clientId) and carries it in a
// LEASE frame right after RESP_HEADER. A round whose resolver signals an
// outage (ErrResolverUnavailable) is authorized by that stored lease
// instead, exactly as if the resolver had returned the lease's scopes,
// while the lease is valid, of the same actor and not revoked; it is not
// refreshed then. Without a usable lease such a round fails request-level
// (sync.auth_lease_required, or sync.auth_lease_revoked). Without leases
// configured an outage fails retryably, as before, and no LEASE frame is
// ever written.

// leasePrefix starts every lease id this engine mints. The id carries its
// clientId (base64url), so a revocation by id finds its record with one
// keyed read and no index: "lease_<clientId b64>.<128 random bits b64>".
const leasePrefix = "lease_"

// newLeaseID mints a fresh, unpredictable lease id for clientID.
func newLeaseID(clientID string) string {
	var r [16]byte
	if _, err := rand.Read(r[:]); err != nil {
		panic(fmt.Sprintf("engine: crypto/rand failed: %v", err))
	}
	return leasePrefix + base64.RawURLEncoding.EncodeToString([]byte(clientID)) + "." + base64.RawURLEncoding.EncodeToString(r[:])
}

// leaseClientID returns the clientId a lease id of newLeaseID names.
func leaseClientID(leaseID string) (string, bool) {
	rest, ok := strings.CutPrefix(leaseID, leasePrefix)
	if !ok {
		return "", false
	}
	enc, random, ok := strings.Cut(rest, ".")
	if !ok || random == "" || strings.Contains(random, ".") {
		return "", false
	}
	id, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return "", false
	}
	return string(id), true
}

// LeasesEnabled reports whether this engine issues auth leases (§7.3.3).
func (e *Engine) LeasesEnabled() bool { return e.leases != nil }

// RevokeLease revokes the auth lease leaseID of partition (§7.3.4): the
// next round that would be authorized by it fails with
// sync.auth_lease_revoked, and the next live-authorized round of its
// client mints a fresh id. ok is false when the partition holds no lease
// with that id (an unknown id, or one already replaced); revoking a
// revoked lease again is ok. It is the host's revocation hook.
func (e *Engine) RevokeLease(ctx context.Context, partition, leaseID string) (ok bool, err error) {
	if e.leases == nil {
		return false, errors.New("engine: auth leases are not configured")
	}
	if ok, err = RevokeLease(ctx, e.leases, partition, leaseID); ok {
		e.log.InfoContext(ctx, "auth lease revoked (§7.3.4)", "partition", partition)
	}
	return ok, err
}

// RevokeLease is Engine.RevokeLease on a lease store directly, for tools
// that run no engine (the admin command).
func RevokeLease(ctx context.Context, leases store.LeaseStore, partition, leaseID string) (ok bool, err error) {
	clientID, parsed := leaseClientID(leaseID)
	if !parsed || partition == "" {
		return false, nil
	}
	if ok, err = leases.RevokeLease(ctx, partition, clientID, leaseID); err != nil {
		return false, fmt.Errorf("revoke auth lease: %w", err)
	}
	return ok, nil
}

// leaseScopes authorizes a round whose resolver signalled an outage by
// the stored lease of its client (§7.3.3): the lease's allowed scopes
// when it is the actor's, not revoked and not expired at the request's
// time; otherwise the request-level lease error. It never refreshes.
func (e *Engine) leaseScopes(ctx context.Context, rs *reqState) (ScopeMap, error) {
	l, ok, err := e.leases.Lease(ctx, rs.auth.Partition, rs.clientID)
	if err != nil {
		return nil, storeErr(err, "read auth lease")
	}
	switch {
	case !ok || l.ActorID != rs.auth.ActorID:
		return nil, syncerr.New(syncerr.AuthLeaseRequired, "the scope authority is unavailable and this client holds no auth lease (§7.3.3)")
	case l.Revoked:
		return nil, syncerr.New(syncerr.AuthLeaseRevoked, "the scope authority is unavailable and this client's auth lease was revoked (§7.3.4)")
	case !l.Valid(rs.now):
		return nil, syncerr.New(syncerr.AuthLeaseRequired, "the scope authority is unavailable and this client's auth lease expired (§7.3.3)")
	}
	// The lease holds a past answer of the resolver: its keys are checked
	// like a live answer's (§3.2 rule 3), so a lease never authorizes a
	// variable no served version declares.
	for k := range l.AllowedScopes {
		if !e.variables[k] {
			return nil, syncerr.New(syncerr.InvalidSubscription, "the auth lease holds scope %q, which no table of any served schema version declares (§3.2)", k)
		}
	}
	e.log.DebugContext(ctx, "round authorized by an auth lease during a resolver outage (§7.3.3)", "partition", rs.auth.Partition, "actor", rs.auth.ActorID, "expiresAtMs", l.ExpiresAtMs)
	return ScopeMap(l.AllowedScopes), nil
}

// issueLease issues or slides the lease of a round whose resolver
// answered (§7.3.3) and returns its LEASE frame; nil when leases are off
// or the round was not live-authorized (a throw, or lease-served).
func (e *Engine) issueLease(ctx context.Context, rs *reqState) (*wire.Lease, error) {
	if e.leases == nil || !rs.resolvedLive {
		return nil, nil
	}
	l, err := e.leases.IssueLease(ctx, rs.auth.Partition, rs.clientID, store.Lease{
		ID:            newLeaseID(rs.clientID),
		ActorID:       rs.auth.ActorID,
		AllowedScopes: rs.allowed,
		IssuedAtMs:    rs.now,
		ExpiresAtMs:   rs.now + e.leaseTTL,
	})
	if err != nil {
		return nil, storeErr(err, "issue auth lease")
	}
	rs.report.LeaseIssued = true
	rs.lease = wire.Lease{LeaseID: l.ID, ExpiresAtMs: l.ExpiresAtMs}
	return &rs.lease, nil
}
