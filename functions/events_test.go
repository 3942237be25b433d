package functions

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/golang-jwt/jwt/v5"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/app/apptest"
	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/core/blobs"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/segment"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/lambdahttp"
	"github.com/skyfold/syncular-lambda/internal/memblobs"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// The sample events in events/ are generated from code so they stay
// valid: regenerate with UPDATE_EVENTS=1 go test ./functions -run TestSampleEvents.
// Their bearer token is signed with env.local.json's dev-only HS256 secret
// and expires in 2100; the segment event names the segment the pull event
// produces after the push event, so the three replay in order under
// `sam local invoke` and the emulator tests.

const (
	envLocalPath = "../env.local.json"
	eventsDir    = "../events"
	schemaPath   = "../examples/todo/schema.json"
)

// envLocal returns env.local.json's shared variables ("Parameters").
func envLocal(t testing.TB) map[string]string {
	t.Helper()
	b, err := os.ReadFile(envLocalPath)
	if err != nil {
		t.Fatal(err)
	}
	var f map[string]map[string]string
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("env.local.json: %v", err)
	}
	return f["Parameters"]
}

func todo(t testing.TB) *schema.Schema {
	s, err := schema.ReadFile(schemaPath)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// devToken is the sample events' token: fixed claims, so the files are
// reproducible byte for byte.
func devToken(t testing.TB, secret string) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "dev-user", "iat": 1767225600, "exp": 4102444800,
		"syncular_scopes": map[string]any{"project_id": []any{"*"}},
	}).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// sampleBlob is the body of events/blob.json.
var sampleBlob = []byte("hello, blob")

// replayBlob uploads the sample blob (idempotent, §5.9.3).
func replayBlob(t testing.TB, invoke func(string, []byte) events.APIGatewayV2HTTPResponse, ev []byte) {
	t.Helper()
	if resp := invoke("blob", ev); resp.StatusCode != 200 {
		t.Fatalf("blob upload: %d %s", resp.StatusCode, resp.Body)
	}
}

func sampleEvent(name, method, path, token string, hdr map[string]string, body []byte) events.APIGatewayV2HTTPRequest {
	h := map[string]string{
		"authorization":     "Bearer " + token,
		"host":              "127.0.0.1:3000",
		"x-forwarded-proto": "http",
		"user-agent":        "syncular-sample-event",
	}
	for k, v := range hdr {
		h[k] = v
	}
	ev := events.APIGatewayV2HTTPRequest{
		Version:  "2.0",
		RouteKey: method + " " + path,
		RawPath:  path,
		Headers:  h,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey:   method + " " + path,
			AccountID:  "123456789012",
			APIID:      "local",
			Stage:      "$default",
			RequestID:  "sample-" + name,
			DomainName: "127.0.0.1",
			Time:       "01/Jan/2026:00:00:00 +0000",
			TimeEpoch:  1767225600000,
			HTTP:       events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: method, Path: path, Protocol: "HTTP/1.1", SourceIP: "127.0.0.1", UserAgent: "syncular-sample-event"},
		},
	}
	if body != nil {
		ev.Body = base64.StdEncoding.EncodeToString(body)
		ev.IsBase64Encoded = true
	}
	return ev
}

// sampleBodies are the SSP2 bodies of the push and pull events: wire
// version 1, so a fresh client needs no epoch round trip first.
func sampleBodies(t testing.TB, sch *schema.Schema) (push, pull []byte) {
	d := &apptest.Deployment{Schema: sch}
	hdr := wire.ReqHeader{ClientID: "sample-client", SchemaVersion: sch.Latest}
	push = apptest.Request(t, wire.Version1, hdr,
		&wire.PushCommit{ClientCommitID: "sample-commit-1", Operations: []wire.Operation{
			apptest.Upsert("projects", "p1", 0, d.Project(t, "p1")),
			apptest.Upsert("tasks", "t1", 0, d.Task(t, "t1", "p1", "Try Syncular on Lambda")),
		}},
		&wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows},
		&wire.Subscription{ID: "projects-p1", Table: "projects", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1},
	)
	pull = apptest.Request(t, wire.Version1, hdr,
		&wire.PullHeader{Accept: wire.AcceptExternalRows},
		&wire.Subscription{ID: "tasks-p1", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1},
	)
	return push, pull
}

func localEnvConfig(t testing.TB, env map[string]string, overrides map[string]string) *config.Config {
	t.Helper()
	cfg, err := config.Load(func(k string) string {
		if v, ok := overrides[k]; ok {
			return v
		}
		return env[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// replay runs push, pull and (when segment is non-nil) the segment event
// through invoke and returns the pulled segment id.
func replay(t testing.TB, invoke func(fn string, ev []byte) events.APIGatewayV2HTTPResponse, push, pull []byte, seg []byte) string {
	t.Helper()
	resp := invoke("push", push)
	if resp.StatusCode != 200 {
		t.Fatalf("push event: HTTP %d %s", resp.StatusCode, apptest.Body(t, &resp))
	}
	m := apptest.Decode(t, apptest.Body(t, &resp))
	res := apptest.Find[*wire.PushResult](m)
	if len(res) != 1 || (res[0].Status != wire.PushApplied && res[0].Status != wire.PushCached) {
		t.Fatalf("push event: %+v", res)
	}
	if len(apptest.Find[*wire.SegmentInline](m)) != 1 {
		t.Fatal("push event: no inline projects bootstrap")
	}
	resp = invoke("pull", pull)
	if resp.StatusCode != 200 {
		t.Fatalf("pull event: HTTP %d %s", resp.StatusCode, apptest.Body(t, &resp))
	}
	refs := apptest.Find[*wire.SegmentRef](apptest.Decode(t, apptest.Body(t, &resp)))
	if len(refs) != 1 || refs[0].RowCount != 1 {
		t.Fatalf("pull event: SEGMENT_REFs %+v", refs)
	}
	id := refs[0].SegmentID
	if seg != nil {
		resp = invoke("segment", seg)
		b := apptest.Body(t, &resp)
		if resp.StatusCode != 200 {
			t.Fatalf("segment event: HTTP %d %s", resp.StatusCode, b)
		}
		if got := segment.SegmentID(b); got != id {
			t.Fatalf("segment event served %s, pulled %s", got, id)
		}
	}
	return id
}

// buildSampleEvents renders the three files, computing the segment id by
// replaying push and pull in process over the in-memory store.
func buildSampleEvents(t testing.TB) map[string][]byte {
	env := envLocal(t)
	sch := todo(t)
	tok := devToken(t, env["SYNC_HS256_SECRET"])
	pushBody, pullBody := sampleBodies(t, sch)
	ct := map[string]string{"content-type": apptest.ContentType, "accept-encoding": "gzip"}
	files := map[string]events.APIGatewayV2HTTPRequest{
		"push.json": sampleEvent("push", "POST", "/sync", tok, ct, pushBody),
		"pull.json": sampleEvent("pull", "POST", "/pull", tok, ct, pullBody),
	}
	out := map[string][]byte{}
	for name, ev := range files {
		b, err := json.MarshalIndent(ev, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		out[name] = append(b, '\n')
	}
	hs := inProcess(t, localEnvConfig(t, env, map[string]string{"SYNC_DYNAMODB_ENDPOINT": "", "SYNC_S3_ENDPOINT": ""}), sch)
	id := replay(t, hs, out["push.json"], out["pull.json"], nil)
	seg := sampleEvent("segment", "GET", "/segments/"+id, tok, map[string]string{"x-syncular-scopes": `{"project_id":["p1"]}`, "accept-encoding": "gzip"}, nil)
	seg.RouteKey, seg.RequestContext.RouteKey = "GET /segments/{segmentId}", "GET /segments/{segmentId}"
	seg.PathParameters = map[string]string{"segmentId": id}
	b, _ := json.MarshalIndent(seg, "", "  ")
	out["segment.json"] = append(b, '\n')
	// §5.9.3: a direct blob upload (the server hashes the bytes).
	blobID := blobs.IDOfBytes(sampleBlob)
	bl := sampleEvent("blob", "PUT", "/blobs/"+blobID, tok, map[string]string{"content-type": "application/octet-stream"}, sampleBlob)
	bl.RouteKey, bl.RequestContext.RouteKey = "PUT /blobs/{blobId}", "PUT /blobs/{blobId}"
	bl.PathParameters = map[string]string{"blobId": blobID}
	b, _ = json.MarshalIndent(bl, "", "  ")
	out["blob.json"] = append(b, '\n')
	return out
}

// inProcess builds the three handlers over memory, as the local runner
// does, and returns an invoker of raw event documents.
func inProcess(t testing.TB, cfg *config.Config, sch *schema.Schema) func(string, []byte) events.APIGatewayV2HTTPResponse {
	bs := memblobs.New(memblobs.Options{})
	deps := app.Deps{Schema: sch, Store: memstore.New(), Segments: memstore.NewSegments(), Blobs: bs}
	hs := map[string]*lambdahttp.Handler{}
	for _, f := range app.Functions {
		h, err := app.Build(cfg, f, deps)
		if err != nil {
			t.Fatal(err)
		}
		hs[f.Name] = h
	}
	return func(fn string, ev []byte) events.APIGatewayV2HTTPResponse {
		out, err := hs[fn].Invoke(context.Background(), ev)
		if err != nil {
			t.Fatal(err)
		}
		var resp events.APIGatewayV2HTTPResponse
		if err := json.Unmarshal(out, &resp); err != nil {
			t.Fatal(err)
		}
		return resp
	}
}

func TestSampleEventsUpToDate(t *testing.T) {
	want := buildSampleEvents(t)
	for name, b := range want {
		path := filepath.Join(eventsDir, name)
		if os.Getenv("UPDATE_EVENTS") == "1" {
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, b) {
			t.Errorf("%s is stale or missing (%v): regenerate with UPDATE_EVENTS=1 go test ./functions -run TestSampleEvents", path, err)
		}
	}
}

// The checked-in files replay in process (the emulator test replays them
// under aws-lambda-rie against DynamoDB Local), and each one routes to its
// function exactly as API Gateway would.
func TestSampleEventsReplay(t *testing.T) {
	files := map[string][]byte{}
	for _, f := range app.Functions {
		b, err := os.ReadFile(filepath.Join(eventsDir, f.Name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		var ev events.APIGatewayV2HTTPRequest
		if err := json.Unmarshal(b, &ev); err != nil {
			t.Fatal(err)
		}
		if m, ok := app.Match("", ev.RequestContext.HTTP.Method, ev.RawPath); !ok || m.Name != f.Name {
			t.Errorf("events/%s.json routes to %q", f.Name, m.Name)
		}
		files[f.Name] = b
	}
	env := envLocal(t)
	invoke := inProcess(t, localEnvConfig(t, env, map[string]string{"SYNC_DYNAMODB_ENDPOINT": "", "SYNC_S3_ENDPOINT": ""}), todo(t))
	replay(t, invoke, files["push"], files["pull"], files["segment"])
	replayBlob(t, invoke, files["blob"])
	// Replaying the push is idempotent (§2.3): cached, not applied twice.
	resp := invoke("push", files["push"])
	res := apptest.Find[*wire.PushResult](apptest.Decode(t, apptest.Body(t, &resp)))
	if len(res) != 1 || res[0].Status != wire.PushCached {
		t.Fatalf("replayed push: %+v", res)
	}
}

// env.local.json only sets variables the template declares (SAM ignores
// the others silently) and yields a valid local configuration.
func TestEnvLocal(t *testing.T) {
	root := loadYAML(t)
	declared := map[string]bool{}
	for _, k := range keys(get(root, "Globals", "Function", "Environment", "Variables")) {
		declared[k] = true
	}
	b, err := os.ReadFile(envLocalPath)
	if err != nil {
		t.Fatal(err)
	}
	var f map[string]map[string]string
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	for scope, vars := range f {
		if scope != "Parameters" && !isFunction(scope) {
			t.Errorf("env.local.json: %q is neither Parameters nor a function", scope)
		}
		for k := range vars {
			if !declared[k] {
				t.Errorf("env.local.json sets %s, which template.yaml does not declare", k)
			}
		}
	}
	env := templateEnv(t, root, f["Parameters"])
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("template + env.local.json: %v", err)
	}
	if cfg.AuthMode != config.AuthHS256 || cfg.DynamoDBEndpoint == "" || cfg.S3Endpoint == "" || !cfg.S3PathStyle {
		t.Errorf("local config %+v", cfg)
	}
	if !strings.Contains(env["SYNC_HS256_SECRET"], "local-dev-only") {
		t.Error("the checked-in secret must be visibly dev-only")
	}
	// env.linux.json (samconfig.toml's linux environment, for
	// --docker-network host) is the same file with the service endpoints
	// on this machine's loopback instead of Docker Desktop's host name.
	lb, err := os.ReadFile("../env.linux.json")
	if err != nil {
		t.Fatal(err)
	}
	var linux map[string]map[string]string
	if err := json.Unmarshal(lb, &linux); err != nil {
		t.Fatal(err)
	}
	for scope, vars := range f {
		for k, v := range vars {
			want := strings.ReplaceAll(v, "host.docker.internal", "127.0.0.1")
			if got, ok := linux[scope][k]; !ok || got != want {
				t.Errorf("env.linux.json %s.%s = %q, want %q", scope, k, got, want)
			}
		}
		if len(linux[scope]) != len(vars) {
			t.Errorf("env.linux.json %s: %d variables, env.local.json %d", scope, len(linux[scope]), len(vars))
		}
	}
	if len(linux) != len(f) {
		t.Errorf("env.linux.json has %d scopes, env.local.json %d", len(linux), len(f))
	}
}

func isFunction(id string) bool {
	for _, f := range app.Functions {
		if f.LogicalID == id {
			return true
		}
	}
	return false
}
