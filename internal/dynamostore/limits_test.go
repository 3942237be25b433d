package dynamostore_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// Identifiers and commits past what storage can hold get the same clear
// answer on the in-memory store and on DynamoDB Local: a request-level
// 400 for the clientId and subscriptions, a rejected PUSH_RESULT for
// everything that concerns one commit (so the rest of a stock client's
// outbox proceeds, §7.2), never a 500 and never a partly applied commit.
func TestLimitsAgreeAcrossStores(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(t *testing.T) store.Store
	}{
		{"memstore", func(*testing.T) store.Store { return memstore.New() }},
		{"dynamodb", func(t *testing.T) store.Store {
			c := ddbClient(t)
			return dynamostore.New(c, newTable(t, c), dynamostore.Options{})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { limitsScenario(t, tc.open(t)) })
	}
}

func limitsScenario(t *testing.T, st store.Store) {
	ctx := context.Background()
	h := enginetest.New(t, st, memstore.NewSegments(), enginetest.Options{})
	h.Grants.Set("alice", engine.ScopeMap{"project_id": {"*"}})
	c := h.Client("tenant", "alice", "device-1")
	task := func(id, project, title string) wire.Operation {
		return enginetest.Upsert("tasks", id, c.Task(id, project, title, false), -1)
	}
	wantRequestError := func(what string, err error, code syncerr.Code) {
		t.Helper()
		se := syncerr.As(err)
		if se == nil || se.Code != code || se.HTTPStatus() != http.StatusBadRequest {
			t.Errorf("%s: got %v, want a 400 %s", what, err, code)
		}
	}
	wantRejected := func(what string, r *wire.PushResult, op int32, code syncerr.Code) {
		t.Helper()
		if r.Status != wire.PushRejected || len(r.Results) != 1 || r.Results[0].OpIndex != op ||
			r.Results[0].Code != string(code) || r.Results[0].Retryable {
			t.Errorf("%s: got %s, want rejected at op %d with non-retryable %s", what, brief(r), op, code)
		}
	}

	// clientId past the key limits: request-level sync.invalid_client_id
	// (the client resets its id, §10.2); DynamoDB used to answer 500.
	long := *c
	long.ID = strings.Repeat("d", 1100)
	_, err := long.PushCommits(enginetest.Commit("x", task("t-x", "p1", "x")))
	wantRequestError("1100-byte clientId", err, syncerr.InvalidClientID)

	// A subscription scope value past the limit: request-level 400.
	_, err = c.Pull(wire.PullHeader{Accept: c.Accept}, wire.Subscription{ID: "s", Table: "tasks", Scopes: enginetest.Scopes("project_id", strings.Repeat("p", 600)), Cursor: -1})
	wantRequestError("600-byte subscription scope value", err, syncerr.InvalidRequest)

	// clientCommitId past the limit: that commit is rejected (the same way
	// on every retry, nothing stored), the next one applies.
	longID := strings.Repeat("k", 1100)
	for round := range 2 {
		res, err := c.PushCommits(enginetest.Commit(longID, task("t-k", "p1", "k")), enginetest.Commit("b", task("t-b", "p1", "b")))
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		wantRejected("1100-byte clientCommitId", res[0], 0, syncerr.InvalidRequest)
		if want := []wire.PushStatus{wire.PushApplied, wire.PushCached}[round]; res[1].Status != want {
			t.Errorf("round %d: commit after it: %s, want %v", round, brief(res[1]), want)
		}
	}

	// Per-commit rejections in one request; each commit is atomic and
	// the last one still applies.
	res, err := c.PushCommits(
		enginetest.Commit("empty-row-id", task("", "p1", "no key")),
		enginetest.Commit("empty-row-id-delete", enginetest.Delete("tasks", "")),
		enginetest.Commit("long-row-id", task("t-c1", "p1", "first"), task(strings.Repeat("r", 1100), "p1", "long")),
		enginetest.Commit("long-table", enginetest.Delete(strings.Repeat("T", 500_000), "t-1")),
		enginetest.Commit("long-scope", task("t-s", strings.Repeat("p", 600), "scope")),
		enginetest.Commit("big-row", task("t-big", "p1", strings.Repeat("x", 450_000))),
		enginetest.Commit("ok", task("t-ok", "p1", "fine")),
	)
	if err != nil {
		t.Fatal(err)
	}
	wantRejected("empty rowId", res[0], 0, syncerr.InvalidRequest)
	wantRejected("empty rowId delete", res[1], 0, syncerr.InvalidRequest)
	wantRejected("1100-byte rowId", res[2], 1, syncerr.InvalidRequest)
	wantRejected("500 KB table name", res[3], 0, syncerr.InvalidRequest)
	wantRejected("600-byte scope value", res[4], 0, syncerr.InvalidRequest)
	wantRejected("450 KB row", res[5], 0, syncerr.ConstraintViolation)
	if res[6].Status != wire.PushApplied {
		t.Errorf("valid commit after the rejected ones: %s", brief(res[6]))
	}

	// A commit whose rows fit one by one but not together in one
	// DynamoDB transaction (or one pull response).
	var ops []wire.Operation
	for i := range 11 {
		id := "t-bulk-" + string(rune('a'+i))
		ops = append(ops, task(id, "p1", strings.Repeat("y", 380_000)))
	}
	res, err = c.PushCommits(enginetest.Commit("bulk", ops...))
	if err != nil {
		t.Fatal(err)
	}
	if r := res[0]; r.Status != wire.PushRejected || r.Results[0].Code != string(syncerr.ConstraintViolation) {
		t.Errorf("4.2 MB commit: %s, want sync.constraint_violation", brief(r))
	}
	// Rejections are stored outcomes: a resend replays them.
	res, err = c.PushCommits(enginetest.Commit("big-row", task("t-big", "p1", "now small")))
	if err != nil {
		t.Fatal(err)
	}
	wantRejected("replayed 450 KB row", res[0], 0, syncerr.ConstraintViolation)

	// Exactly two commits applied, nothing of the rejected ones.
	head, ok, err := st.Head(ctx, "tenant")
	if err != nil || !ok || head.MaxCommitSeq != 2 {
		t.Fatalf("head %+v %v %v, want 2 commits", head, ok, err)
	}
	rows, err := st.GetRows(ctx, "tenant", "tasks", []string{"t-b", "t-ok", "t-c1", "t-s", "t-big", "t-bulk-a", "t-k"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows["t-b"] == nil || rows["t-ok"] == nil {
		t.Errorf("stored rows %v, want t-b and t-ok only", keys(rows))
	}
}

// brief renders a push result without its (possibly huge) echoes.
func brief(r *wire.PushResult) string {
	if r == nil {
		return "<nil>"
	}
	out := r.Status.String()
	for _, o := range r.Results {
		if o.Status != wire.OpApplied {
			out += fmt.Sprintf(" [op %d %s retryable=%v]", o.OpIndex, o.Code, o.Retryable)
		}
	}
	return out
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
