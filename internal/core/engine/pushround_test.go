package engine_test

import (
	"context"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// countedMem is memstore counting its log and gate reads; embedding the
// store keeps every optional interface the engine looks for.
type countedMem struct {
	*memstore.Store
	enginetest.ReadCounts
}

func (s *countedMem) ReadLog(ctx context.Context, p string, after, through int64, fn func(*store.Commit) bool) error {
	s.Logs.Add(1)
	return s.Store.ReadLog(ctx, p, after, through, fn)
}

func (s *countedMem) ReadLogScoped(ctx context.Context, p, table, variable string, values []string, after, through int64, fn func(*store.Commit) bool) (int64, error) {
	s.Logs.Add(1)
	return s.Store.ReadLogScoped(ctx, p, table, variable, values, after, through, fn)
}

func (s *countedMem) ReadGate(ctx context.Context, p string) (store.Gate, error) {
	s.Gates.Add(1)
	return s.Store.ReadGate(ctx, p)
}

// TestPushRound runs the push-round suite on memstore; the DynamoDB
// Local run is in internal/dynamostore.
func TestPushRound(t *testing.T) {
	enginetest.RunPushRound(t, func(testing.TB) (store.Store, store.SegmentStore) {
		return &countedMem{Store: memstore.New()}, memstore.NewSegments()
	})
}
