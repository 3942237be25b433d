package dynamostore_test

import (
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// TestValidatorsRollBackOverDynamoDB runs the §6.7/§6.8 validator
// scenarios (engine TestValidatorsRollBack) through the engine on
// DynamoDB Local: rejected commits write no item, the rejected outcome is
// the recorded one, and the candidate reader's scans go through the
// store's scope index.
func TestValidatorsRollBackOverDynamoDB(t *testing.T) {
	c := ddbClient(t)
	st := dynamostore.New(c, newTable(t, c), dynamostore.Options{})
	enginetest.RunValidatorsRollBack(t,
		func(*testing.T) store.Store { return st },
		func() store.SegmentStore { return memstore.NewSegments() })
}
