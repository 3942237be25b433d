package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// revoke-lease revokes a lease issued by the engine's store layout
// (§7.3.4): the record is marked revoked, an unknown or replaced id
// revokes nothing and exits 1, and missing flags are a usage error.
func TestRevokeLease(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	now := time.Now().UnixMilli()
	// An id of the engine's shape: lease_<clientId base64url>.<random>.
	const id = "lease_ZGV2LTE.cmFuZG9tLWJpdHM"
	l, err := f.store.IssueLease(ctx, "tenant", "dev-1", store.Lease{ID: id, ActorID: "alice", AllowedScopes: map[string][]string{"project_id": {"p1"}}, IssuedAtMs: now, ExpiresAtMs: now + 60_000})
	if err != nil || l.ID != id {
		t.Fatalf("issue: %+v %v", l, err)
	}

	if r := f.run("revoke-lease", "-partition", "tenant"); r.code != exitUsage || !strings.Contains(r.stderr, "-lease ID") {
		t.Fatalf("missing -lease: %+v", r)
	}
	if r := f.run("revoke-lease", "-partition", "other", "-lease", id); r.code != exitFailure || !strings.Contains(r.stderr, "holds no lease") {
		t.Fatalf("other partition: %+v", r)
	}
	if r := f.run("revoke-lease", "-partition", "tenant", "-lease", "lease_bm9uZQ.eA"); r.code != exitFailure {
		t.Fatalf("unknown id: %+v", r)
	}
	if got, _, _ := f.store.Lease(ctx, "tenant", "dev-1"); got.Revoked {
		t.Fatal("a failed revocation revoked the lease")
	}
	if r := f.run("revoke-lease", "-partition", "tenant", "-lease", id); r.code != exitOK || !strings.Contains(r.stdout, "revoked lease") {
		t.Fatalf("revoke: %+v", r)
	}
	if got, ok, err := f.store.Lease(ctx, "tenant", "dev-1"); err != nil || !ok || !got.Revoked || got.ID != id {
		t.Fatalf("after revoke-lease: %+v ok %v err %v", got, ok, err)
	}
}
