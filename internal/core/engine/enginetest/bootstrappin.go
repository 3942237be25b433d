package enginetest

import (
	"context"
	"fmt"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// Meter meters the storage cost of one request: it returns the context
// to send it with and a function that describes what it cost. Nil when
// the store has no meter.
type Meter func() (ctx context.Context, report func() string)

// RunBootstrapPins is the §4.7 pin of a fresh bootstrap over a segment
// store that can reuse a publication built at an earlier pin
// (store.LatestFinder): the answer to one request must be the scope's
// rows as of the partition head. A snapshot built earlier may serve it
// only while no commit changed its scope since it was built; a commit in
// another scope keeps it reusable. meter, when set, measures each
// bootstrap request (reader-1 builds, reader-2 reuses, reader-3 rebuilds
// after commits in the scope, reader-4 reuses again).
func RunBootstrapPins(t *testing.T, stores Stores, meter Meter) {
	st, inner := stores(t)
	segs := &CountingSegments{SegmentStore: inner}
	if _, ok := inner.(store.LatestFinder); !ok {
		t.Fatalf("segment store %T cannot find a publication at an earlier pin", inner)
	}
	h := New(t, st, segs, Options{})
	h.Grants.Set("writer", engine.ScopeMap{"project_id": {"p1", "p2"}})
	for _, actor := range []string{"reader-1", "reader-2", "reader-3", "reader-4"} {
		h.Grants.Set(actor, engine.ScopeMap{"project_id": {"p1"}})
	}
	w := h.Client("tenant", "writer", "w")
	push := func(id string, ops ...wire.Operation) int64 {
		t.Helper()
		r := w.Push(id, ops...)
		if r.Status != wire.PushApplied || !r.CommitSeq.Present {
			t.Fatalf("push %s: status %d results %+v", id, r.Status, r.Results)
		}
		return r.CommitSeq.Value
	}
	for i := range 5 {
		id := fmt.Sprintf("t%d", i)
		push("seed-"+id, Upsert("tasks", id, w.Task(id, "p1", "v1", false), 0))
	}
	push("seed-o1", Upsert("tasks", "o1", w.Task("o1", "p2", "other", false), 0))

	// Three external pages per bootstrap, all in one response.
	hdr := wire.PullHeader{Accept: wire.AcceptExternalRows, LimitSnapshotRows: 2, MaxSnapshotPages: 10, LimitCommits: 100}
	p1 := Scopes("project_id", "p1")
	// wantP1 is the server's p1 rows now.
	wantP1 := func() map[string]RowState {
		t.Helper()
		out := map[string]RowState{}
		if err := h.Store.ScanScopedRows(context.Background(), "tenant", "tasks", "project_id", []string{"p1"}, nil, 0, func(_ string, r *store.Row) bool {
			out[r.RowID] = RowState{Version: r.Version, Payload: r.Payload}
			return true
		}); err != nil {
			t.Fatalf("scan p1: %v", err)
		}
		return out
	}
	head := func() int64 {
		t.Helper()
		hd, ok, err := h.Store.Head(context.Background(), "tenant")
		if err != nil || !ok {
			t.Fatalf("head: %v %v", ok, err)
		}
		return hd.MaxCommitSeq
	}
	// fresh bootstraps a new client's replica of p1 in one request and
	// checks the answer against the server's rows: complete, pinned at
	// or above pinAtLeast, every descriptor labelled with the pin.
	fresh := func(actor string, pinAtLeast int64, c *Client) *Section {
		t.Helper()
		rep := c.NewReplica("tasks-p1", "tasks", p1)
		var report func() string
		if meter != nil {
			c.Ctx, report = meter()
		}
		sec, err := rep.Pull(hdr)
		c.Ctx = nil
		if report != nil {
			t.Logf("%s's bootstrap request: %s", actor, report())
		}
		if err != nil {
			t.Fatalf("%s: bootstrap: %v", actor, err)
		}
		if !sec.Start.Bootstrap || sec.End == nil || sec.End.BootstrapState.Present {
			t.Fatalf("%s: want a complete bootstrap in one response, got start %+v end %+v", actor, sec.Start, sec.End)
		}
		if sec.End.NextCursor < pinAtLeast {
			t.Fatalf("%s: bootstrap pinned at %d, want ≥ %d (§4.7: asOfCommitSeq = maxCommitSeq, or a snapshot still current for the scope)", actor, sec.End.NextCursor, pinAtLeast)
		}
		for _, r := range sec.Refs {
			if r.AsOfCommitSeq != sec.End.NextCursor {
				t.Fatalf("%s: descriptor pinned at %d, SUB_END.nextCursor %d (§4.7)", actor, r.AsOfCommitSeq, sec.End.NextCursor)
			}
		}
		if d := DiffRows(wantP1(), rep.Rows); d != "" {
			t.Fatalf("%s: rows after one bootstrap request differ from the server's:\n%s", actor, d)
		}
		return sec
	}

	// A first bootstrap builds the pages at the head.
	pin := head()
	first := fresh("reader-1", pin, h.Client("tenant", "reader-1", "r1"))
	built := segs.Puts()
	if built == 0 || first.End.NextCursor != pin {
		t.Fatalf("first bootstrap: %d segments built, pin %d (head %d)", built, first.End.NextCursor, pin)
	}

	// A commit in another scope leaves the snapshot current: the next
	// fresh bootstrap reuses every page at the earlier pin.
	push("other-scope", Upsert("tasks", "o1", w.Task("o1", "p2", "changed", false), -1))
	reused := fresh("reader-2", pin, h.Client("tenant", "reader-2", "r2"))
	if segs.Puts() != built || reused.End.NextCursor != pin {
		t.Fatalf("quiet scope: %d segments rebuilt, pin %d; want every page reused at pin %d", segs.Puts()-built, reused.End.NextCursor, pin)
	}

	// Commits into the scope (an update of a row on the first page, a
	// delete, an insert): a fresh bootstrap must carry them in its one
	// response.
	push("update", Upsert("tasks", "t0", w.Task("t0", "p1", "v2", true), -1))
	push("delete", Delete("tasks", "t3"))
	last := push("insert", Upsert("tasks", "t9", w.Task("t9", "p1", "v1", false), 0))
	changed := fresh("reader-3", last, h.Client("tenant", "reader-3", "r3"))
	if segs.Puts() == built {
		t.Fatalf("changed scope: the stale pages were reused (pin %d)", changed.End.NextCursor)
	}

	// The pages built at the new pin are reused again while the scope
	// stays quiet.
	rebuilt := segs.Puts()
	push("other-scope-2", Upsert("tasks", "o1", w.Task("o1", "p2", "again", false), -1))
	again := fresh("reader-4", last, h.Client("tenant", "reader-4", "r4"))
	if segs.Puts() != rebuilt || again.End.NextCursor != changed.End.NextCursor {
		t.Fatalf("quiet again: %d segments rebuilt, pin %d; want the pages of pin %d", segs.Puts()-rebuilt, again.End.NextCursor, changed.End.NextCursor)
	}
}
