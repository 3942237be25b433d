package dynamostore_test

import (
	"context"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// countedStore is the store counting its log and gate reads; embedding
// it keeps every optional interface the engine looks for.
type countedStore struct {
	*dynamostore.Store
	enginetest.ReadCounts
}

func (s *countedStore) ReadLog(ctx context.Context, p string, after, through int64, fn func(*store.Commit) bool) error {
	s.Logs.Add(1)
	return s.Store.ReadLog(ctx, p, after, through, fn)
}

func (s *countedStore) ReadLogScoped(ctx context.Context, p, table, variable string, values []string, after, through int64, fn func(*store.Commit) bool) (int64, error) {
	s.Logs.Add(1)
	return s.Store.ReadLogScoped(ctx, p, table, variable, values, after, through, fn)
}

func (s *countedStore) ReadGate(ctx context.Context, p string) (store.Gate, error) {
	s.Gates.Add(1)
	return s.Store.ReadGate(ctx, p)
}

// TestPushRoundOverDynamoDB runs the push-round suite (a round's pull
// against the same pull sent after it) on DynamoDB Local at this build's
// store-format level (small commits, compressed log bodies), and with
// commits in the transaction.
func TestPushRoundOverDynamoDB(t *testing.T) {
	client := ddbClient(t)
	for name, opts := range map[string]dynamostore.Options{"small commits": {}, "transaction": {TransactionalCommits: true}} {
		t.Run(name, func(t *testing.T) {
			enginetest.RunPushRound(t, func(t testing.TB) (store.Store, store.SegmentStore) {
				st := dynamostore.New(client, newTable(t, client), opts)
				// A stack after its deploy's post-traffic hook (formats.go).
				if _, err := st.RaiseFormatLevel(context.Background()); err != nil {
					t.Fatal(err)
				}
				return &countedStore{Store: st}, memstore.NewSegments()
			})
		})
	}
}
