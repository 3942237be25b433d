package dynamostore_test

import (
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// TestRollingUpgradeOverDynamoDB runs the engine's serve-gate scenarios
// on DynamoDB Local, one fresh table per scenario.
func TestRollingUpgradeOverDynamoDB(t *testing.T) {
	client := ddbClient(t)
	enginetest.RollingUpgrade(t, func(t testing.TB) enginetest.SchemaBackend {
		return dynamostore.New(client, newTable(t, client), dynamostore.Options{})
	}, func() store.SegmentStore { return memstore.NewSegments() })
}
