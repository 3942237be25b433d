package engine_test

import (
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// The push rules of wire version 3 and the version-2 rules beside them,
// on memstore (internal/dynamostore runs the same suite on DynamoDB Local).
func TestPushRules(t *testing.T) {
	enginetest.PushRules(t, func(testing.TB) (store.Store, store.SegmentStore) {
		return memstore.New(), memstore.NewSegments()
	})
}
