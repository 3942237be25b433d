package dynamostore_test

import (
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// TestB19ReferencesOverDynamoDB runs the §6.11 / Appendix B.19 scenarios
// through the engine on DynamoDB Local (reference index items, cascades
// in the commit transaction or the log-first roll-forward).
func TestB19ReferencesOverDynamoDB(t *testing.T) {
	c := ddbClient(t)
	table := newTable(t, c)
	st := dynamostore.New(c, table, dynamostore.Options{})
	enginetest.RunReferences(t,
		func(*testing.T) store.Store { return st },
		func() store.SegmentStore { return memstore.NewSegments() })
}
