package dynamostore_test

import (
	"context"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/memstore"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// The cost contract of the engine over DynamoDB, counted on the wire to
// DynamoDB Local: a warm client's single-op push (an upsert, a delete
// writing its tombstone, a re-insert over it) takes at most 3 DynamoDB
// round trips and 10 WCU, and a quiet pull exactly one consistent read of
// at most 1 RCU and no write. (Capacity is this package's estimate from
// item sizes per the AWS rules; DynamoDB Local under-reports transactions.)
func TestEngineCostOverDynamoDB(t *testing.T) {
	ctx := context.Background()
	client := testenv.DynamoDB(t).Client(t)
	table := testenv.UniqueName(t, "cost")
	if err := dynamostore.CreateTable(ctx, client, table); err != nil {
		t.Fatal(err)
	}
	st := dynamostore.New(client, table, dynamostore.Options{})
	h := enginetest.New(t, st, memstore.NewSegments(), enginetest.Options{})
	h.Grants.Set("alice", engine.ScopeMap{"project_id": {"p1"}})
	c := h.Client("tenant", "alice", "device-1")

	measure := func(what string, fn func()) dynamostore.Usage {
		mctx, capacity := dynamostore.WithCapacity(ctx)
		c.Ctx = mctx
		fn()
		c.Ctx = nil
		u := capacity.Snapshot()
		t.Logf("%s: %d round trips, est %.1f RCU / %.1f WCU (reported %.1f / %.1f)", what, u.RoundTrips, u.EstRCU, u.EstWCU, u.RCU, u.WCU)
		return u
	}

	// Warm-up: the first push binds the client record.
	if r := c.Push("c0", enginetest.Upsert("tasks", "t0", c.Task("t0", "p1", "first", false), 0)); r.Status != wire.PushApplied {
		t.Fatalf("warm-up push: %+v", r)
	}
	u := measure("single-op push", func() {
		if r := c.Push("c1", enginetest.Upsert("tasks", "t1", c.Task("t1", "p1", "second", false), 0)); r.Status != wire.PushApplied {
			t.Fatalf("push: %+v", r)
		}
	})
	if u.RoundTrips > 3 || u.EstWCU > 10 {
		t.Errorf("single-op push: %d round trips, %.1f WCU; want ≤3 and ≤10", u.RoundTrips, u.EstWCU)
	}

	// A delete writes a tombstone in place of the row (§2.2 of the wire-3
	// spec): a Put of the same key, at the cost of the delete it replaces.
	u = measure("single-op delete push", func() {
		if r := c.Push("c2", enginetest.Delete("tasks", "t1")); r.Status != wire.PushApplied {
			t.Fatalf("delete push: %+v", r)
		}
	})
	if u.RoundTrips > 3 || u.EstWCU > 10 {
		t.Errorf("single-op delete push: %d round trips, %.1f WCU; want ≤3 and ≤10", u.RoundTrips, u.EstWCU)
	}
	// Recreating the deleted row is an insert again for a version-2 client
	// (the tombstone reads as absent) and replaces the tombstone.
	u = measure("re-insert over a tombstone", func() {
		if r := c.Push("c3", enginetest.Upsert("tasks", "t1", c.Task("t1", "p1", "again", false), 0)); r.Status != wire.PushApplied {
			t.Fatalf("re-insert push: %+v", r)
		}
	})
	if u.RoundTrips > 3 || u.EstWCU > 10 {
		t.Errorf("re-insert push: %d round trips, %.1f WCU; want ≤3 and ≤10", u.RoundTrips, u.EstWCU)
	}

	sub := []wire.Subscription{{ID: "s", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1}}
	resp, err := c.Send(c.Request(nil, &wire.PullHeader{Accept: c.Accept}, sub))
	if err != nil {
		t.Fatal(err)
	}
	sub[0].Cursor = enginetest.Sections(t, resp)[0].End.NextCursor
	u = measure("quiet pull", func() {
		resp, err := c.Send(c.Request(nil, &wire.PullHeader{Accept: c.Accept}, sub))
		if err != nil {
			t.Fatal(err)
		}
		if s := enginetest.Sections(t, resp)[0]; len(s.Commits) != 0 || s.End.NextCursor != sub[0].Cursor {
			t.Fatalf("quiet pull delivered data: %+v", s)
		}
	})
	if u.RoundTrips != 1 || u.EstRCU > 1 || u.EstWCU != 0 {
		t.Errorf("quiet pull: %d round trips, %.1f RCU, %.1f WCU; want exactly 1, ≤1, 0", u.RoundTrips, u.EstRCU, u.EstWCU)
	}
}
