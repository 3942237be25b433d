package enginetest

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// LeaseTTL is the lease window of the lease suite: 15 minutes, the
// reference's default.
const LeaseTTL = 15 * time.Minute

const leaseTTLMs = int64(LeaseTTL / time.Millisecond)

// RunLeases is the auth-lease suite (§7.3) over a store that keeps
// leases: issuance and sliding refresh on authorized rounds in every wire
// version, serving rounds from a valid lease during a resolver outage
// without widening the leased scopes, expiry, revocation, and failing
// closed when the resolver throws or the feature is off.
func RunLeases(t *testing.T, stores Stores) {
	t.Run("issued-and-slid-in-every-wire-version", func(t *testing.T) { leasesIssued(t, stores) })
	t.Run("outage-served-then-expired", func(t *testing.T) { leasesOutage(t, stores) })
	t.Run("revocation", func(t *testing.T) { leasesRevoked(t, stores) })
	t.Run("throwing-resolver-fails-closed", func(t *testing.T) { leasesThrow(t, stores) })
	t.Run("feature-off", func(t *testing.T) { leasesOff(t, stores) })
}

func leaseHarness(t *testing.T, stores Stores) *Harness {
	st, segs := stores(t)
	h := New(t, st, segs, Options{LeaseTTL: LeaseTTL})
	h.Grants.Set("alice", p1)
	return h
}

// subs is one subscription of tasks per project, in order.
func subs(projects ...string) []wire.Subscription {
	out := make([]wire.Subscription, len(projects))
	for i, p := range projects {
		out[i] = wire.Subscription{ID: "s-" + p, Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{p}}}, Cursor: -1}
	}
	return out
}

// round sends one request with commits and (when projects are given) a
// pull of those projects' tasks.
func (c *Client) round(commits []wire.PushCommit, projects ...string) (*wire.Message, error) {
	var pull *wire.PullHeader
	if len(projects) > 0 {
		pull = &wire.PullHeader{Accept: c.Accept}
	}
	return c.Send(c.Request(commits, pull, subs(projects...)))
}

func taskCommit(c *Client, commitID, rowID, project string) []wire.PushCommit {
	return []wire.PushCommit{{ClientCommitID: commitID, Operations: []wire.Operation{Upsert("tasks", rowID, c.Task(rowID, project, "t", false), -1)}}}
}

// leaseFrame returns the response's LEASE frame, checking it is the one
// right after RESP_HEADER (§1.6, §7.3.2); nil when there is none.
func leaseFrame(t testing.TB, resp *wire.Message) *wire.Lease {
	t.Helper()
	var found *wire.Lease
	for i, f := range resp.Frames {
		if l, ok := f.(*wire.Lease); ok {
			if i != 1 || found != nil {
				t.Fatalf("LEASE at frame %d (want exactly one, right after RESP_HEADER)", i)
			}
			found = l
		}
	}
	return found
}

// mustLease runs a round that must succeed and carry a LEASE frame.
func mustLease(t testing.TB, c *Client, commits []wire.PushCommit, projects ...string) (*wire.Lease, *wire.Message) {
	t.Helper()
	resp, err := c.round(commits, projects...)
	if err != nil {
		t.Fatalf("round: %v", err)
	}
	l := leaseFrame(t, resp)
	if l == nil || l.LeaseID == "" {
		t.Fatalf("an authorized round must carry a LEASE frame with an id, got %+v", l)
	}
	return l, resp
}

// mustServe runs a round that must succeed without a LEASE frame.
func mustServe(t testing.TB, c *Client, commits []wire.PushCommit, projects ...string) *wire.Message {
	t.Helper()
	resp, err := c.round(commits, projects...)
	if err != nil {
		t.Fatalf("round: %v", err)
	}
	if l := leaseFrame(t, resp); l != nil {
		t.Fatalf("this round must not issue or refresh a lease, got %+v", l)
	}
	return resp
}

// wantRoundError runs a round that must fail request-level with code.
func wantRoundError(t testing.TB, c *Client, code syncerr.Code, status int, commits []wire.PushCommit, projects ...string) {
	t.Helper()
	_, err := c.round(commits, projects...)
	se := syncerr.As(err)
	if se == nil || se.Code != code {
		t.Fatalf("want request-level %s, got %v", code, err)
	}
	if se.HTTPStatus() != status {
		t.Fatalf("%s: HTTP status %d, want %d", code, se.HTTPStatus(), status)
	}
}

func pushResults(resp *wire.Message) []*wire.PushResult {
	var out []*wire.PushResult
	for _, f := range resp.Frames {
		if r, ok := f.(*wire.PushResult); ok {
			out = append(out, r)
		}
	}
	return out
}

func subStatuses(t testing.TB, resp *wire.Message) []wire.SubStatus {
	t.Helper()
	var out []wire.SubStatus
	for _, s := range Sections(t, resp) {
		out = append(out, s.Start.Status)
	}
	return out
}

func storedLease(t testing.TB, h *Harness, partition, clientID string) store.Lease {
	t.Helper()
	l, ok, err := h.Store.(store.LeaseStore).Lease(context.Background(), partition, clientID)
	if err != nil || !ok {
		t.Fatalf("stored lease of %s/%s: ok %v err %v", partition, clientID, ok, err)
	}
	return l
}

func leasesIssued(t *testing.T, stores Stores) {
	h := leaseHarness(t, stores)
	for _, v := range []uint16{wire.Version1, wire.Version2, wire.Version3} {
		clientID := "dev-v" + string(rune('0'+v))
		var c *Client
		if v == wire.Version3 {
			c = h.ClientV3("tenant", "alice", clientID)
		} else {
			c = h.ClientV(v, "tenant", "alice", clientID)
		}
		// §7.3.3: expiresAtMs = issuedAt + ttl, issuedAt the server clock.
		first, _ := mustLease(t, c, nil, "p1")
		if want := h.Clock.Now() + leaseTTLMs; first.ExpiresAtMs != want {
			t.Fatalf("v%d: expiresAtMs %d, want now+ttl %d", v, first.ExpiresAtMs, want)
		}
		// A push-only round is authorized too and slides the same handle.
		h.Clock.Advance(60_000)
		second, resp := mustLease(t, c, taskCommit(c, "c1", "v"+clientID, "p1"))
		applied(t, pushResults(resp)[0])
		if second.LeaseID != first.LeaseID {
			t.Fatalf("v%d: a refresh minted %q, want the same handle %q (§7.3.3)", v, second.LeaseID, first.LeaseID)
		}
		if want := h.Clock.Now() + leaseTTLMs; second.ExpiresAtMs != want || second.ExpiresAtMs <= first.ExpiresAtMs {
			t.Fatalf("v%d: slid expiry %d, want %d (after %d)", v, second.ExpiresAtMs, want, first.ExpiresAtMs)
		}
		// The record holds what the resolver answered (§7.3.1).
		l := storedLease(t, h, "tenant", clientID)
		if l.ID != first.LeaseID || l.ActorID != "alice" || l.Revoked || len(l.AllowedScopes) != 1 || len(l.AllowedScopes["project_id"]) != 1 || l.AllowedScopes["project_id"][0] != "p1" || l.IssuedAtMs != h.Clock.Now() {
			t.Fatalf("v%d: stored lease %+v", v, l)
		}
	}
	// Two clients of one actor hold two leases (keyed by clientId).
	a := storedLease(t, h, "tenant", "dev-v1")
	b := storedLease(t, h, "tenant", "dev-v2")
	if a.ID == b.ID {
		t.Fatalf("two clients share lease id %q", a.ID)
	}
}

func leasesOutage(t *testing.T, stores Stores) {
	h := leaseHarness(t, stores)
	c := h.ClientV3("tenant", "alice", "dev-1")
	applied(t, c.Push("seed", Upsert("tasks", "t1", c.Task("t1", "p1", "one", false), -1)))
	held, _ := mustLease(t, c, nil, "p1")

	// §7.3.3: the resolver signals an outage. The round is authorized by
	// the lease, exactly as if the resolver had answered p1.
	h.Grants.Fail(true)
	h.Grants.Set("alice", engine.ScopeMap{"project_id": {"p1", "p2"}}) // unseen during the outage
	h.Clock.Advance(5 * 60_000)
	resp := mustServe(t, c, taskCommit(c, "off-1", "t3", "p1"), "p1", "p2")
	applied(t, pushResults(resp)[0])
	wantStored(t, h, "tasks", "t3", 1, Cols{"project_id": S("p1")})
	if got := subStatuses(t, resp); len(got) != 2 || got[0] != wire.SubActive || got[1] != wire.SubRevoked {
		t.Fatalf("lease-served pull: statuses %v, want [active revoked]: the lease never widens", got)
	}
	// A write outside the leased scopes is forbidden (§3.4 against the
	// leased map), not applied.
	resp = mustServe(t, c, taskCommit(c, "off-2", "t4", "p2"))
	rejected(t, pushResults(resp)[0], 0, wire.OpError, syncerr.Forbidden)
	wantAbsent(t, h, "tasks", "t4")
	// No refresh during the outage: the window ticks down.
	if l := storedLease(t, h, "tenant", "dev-1"); l.ExpiresAtMs != held.ExpiresAtMs {
		t.Fatalf("an outage-served round moved the expiry to %d (issued %d)", l.ExpiresAtMs, held.ExpiresAtMs)
	}

	// A client without a lease cannot sync on one.
	other := h.ClientV3("tenant", "alice", "dev-2") // its epoch round resolves nothing
	wantRoundError(t, other, syncerr.AuthLeaseRequired, http.StatusUnauthorized, taskCommit(other, "o-1", "t5", "p1"))
	wantAbsent(t, h, "tasks", "t5")

	// At expiresAtMs the lease is no longer valid (§7.3.1).
	h.Clock.Advance(held.ExpiresAtMs - h.Clock.Now())
	wantRoundError(t, c, syncerr.AuthLeaseRequired, http.StatusUnauthorized, taskCommit(c, "late", "t6", "p1"), "p1")
	wantAbsent(t, h, "tasks", "t6")

	// The resolver returns: a live round slides the same lease again and
	// the queued write applies.
	h.Grants.Fail(false)
	back, resp := mustLease(t, c, taskCommit(c, "late", "t6", "p1"), "p1")
	applied(t, pushResults(resp)[0])
	if back.LeaseID != held.LeaseID || back.ExpiresAtMs != h.Clock.Now()+leaseTTLMs {
		t.Fatalf("recovered lease %+v, want id %q expiring %d", back, held.LeaseID, h.Clock.Now()+leaseTTLMs)
	}
	if l := storedLease(t, h, "tenant", "dev-1"); len(l.AllowedScopes["project_id"]) != 2 {
		t.Fatalf("the refresh must re-capture the current scopes, got %v", l.AllowedScopes)
	}
}

func leasesRevoked(t *testing.T, stores Stores) {
	h := leaseHarness(t, stores)
	ctx := context.Background()
	c := h.Client("tenant", "alice", "dev-1")
	held, _ := mustLease(t, c, nil, "p1")

	if ok, err := h.Engine.RevokeLease(ctx, "tenant", held.LeaseID); err != nil || !ok {
		t.Fatalf("revoke: ok %v err %v", ok, err)
	}
	if ok, err := h.Engine.RevokeLease(ctx, "tenant", held.LeaseID); err != nil || !ok {
		t.Fatalf("revoking twice: ok %v err %v", ok, err)
	}
	for _, bad := range []struct{ partition, id string }{{"other-tenant", held.LeaseID}, {"tenant", "lease_unknown"}, {"tenant", held.LeaseID + "x"}, {"tenant", ""}} {
		if ok, err := h.Engine.RevokeLease(ctx, bad.partition, bad.id); err != nil || ok {
			t.Fatalf("revoke %q in %q: ok %v err %v, want nothing revoked", bad.id, bad.partition, ok, err)
		}
	}

	// §7.3.4: the next lease-authorized round fails; nothing is applied.
	h.Grants.Fail(true)
	wantRoundError(t, c, syncerr.AuthLeaseRevoked, http.StatusUnauthorized, taskCommit(c, "c1", "t2", "p1"), "p1")
	wantAbsent(t, h, "tasks", "t2")

	// A live round mints a fresh id; the revoked one never resurrects.
	h.Grants.Fail(false)
	fresh, resp := mustLease(t, c, taskCommit(c, "c1", "t2", "p1"), "p1")
	applied(t, pushResults(resp)[0])
	if fresh.LeaseID == held.LeaseID {
		t.Fatalf("a revoked lease id was handed out again: %q", fresh.LeaseID)
	}
	if ok, err := h.Engine.RevokeLease(ctx, "tenant", held.LeaseID); err != nil || ok {
		t.Fatalf("revoking the replaced id: ok %v err %v, want nothing revoked", ok, err)
	}
	// The fresh lease authorizes the next outage.
	h.Grants.Fail(true)
	resp = mustServe(t, c, taskCommit(c, "c2", "t3", "p1"), "p1")
	applied(t, pushResults(resp)[0])
}

func leasesThrow(t *testing.T, stores Stores) {
	h := leaseHarness(t, stores)
	c := h.Client("tenant", "alice", "dev-1")
	held, _ := mustLease(t, c, nil, "p1")
	// A resolver that throws is not an outage: §3.2 rule 5 fails loud
	// (revoke, forbid) and the lease neither authorizes nor slides.
	h.Grants.FailWith(errors.New("grant document is malformed"))
	h.Clock.Advance(60_000)
	resp := mustServe(t, c, taskCommit(c, "c1", "t2", "p1"), "p1")
	rejected(t, pushResults(resp)[0], 0, wire.OpError, syncerr.Forbidden)
	if got := subStatuses(t, resp); len(got) != 1 || got[0] != wire.SubRevoked {
		t.Fatalf("statuses %v, want [revoked]", got)
	}
	wantAbsent(t, h, "tasks", "t2")
	if l := storedLease(t, h, "tenant", "dev-1"); l.ExpiresAtMs != held.ExpiresAtMs {
		t.Fatalf("a throwing resolver slid the lease to %d", l.ExpiresAtMs)
	}
}

func leasesOff(t *testing.T, stores Stores) {
	st, segs := stores(t)
	h := New(t, st, segs, Options{})
	h.Grants.Set("alice", p1)
	c := h.Client("tenant", "alice", "dev-1")
	mustServe(t, c, taskCommit(c, "c1", "t1", "p1"), "p1")
	// Without leases an outage is the retryable error it always was
	// (sync.internal_error, which a version-2 client knows as
	// sync.rate_limited), never a lease code.
	h.Grants.Fail(true)
	_, err := c.round(taskCommit(c, "c2", "t2", "p1"), "p1")
	if se := syncerr.As(err); se == nil || se.Code != syncerr.RateLimited || !se.Entry().Retryable {
		t.Fatalf("outage without leases: want retryable sync.rate_limited, got %v", err)
	}
	if _, ok, err := st.(store.LeaseStore).Lease(context.Background(), "tenant", "dev-1"); ok || err != nil {
		t.Fatalf("a feature-off engine stored a lease (ok %v, err %v)", ok, err)
	}
}
