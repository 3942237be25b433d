package wiring

import (
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// SYNC_AUTH_LEASES=on gives the engine the store's leases (§7.3); off
// (the default) gives it none; a store without leases is refused at
// start rather than serving without them.
func TestNewEngineAuthLeases(t *testing.T) {
	sc := todoSchema(t)
	load := func(leases string) *config.Config { return configWith(t, "SYNC_AUTH_LEASES", leases) }
	for _, tc := range []struct {
		leases string
		want   bool
	}{{"on", true}, {"off", false}, {"", false}} {
		eng, err := NewEngine(load(tc.leases), Deps{Schema: sc, Store: memstore.New(), Segments: memstore.NewSegments()})
		if err != nil {
			t.Fatalf("%q: %v", tc.leases, err)
		}
		if eng.LeasesEnabled() != tc.want {
			t.Fatalf("SYNC_AUTH_LEASES=%q: leases enabled %v", tc.leases, eng.LeasesEnabled())
		}
	}
	_, err := NewEngine(load("on"), Deps{Schema: sc, Store: noLeases{memstore.New()}, Segments: memstore.NewSegments()})
	if err == nil || !strings.Contains(err.Error(), "SYNC_AUTH_LEASES=on") {
		t.Fatalf("a store without leases: %v", err)
	}
}

// noLeases hides the lease methods of its store.
type noLeases struct{ store.Store }
