package engine_test

import (
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// TestB19References: SPEC Appendix B.19 and the conformance catalog's
// references/* scenarios (§6.11) on memstore; the DynamoDB run is in
// internal/dynamostore.
func TestB19References(t *testing.T) {
	enginetest.RunReferences(t,
		func(*testing.T) store.Store { return memstore.New() },
		func() store.SegmentStore { return memstore.NewSegments() })
}

// TestReferencesStayInScope: declared references never reach across
// scope values (§6.11 with §3.4), one subtest per cross-scope attack, on
// memstore; the DynamoDB run is in internal/dynamostore.
func TestReferencesStayInScope(t *testing.T) {
	enginetest.RunReferencesStayInScope(t,
		func(*testing.T) store.Store { return memstore.New() },
		func() store.SegmentStore { return memstore.NewSegments() })
}
