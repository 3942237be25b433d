package dynamostore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/wire"

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

// TestCascadeAtTheCapOverDynamoDB: a cascade of the default cap (1,000
// child deletes plus their index entries, far past one transaction's 100
// actions) commits through the log-first path and is fully materialized
// when the push returns; the cost is logged.
func TestCascadeAtTheCapOverDynamoDB(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 2,000 items")
	}
	ctx := context.Background()
	c := ddbClient(t)
	st := dynamostore.New(c, newTable(t, c), dynamostore.Options{})
	h := enginetest.New(t, st, memstore.NewSegments(), enginetest.Options{Schema: enginetest.ReferenceSchema})
	h.Grants.Set("alice", engine.ScopeMap{"project_id": {"*"}})
	a := h.Client("tenant", "alice", "a")
	if r := a.Push("p", a.ProjectOp("p1")); r.Status != wire.PushApplied {
		t.Fatalf("%+v", r)
	}
	for batch := range 2 {
		var ops []wire.Operation
		for i := range 500 {
			ops = append(ops, a.ItemOp(fmt.Sprintf("i%04d", batch*500+i), enginetest.Parents{Cascade: "p1"}))
		}
		if r := a.Push(fmt.Sprintf("b%d", batch), ops...); r.Status != wire.PushApplied {
			t.Fatalf("%+v", r.Results)
		}
	}
	mctx, capacity := dynamostore.WithCapacity(ctx)
	a.Ctx = mctx
	r := a.Push("del", enginetest.Delete("projects", "p1"))
	a.Ctx = nil
	u := capacity.Snapshot()
	t.Logf("cascade of 1,000: %d round trips, est %.1f RCU / %.1f WCU", u.RoundTrips, u.EstRCU, u.EstWCU)
	if r.Status != wire.PushApplied {
		t.Fatalf("cascade at the cap: %+v", r.Results)
	}
	if n := len(h.ServerRows("tenant", "items")); n != 0 {
		t.Fatalf("%d items left after the cascade", n)
	}
	if ids, err := st.ListChildren(ctx, "tenant", "items", "cascade_parent", "p1", 10); err != nil || len(ids) != 0 {
		t.Fatalf("index entries left: %v %v", ids, err)
	}
}
