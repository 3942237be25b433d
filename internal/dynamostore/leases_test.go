package dynamostore_test

import (
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// Auth leases (§7.3) with the lease items in the table, over DynamoDB
// Local; the memstore run is in internal/core/engine.
func TestLeaseServesResolverOutage(t *testing.T) {
	client := ddbClient(t)
	enginetest.RunLeases(t, func(t testing.TB) (store.Store, store.SegmentStore) {
		return dynamostore.New(client, newTable(t, client), dynamostore.Options{}), memstore.NewSegments()
	})
}
