package engine_test

import (
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// TestBackfillWrites is issue 20 item 2 on memstore; the DynamoDB Local
// run is in internal/dynamostore.
func TestBackfillWrites(t *testing.T) {
	t.Run("ClientReceivesBackfill", func(t *testing.T) {
		enginetest.BackfillWrites(t, memstore.New(), memstore.NewSegments())
	})
	t.Run("ConcurrentDrivers", func(t *testing.T) {
		enginetest.BackfillConcurrentDrivers(t, memstore.New(), memstore.NewSegments())
	})
}
