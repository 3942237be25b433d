package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// §1.7 request-level pull validation: nothing is written, the whole
// request fails with the named code — including its pushes.
func TestPullRequestValidation(t *testing.T) {
	h := newHarness(t, enginetest.Options{})
	h.Grants.Set("alice", projects("p1"))
	a := h.Client("tenant", "alice", "a")
	push := []wire.PushCommit{cmt("c1", up("tasks", "t1", a.Task("t1", "p1", "x", false), 0))}
	cases := []struct {
		name   string
		accept uint8
		subs   []wire.Subscription
		code   syncerr.Code
	}{
		{"duplicate ids", acceptRows, []wire.Subscription{sub("s", "tasks", "p1", -1), sub("s", "projects", "p1", -1)}, syncerr.InvalidSubscription},
		{"undeclared key", acceptRows, []wire.Subscription{{ID: "s", Table: "tasks", Scopes: enginetest.Scopes("org_id", "o1"), Cursor: -1}}, syncerr.InvalidSubscription},
		{"requested wildcard", acceptRows, []wire.Subscription{{ID: "s", Table: "tasks", Scopes: enginetest.Scopes("project_id", "p1", "*"), Cursor: -1}}, syncerr.InvalidSubscription},
		{"unknown table", acceptRows, []wire.Subscription{sub("ok", "tasks", "p1", -1), sub("s", "nope", "p1", -1)}, syncerr.UnknownTable},
		{"no rows bits", wire.AcceptSQLite | wire.AcceptSignedURL, []wire.Subscription{sub("s", "tasks", "p1", -1)}, syncerr.InvalidRequest},
		{"no rows bits, no subs", 0, nil, syncerr.InvalidRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := a.Send(a.Request(push, &wire.PullHeader{Accept: tc.accept}, tc.subs))
			wantCode(t, err, tc.code)
			if head(t, h, "tenant").MaxCommitSeq != 0 {
				t.Fatal("a request-level failure applied its push")
			}
		})
	}
	// The resolver naming a variable no table declares is a server bug.
	h.Grants.Set("alice", engine.ScopeMap{"project_id": {"p1"}, "galaxy_id": {"g"}})
	_, err := a.Pull(pullHdr(acceptRows), sub("s", "tasks", "p1", -1))
	wantCode(t, err, syncerr.InvalidSubscription)
	// A key declared by another table is legal (and simply ignored).
	_ = err
}

// §3.2 rule 5 / §3.4 step 4: a resolver that answers "no grant", or that
// throws (any error that is not the outage signal), revokes every
// subscription and forbids every write, in the same request.
func TestPullResolverFailure(t *testing.T) {
	for name, fail := range map[string]error{
		"no grant": fmt.Errorf("grant table says: %w", engine.ErrNoGrant),
		"throw":    errors.New("grant item is malformed"),
	} {
		t.Run(name, func(t *testing.T) { testPullResolverFailure(t, fail) })
	}
}

func testPullResolverFailure(t *testing.T, fail error) {
	h := newHarness(t, enginetest.Options{})
	h.Grants.Set("alice", projects("p1"))
	a := h.Client("tenant", "alice", "a")
	wantApplied(t, a.Push("seed", up("tasks", "t1", a.Task("t1", "p1", "x", false), 0)))
	h.Grants.FailWith(fail)
	calls := h.Grants.Calls()
	subs := []wire.Subscription{sub("s1", "tasks", "p1", -1), sub("s2", "projects", "p1", 1)}
	resp, err := a.Send(a.Request([]wire.PushCommit{
		cmt("c1", up("tasks", "t2", a.Task("t2", "p1", "x", false), 0)),
		cmt("c2", up("tasks", "t1", a.Task("t1", "p1", "y", false), 1)),
		cmt("c3", del("tasks", "t1")),
	}, &wire.PullHeader{Accept: acceptRows}, subs))
	if err != nil {
		t.Fatal(err)
	}
	var results []*wire.PushResult
	for _, f := range resp.Frames {
		if r, ok := f.(*wire.PushResult); ok {
			results = append(results, r)
		}
	}
	for _, r := range results {
		wantRejected(t, r, 0, wire.OpError, syncerr.Forbidden)
	}
	secs := enginetest.Sections(t, resp)
	for i, s := range secs {
		if s.Start.Status != wire.SubRevoked || s.Start.ReasonCode != string(syncerr.ScopeRevoked) || len(s.Start.EffectiveScopes) != 0 ||
			s.End.NextCursor != subs[i].Cursor || len(s.Commits)+len(s.Refs)+len(s.Inline) != 0 {
			t.Fatalf("section %d under a failing resolver: %+v %+v", i, s.Start, s.End)
		}
	}
	if got := h.Grants.Calls() - calls; got != 1 {
		t.Fatalf("resolver called %d times in one request, want 1 (§3.2 rule 3)", got)
	}
	if head(t, h, "tenant").MaxCommitSeq != 1 {
		t.Fatal("a commit applied while the resolver failed")
	}
}

// §3.2 rule 3: the resolver runs at most once per request, whatever the
// number of commits, operations and subscriptions.
func TestResolverCalledOncePerRequest(t *testing.T) {
	h := newHarness(t, enginetest.Options{})
	h.Grants.Set("alice", projects("p1", "p2"))
	a := h.Client("tenant", "alice", "a")
	var commits []wire.PushCommit
	for i := 0; i < 5; i++ {
		id := fmt.Sprintf("t%d", i)
		commits = append(commits, cmt("c"+id, up("tasks", id, a.Task(id, "p1", "x", false), 0), del("tasks", "zz"+id), up("tasks", id+"b", a.Task(id+"b", "p2", "x", false), -1)))
	}
	before := h.Grants.Calls()
	if _, err := a.Send(a.Request(commits, &wire.PullHeader{Accept: acceptRows}, []wire.Subscription{
		sub("s1", "tasks", "p1", -1), sub("s2", "tasks", "p2", -1), sub("s3", "projects", "p1", 0),
	})); err != nil {
		t.Fatal(err)
	}
	if got := h.Grants.Calls() - before; got != 1 {
		t.Fatalf("resolver called %d times", got)
	}
	before = h.Grants.Calls()
	mustPull(t, a, pullHdr(acceptRows)) // no subscriptions: no resolution needed
	mustPushAll(t, a, cmt("d", del("tasks", "none")))
	if got := h.Grants.Calls() - before; got > 2 {
		t.Fatalf("resolver called %d times over two requests", got)
	}
}

// §4.2 / §4.5: limitCommits counts changes; a commit larger than the limit
// goes whole and alone; nextCursor is the last fully delivered commit when
// truncated; quiet subscriptions advance to maxCommitSeq.
func TestPullLimitCommits(t *testing.T) {
	h := newHarness(t, enginetest.Options{})
	grantAll(h, projects("p1", "p2"), "alice", "bob")
	a := h.Client("tenant", "alice", "a")
	b := h.Client("tenant", "bob", "b")
	base := wantApplied(t, a.Push("seed", up("tasks", "seed", a.Task("seed", "p2", "x", false), 0)))
	sizes := []int{3, 3, 7, 1, 2}
	var seqs []int64
	for i, n := range sizes {
		var ops []wire.Operation
		for j := 0; j < n; j++ {
			id := fmt.Sprintf("c%d-%d", i, j)
			ops = append(ops, up("tasks", id, a.Task(id, "p1", "x", false), 0))
		}
		seqs = append(seqs, wantApplied(t, a.Push(fmt.Sprint("c", i), ops...)))
	}
	maxSeq := seqs[len(seqs)-1]
	hdr := wire.PullHeader{Accept: acceptRows, LimitCommits: 5}
	s := sub("s", "tasks", "p1", base)
	quiet := sub("q", "tasks", "p2", base)
	var got [][]int64
	for s.Cursor < maxSeq {
		secs := mustPull(t, b, hdr, s, quiet)
		var batch []int64
		changes := 0
		for _, c := range secs[0].Commits {
			batch = append(batch, c.CommitSeq)
			changes += len(c.Changes)
		}
		if len(batch) == 0 {
			t.Fatal("no progress")
		}
		if changes > 5 && len(batch) > 1 {
			t.Fatalf("pull %v carries %d changes: limit 5 only allows a single big commit alone", batch, changes)
		}
		if secs[0].End.NextCursor != batch[len(batch)-1] {
			t.Fatalf("truncated pull: nextCursor %d, last delivered %d", secs[0].End.NextCursor, batch[len(batch)-1])
		}
		got = append(got, batch)
		s.Cursor = secs[0].End.NextCursor
		if secs[1].End.NextCursor != maxSeq || len(secs[1].Commits) != 0 {
			t.Fatalf("quiet subscription: nextCursor %d (want %d), %d commits", secs[1].End.NextCursor, maxSeq, len(secs[1].Commits))
		}
	}
	want := [][]int64{{seqs[0]}, {seqs[1]}, {seqs[2]}, {seqs[3], seqs[4]}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("batches %v, want %v", got, want)
	}
	// Clamps: negative → 1 change; 0 → default; huge → 1000.
	secs := mustPull(t, b, wire.PullHeader{Accept: acceptRows, LimitCommits: -7}, sub("s", "tasks", "p1", base))
	if len(secs[0].Commits) != 1 {
		t.Fatalf("limitCommits -7: %d commits", len(secs[0].Commits))
	}
	var ops []wire.Operation
	for i := 0; i < 1001; i++ {
		ops = append(ops, del("tasks", fmt.Sprint("c0-", i%3)))
	}
	_ = ops
	var many []wire.PushCommit
	for i := 0; i < 1200; i++ {
		id := fmt.Sprintf("m%d", i)
		many = append(many, cmt("m"+id, up("tasks", id, a.Task(id, "p1", "x", false), 0)))
		if len(many) == 250 {
			for _, r := range mustPushAll(t, a, many...) {
				wantApplied(t, r)
			}
			many = nil
		}
	}
	for _, lim := range []int32{0, 5000} {
		secs = mustPull(t, b, wire.PullHeader{Accept: acceptRows, LimitCommits: lim}, sub("s", "tasks", "p1", maxSeq))
		if n := len(secs[0].Commits); n != 1000 {
			t.Fatalf("limitCommits %d: %d single-change commits, want 1000", lim, n)
		}
	}
}

// §1.6: subscriptions are echoed in request order, whatever their status.
func TestPullEchoesRequestOrder(t *testing.T) {
	h := newHarness(t, enginetest.Options{})
	h.Grants.Set("alice", projects("p1", "p3"))
	a := h.Client("tenant", "alice", "a")
	wantApplied(t, a.Push("seed", up("tasks", "t1", a.Task("t1", "p1", "x", false), 0)))
	subs := []wire.Subscription{sub("z", "tasks", "p1", 1), sub("a", "tasks", "p2", -1), sub("m", "projects", "p3", -1), sub("b", "tasks", "p1", -1), sub("0", "tasks", "p3", 0)}
	secs := mustPull(t, a, pullHdr(acceptRows), subs...)
	for i, s := range secs {
		if s.Start.ID != subs[i].ID {
			t.Fatalf("section %d is %q, want %q", i, s.Start.ID, subs[i].ID)
		}
	}
	if secs[1].Start.Status != wire.SubRevoked || secs[3].Start.Bootstrap != true || secs[0].Start.Bootstrap {
		t.Fatalf("statuses: %+v %+v %+v", secs[0].Start, secs[1].Start, secs[3].Start)
	}
}

// §3.2 rule 4: effective = requested ∩ allowed.
func TestPullEffectiveScopes(t *testing.T) {
	h := newHarness(t, enginetest.Options{})
	h.Grants.Set("admin", projects("*"))
	admin := h.Client("tenant", "admin", "admin")
	var ops []wire.Operation
	for _, p := range []string{"p1", "p2", "p3"} {
		ops = append(ops, up("tasks", "t-"+p, admin.Task("t-"+p, p, "x", false), 0))
	}
	wantApplied(t, admin.Push("seed", ops...))
	ids := func(s *enginetest.Section) []string {
		var out []string
		for _, seg := range s.Segments {
			for _, b := range seg.Blocks {
				for _, r := range b {
					out = append(out, r.Values[0].Str)
				}
			}
		}
		slices.Sort(out)
		return out
	}
	cases := []struct {
		name      string
		allowed   engine.ScopeMap
		requested []string
		effective []string // nil: revoked
		rows      []string
	}{
		{"wildcard passes requested", projects("*"), []string{"p3", "p1", "p1"}, []string{"p1", "p3"}, []string{"t-p1", "t-p3"}},
		{"partial intersection", projects("p1", "p2"), []string{"p2", "p3"}, []string{"p2"}, []string{"t-p2"}},
		{"empty intersection", projects("p1"), []string{"p2", "p3"}, nil, nil},
		{"key absent from allowed", engine.ScopeMap{}, []string{"p1"}, nil, nil},
		{"no allowed map at all", nil, []string{"p1"}, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h.Grants.Set("u", tc.allowed)
			c := h.Client("tenant", "u", "u-"+tc.name)
			secs := mustPull(t, c, pullHdr(acceptInline), wire.Subscription{ID: "s", Table: "tasks", Scopes: p1Scopes(tc.requested...), Cursor: -1})
			s := secs[0]
			if tc.effective == nil {
				if s.Start.Status != wire.SubRevoked || len(s.Start.EffectiveScopes) != 0 || s.End.NextCursor != -1 {
					t.Fatalf("want revoked, got %+v %+v", s.Start, s.End)
				}
				return
			}
			eff := s.Start.EffectiveScopes
			if s.Start.Status != wire.SubActive || len(eff) != 1 || eff[0].Key != "project_id" || !slices.Equal(eff[0].Values, tc.effective) {
				t.Fatalf("effective %+v, want project_id=%v", eff, tc.effective)
			}
			if got := ids(s); !slices.Equal(got, tc.rows) {
				t.Fatalf("rows %v, want %v", got, tc.rows)
			}
		})
	}
}

// §4.7 bootstrap triggers and restarts: unusable tokens and pins below the
// horizon silently restart with a fresh pin; cursor > maxCommitSeq
// bootstraps.
func TestPullBootstrapTriggers(t *testing.T) {
	h := newHarness(t, enginetest.Options{})
	grantAll(h, projects("p1"), "alice", "bob")
	a := h.Client("tenant", "alice", "a")
	for i := 0; i < 6; i++ {
		id := fmt.Sprintf("t%d", i)
		wantApplied(t, a.Push(id, up("tasks", id, a.Task(id, "p1", "x", false), 0)))
	}
	b := h.Client("tenant", "bob", "b")
	hdr := wire.PullHeader{Accept: acceptExternal, LimitSnapshotRows: 2, MaxSnapshotPages: 1}
	first := mustPull(t, b, hdr, sub("s", "tasks", "p1", -1))[0]
	if !first.End.BootstrapState.Present || first.End.NextCursor != 6 {
		t.Fatalf("first page: %+v", first.End)
	}
	var tok map[string]any
	if err := json.Unmarshal([]byte(first.End.BootstrapState.Value), &tok); err != nil {
		t.Fatal(err)
	}
	if tok["asOfCommitSeq"] != float64(6) || tok["tableIndex"] != float64(0) || fmt.Sprint(tok["tables"]) != "[tasks]" || tok["rowCursor"] == nil {
		t.Fatalf("token shape %v (§4.7)", tok)
	}
	resumed := func(cursor int64, state string) *enginetest.Section {
		s := sub("s", "tasks", "p1", cursor)
		s.BootstrapState = wire.Some(wire.JSON(state))
		return mustPull(t, b, hdr, s)[0]
	}
	// A good token resumes: second page.
	sec := resumed(6, string(first.End.BootstrapState.Value))
	if !sec.Start.Bootstrap || !sec.Refs[0].RowCursor.Present || sec.Refs[0].AsOfCommitSeq != 6 {
		t.Fatalf("resume: %+v", sec.Refs)
	}
	wantApplied(t, a.Push("more", up("tasks", "t9", a.Task("t9", "p1", "x", false), 0)))
	restarts := map[string]string{
		"not an object": `[1,2]`,
		"a string":      `"resume please"`,
		"wrong types":   `{"asOfCommitSeq":"6","tables":["tasks"],"tableIndex":0,"rowCursor":"t1"}`,
		"missing field": `{"asOfCommitSeq":6,"tables":["tasks"],"tableIndex":0}`,
		"wrong table":   `{"asOfCommitSeq":6,"tables":["projects"],"tableIndex":0,"rowCursor":"t1"}`,
		"table index":   `{"asOfCommitSeq":6,"tables":["tasks"],"tableIndex":1,"rowCursor":"t1"}`,
		"future pin":    `{"asOfCommitSeq":99,"tables":["tasks"],"tableIndex":0,"rowCursor":"t1"}`,
		"negative pin":  `{"asOfCommitSeq":-3,"tables":["tasks"],"tableIndex":0,"rowCursor":"t1"}`,
	}
	// A fresh start pins at the head, 7: commit 7 changed the scope after
	// the live first page pinned at 6, which is no longer reused (§4.7,
	// issue 24).
	for name, state := range restarts {
		sec := resumed(6, state)
		if !sec.Start.Bootstrap || sec.Start.Status != wire.SubActive || len(sec.Refs) != 1 || sec.Refs[0].RowCursor.Present ||
			sec.Refs[0].AsOfCommitSeq != 7 || sec.End.NextCursor != 7 {
			t.Fatalf("%s: want a silent restart pinned at the head 7, got start %+v refs %+v end %+v", name, sec.Start, sec.Refs, sec.End)
		}
	}
	// cursor > maxCommitSeq: a client from the future bootstraps.
	sec = mustPull(t, b, hdr, sub("s", "tasks", "p1", 500))[0]
	if !sec.Start.Bootstrap || sec.End.NextCursor != 7 {
		t.Fatalf("future cursor: %+v %+v", sec.Start, sec.End)
	}
	// Pin below the horizon: restart; a garbage token with a cursor below
	// the horizon is a restart too, never a reset.
	for i := 0; i < 5; i++ {
		wantApplied(t, a.Push(fmt.Sprint("p", i), up("tasks", "t0", a.Task("t0", "p1", fmt.Sprint(i), false), -1)))
	}
	keep, window := int64(1), int64(0)
	h.Clock.Advance(1) // every client record is now outside a 0 ms window
	if _, err := h.Engine.Prune(t.Context(), "tenant", &engine.RetentionOverride{MinRetainedCommits: &keep, ActiveWindowMs: &window}); err != nil {
		t.Fatal(err)
	}
	hz := head(t, h, "tenant").HorizonSeq
	if hz != 11 {
		t.Fatalf("horizon %d", hz)
	}
	for name, state := range map[string]string{"pruned pin": string(first.End.BootstrapState.Value), "garbage": "{}"} {
		sec := resumed(6, state)
		if sec.Start.Status != wire.SubActive || !sec.Start.Bootstrap || sec.Refs[0].RowCursor.Present || sec.Refs[0].AsOfCommitSeq != 12 {
			t.Fatalf("%s below the horizon: start %+v refs %+v", name, sec.Start, sec.Refs)
		}
	}
	// A token pinned exactly at the horizon still resumes.
	// (The row cursor is this server's (scope value, rowId) form: after
	// row t1 under project_id p1.)
	atHorizon := fmt.Sprintf(`{"asOfCommitSeq":%d,"tables":["tasks"],"tableIndex":0,"rowCursor":"s2:p1t1"}`, hz)
	sec = resumed(hz, atHorizon)
	if sec.Refs[0].AsOfCommitSeq != hz || !sec.Refs[0].RowCursor.Present || sec.Refs[0].RowCursor.Value != "s2:p1t1" {
		t.Fatalf("resume at the horizon: %+v", sec.Refs[0])
	}
	// A cursor this server never writes (a plain rowId, as written before
	// scope-keyed reads) restarts the pages at the pin, never skips rows.
	legacy := fmt.Sprintf(`{"asOfCommitSeq":%d,"tables":["tasks"],"tableIndex":0,"rowCursor":"t1"}`, hz)
	sec = resumed(hz, legacy)
	if sec.Refs[0].AsOfCommitSeq != hz || sec.Refs[0].RowCursor.Present {
		t.Fatalf("resume with a foreign cursor: %+v", sec.Refs[0])
	}
}

// §4.2: maxSnapshotPages clamp [1, 50], default 4; limitSnapshotRows
// clamp [1, 50000], default 1000.
func TestPullSnapshotClamps(t *testing.T) {
	h := newHarness(t, enginetest.Options{})
	grantAll(h, projects("p1"), "alice", "bob")
	a := h.Client("tenant", "alice", "a")
	var commits []wire.PushCommit
	for i := 0; i < 1100; i++ {
		id := fmt.Sprintf("t%04d", i)
		commits = append(commits, cmt(id, up("tasks", id, a.Task(id, "p1", "x", false), 0)))
		if len(commits) == 250 || i == 1099 {
			mustPushAll(t, a, commits...)
			commits = nil
		}
	}
	b := h.Client("tenant", "bob", "b")
	cases := []struct {
		rows, pages   int32
		segs, perPage int
		complete      bool
	}{
		{1, 0, 4, 1, false},        // default 4 pages
		{1, -3, 1, 1, false},       // clamp to 1
		{1, 100, 50, 1, false},     // clamp to 50
		{0, 1, 1, 1000, false},     // default 1000 rows
		{-9, 2, 2, 1, false},       // rows clamp to 1
		{100000, 1, 1, 1100, true}, // rows clamp to 50000: all in one page
	}
	for _, tc := range cases {
		for _, accept := range []uint8{acceptInline, acceptExternal} {
			sec := mustPull(t, b, wire.PullHeader{Accept: accept, LimitSnapshotRows: tc.rows, MaxSnapshotPages: tc.pages}, sub("s", "tasks", "p1", -1))[0]
			n := len(sec.Inline) + len(sec.Refs)
			if n != tc.segs || sec.End.BootstrapState.Present == tc.complete {
				t.Fatalf("rows %d pages %d accept %b: %d segments complete=%v, want %d complete=%v", tc.rows, tc.pages, accept, n, !sec.End.BootstrapState.Present, tc.segs, tc.complete)
			}
			if len(sec.Refs) > 0 && sec.Refs[0].RowCount != int64(tc.perPage) {
				t.Fatalf("rows %d: page of %d rows, want %d", tc.rows, sec.Refs[0].RowCount, tc.perPage)
			}
			if len(sec.Segments) > 0 && sec.Segments[0].Rows() != tc.perPage {
				t.Fatalf("rows %d: inline page of %d rows, want %d", tc.rows, sec.Segments[0].Rows(), tc.perPage)
			}
		}
	}
}

// §4.2 / §5.7: bit 0 only → always inline; bit 1 only → always a ref;
// both → inline up to the inline size, a ref above it.
func TestPullInlineVersusRef(t *testing.T) {
	for _, tc := range []struct {
		accept       uint8
		project      string
		inline, refs int
	}{
		{acceptInline, "p1", 1, 0},
		{acceptInline, "p2", 1, 0},
		{acceptExternal, "p1", 0, 1},
		{acceptExternal, "p2", 0, 1},
		{acceptRows, "p1", 0, 1},
		{acceptRows, "p2", 1, 0},
	} {
		// A fresh server per case: a page another client already published
		// as a ref is reused as a ref (see the report), which would mask
		// the size rule.
		h := newHarness(t, enginetest.Options{Limits: engine.Limits{InlineSegmentMaxBytes: 400}})
		grantAll(h, projects("p1", "p2"), "alice", "bob")
		a := h.Client("tenant", "alice", "a")
		wantApplied(t, a.Push("small", up("tasks", "s1", a.Task("s1", "p2", "tiny", false), 0)))
		var ops []wire.Operation
		for i := 0; i < 40; i++ {
			id := fmt.Sprintf("big%02d", i)
			ops = append(ops, up("tasks", id, a.Task(id, "p1", "a longer title to make the page large", false), 0))
		}
		wantApplied(t, a.Push("big", ops...))
		b := h.Client("tenant", "bob", "b")
		sec := mustPull(t, b, pullHdr(tc.accept), sub("s", "tasks", tc.project, -1))[0]
		if len(sec.Inline) != tc.inline || len(sec.Refs) != tc.refs {
			t.Fatalf("accept %02b %s: %d inline %d refs, want %d/%d", tc.accept, tc.project, len(sec.Inline), len(sec.Refs), tc.inline, tc.refs)
		}
		if tc.inline == 1 && tc.project == "p1" && len(sec.Inline[0].Payload) <= 400 {
			t.Fatal("test setup: the p1 page is not larger than the inline limit")
		}
	}
}

// Response byte budget: a pull stops adding commits before the budget,
// never splits a commit, and always makes progress.
func TestPullResponseBudget(t *testing.T) {
	const budget = 3000
	h := newHarness(t, enginetest.Options{Limits: engine.Limits{ResponseBudgetBytes: budget}})
	grantAll(h, projects("p1"), "alice", "bob")
	a := h.Client("tenant", "alice", "a")
	title := string(make([]byte, 200))
	var sizes []int
	for i := 0; i < 30; i++ {
		n := 1 + i%4
		if i == 17 {
			n = 25 // one commit far larger than the budget
		}
		var ops []wire.Operation
		for j := 0; j < n; j++ {
			id := fmt.Sprintf("c%02d-%02d", i, j)
			ops = append(ops, up("tasks", id, a.Task(id, "p1", title, false), 0))
		}
		wantApplied(t, a.Push(fmt.Sprint("c", i), ops...))
		sizes = append(sizes, n)
	}
	r := h.Client("tenant", "bob", "b").NewReplica("s", "tasks", p1Scopes("p1"))
	r.Sub.Cursor = 0
	pulls := 0
	for r.Sub.Cursor < 30 {
		before := r.Sub.Cursor
		resp, err := r.C.Send(r.C.Request(nil, &wire.PullHeader{Accept: acceptRows}, []wire.Subscription{r.Sub}))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := wire.Encode(resp)
		secs := enginetest.Sections(t, resp)
		if err := r.Apply(r.Sub, secs[0]); err != nil {
			t.Fatal(err)
		}
		commits := secs[0].Commits
		if len(commits) == 0 || r.Sub.Cursor <= before {
			t.Fatalf("pull %d made no progress", pulls)
		}
		for _, c := range commits {
			if len(c.Changes) != sizes[c.CommitSeq-1] {
				t.Fatalf("commit %d split: %d of %d changes", c.CommitSeq, len(c.Changes), sizes[c.CommitSeq-1])
			}
		}
		if len(commits) > 1 && len(body) > budget {
			t.Fatalf("pull %d: %d bytes with %d commits, budget %d", pulls, len(body), len(commits), budget)
		}
		pulls++
	}
	if pulls < 5 {
		t.Fatalf("budget %d never cut a pull short (%d pulls)", budget, pulls)
	}
	wantRows(t, h.ServerRows("tenant", "tasks"), r.Rows, "budgeted replica")
	// The budget also stops inline bootstrap pages, after the first.
	rb := h.Client("tenant", "bob", "b2").NewReplica("s", "tasks", p1Scopes("p1"))
	hdr := wire.PullHeader{Accept: acceptInline, LimitSnapshotRows: 5, MaxSnapshotPages: 50}
	sec, err := rb.Pull(hdr)
	if err != nil {
		t.Fatal(err)
	}
	if len(sec.Inline) == 0 || len(sec.Inline) >= 20 || !sec.End.BootstrapState.Present {
		t.Fatalf("budgeted bootstrap: %d inline pages", len(sec.Inline))
	}
	if err := rb.Sync(hdr, 100); err != nil {
		t.Fatal(err)
	}
	wantRows(t, h.ServerRows("tenant", "tasks"), rb.Rows, "budgeted bootstrap")
}

// §4.4 / §5.6 with the response budget: when earlier sections used up the
// budget, a fresh bootstrap must not be "started" without its first page
// (SUB_START.bootstrap is true iff segments are delivered, and the client
// clears stale local rows only on the first page of the response to its
// fresh request). The replica holds a stale local row the server never
// had; it must be cleared.
func TestPullBudgetDefersFreshBootstrap(t *testing.T) {
	for _, accept := range []uint8{acceptInline, acceptRows} {
		t.Run(fmt.Sprintf("accept=%b", accept), func(t *testing.T) {
			h := newHarness(t, enginetest.Options{Limits: engine.Limits{ResponseBudgetBytes: 2500}})
			grantAll(h, projects("p1", "p2"), "alice", "bob")
			a := h.Client("tenant", "alice", "a")
			var ops []wire.Operation
			for i := 0; i < 30; i++ {
				id := fmt.Sprintf("a%02d", i)
				ops = append(ops, up("tasks", id, a.Task(id, "p1", "bootstrap row with some text", false), 0))
			}
			wantApplied(t, a.Push("seed", ops...))
			c := h.Client("tenant", "bob", "b")
			busy := c.NewReplica("busy", "tasks", p1Scopes("p2"))
			busy.Sub.Cursor = head(t, h, "tenant").MaxCommitSeq
			for i := 0; i < 40; i++ {
				id := fmt.Sprintf("b%02d", i)
				wantApplied(t, a.Push(id, up("tasks", id, a.Task(id, "p2", "incremental change with text", false), 0)))
			}
			fresh := c.NewReplica("fresh", "tasks", p1Scopes("p1"))
			fresh.Rows["ghost"] = enginetest.RowState{Version: 3, Payload: a.Task("ghost", "p1", "deleted while away", false)}
			hdr := wire.PullHeader{Accept: accept, LimitSnapshotRows: 100}
			for i := 0; ; i++ {
				if _, err := enginetest.Exchange(c, hdr, nil, busy, fresh); err != nil {
					t.Fatal(err)
				}
				for _, r := range []*enginetest.Replica{busy, fresh} {
					s := r.LastSection
					if s.Start.Bootstrap != (len(s.Inline)+len(s.Refs) > 0) {
						t.Fatalf("pull %d %s: bootstrap=%v with %d segments (§4.4)", i, r.Sub.ID, s.Start.Bootstrap, len(s.Inline)+len(s.Refs))
					}
				}
				if fresh.Sub.Cursor >= 0 && !fresh.Sub.BootstrapState.Present && len(busy.LastSection.Commits) == 0 {
					break
				}
				if i > 50 {
					t.Fatal("no convergence")
				}
			}
			if busy.Pulls < 3 {
				t.Fatalf("the budget never cut the busy subscription (%d pulls)", busy.Pulls)
			}
			rows := h.ServerRows("tenant", "tasks")
			wantRows(t, filterProject(t, a, rows, "p1"), fresh.Rows, "fresh bootstrap")
			wantRows(t, filterProject(t, a, rows, "p2"), busy.Rows, "busy subscription")
		})
	}
}

// A deferred restart (unusable token, budget exhausted before its first
// page) echoes the request's cursor and token unchanged: dropping the
// token would let a partial replica continue incrementally.
func TestPullBudgetDeferredRestartKeepsToken(t *testing.T) {
	h := newHarness(t, enginetest.Options{Limits: engine.Limits{ResponseBudgetBytes: 1500}})
	grantAll(h, projects("p1", "p2"), "alice", "bob")
	a := h.Client("tenant", "alice", "a")
	var ops []wire.Operation
	for i := 0; i < 30; i++ {
		id := fmt.Sprintf("a%02d", i)
		ops = append(ops, up("tasks", id, a.Task(id, "p1", "bootstrap row with some text", false), 0))
	}
	wantApplied(t, a.Push("seed", ops...))
	for i := 0; i < 40; i++ {
		id := fmt.Sprintf("b%02d", i)
		wantApplied(t, a.Push(id, up("tasks", id, a.Task(id, "p2", "incremental change with text", false), 0)))
	}
	c := h.Client("tenant", "bob", "b")
	partial := sub("partial", "tasks", "p1", 1)
	partial.BootstrapState = wire.Some(wire.JSON(`{"unusable":true}`))
	secs := mustPull(t, c, wire.PullHeader{Accept: acceptInline}, sub("busy", "tasks", "p2", 1), partial)
	s := secs[1]
	if s.Start.Bootstrap || len(s.Inline) != 0 {
		t.Fatal("test setup: the budget did not defer the restart")
	}
	if s.Start.Status != wire.SubActive || s.End.NextCursor != 1 || s.End.BootstrapState != partial.BootstrapState {
		t.Fatalf("deferred restart: start %+v end %+v, want cursor 1 and the request token echoed", s.Start, s.End)
	}
	// The next pull with the echoed token (and spare budget) restarts.
	secs = mustPull(t, c, wire.PullHeader{Accept: acceptInline}, partial)
	if !secs[0].Start.Bootstrap || len(secs[0].Inline) == 0 {
		t.Fatalf("restart after deferral: %+v", secs[0].Start)
	}
}

// multiScopeSchema has a two-variable table and a table whose variable no
// other table declares.
const multiScopeSchema = `{
  "version": 1,
  "tables": [
    {"name": "docs", "primaryKey": "id",
     "columns": [
       {"name": "id", "type": "string", "nullable": false},
       {"name": "workspace_id", "type": "string", "nullable": false},
       {"name": "project_id", "type": "string", "nullable": true},
       {"name": "body", "type": "string", "nullable": false}
     ],
     "scopes": ["workspace:{workspace_id}", "project:{project_id}"]},
    {"name": "notes", "primaryKey": "id",
     "columns": [
       {"name": "id", "type": "string", "nullable": false},
       {"name": "user_id", "type": "string", "nullable": false}
     ],
     "scopes": ["user:{user_id}"]}
  ]
}`

// §3.2 / §3.4 with several variables: every declared key is required on
// writes; reads filter on each effective key independently; resolver keys
// declared only by another table are legal.
func TestMultiScopeTable(t *testing.T) {
	h := newHarness(t, enginetest.Options{Schema: multiScopeSchema})
	h.Grants.Set("admin", engine.ScopeMap{"workspace_id": {"*"}, "project_id": {"*"}, "user_id": {"u1"}})
	h.Grants.Set("ws-only", engine.ScopeMap{"workspace_id": {"w1"}})
	h.Grants.Set("w1p1", engine.ScopeMap{"workspace_id": {"w1"}, "project_id": {"p1"}, "user_id": {"u9"}})
	admin := h.Client("tenant", "admin", "admin")
	doc := func(c *enginetest.Client, id, ws string, proj *string, body string) []byte {
		t.Helper()
		v := []rowcodec.Value{{Str: id}, {Str: ws}, {Null: true}, {Str: body}}
		if proj != nil {
			v[2] = rowcodec.Value{Str: *proj}
		}
		b, err := c.Codec("docs").Codec.Append(nil, v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	p := func(s string) *string { return &s }
	wantApplied(t, admin.Push("seed",
		up("docs", "d11", doc(admin, "d11", "w1", p("p1"), "x"), 0),
		up("docs", "d12", doc(admin, "d12", "w1", p("p2"), "x"), 0),
		up("docs", "d21", doc(admin, "d21", "w2", p("p1"), "x"), 0)))
	// A NULL scope column denies even a wildcard grant (§3.4 step 2).
	wantRejected(t, admin.Push("null", up("docs", "dn", doc(admin, "dn", "w1", nil, "x"), 0)), 0, wire.OpError, syncerr.Forbidden)
	ws := h.Client("tenant", "ws-only", "ws")
	wantRejected(t, ws.Push("c1", up("docs", "d9", doc(ws, "d9", "w1", p("p1"), "x"), 0)), 0, wire.OpError, syncerr.Forbidden)
	wantRejected(t, ws.Push("c2", up("docs", "d11", doc(ws, "d11", "w1", p("p1"), "y"), 1)), 0, wire.OpError, syncerr.Forbidden)
	c := h.Client("tenant", "w1p1", "c")
	wantApplied(t, c.Push("c3", up("docs", "d11", doc(c, "d11", "w1", p("p1"), "y"), 1)))
	wantRejected(t, c.Push("c4", up("docs", "d12", doc(c, "d12", "w1", p("p2"), "y"), 1)), 0, wire.OpError, syncerr.Forbidden)
	wantRejected(t, c.Push("c5", up("docs", "d21", doc(c, "d21", "w2", p("p1"), "y"), 1)), 0, wire.OpError, syncerr.Forbidden)
	rowIDs := func(s *enginetest.Section) []string {
		var out []string
		for _, seg := range s.Segments {
			for _, b := range seg.Blocks {
				for _, r := range b {
					out = append(out, r.Values[0].Str)
				}
			}
		}
		slices.Sort(out)
		return out
	}
	both := wire.ScopeMap{{Key: "project_id", Values: []string{"p1", "p2"}}, {Key: "workspace_id", Values: []string{"w1"}}}
	secs := mustPull(t, c, pullHdr(acceptInline),
		wire.Subscription{ID: "both", Table: "docs", Scopes: both, Cursor: -1},
		wire.Subscription{ID: "ws", Table: "docs", Scopes: enginetest.Scopes("workspace_id", "w1"), Cursor: -1},
		wire.Subscription{ID: "notes", Table: "notes", Scopes: enginetest.Scopes("user_id", "u1"), Cursor: -1})
	if eff := secs[0].Start.EffectiveScopes; secs[0].Start.Status != wire.SubActive || len(eff) != 2 || fmt.Sprint(eff[0].Values) != "[p1]" {
		t.Fatalf("two-key effective scopes %+v", secs[0].Start)
	}
	if got := rowIDs(secs[0]); fmt.Sprint(got) != "[d11]" {
		t.Fatalf("two-key subscription rows %v", got)
	}
	// Requesting only workspace_id: the key filter is independent (§3.2).
	if got := rowIDs(secs[1]); fmt.Sprint(got) != "[d11 d12]" {
		t.Fatalf("workspace-only subscription rows %v", got)
	}
	if secs[2].Start.Status != wire.SubRevoked {
		t.Fatalf("notes for a user not granted: %+v", secs[2].Start)
	}
	// ws-only lacks project_id: requesting it revokes (rule 5).
	secs = mustPull(t, ws, pullHdr(acceptInline), wire.Subscription{ID: "both", Table: "docs", Scopes: both, Cursor: -1})
	if secs[0].Start.Status != wire.SubRevoked {
		t.Fatalf("partial scope loss must revoke: %+v", secs[0].Start)
	}
}

// Several subscriptions with different cursors in one request share the
// log window (pull.go logWindow) and each get exactly their window.
func TestPullManyCursorsOneRequest(t *testing.T) {
	h := newHarness(t, enginetest.Options{})
	grantAll(h, projects("p1", "p2"), "alice", "bob")
	a := h.Client("tenant", "alice", "a")
	for i := 1; i <= 600; i++ {
		proj := []string{"p1", "p2"}[i%2]
		id := fmt.Sprintf("t%d", i%50)
		wantApplied(t, a.Push(fmt.Sprint(i), up("tasks", id+proj, a.Task(id+proj, proj, fmt.Sprint(i), false), -1)))
	}
	c := h.Client("tenant", "bob", "b")
	cursors := []int64{300, 5, 599, 0, 280, 600, 5}
	var subs []wire.Subscription
	for i, cur := range cursors {
		subs = append(subs, sub(fmt.Sprint("s", i), "tasks", []string{"p1", "p2"}[i%2], cur))
	}
	secs := mustPull(t, c, wire.PullHeader{Accept: acceptRows, LimitCommits: 200}, subs...)
	for i, s := range secs {
		proj := []string{"p1", "p2"}[i%2]
		want := int64(-1)
		n := 0
		for seq := cursors[i] + 1; seq <= 600 && n < 200; seq++ {
			if (seq%2 == 0) == (proj == "p2") {
				continue
			}
			if n < len(s.Commits) && s.Commits[n].CommitSeq != seq {
				t.Fatalf("sub %d: commit %d is %d, want %d", i, n, s.Commits[n].CommitSeq, seq)
			}
			n++
			want = seq
		}
		if len(s.Commits) != n {
			t.Fatalf("sub %d (cursor %d, %s): %d commits, want %d", i, cursors[i], proj, len(s.Commits), n)
		}
		// Truncated: nextCursor is the last delivered commit, or past
		// non-matching commits scanned after it — never past the next
		// matching one (§4.5).
		lo, hi := want, want+1
		if n < 200 {
			lo, hi = 600, 600
		}
		if n == 0 {
			lo, hi = max(cursors[i], 600), max(cursors[i], 600)
		}
		if s.End.NextCursor < lo || s.End.NextCursor > hi {
			t.Fatalf("sub %d: nextCursor %d, want within [%d, %d]", i, s.End.NextCursor, lo, hi)
		}
	}
}

// Issue 9 item 3: a resolver that cannot answer (outage, throttle,
// timeout) is not a revocation. The request fails before any response
// byte with a retryable error; nothing is applied, no outcome is stored
// (so the client's retry is evaluated afresh), no subscription revokes.
func TestResolverOutageIsRetryable(t *testing.T) {
	for name, tc := range map[string]struct {
		err  error
		code syncerr.Code
	}{
		"outage":   {fmt.Errorf("connection refused: %w", engine.ErrResolverUnavailable), syncerr.InternalError},
		"timeout":  {fmt.Errorf("grant read: %w", context.DeadlineExceeded), syncerr.InternalError},
		"throttle": {syncerr.New(syncerr.RateLimited, "grant read throttled"), syncerr.RateLimited},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, enginetest.Options{})
			h.Grants.Set("alice", projects("p1"))
			a := h.Client("tenant", "alice", "a")
			wantApplied(t, a.Push("seed", up("tasks", "t1", a.Task("t1", "p1", "x", false), 0)))
			h.Grants.FailWith(tc.err)
			commits := []wire.PushCommit{
				cmt("c1", up("tasks", "t2", a.Task("t2", "p1", "x", false), 0)),
				cmt("c2", up("tasks", "t1", a.Task("t1", "p1", "y", false), 1)),
				cmt("c3", del("tasks", "t1")),
			}
			for _, req := range []*wire.Message{
				a.Request(commits, &wire.PullHeader{Accept: acceptRows}, []wire.Subscription{sub("s1", "tasks", "p1", -1)}),
				a.Request(commits, nil, nil),
				a.Request(nil, &wire.PullHeader{Accept: acceptRows}, []wire.Subscription{sub("s1", "tasks", "p1", 1)}),
			} {
				_, err := a.Send(req)
				se := syncerr.As(err)
				if se == nil || se.Code != syncerr.ForWire(tc.code, wire.Version2) || !se.Entry().Retryable {
					t.Fatalf("want a retryable %s request error, got %v", tc.code, err)
				}
			}
			for _, id := range []string{"c1", "c2", "c3"} {
				if o, err := h.Store.GetOutcome(context.Background(), "tenant", "a", id, h.Clock.Now()); err != nil || o != nil {
					t.Fatalf("outcome of %s stored during the outage: %+v %v", id, o, err)
				}
			}
			if head(t, h, "tenant").MaxCommitSeq != 1 {
				t.Fatal("a commit applied during the outage")
			}
			h.Grants.FailWith(nil)
			res, err := a.PushCommits(commits...)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range res {
				if r.Status != wire.PushApplied {
					t.Fatalf("retry after the outage: commit %d %+v", i, r)
				}
			}
		})
	}
}

// §3.2 rule 3: resolver keys are checked against every served version's
// variables (a key only a newer version declares is legal for an older
// client) and on push-only requests too.
func TestResolverKeysAllVersions(t *testing.T) {
	const v2 = `{
  "version": 2,
  "tables": [
    {"name": "tasks", "primaryKey": "id",
     "columns": [
       {"name": "id", "type": "string", "nullable": false},
       {"name": "project_id", "type": "string", "nullable": false},
       {"name": "title", "type": "string", "nullable": false},
       {"name": "done", "type": "boolean", "nullable": false},
       {"name": "priority", "type": "integer", "nullable": true}
     ],
     "scopes": ["project:{project_id}"]},
    {"name": "labels", "primaryKey": "id",
     "columns": [
       {"name": "id", "type": "string", "nullable": false},
       {"name": "team_id", "type": "string", "nullable": false}
     ],
     "scopes": ["team:{team_id}"]},
    {"name": "projects", "primaryKey": "id",
     "columns": [
       {"name": "id", "type": "string", "nullable": false},
       {"name": "name", "type": "string", "nullable": false}
     ],
     "scopes": [{"pattern": "project:{project_id}", "column": "id"}]}
  ]
}`
	h := newHarness(t, enginetest.Options{Schema: v2, OlderSchemas: []string{enginetest.TodoSchema}})
	h.Grants.Set("alice", engine.ScopeMap{"project_id": {"p1"}, "team_id": {"t1"}})
	old := h.Client("tenant", "alice", "old") // speaks schema version 1: no team_id there
	if old.Schema != 1 {
		t.Fatalf("client schema %d", old.Schema)
	}
	wantApplied(t, old.Push("c1", up("tasks", "t1", old.Task("t1", "p1", "x", false), 0)))
	if _, err := old.Pull(pullHdr(acceptRows), sub("s", "tasks", "p1", -1)); err != nil {
		t.Fatalf("older client with a newer version's grant key: %v", err)
	}
	// A key no version declares fails every request that resolves, the
	// push-only one included.
	h.Grants.Set("alice", engine.ScopeMap{"project_id": {"p1"}, "galaxy_id": {"g"}})
	_, err := old.Send(old.Request([]wire.PushCommit{cmt("c2", up("tasks", "t2", old.Task("t2", "p1", "x", false), 0))}, nil, nil))
	wantCode(t, err, syncerr.InvalidSubscription)
	if head(t, h, "tenant").MaxCommitSeq != 1 {
		t.Fatal("push applied under an invalid resolver result")
	}
}
