package dynamostore_test

import (
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/blobs"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/memblobs"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// The §5.9 scenarios with the blob reference index (§5.9.4) in DynamoDB
// Local: upload, push-time check, download authorization through the
// index, unreference and the orphan sweep.
func TestBlobsOverDynamoDB(t *testing.T) {
	client := ddbClient(t)
	enginetest.Blobs(t, func(t testing.TB) (store.Store, store.SegmentStore) {
		return dynamostore.New(client, newTable(t, client), dynamostore.Options{}), memstore.NewSegments()
	}, func(_ testing.TB, now func() int64) blobs.Store {
		return memblobs.New(memblobs.Options{Now: now})
	})
}
