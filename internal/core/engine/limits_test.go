package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// Conflict serverRows count against the response budget (§6.3 results
// are one per commit and cannot be cut): once the budget is spent, the
// remaining commits are not processed and are answered with the
// retryable, never-stored cache-miss result, the one rejection a stock
// client keeps queued (§7.2). The resend gets the real outcomes.
func TestPushResultsKeepTheResponseBudget(t *testing.T) {
	h := newHarness(t, enginetest.Options{Limits: engine.Limits{ResponseBudgetBytes: 64 << 10}})
	grantAll(h, projects("p1"), "alice", "bob")
	alice := h.Client("t", "alice", "a")
	title := strings.Repeat("w", 30_000)
	for _, id := range []string{"t1", "t2", "t3"} {
		if r := alice.Push("c-"+id, up("tasks", id, alice.Task(id, "p1", title, false), 0)); r.Status != wire.PushApplied {
			t.Fatalf("seed %s: %+v", id, r)
		}
	}
	bob := h.Client("t", "bob", "b")
	clash := func(id string) wire.PushCommit {
		return cmt("b-"+id, up("tasks", id, bob.Task(id, "p1", "mine", false), 0))
	}
	res, err := bob.PushCommits(clash("t1"), clash("t2"), clash("t3"), cmt("b-t4", up("tasks", "t4", bob.Task("t4", "p1", "new", false), 0)))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if r := res[i]; r.Status != wire.PushRejected || r.Results[0].Status != wire.OpConflict || len(r.Results[0].ServerRow) < 30_000 {
			t.Fatalf("result %d: %s, want a conflict with the server row", i, brief(r))
		}
	}
	for i := 2; i < 4; i++ {
		r := res[i]
		if r.Status != wire.PushRejected || len(r.Results) != 1 || r.Results[0].Code != string(syncerr.IdempotencyCacheMiss) || !r.Results[0].Retryable {
			t.Fatalf("result %d past the budget: %s, want retryable sync.idempotency_cache_miss", i, brief(r))
		}
	}
	// The deferred insert was not applied: nothing passed the budget.
	if rows, err := h.Store.GetRows(context.Background(), "t", "tasks", []string{"t4"}); err != nil || len(rows) != 0 {
		t.Fatalf("deferred insert t4: %v %v, want not applied", rows, err)
	}
	res, err = bob.PushCommits(clash("t3"), cmt("b-t4", up("tasks", "t4", bob.Task("t4", "p1", "new", false), 0)))
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Results[0].Status != wire.OpConflict || res[1].Status != wire.PushApplied {
		t.Fatalf("resend: %s / %s, want the conflict and the insert", brief(res[0]), brief(res[1]))
	}
}

// A request that pushes and pulls: the push results are progress, so the
// pull half stops before a commit that would pass the budget instead of
// sending it anyway as "the first data frame".
func TestPullAfterPushResultsKeepsTheBudget(t *testing.T) {
	const budget = 64 << 10
	h := newHarness(t, enginetest.Options{Limits: engine.Limits{ResponseBudgetBytes: budget}})
	grantAll(h, projects("p1"), "alice", "bob")
	alice := h.Client("t", "alice", "a")
	title := strings.Repeat("w", 30_000)
	for _, id := range []string{"t1", "t2"} {
		alice.Push("c-"+id, up("tasks", id, alice.Task(id, "p1", title, false), 0))
	}
	bob := h.Client("t", "bob", "b")
	clash := func(id string) wire.PushCommit {
		return cmt("b-"+id, up("tasks", id, bob.Task(id, "p1", "mine", false), 0))
	}
	m := bob.Request([]wire.PushCommit{clash("t1"), clash("t2")}, &wire.PullHeader{Accept: acceptRows}, []wire.Subscription{sub("s", "tasks", "p1", 0)})
	body, err := wire.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := bob.Send(m)
	if err != nil {
		t.Fatal(err)
	}
	out, err := wire.Encode(resp)
	if err != nil {
		t.Fatal(err)
	}
	secs := enginetest.Sections(t, resp)
	if len(secs) != 1 || len(secs[0].Commits) != 0 || secs[0].End.NextCursor != 0 {
		t.Fatalf("pull half: %d sections, %d commits, cursor %d; want no commit and the cursor kept", len(secs), len(secs[0].Commits), secs[0].End.NextCursor)
	}
	if len(out) > budget {
		t.Errorf("response is %d bytes, over the %d-byte budget (request %d bytes)", len(out), budget, len(body))
	}
	// The next (pull-only) round delivers them.
	secs, err = bob.Pull(wire.PullHeader{Accept: acceptRows}, sub("s", "tasks", "p1", 0))
	if err != nil || len(secs[0].Commits) == 0 {
		t.Fatalf("next pull: %v, %d sections", err, len(secs))
	}
}

// A commit is refused at push time when one table's share of it (the
// COMMIT frame a subscriber receives, §4.5 never splits a commit) cannot
// fit one pull response; otherwise every pull reaching it would fail.
func TestCommitMustFitOnePullResponse(t *testing.T) {
	h := newHarness(t, enginetest.Options{Limits: engine.Limits{MaxCommitFrameBytes: 100_000}})
	grantAll(h, projects("p1"), "alice")
	c := h.Client("t", "alice", "a")
	text := strings.Repeat("z", 40_000)
	r := c.Push("three-tasks",
		up("tasks", "t1", c.Task("t1", "p1", text, false), -1),
		up("tasks", "t2", c.Task("t2", "p1", text, false), -1),
		up("tasks", "t3", c.Task("t3", "p1", text, false), -1))
	if r.Status != wire.PushRejected || r.Results[0].Code != string(syncerr.ConstraintViolation) || r.Results[0].OpIndex != 2 || r.Results[0].Retryable {
		t.Fatalf("120 KB of tasks in one commit: %s, want sync.constraint_violation at op 2", brief(r))
	}
	// The same bytes spread over two tables fit: each subscriber gets one
	// table's frame.
	project := projectRow(t, c, "p1", text)
	r = c.Push("two-tables",
		up("projects", "p1", project, -1),
		up("tasks", "t1", c.Task("t1", "p1", text, false), -1),
		up("tasks", "t2", c.Task("t2", "p1", text, false), -1))
	if r.Status != wire.PushApplied {
		t.Fatalf("40 KB + 80 KB over two tables: %s", brief(r))
	}
	secs, err := c.Pull(wire.PullHeader{Accept: acceptRows}, sub("s", "tasks", "p1", 0))
	if err != nil || len(secs[0].Commits) != 1 || len(secs[0].Commits[0].Changes) != 2 {
		t.Fatalf("pull: %v, %d sections", err, len(secs))
	}
}

// brief renders a push result without its (possibly large) server rows.
func brief(r *wire.PushResult) string {
	out := r.Status.String()
	for _, o := range r.Results {
		if o.Status != wire.OpApplied {
			out += fmt.Sprintf(" [op %d %s %s retryable=%v row=%dB]", o.OpIndex, o.Status, o.Code, o.Retryable, len(o.ServerRow))
		}
	}
	return out
}
