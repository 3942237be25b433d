package dynamostore_test

import (
	"context"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/memstore"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// What auth leases (§7.3) add to a round on DynamoDB, counted on the wire
// to DynamoDB Local: a live-authorized quiet pull slides the lease with
// one UpdateItem (one more round trip, 1 WCU); the first round of a
// client mints the id (the failed slide and a PutItem); a round served
// from the lease during an outage reads it (one more round trip, one RCU)
// and writes nothing.
func TestLeaseCostOverDynamoDB(t *testing.T) {
	ctx := context.Background()
	client := testenv.DynamoDB(t).Client(t)
	table := testenv.UniqueName(t, "leasecost")
	if err := dynamostore.CreateTable(ctx, client, table); err != nil {
		t.Fatal(err)
	}
	st := dynamostore.New(client, table, dynamostore.Options{})
	h := enginetest.New(t, st, memstore.NewSegments(), enginetest.Options{LeaseTTL: enginetest.LeaseTTL})
	h.Grants.Set("alice", engine.ScopeMap{"project_id": {"p1"}})
	c := h.Client("tenant", "alice", "device-1")
	sub := []wire.Subscription{{ID: "s", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1}}
	pull := func(what string) dynamostore.Usage {
		mctx, capacity := dynamostore.WithCapacity(ctx)
		c.Ctx = mctx
		resp, err := c.Send(c.Request(nil, &wire.PullHeader{Accept: c.Accept}, sub))
		c.Ctx = nil
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		sub[0].Cursor = enginetest.Sections(t, resp)[0].End.NextCursor

		u := capacity.Snapshot()
		t.Logf("%s: %d round trips, est %.1f RCU / %.1f WCU (reported %.1f / %.1f)", what, u.RoundTrips, u.EstRCU, u.EstWCU, u.RCU, u.WCU)
		return u
	}
	pull("first pull (bootstrap, binds the client, mints the lease)")
	// The mint alone, on the store: the slide's condition fails, the put
	// writes the fresh record.
	mctx, capacity := dynamostore.WithCapacity(ctx)
	if _, err := st.IssueLease(mctx, "tenant", "device-2", store.Lease{ID: "lease_fresh", ActorID: "alice", AllowedScopes: map[string][]string{"project_id": {"p1"}}, IssuedAtMs: 1, ExpiresAtMs: 2}); err != nil {
		t.Fatal(err)
	}
	if u := capacity.Snapshot(); u.RoundTrips != 2 || u.EstWCU != 2 || u.EstRCU != 0 {
		t.Errorf("minting a lease: %d round trips, %.1f RCU, %.1f WCU; want 2, 0, 2", u.RoundTrips, u.EstRCU, u.EstWCU)
	} else {
		t.Logf("mint: %d round trips, est %.1f RCU / %.1f WCU (reported %.1f / %.1f)", u.RoundTrips, u.EstRCU, u.EstWCU, u.RCU, u.WCU)
	}
	if u := pull("quiet pull, lease slid"); u.RoundTrips != 2 || u.EstWCU != 1 || u.EstRCU > 2 {
		t.Errorf("quiet pull with leases: %d round trips, %.1f RCU, %.1f WCU; want 2, ≤2, 1", u.RoundTrips, u.EstRCU, u.EstWCU)
	}
	h.Grants.Fail(true)
	if u := pull("quiet pull, lease-served (outage)"); u.RoundTrips != 2 || u.EstWCU != 0 || u.EstRCU > 3 {
		t.Errorf("lease-served quiet pull: %d round trips, %.1f RCU, %.1f WCU; want 2, ≤3, 0", u.RoundTrips, u.EstRCU, u.EstWCU)
	}
}
