package engine_test

import (
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// Issue 24 / §4.7: a fresh bootstrap answers the scope's rows as of the
// head in one request; a snapshot built at an earlier pin serves it only
// while no commit changed the scope. On memstore; internal/dynamostore
// runs the same scenario on DynamoDB Local and the S3 server.
func TestBootstrapPinsNewestCommit(t *testing.T) {
	enginetest.RunBootstrapPins(t, func(testing.TB) (store.Store, store.SegmentStore) {
		return memstore.New(), memstore.NewSegments()
	}, nil)
}
