package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/app/apptest"
	"github.com/skyfold/syncular-lambda/internal/auth"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/lambdahttp"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// builds is an in-memory build registry (the table's is tested in
// internal/dynamostore).
type builds struct {
	mu sync.Mutex
	m  []store.Build
}

func (r *builds) RegisterBuild(_ context.Context, b store.Build) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m = append(r.m, b)
	return nil
}

func (r *builds) NewestBuild(_ context.Context, fn string, above int64) (store.Build, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var best store.Build
	for _, b := range r.m {
		if b.Function == fn && b.SchemaVersion > above && b.SchemaVersion >= best.SchemaVersion {
			best = b
		}
	}
	return best, best.Version != "", nil
}

// invoker answers every invocation with one document, counting them.
type invoker struct {
	calls  int
	out    []byte
	fnErr  string
	target string
}

func (i *invoker) Invoke(_ context.Context, fn, version string, payload []byte) ([]byte, string, error) {
	i.calls++
	i.target = fn + ":" + version
	if !bytes.Contains(payload, []byte(`"`+lambdahttp.ForwardedMember+`":"1"`)) {
		return nil, "", fmt.Errorf("the forwarded event carries no marker: %s", payload)
	}
	return i.out, i.fnErr, nil
}

// A version the serve gate refuses answers through the newest version
// registered past its schema, relaying its answer byte for byte; the
// refusal (503 sync.schema_not_ready, Retry-After, never serverErrors)
// stands when that version fails the invocation, when none is registered,
// and for an event another build already forwarded (no loops).
func TestForwarderAnswersOrRefuses(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	if _, err := st.TouchPartition(ctx, "default", time.Now().UnixMilli(), "e1"); err != nil {
		t.Fatal(err)
	}
	if err := st.RaiseWriterFence(ctx, "default", 2); err != nil { // a version-2 build wrote here
		t.Fatal(err)
	}
	reg := &builds{}
	inv := &invoker{}
	var logs bytes.Buffer
	fwd := &app.Forwarder{Function: "pull", Version: "1", SchemaVersion: 1, Builds: reg, Invoker: inv, Logger: slog.New(slog.DiscardHandler)}
	h, err := app.Build(localConfig(t, nil), app.Pull, app.Deps{Schema: todoSchema(t), Store: st, Segments: memstore.NewSegments(),
		Logger: app.NewLogger(&logs, slog.LevelInfo, app.Pull), Forward: fwd})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := auth.MintHS256(secret, auth.Claims{"sub": "a", "syncular_scopes": map[string][]string{"project_id": {"p1"}}}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	body, err := wire.Encode(&wire.Message{WireVersion: wire.Version3, Kind: wire.KindRequest, Frames: []wire.Frame{
		&wire.ReqHeader{ClientID: "c", SchemaVersion: 1}, &wire.PullHeader{Accept: wire.AcceptInlineRows},
		&wire.Subscription{ID: "s", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	event := apptest.MustJSON(t, apptest.Event("POST", "/pull", map[string]string{"Content-Type": apptest.ContentType, "Authorization": "Bearer " + tok}, body))
	send := func(ev []byte) ([]byte, string) {
		t.Helper()
		logs.Reset()
		out, err := h.Invoke(ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		return out, logs.String()
	}
	refused := func(what string, out []byte, line string) {
		t.Helper()
		var resp events.APIGatewayV2HTTPResponse
		if err := json.Unmarshal(out, &resp); err != nil || resp.StatusCode != 503 || resp.Headers["Retry-After"] != "1" || !strings.Contains(resp.Body, `"sync.schema_not_ready"`) {
			t.Fatalf("%s: %s, want 503 sync.schema_not_ready with Retry-After", what, out)
		}
		if !strings.Contains(line, `"schemaNotReady":1`) || strings.Contains(line, "serverErrors") || strings.Contains(line, `"forwarded"`) {
			t.Fatalf("%s: request line %s", what, line)
		}
	}

	out, line := send(event)
	refused("no newer version registered", out, line)
	if inv.calls != 0 {
		t.Fatal("invoked without a registered version")
	}

	fwd.Now = func() time.Time { return time.Now().Add(app.BuildCacheTTL) } // past the cached "none"
	for _, b := range []store.Build{{Function: "pull", SchemaVersion: 1, Version: "1"}, {Function: "push", SchemaVersion: 3, Version: "30"}, {Function: "pull", SchemaVersion: 2, Version: "2"}} {
		if err := reg.RegisterBuild(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	inv.out = apptest.MustJSON(t, events.APIGatewayV2HTTPResponse{StatusCode: 200, Headers: map[string]string{"Content-Type": apptest.ContentType}, Body: "AAEC", IsBase64Encoded: true})
	out, line = send(event)
	if !bytes.Equal(out, inv.out) || inv.target != "pull:2" {
		t.Fatalf("forwarded to %s, answered %s; want version 2's answer unchanged", inv.target, out)
	}
	if !strings.Contains(line, `"status":200`) || !strings.Contains(line, `"forwarded":1`) || strings.Contains(line, "schemaNotReady") {
		t.Fatalf("forwarded request line %s", line)
	}

	inv.out, inv.fnErr = []byte(`{"errorMessage":"signal: killed","errorType":"Runtime.ExitError"}`), "Unhandled"
	out, line = send(event)
	refused("the newer version failed the invocation", out, line)

	calls := inv.calls
	marked, err := lambdahttp.MarkForwarded(event, "1")
	if err != nil {
		t.Fatal(err)
	}
	out, line = send(marked)
	refused("an event already forwarded", out, line)
	if inv.calls != calls {
		t.Fatal("a forwarded event was forwarded again")
	}
}
