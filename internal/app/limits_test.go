package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/app/apptest"
	"github.com/skyfold/syncular-lambda/internal/auth"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// A response Lambda cannot return (here: a commit of 5 MB written before
// push-time limits existed) is answered with a §10.1 500, and the request
// log line reports that status, not the 200 the engine produced.
func TestLogLineReportsTheStatusSent(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	if _, err := st.TouchPartition(ctx, "default", time.Now().UnixMilli(), "e1"); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte{0x5a}, 5<<20)
	scopes := wire.StoredScopes{{Key: "project_id", Value: "p1"}}
	if err := st.Commit(ctx, "default", &store.CommitRequest{
		ExpectedMaxSeq: 0,
		Commit: store.Commit{Seq: 1, CreatedAtMs: 1, ActorID: "old", ClientID: "old", ClientCommitID: "legacy",
			Changes: []store.Change{{Table: "tasks", RowID: "big", Op: wire.OpUpsert, RowVersion: 1, Scopes: scopes, Row: big}}},
		Rows:    []store.RowWrite{{Table: "tasks", Row: store.Row{RowID: "big", Version: 1, Scopes: scopes, Payload: big, CommitSeq: 1}}},
		Outcome: store.Outcome{Applied: true, CommitSeq: 1, Result: []byte("x"), RecordedAtMs: 1},
	}); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cfg := localConfig(t, nil)
	h, err := app.Build(cfg, app.Pull, app.Deps{Schema: todoSchema(t), Store: st, Segments: memstore.NewSegments(),
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := auth.MintHS256(secret, auth.Claims{"sub": "alice", "syncular_scopes": map[string][]string{"project_id": {"p1"}}}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	body := apptest.Request(t, wire.Version1, wire.ReqHeader{ClientID: "c1", SchemaVersion: 1},
		&wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows},
		&wire.Subscription{ID: "s", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: 0})
	ev := apptest.Event("POST", "/pull", map[string]string{"content-type": "application/vnd.syncular.sync.v2", "authorization": "Bearer " + tok}, body)
	out, err := h.Invoke(ctx, apptest.MustJSON(t, ev))
	if err != nil {
		t.Fatal(err)
	}
	var resp struct {
		StatusCode int `json:"statusCode"`
	}
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 500 || len(out) > 6<<20 {
		t.Fatalf("status %d, %d bytes; want a 500 that fits Lambda's payload", resp.StatusCode, len(out))
	}
	logged := -1
	for _, line := range bytes.Split(logs.Bytes(), []byte("\n")) {
		var rec struct {
			Msg    string `json:"msg"`
			Status int    `json:"status"`
		}
		if json.Unmarshal(line, &rec) == nil && rec.Msg == "request" {
			logged = rec.Status
		}
	}
	if logged != resp.StatusCode {
		t.Errorf("request log line says status %d; %d was sent", logged, resp.StatusCode)
	}
}
