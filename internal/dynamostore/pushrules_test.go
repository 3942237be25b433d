package dynamostore_test

import (
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// The engine's push-rule suite (wire 3 and wire 2 rules, column versions,
// tombstones) over DynamoDB Local; the memstore run is in internal/core/engine.
func TestPushRulesOverDynamoDB(t *testing.T) {
	client := ddbClient(t)
	enginetest.PushRules(t, func(t testing.TB) (store.Store, store.SegmentStore) {
		return dynamostore.New(client, newTable(t, client), dynamostore.Options{}), memstore.NewSegments()
	})
}
