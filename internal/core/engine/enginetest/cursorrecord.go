package enginetest

import (
	"context"
	"fmt"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// RunCursorRecords checks how often a round writes the client record
// (§4.5: the server records each client's least cursor with a timestamp)
// and that a record lagging the client's cursor never lets §4.6 pruning
// pass that cursor: the first cursor is recorded at once; a push round
// (push and pull in one request) shortly after a recorded one writes no
// record; a cursor that moved up is recorded once the record is
// CursorRecordInterval old; a cursor that went down is recorded at once;
// and a prune while the record lags keeps every commit after the
// client's real cursor, so the client's next pull goes on incrementally.
func RunCursorRecords(t *testing.T, stores Stores) {
	st, segs := stores(t)
	h := New(t, st, segs, Options{})
	scopes := engine.ScopeMap{"project_id": {"p1"}}
	h.Grants.Set("writer", scopes)
	h.Grants.Set("reader", scopes)
	w := h.Client("tenant", "writer", "w")
	r := h.Client("tenant", "reader", "r")
	interval := engine.DefaultCursorRecordInterval.Milliseconds()
	ctx := context.Background()

	rig := &cursorRig{t: t, st: st, w: w}
	pushSome, round, stored := rig.pushSome, rig.round, rig.stored
	pushSome(5)
	// The first cursor is recorded at once, whatever the record's age.
	c1 := round(r, -1)
	if c1 != 5 {
		t.Fatalf("bootstrap ended at cursor %d, want 5", c1)
	}
	if rec := stored(r); rec.Cursor != c1 || rec.UpdatedAtMs != h.Clock.Now() {
		t.Fatalf("first cursor: stored %d at %d, want %d at %d", rec.Cursor, rec.UpdatedAtMs, c1, h.Clock.Now())
	}
	recordedAt := h.Clock.Now()

	// Push rounds soon after: the cursor moves, the record stays.
	cur := c1
	for i := range 3 {
		h.Clock.Advance(1_000)
		id := fmt.Sprintf("mine%d", i)
		next := round(r, cur, Upsert("tasks", id, r.Task(id, "p1", id, false), -1))
		if next <= cur {
			t.Fatalf("push round from %d ended at %d", cur, next)
		}
		cur = next
		if rec := stored(r); rec.Cursor != c1 || rec.UpdatedAtMs != recordedAt {
			t.Fatalf("push round %d within the record interval wrote the client record: cursor %d at %d (recorded %d at %d)",
				i, rec.Cursor, rec.UpdatedAtMs, c1, recordedAt)
		}
	}

	// Prune while the record lags: the horizon stops at the stored
	// cursor, below the client's real one, and the client pulls on.
	pushSome(20)
	zero, never := int64(0), int64(1)<<50
	rep, err := h.Engine.Prune(ctx, "tenant", &engine.RetentionOverride{MinRetainedCommits: &zero, AgeForceMs: &never})
	if err != nil {
		t.Fatal(err)
	}
	if rep.NewHorizon != c1 || rep.NewHorizon > cur {
		t.Fatalf("prune with a lagging record: horizon %d, want the stored cursor %d (real cursor %d)", rep.NewHorizon, c1, cur)
	}
	if next := round(r, cur); next <= cur {
		t.Fatalf("pull from the real cursor %d after the prune ended at %d", cur, next)
	}

	// Once the record is CursorRecordInterval old, the next round writes it.
	h.Clock.Advance(interval)
	cur = round(r, cur)
	if rec := stored(r); rec.Cursor != cur || rec.UpdatedAtMs != h.Clock.Now() {
		t.Fatalf("round after the interval: stored %d at %d, want %d at %d", rec.Cursor, rec.UpdatedAtMs, cur, h.Clock.Now())
	}

	// A cursor that went down (a replica restored from a backup) is
	// recorded at once, so the stored cursor never exceeds the real one.
	h.Clock.Advance(1_000)
	back := rep.NewHorizon + 2
	secs, err := r.Pull(wire.PullHeader{Accept: r.Accept, LimitCommits: 1},
		wire.Subscription{ID: "s", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: back})
	if err != nil || len(secs) != 1 {
		t.Fatalf("pull from a lower cursor %d: %v", back, err)
	}
	low := secs[0].End.NextCursor
	if rec := stored(r); low >= cur || rec.Cursor != low {
		t.Fatalf("a cursor lowered from %d to %d: stored %d", cur, low, rec.Cursor)
	}
	rep, err = h.Engine.Prune(ctx, "tenant", &engine.RetentionOverride{MinRetainedCommits: &zero, AgeForceMs: &never})
	if err != nil {
		t.Fatal(err)
	}
	if rep.NewHorizon > low {
		t.Fatalf("prune passed the client's lowered cursor %d: horizon %d", low, rep.NewHorizon)
	}
}

// cursorRig holds RunCursorRecords' helpers: the writer's pushes, a
// stock client's round and the stored client record.
type cursorRig struct {
	t  *testing.T
	st store.Store
	w  *Client // the writer of pushSome
	n  int     // ids pushed so far
}

// pushSome pushes k new tasks as the writer.
func (g *cursorRig) pushSome(k int) {
	g.t.Helper()
	for range k {
		g.n++
		id := fmt.Sprintf("t%d", g.n)
		if res := g.w.Push(id, Upsert("tasks", id, g.w.Task(id, "p1", id, false), -1)); res.Status != wire.PushApplied {
			g.t.Fatalf("push %s: %s", id, res.Status)
		}
	}
}

// round is a stock client's request: one commit (when ops) and the pull
// of its one subscription from cursor, answered in full; it returns the
// next cursor.
func (g *cursorRig) round(c *Client, cursor int64, ops ...wire.Operation) int64 {
	g.t.Helper()
	var commits []wire.PushCommit
	if len(ops) > 0 {
		g.n++
		commits = append(commits, wire.PushCommit{ClientCommitID: fmt.Sprintf("r%d", g.n), Operations: ops})
	}
	s := wire.Subscription{ID: "s", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: cursor}
	resp, err := c.Send(c.Request(commits, &wire.PullHeader{Accept: c.Accept}, []wire.Subscription{s}))
	if err != nil {
		g.t.Fatalf("round from %d: %v", cursor, err)
	}
	secs := Sections(g.t, resp)
	if len(secs) != 1 || secs[0].Start.Status != wire.SubActive {
		g.t.Fatalf("round from %d: %d sections, %+v", cursor, len(secs), secs[0].Start)
	}
	return secs[0].End.NextCursor
}

// stored is c's client record as the store holds it.
func (g *cursorRig) stored(c *Client) *store.Client {
	g.t.Helper()
	rec, err := g.st.GetClient(context.Background(), c.Partition, c.ID)
	if err != nil || rec == nil {
		g.t.Fatalf("client record of %s: %v (%v)", c.ID, rec, err)
	}
	return rec
}
