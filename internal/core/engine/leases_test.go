package engine_test

import (
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
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
