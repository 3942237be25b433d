package engine_test

import (
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// Auth leases (§7.3) on memstore: issuance and sliding refresh, a round
// served from the lease during a resolver outage, expiry, revocation and
// the fail-closed paths (internal/dynamostore runs the same suite on
// DynamoDB Local).
func TestLeaseServesResolverOutage(t *testing.T) {
	enginetest.RunLeases(t, func(testing.TB) (store.Store, store.SegmentStore) {
		return memstore.New(), memstore.NewSegments()
	})
}

// Auth leases need both a store and a TTL (§7.3.3: a configured TTL);
// half a configuration is refused rather than silently off.
func TestLeaseConfigNeedsStoreAndTTL(t *testing.T) {
	sc, err := schema.Parse([]byte(enginetest.TodoSchema))
	if err != nil {
		t.Fatal(err)
	}
	st := memstore.New()
	base := engine.Config{Schema: sc, Store: st, Segments: memstore.NewSegments(), Resolver: &enginetest.Grants{}}
	for _, tc := range []struct {
		name   string
		leases store.LeaseStore
		ttl    time.Duration
		ok     bool
	}{
		{"off", nil, 0, true},
		{"on", st, time.Minute, true},
		{"store without ttl", st, 0, false},
		{"ttl without store", nil, time.Minute, false},
	} {
		cfg := base
		cfg.Leases, cfg.LeaseTTL = tc.leases, tc.ttl
		e, err := engine.New(cfg)
		if (err == nil) != tc.ok {
			t.Fatalf("%s: err %v", tc.name, err)
		}
		if err == nil && e.LeasesEnabled() != (tc.leases != nil) {
			t.Fatalf("%s: LeasesEnabled %v", tc.name, e.LeasesEnabled())
		}
	}
}
