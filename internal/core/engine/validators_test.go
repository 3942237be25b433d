package engine_test

import (
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// TestValidatorsRollBack: §6.7 row validators and the §6.8 whole-commit
// validator reject atomically (no row, no log entry, the recorded
// rejection with the host's code and details, replayed without running
// again) and the whole-commit validator sees every staged operation and
// the candidate state, on memstore; the DynamoDB run is in
// internal/dynamostore.
func TestValidatorsRollBack(t *testing.T) {
	enginetest.RunValidatorsRollBack(t,
		func(*testing.T) store.Store { return memstore.New() },
		func() store.SegmentStore { return memstore.NewSegments() })
}
