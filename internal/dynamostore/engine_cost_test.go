package dynamostore_test

import (
	"context"
	"fmt"
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
// writing its tombstone, a re-insert over it) takes at most 7 DynamoDB
// calls and 5 RCU with small commits (the default, fast.go: the head
// and rows read, 2 RCU; the commit's read of its outcome key, the
// previous commit's log item and the row, 3 RCU, following the head
// read before it rather than reading the head again, which made it 6;
// its head update, the outcome and row puts, the delete's scope-copy
// tombstone, its log item) and 4 WCU for an upsert (head, outcome, row
// and log, 1 each: issue 23, a partition writes no live scope copy
// until a bootstrap shows it wide, scopeindex.go, where issue 11's
// layout wrote one on every commit, 5), 5 for a delete (its scope
// copy's tombstone is written whatever the partition's state); with
// Options.TransactionalCommits at most 3 round trips, 2 RCU and twice
// the units (each item charged twice in a transaction: 8 and 10; no
// log-index entry either while the partition's pulls have not shown it
// wide, 2 more each); and a quiet pull exactly one consistent read (the
// head, with the schema marker when its cached copy is due) of at most
// 2 RCU and no write. (Capacity is this package's estimate from item
// sizes per the AWS rules; DynamoDB Local under-reports transactions.)
func TestEngineCostOverDynamoDB(t *testing.T) {
	t.Run("transaction", func(t *testing.T) {
		engineCost(t, dynamostore.Options{TransactionalCommits: true}, 3, opCost{rcu: 2, upsertWCU: 8, deleteWCU: 10})
	})
	t.Run("small commits", func(t *testing.T) {
		engineCost(t, dynamostore.Options{}, 7, opCost{rcu: 5, upsertWCU: 4, deleteWCU: 5})
	})
}

// opCost is the most read units and write units a single-op push may
// take.
type opCost struct{ rcu, upsertWCU, deleteWCU float64 }

func engineCost(t *testing.T, opts dynamostore.Options, maxTrips int, want opCost) {
	ctx := context.Background()
	client := testenv.DynamoDB(t).Client(t)
	table := testenv.UniqueName(t, "cost")
	if err := dynamostore.CreateTable(ctx, client, table); err != nil {
		t.Fatal(err)
	}
	st := dynamostore.New(client, table, opts)
	// A stack after its deploy's post-traffic hook (formats.go).
	if _, err := st.RaiseFormatLevel(ctx); err != nil {
		t.Fatal(err)
	}
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
	if u.RoundTrips > maxTrips || u.EstRCU > want.rcu || u.EstWCU > want.upsertWCU {
		t.Errorf("single-op push: %d round trips, %.1f RCU, %.1f WCU; want ≤%d, ≤%.0f and ≤%.0f", u.RoundTrips, u.EstRCU, u.EstWCU, maxTrips, want.rcu, want.upsertWCU)
	}

	// A delete writes a tombstone in place of the row (§2.2 of the wire-3
	// spec): a Put of the same key, at the cost of the delete it replaces.
	u = measure("single-op delete push", func() {
		if r := c.Push("c2", enginetest.Delete("tasks", "t1")); r.Status != wire.PushApplied {
			t.Fatalf("delete push: %+v", r)
		}
	})
	if u.RoundTrips > maxTrips || u.EstRCU > want.rcu || u.EstWCU > want.deleteWCU {
		t.Errorf("single-op delete push: %d round trips, %.1f RCU, %.1f WCU; want ≤%d, ≤%.0f and ≤%.0f", u.RoundTrips, u.EstRCU, u.EstWCU, maxTrips, want.rcu, want.deleteWCU)
	}
	// Recreating the deleted row is an insert again for a version-2 client
	// (the tombstone reads as absent) and replaces the tombstone.
	u = measure("re-insert over a tombstone", func() {
		if r := c.Push("c3", enginetest.Upsert("tasks", "t1", c.Task("t1", "p1", "again", false), 0)); r.Status != wire.PushApplied {
			t.Fatalf("re-insert push: %+v", r)
		}
	})
	if u.RoundTrips > maxTrips || u.EstRCU > want.rcu || u.EstWCU > want.upsertWCU {
		t.Errorf("re-insert push: %d round trips, %.1f RCU, %.1f WCU; want ≤%d, ≤%.0f and ≤%.0f", u.RoundTrips, u.EstRCU, u.EstWCU, maxTrips, want.rcu, want.upsertWCU)
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
	if u.RoundTrips != 1 || u.EstRCU > 2 || u.EstWCU != 0 {
		t.Errorf("quiet pull: %d round trips, %.1f RCU, %.1f WCU; want exactly 1, ≤2, 0", u.RoundTrips, u.EstRCU, u.EstWCU)
	}

	// A stock client's push round (issue 23): the push and, in the same
	// request, the pull from the head the push built on. The pull's
	// window is the round's own commit, served as committed: no log
	// Query and no second gate read, so the round costs what the push
	// alone does.
	push := measure("single-op push before the round", func() {
		if r := c.Push("c4", enginetest.Upsert("tasks", "t4", c.Task("t4", "p1", "four", false), 0)); r.Status != wire.PushApplied {
			t.Fatalf("push: %+v", r)
		}
	})
	sub[0].Cursor++ // the head c4 left: the round's commit follows it
	u = measure("push round", func() {
		resp, err := c.Send(c.Request([]wire.PushCommit{{ClientCommitID: "c5", Operations: []wire.Operation{enginetest.Upsert("tasks", "t5", c.Task("t5", "p1", "five", false), 0)}}},
			&wire.PullHeader{Accept: c.Accept}, sub))
		if err != nil {
			t.Fatal(err)
		}
		if s := enginetest.Sections(t, resp)[0]; len(s.Commits) != 1 || s.End.NextCursor != sub[0].Cursor+1 {
			t.Fatalf("push round delivered %d commits, next %d; want its own commit, %d", len(s.Commits), s.End.NextCursor, sub[0].Cursor+1)
		}
	})
	if u.RoundTrips > push.RoundTrips || u.EstRCU > push.EstRCU {
		t.Errorf("push round: %d round trips, %.1f RCU; the push alone %d, %.1f: the pull of its own commit read more", u.RoundTrips, u.EstRCU, push.RoundTrips, push.EstRCU)
	}
}

// The cost of wire-version-3 pushes over DynamoDB (issue 8's target): no
// more round trips than a version-2 push of the same rows and at most 2 WCU
// more per operation for column versions and tombstones. Measured on the
// wire to DynamoDB Local for a 1-op insert, a 1-op sparse patch and a
// 50-op commit, each against the same commit pushed by a version-2 client.
func TestEngineCostV3OverDynamoDB(t *testing.T) {
	ctx := context.Background()
	client := testenv.DynamoDB(t).Client(t)
	table := testenv.UniqueName(t, "cost3")
	if err := dynamostore.CreateTable(ctx, client, table); err != nil {
		t.Fatal(err)
	}
	st := dynamostore.New(client, table, dynamostore.Options{})
	// A stack after its deploy's post-traffic hook: large log bodies are
	// stored compressed (formats.go).
	if _, err := st.RaiseFormatLevel(ctx); err != nil {
		t.Fatal(err)
	}
	h := enginetest.New(t, st, memstore.NewSegments(), enginetest.Options{})
	h.Grants.Set("alice", engine.ScopeMap{"project_id": {"p1"}})
	v2 := h.Client("tenant", "alice", "device-2")
	v3 := h.ClientV3("tenant", "alice", "device-3")

	measure := func(c *enginetest.Client, what string, commitID string, ops ...wire.Operation) dynamostore.Usage {
		t.Helper()
		mctx, capacity := dynamostore.WithCapacity(ctx)
		c.Ctx = mctx
		r := c.Push(commitID, ops...)
		c.Ctx = nil
		if r.Status != wire.PushApplied {
			t.Fatalf("%s: %+v", what, r)
		}
		u := capacity.Snapshot()
		t.Logf("%s: %d round trips, est %.1f RCU / %.1f WCU", what, u.RoundTrips, u.EstRCU, u.EstWCU)
		return u
	}
	// Warm-up: bind both clients.
	measure(v2, "v2 warm-up", "w2", enginetest.Upsert("tasks", "w2", v2.Task("w2", "p1", "x", false), 0))
	measure(v3, "v3 warm-up", "w3", enginetest.Upsert("tasks", "w3", v3.Task("w3", "p1", "x", false), 0))

	compare := func(what string, base, got dynamostore.Usage, ops int) {
		t.Helper()
		if got.RoundTrips > base.RoundTrips {
			t.Errorf("%s: v3 takes %d round trips, v2 %d", what, got.RoundTrips, base.RoundTrips)
		}
		if got.EstWCU > base.EstWCU+2*float64(ops) {
			t.Errorf("%s: v3 %.1f WCU vs v2 %.1f: more than +2 WCU per op", what, got.EstWCU, base.EstWCU)
		}
	}
	b := measure(v2, "v2 1-op insert", "i2", enginetest.Upsert("tasks", "a2", v2.Task("a2", "p1", "title", false), 0))
	g := measure(v3, "v3 1-op insert", "i3", enginetest.Upsert("tasks", "a3", v3.Task("a3", "p1", "title", false), 0))
	compare("1-op insert", b, g, 1)
	if g.RoundTrips > 7 { // the head and rows read, then a small commit's 6 calls (fast.go)
		t.Errorf("v3 1-op insert: %d round trips, want ≤ 7", g.RoundTrips)
	}

	b = measure(v2, "v2 1-op update", "u2", enginetest.Upsert("tasks", "a2", v2.Task("a2", "p1", "renamed", true), 1))
	g = measure(v3, "v3 1-op sparse patch", "u3", enginetest.Upsert("tasks", "a3",
		v3.Patch("tasks", enginetest.Cols{"id": enginetest.S("a3"), "title": enginetest.S("renamed")}), 1))
	compare("1-op update", b, g, 1)

	many := func(c *enginetest.Client, prefix string) []wire.Operation {
		ops := make([]wire.Operation, 50)
		for i := range ops {
			id := fmt.Sprintf("%s-%02d", prefix, i)
			ops[i] = enginetest.Upsert("tasks", id, c.Task(id, "p1", "bulk row "+id, i%2 == 0), 0)
		}
		return ops
	}
	b = measure(v2, "v2 50-op insert", "m2", many(v2, "m2")...)
	g = measure(v3, "v3 50-op insert", "m3", many(v3, "m3")...)
	compare("50-op insert", b, g, 50)
}
