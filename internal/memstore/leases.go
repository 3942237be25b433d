package memstore

import (
	"context"
	"slices"
	"sync"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// leaseTable holds the auth leases (§7.3) by (partition, clientId). A
// lease is small and read once per round at most, so one lock for every
// partition is enough.
type leaseTable struct {
	mu sync.Mutex
	m  map[leaseKey]store.Lease
}

type leaseKey struct{ partition, clientID string }

var _ store.LeaseStore = (*Store)(nil)

// cloneScopes copies a scope map deeply: a stored lease shares nothing
// with its callers.
func cloneScopes(m map[string][]string) map[string][]string {
	out := make(map[string][]string, len(m))
	for k, v := range m {
		out[k] = slices.Clone(v)
	}
	return out
}

func cloneLease(l store.Lease) store.Lease {
	l.AllowedScopes = cloneScopes(l.AllowedScopes)
	return l
}

// Lease implements store.LeaseStore.
func (s *Store) Lease(ctx context.Context, partition, clientID string) (store.Lease, bool, error) {
	if err := ctx.Err(); err != nil {
		return store.Lease{}, false, err
	}
	t := &s.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.m[leaseKey{partition, clientID}]
	if !ok {
		return store.Lease{}, false, nil
	}
	return cloneLease(l), true, nil
}

// IssueLease implements store.LeaseStore: the decision and the write
// happen under one lock, so a revocation cannot slip between them.
func (s *Store) IssueLease(ctx context.Context, partition, clientID string, l store.Lease) (store.Lease, error) {
	if err := ctx.Err(); err != nil {
		return store.Lease{}, err
	}
	t := &s.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = make(map[leaseKey]store.Lease)
	}
	k := leaseKey{partition, clientID}
	if old, ok := t.m[k]; ok && old.ActorID == l.ActorID && !old.Revoked {
		l.ID = old.ID // a refresh slides the same handle (§7.3.3)
	}
	l.Revoked = false
	t.m[k] = cloneLease(l)
	return cloneLease(l), nil
}

// RevokeLease implements store.LeaseStore.
func (s *Store) RevokeLease(ctx context.Context, partition, clientID, leaseID string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	t := &s.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	k := leaseKey{partition, clientID}
	l, ok := t.m[k]
	if !ok || l.ID != leaseID {
		return false, nil
	}
	l.Revoked = true
	t.m[k] = l
	return true, nil
}
