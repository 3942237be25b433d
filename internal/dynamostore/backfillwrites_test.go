package dynamostore_test

import (
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// TestBackfillWrites is issue 20 item 2 on DynamoDB Local: the
// declared backfill's rows reach a client as ordinary commits.
func TestBackfillWrites(t *testing.T) {
	c := ddbClient(t)
	t.Run("ClientReceivesBackfill", func(t *testing.T) {
		enginetest.BackfillWrites(t, dynamostore.New(c, newTable(t, c), dynamostore.Options{}), memstore.NewSegments())
	})
	t.Run("ConcurrentDrivers", func(t *testing.T) {
		enginetest.BackfillConcurrentDrivers(t, dynamostore.New(c, newTable(t, c), dynamostore.Options{}), memstore.NewSegments())
	})
}
