package dynamostore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/s3segments"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// Issue 24 / §4.7 on the production stores: DynamoDB Local for rows,
// log and publications, the S3 server for segment bytes. The reused
// bootstrap's DynamoDB cost is logged (the memstore run is in
// internal/core/engine).
func TestBootstrapPinsNewestCommit(t *testing.T) {
	client := ddbClient(t)
	srv := testenv.S3(t)
	bucket := testenv.UniqueName(t, "pin")
	srv.CreateBucket(t, bucket)
	enginetest.RunBootstrapPins(t, func(t testing.TB) (store.Store, store.SegmentStore) {
		table := newTable(t, client)
		return dynamostore.New(client, table, dynamostore.Options{}),
			s3segments.New(srv.Client(t), bucket, "segments/", client, table, s3segments.Options{})
	}, func() (context.Context, func() string) {
		ctx, c := dynamostore.WithCapacity(context.Background())
		return ctx, func() string {
			u := c.Snapshot()
			return fmt.Sprintf("%d DynamoDB round trips, %.1f RCU", u.RoundTrips, u.EstRCU)
		}
	})
}
