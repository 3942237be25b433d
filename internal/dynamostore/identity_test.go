package dynamostore_test

import (
	"context"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/memstore"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// §1.5 on DynamoDB Local: actors racing the first request of one
// clientId from separate engine instances; the conditional bind lets
// exactly one through (same scenario the engine suite runs on memstore).
func TestClientBindingRaceOverDynamoDB(t *testing.T) {
	client := testenv.DynamoDB(t).Client(t)
	for range 3 {
		t.Run("round", func(t *testing.T) {
			// A fresh table name per round keeps the partition new.
			tbl := testenv.UniqueName(t, "bind")
			if err := dynamostore.CreateTable(context.Background(), client, tbl); err != nil {
				t.Fatal(err)
			}
			enginetest.RunBindRace(t, dynamostore.New(client, tbl, dynamostore.Options{}), memstore.NewSegments(), 6)
		})
	}
}

// The client record's write interval and the prune watermark over
// DynamoDB Local (the memstore run is in internal/core/engine).
func TestCursorRecordLagIsSafe(t *testing.T) {
	client := ddbClient(t)
	enginetest.RunCursorRecords(t, func(t testing.TB) (store.Store, store.SegmentStore) {
		return dynamostore.New(client, newTable(t, client), dynamostore.Options{}), memstore.NewSegments()
	})
}
