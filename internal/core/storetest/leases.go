package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// RunLeaseStore is the store.LeaseStore contract (§7.3.1, §7.3.3,
// §7.3.4): a refresh keeps the id, another actor or a revocation makes
// the next issuance take the fresh id, revocation is by exact id and
// durable, keys are per (partition, clientId), and a revocation racing
// refreshes is never undone.
func RunLeaseStore(t *testing.T, newStore func(t *testing.T) store.LeaseStore) {
	ctx := context.Background()
	lease := func(id, actor string, issued int64, scopes ...string) store.Lease {
		return store.Lease{ID: id, ActorID: actor, AllowedScopes: map[string][]string{"project_id": scopes}, IssuedAtMs: issued, ExpiresAtMs: issued + 1000}
	}
	t.Run("lifecycle", func(t *testing.T) {
		s := newStore(t)
		if _, ok, err := s.Lease(ctx, "p", "c1"); ok || err != nil {
			t.Fatalf("empty store: ok %v err %v", ok, err)
		}
		got, err := s.IssueLease(ctx, "p", "c1", lease("id-1", "alice", 10, "a"))
		if err != nil || got.ID != "id-1" || got.ExpiresAtMs != 1010 || got.Revoked {
			t.Fatalf("first issue: %+v %v", got, err)
		}
		// A refresh slides the stored id and re-captures the scopes.
		got, err = s.IssueLease(ctx, "p", "c1", lease("id-2", "alice", 20, "a", "b"))
		if err != nil || got.ID != "id-1" || got.IssuedAtMs != 20 || got.ExpiresAtMs != 1020 || len(got.AllowedScopes["project_id"]) != 2 {
			t.Fatalf("refresh: %+v %v", got, err)
		}
		read, ok, err := s.Lease(ctx, "p", "c1")
		if err != nil || !ok || read.ID != "id-1" || read.ActorID != "alice" || read.IssuedAtMs != 20 || read.ExpiresAtMs != 1020 || read.Revoked ||
			fmt.Sprint(read.AllowedScopes) != fmt.Sprint(map[string][]string{"project_id": {"a", "b"}}) {
			t.Fatalf("read back: %+v ok %v err %v", read, ok, err)
		}
		// Keys are per (partition, clientId).
		if _, ok, _ := s.Lease(ctx, "p", "c2"); ok {
			t.Fatal("another clientId sees the lease")
		}
		if _, ok, _ := s.Lease(ctx, "q", "c1"); ok {
			t.Fatal("another partition sees the lease")
		}
		// Revocation is by exact id, and durable.
		for _, wrong := range [][2]string{{"q", "id-1"}, {"p", "id-2"}} {
			if ok, err := s.RevokeLease(ctx, wrong[0], "c1", wrong[1]); ok || err != nil {
				t.Fatalf("revoke %v: ok %v err %v", wrong, ok, err)
			}
		}
		if ok, err := s.RevokeLease(ctx, "p", "c1", "id-1"); !ok || err != nil {
			t.Fatalf("revoke: ok %v err %v", ok, err)
		}
		if read, _, _ := s.Lease(ctx, "p", "c1"); !read.Revoked || read.ID != "id-1" {
			t.Fatalf("after revoke: %+v", read)
		}
		// The next issuance mints the fresh id; the revoked one is gone.
		if got, err = s.IssueLease(ctx, "p", "c1", lease("id-3", "alice", 30, "a")); err != nil || got.ID != "id-3" || got.Revoked {
			t.Fatalf("issue after revoke: %+v %v", got, err)
		}
		if ok, _ := s.RevokeLease(ctx, "p", "c1", "id-1"); ok {
			t.Fatal("the replaced id was revocable again")
		}
		// Another actor on the clientId gets a fresh id, never the stored one.
		if got, err = s.IssueLease(ctx, "p", "c1", lease("id-4", "bob", 40, "z")); err != nil || got.ID != "id-4" || got.ActorID != "bob" {
			t.Fatalf("issue for another actor: %+v %v", got, err)
		}
	})
	t.Run("revocation-survives-concurrent-refreshes", func(t *testing.T) {
		s := newStore(t)
		if _, err := s.IssueLease(ctx, "p", "c1", lease("first", "alice", 0, "a")); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for w := range 4 {
			wg.Go(func() {
				for i := range 8 {
					if _, err := s.IssueLease(ctx, "p", "c1", lease(fmt.Sprintf("fresh-%d-%d", w, i), "alice", int64(i+1))); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		ok, err := s.RevokeLease(ctx, "p", "c1", "first")
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if err != nil || !ok {
			t.Fatalf("revoke during refreshes: ok %v err %v", ok, err)
		}
		// Whatever interleaving: "first" is never live again.
		read, _, err := s.Lease(ctx, "p", "c1")
		if err != nil || (read.ID == "first" && !read.Revoked) {
			t.Fatalf("after the race: %+v %v (a revoked id is live again)", read, err)
		}
	})
}
