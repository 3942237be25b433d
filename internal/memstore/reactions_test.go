package memstore_test

import (
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

func TestReactionsSurviveCrash(t *testing.T) {
	enginetest.RunReactions(t,
		func(*testing.T) store.Store { return memstore.New() },
		func() store.SegmentStore { return memstore.NewSegments() })
}
