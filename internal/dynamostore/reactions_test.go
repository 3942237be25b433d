package dynamostore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/reactions"
	"github.com/skyfold/syncular-lambda/internal/core/wire"

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

// BenchmarkReactionDelivery is the §6.9 path on DynamoDB Local from an
// accepted push to the handler's call: one one-op commit that plans one
// reaction, then the runner's run of the partition (enqueue from the log,
// due query, claim, handler, completion). ns/op is push-to-delivery
// latency without the stream's own delay; the custom metric is the runner's
// share.
func BenchmarkReactionDelivery(b *testing.B) {
	c := ddbClient(b)
	st := dynamostore.New(c, newTable(b, c), dynamostore.Options{})
	planner := reactions.PlannerFunc(func(_ context.Context, in *reactions.Input) ([]reactions.Planned, error) {
		return []reactions.Planned{{Key: "k", Type: "t", Version: 1, Payload: []byte(`{"n":1}`)}}, nil
	})
	h := enginetest.New(b, st, memstore.NewSegments(), enginetest.Options{Reactions: planner})
	h.Grants.Set("alice", engine.ScopeMap{"project_id": {"p1"}})
	cl := h.Client("bench", "alice", "phone")
	delivered := 0
	r := &reactions.Runner{Log: st, Store: st, Now: func() time.Time { return time.UnixMilli(h.Clock.Now()) },
		Handlers: map[string]reactions.Handler{"t": reactions.HandlerFunc(func(context.Context, *reactions.Delivery) error {
			delivered++
			return nil
		})}}
	var runner time.Duration
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprintf("t%d", i)
		if res := cl.Push("c"+id, enginetest.Upsert("tasks", id, cl.Task(id, "p1", "x", false), 0)); res.Status != wire.PushApplied {
			b.Fatalf("push %+v", res)
		}
		start := time.Now()
		if _, err := r.RunPartition(context.Background(), "bench"); err != nil {
			b.Fatal(err)
		}
		runner += time.Since(start)
	}
	if delivered != b.N {
		b.Fatalf("delivered %d of %d", delivered, b.N)
	}
	b.ReportMetric(float64(runner.Microseconds())/float64(b.N)/1000, "runner-ms/op")
}
