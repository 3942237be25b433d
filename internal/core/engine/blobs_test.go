package engine_test

import (
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/blobs"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/memblobs"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// The §5.9 scenarios over memstore; the DynamoDB Local run is in
// internal/dynamostore.
func TestBlobs(t *testing.T) {
	enginetest.Blobs(t, func(testing.TB) (store.Store, store.SegmentStore) {
		return memstore.New(), memstore.NewSegments()
	}, func(_ testing.TB, now func() int64) blobs.Store {
		return memblobs.New(memblobs.Options{Now: now})
	})
}
