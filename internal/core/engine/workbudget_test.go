package engine_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// Work budgets (issue 11 item 3): caps on what one request may ask the
// server to read, a bound on the rows one bootstrap page scans, and a
// deadline that ends a pull early with resumable state.

func TestRequestCaps(t *testing.T) {
	h := newHarness(t, enginetest.Options{Limits: engine.Limits{MaxSubscriptions: 3, MaxScopeValues: 5}})
	grantAll(h, projects("p1"), "alice")
	a := h.Client("tenant", "alice", "a")
	many := func(n int) []wire.Subscription {
		var out []wire.Subscription
		for i := range n {
			out = append(out, sub(fmt.Sprintf("s%d", i), "tasks", "p1", -1))
		}
		return out
	}
	values := wire.Subscription{ID: "v", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"a", "b", "c", "d", "e", "f"}}}, Cursor: -1}
	for name, subs := range map[string][]wire.Subscription{"4 subscriptions": many(4), "6 scope values": {values}} {
		_, err := a.Send(a.Request(nil, &wire.PullHeader{Accept: acceptInline}, subs))
		if se := syncerr.As(err); se == nil || se.Code != syncerr.InvalidRequest {
			t.Errorf("%s over the caps: %v, want sync.invalid_request", name, err)
		}
	}
	if secs := mustPull(t, a, pullHdr(acceptInline), many(3)...); len(secs) != 3 {
		t.Fatalf("3 subscriptions: %d sections", len(secs))
	}
}

// TestRowsScannedPerPage: rows read by the first variable and filtered
// out by the second count against the page's scan bound; pages end
// early (even empty) and the bootstrap still delivers exactly the
// matching rows, once each.
func TestRowsScannedPerPage(t *testing.T) {
	h := newHarness(t, enginetest.Options{Schema: multiScopeSchema, Limits: engine.Limits{MaxRowsScannedPerPage: 3}})
	h.Grants.Set("admin", engine.ScopeMap{"workspace_id": {"*"}, "project_id": {"*"}})
	h.Grants.Set("w1p1", engine.ScopeMap{"workspace_id": {"w1"}, "project_id": {"p1"}})
	admin := h.Client("tenant", "admin", "admin")
	var ops []wire.Operation
	var want []string
	for i := range 20 {
		// Every row is in p1 (the variable pages read by); few in w1.
		id, ws := fmt.Sprintf("d%02d", i), "w2"
		if i%7 == 0 {
			ws = "w1"
			want = append(want, id)
		}
		row, err := admin.Codec("docs").Codec.Append(nil, []rowcodec.Value{{Str: id}, {Str: ws}, {Str: "p1"}, {Str: "x"}})
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, enginetest.Upsert("docs", id, row, 0))
	}
	wantApplied(t, admin.Push("seed", ops...))
	c := h.Client("tenant", "w1p1", "c")
	s := wire.Subscription{ID: "s", Table: "docs", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}, {Key: "workspace_id", Values: []string{"w1"}}}, Cursor: -1}
	var got []string
	pages := 0
	for range 50 {
		sec := mustPull(t, c, pullHdr(acceptInline), s)[0]
		for _, seg := range sec.Segments {
			pages++
			for _, b := range seg.Blocks {
				for _, r := range b {
					got = append(got, r.Values[0].Str)
				}
			}
		}
		if !sec.End.BootstrapState.Present {
			break
		}
		s.Cursor, s.BootstrapState = sec.End.NextCursor, sec.End.BootstrapState
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
	if pages < 20/3 {
		t.Fatalf("%d pages: the scan bound of 3 rows per page was not applied", pages)
	}
}

// TestPullDeadline: with less than the reserve left, a pull stops after
// its first page or commit and returns resumable state; repeating it
// delivers the rest.
func TestPullDeadline(t *testing.T) {
	h := newHarness(t, enginetest.Options{Limits: engine.Limits{DeadlineReserve: time.Hour}})
	grantAll(h, projects("p1"), "alice", "bob")
	a := h.Client("tenant", "alice", "a")
	for i := range 5 {
		id := fmt.Sprintf("t%d", i)
		wantApplied(t, a.Push(id, enginetest.Upsert("tasks", id, a.Task(id, "p1", "x", false), 0)))
	}
	b := h.Client("tenant", "bob", "b")
	hdr := wire.PullHeader{Accept: acceptInline, LimitSnapshotRows: 2}
	s := sub("s", "tasks", "p1", -1)
	rows := 0
	for i := 0; ; i++ {
		if i > 10 {
			t.Fatal("bootstrap did not finish")
		}
		sec := mustPull(t, b, hdr, s)[0]
		if len(sec.Segments) != 1 {
			t.Fatalf("pull %d: %d pages, want 1 (the deadline stops after the first)", i, len(sec.Segments))
		}
		rows += sec.Segments[0].Rows()
		s.Cursor, s.BootstrapState = sec.End.NextCursor, sec.End.BootstrapState
		if !sec.End.BootstrapState.Present {
			break
		}
	}
	if rows != 5 || s.Cursor != 5 {
		t.Fatalf("bootstrap: %d rows, cursor %d; want 5, 5", rows, s.Cursor)
	}
	for i := range 3 {
		id := fmt.Sprintf("u%d", i)
		wantApplied(t, a.Push(id, enginetest.Upsert("tasks", id, a.Task(id, "p1", "x", false), 0)))
	}
	for want := int64(6); want <= 8; want++ {
		sec := mustPull(t, b, hdr, s)[0]
		if len(sec.Commits) != 1 || sec.End.NextCursor != want {
			t.Fatalf("incremental: %d commits, next %d; want 1, %d", len(sec.Commits), sec.End.NextCursor, want)
		}
		s.Cursor = sec.End.NextCursor
	}
}

// TestScopedLogWindow (§3.1 inverted index): a long incremental window
// is read through the log's scope index; the subscription gets exactly
// its commits (upserts and deletes), in order, once each, across
// commit-limited pulls, and its cursor ends at the head.
func TestScopedLogWindow(t *testing.T) {
	h := newHarness(t, enginetest.Options{})
	grantAll(h, projects("p1", "p2"), "alice", "bob")
	a := h.Client("tenant", "alice", "a")
	b := h.Client("tenant", "bob", "b")
	wantApplied(t, a.Push("seed", enginetest.Upsert("tasks", "x", a.Task("x", "p1", "x", false), 0)))
	s := sub("s", "tasks", "p1", -1)
	sec := mustPull(t, b, pullHdr(acceptInline), s)[0]
	s.Cursor = sec.End.NextCursor
	var want []int64
	for i := range 300 {
		id, proj := fmt.Sprintf("t%03d", i), "p2"
		if i%50 == 7 {
			proj = "p1"
		}
		seq := wantApplied(t, a.Push(id, enginetest.Upsert("tasks", id, a.Task(id, proj, "x", false), 0)))
		if proj == "p1" {
			want = append(want, seq)
		}
	}
	want = append(want, wantApplied(t, a.Push("del", enginetest.Delete("tasks", "x"))))
	head := want[len(want)-1]
	var got []int64
	for range 20 {
		sec := mustPull(t, b, wire.PullHeader{Accept: acceptInline, LimitCommits: 1}, s)[0]
		for _, c := range sec.Commits {
			got = append(got, c.CommitSeq)
		}
		if sec.End.NextCursor == s.Cursor {
			break
		}
		if len(sec.Commits) > 0 && sec.End.NextCursor < sec.Commits[len(sec.Commits)-1].CommitSeq {
			t.Fatalf("cursor %d behind the delivered commit", sec.End.NextCursor)
		}
		s.Cursor = sec.End.NextCursor
	}
	if !slices.Equal(got, want) || s.Cursor != head {
		t.Fatalf("delivered %v, cursor %d; want %v, cursor %d", got, s.Cursor, want, head)
	}
}
