package dynamostore_test

import (
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// TestReactionsSurviveCrash runs the §6.9 reaction suite on DynamoDB
// Local: records logged in the commit's body, live and terminal reaction
// items, conditional claims and acknowledgements, a worker crash between
// its side effect and the acknowledgement, and a prune of the log before
// any runner ran.
func TestReactionsSurviveCrash(t *testing.T) {
	c := ddbClient(t)
	st := dynamostore.New(c, newTable(t, c), dynamostore.Options{})
	enginetest.RunReactions(t,
		func(*testing.T) store.Store { return st },
		func() store.SegmentStore { return memstore.NewSegments() })
}
