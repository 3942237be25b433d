package app_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/app/apptest"
	"github.com/skyfold/syncular-lambda/internal/auth"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/memstore"
	"github.com/skyfold/syncular-lambda/internal/metrics"
)

// requestLines returns the EMF documents of the "request" lines in logs,
// failing on any line that is not valid EMF.
func requestLines(t *testing.T, logs []byte) []metrics.Document {
	t.Helper()
	var out []metrics.Document
	for _, line := range bytes.Split(logs, []byte("\n")) {
		var rec struct{ Msg string }
		if json.Unmarshal(line, &rec) != nil || rec.Msg != "request" {
			continue
		}
		doc, err := metrics.Parse(line)
		if err != nil {
			t.Fatalf("request line is not valid EMF: %v\n%s", err, line)
		}
		out = append(out, doc)
	}
	return out
}

// Every function's request line is its EMF document: the configured
// namespace, the function dimension (route and outcome as fields), the engine's counters as
// metrics and the partition as a property only.
func TestRequestLinesCarryEMF(t *testing.T) {
	cfg := localConfig(t, map[string]string{"SYNC_METRICS_NAMESPACE": "Ops/Test", "SYNC_SIGNED_URLS": "off"})
	sch := todoSchema(t)
	d, logs := loggedDeployment(t, cfg, app.Deps{Schema: sch, Store: memstore.New(), Segments: memstore.NewSegments()})
	tok, err := auth.MintHS256(secret, auth.Claims{"sub": "alice", "syncular_scopes": map[string][]string{"project_id": {"p1"}}}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	epoch := d.Epoch(t, "push", "/sync", tok, "c1")
	d.Push(t, tok, "c1", epoch, wire.PushCommit{ClientCommitID: "k1", Operations: []wire.Operation{
		apptest.Upsert("projects", "p1", 0, d.Project(t, "p1")),
		apptest.Upsert("tasks", "t1", 0, d.Task(t, "t1", "p1", "one")),
		apptest.Upsert("tasks", "t2", 0, d.Task(t, "t2", "p1", "two")),
	}})
	sub := wire.Subscription{ID: "s", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1}
	d.Pull(t, tok, "c2", epoch, wire.PullHeader{Accept: wire.AcceptInlineRows}, sub)
	// No credentials: a 401 with the §10 code as the outcome.
	if resp := d.Call(t, "pull", "/pull", "", []byte("x"), nil); resp.StatusCode != 401 {
		t.Fatalf("unauthenticated pull: HTTP %d", resp.StatusCode)
	}

	push := requestLines(t, logs["push"].Bytes())
	if len(push) != 2 {
		t.Fatalf("%d push request lines, want 2 (epoch, push)", len(push))
	}
	p := push[1]
	for k, v := range map[string]string{"function": "push", "partition": "default", "actor": "alice"} {
		if p[k] != v {
			t.Errorf("push line %s = %v, want %q", k, p[k], v)
		}
	}
	if p.Namespace() != "Ops/Test" {
		t.Errorf("namespace %q", p.Namespace())
	}
	for name, want := range map[string]float64{"applied": 1} {
		if n, ok := p.Number(name); !ok || n != want {
			t.Errorf("push %s = %v (%t), want %v", name, n, ok, want)
		}
	}
	// At info a zero counter is left out (its sum is the same).
	for _, name := range []string{"serverErrors", "rateLimited", "commitRacesLost", "rejected"} {
		if _, ok := p[name]; ok {
			t.Errorf("push line carries the zero counter %s", name)
		}
	}
	// ms on every line: its SampleCount counts the requests.
	for _, name := range []string{metrics.Duration.Name, "applied"} {
		if !slices.Contains(p.Declared(), name) {
			t.Errorf("push line does not declare %s: %v", name, p.Declared())
		}
	}

	pull := requestLines(t, logs["pull"].Bytes())
	if len(pull) != 2 {
		t.Fatalf("%d pull request lines, want 2", len(pull))
	}
	b := pull[0]
	// The bootstrap page: one built, the two tasks scanned and delivered
	// (the project row lives in another table).
	for name, want := range map[string]float64{"segmentsBuilt": 1, "rowsScanned": 2, "rowsDelivered": 2} {
		if n, ok := b.Number(name); !ok || n != want {
			t.Errorf("bootstrap %s = %v (%t), want %v", name, n, ok, want)
		}
	}
	if _, ok := b["segmentsReused"]; ok {
		t.Errorf("bootstrap line carries segmentsReused 0")
	}
	u := pull[1]
	if u[metrics.ErrorCodeField] != "sync.auth_required" || u["route"] != "pull" {
		t.Errorf("401 line: errorCode %v route %v", u[metrics.ErrorCodeField], u["route"])
	}
	if !slices.Contains(u.Declared(), metrics.Duration.Name) {
		t.Errorf("401 line does not declare %s: %v", metrics.Duration.Name, u.Declared())
	}
}
