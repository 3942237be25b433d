package engine_test

import (
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// TestRollingUpgrade runs the serve-gate scenarios on memstore; the
// DynamoDB Local run is in internal/dynamostore.
func TestRollingUpgrade(t *testing.T) {
	enginetest.RollingUpgrade(t, func(testing.TB) enginetest.SchemaBackend { return memstore.New() },
		func() store.SegmentStore { return memstore.NewSegments() })
}
