package app_test

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/app/apptest"
	"github.com/skyfold/syncular-lambda/internal/auth"
	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/lambdahttp"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

var secret = []byte("test-secret-test-secret-test-secret!")

func todoSchema(t testing.TB) *schema.Schema {
	_, file, _, _ := runtime.Caller(0)
	s, err := schema.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "examples", "todo", "schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func localConfig(t testing.TB, extra map[string]string) *config.Config {
	env := map[string]string{
		"SYNC_TABLE_NAME": "t", "SYNC_BUCKET": "b", "SYNC_AUTH_MODE": "hs256", "SYNC_HS256_SECRET": string(secret),
		"SYNC_SIGNED_URLS": "native", "SYNC_SIGNING_KEY": strings.Repeat("s", 32), "SYNC_PUBLIC_URL": "https://sync.example.test",
	}
	for k, v := range extra {
		env[k] = v
	}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// loggedDeployment builds every function over deps, each logging at info
// into its own buffer (by function name), invoked in process.
func loggedDeployment(t testing.TB, cfg *config.Config, deps app.Deps) (*apptest.Deployment, map[string]*bytes.Buffer) {
	t.Helper()
	logs := map[string]*bytes.Buffer{}
	hs := map[string]func(context.Context, []byte) ([]byte, error){}
	for _, fn := range app.Functions {
		logs[fn.Name] = &bytes.Buffer{}
		d := deps
		d.Logger = app.NewLogger(logs[fn.Name], slog.LevelInfo, fn)
		h, err := app.Build(cfg, fn, d)
		if err != nil {
			t.Fatal(err)
		}
		hs[fn.Name] = h.Invoke
	}
	return &apptest.Deployment{Schema: deps.Schema, Invoke: func(t testing.TB, fn string, ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
		t.Helper()
		return apptest.Invoke(t, hs[fn], ev)
	}}, logs
}

// memDeployment builds the three functions over one in-memory store, the
// way the local runner does.
func memDeployment(t testing.TB, cfg *config.Config) (*apptest.Deployment, map[string]*lambdahttp.Handler) {
	sch := todoSchema(t)
	deps := app.Deps{Schema: sch, Store: memstore.New(), Segments: memstore.NewSegments()}
	hs := map[string]*lambdahttp.Handler{}
	for _, fn := range app.Functions {
		h, err := app.Build(cfg, fn, deps)
		if err != nil {
			t.Fatal(err)
		}
		hs[fn.Name] = h
	}
	d := &apptest.Deployment{
		Schema: sch,
		Invoke: func(t testing.TB, fn string, ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
			t.Helper()
			return apptest.Invoke(t, hs[fn].Invoke, ev)
		},
		Token: func(t testing.TB, actor string, scopes map[string][]string) string {
			claims := auth.Claims{"sub": actor, "syncular_scopes": scopes}
			tok, err := auth.MintHS256(secret, claims, time.Hour, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			return tok
		},
	}
	d.FetchURL = apptest.NativeFetcher(d)
	return d, hs
}

func TestFlowInProcess(t *testing.T) {
	d, _ := memDeployment(t, localConfig(t, nil))
	apptest.RunFlow(t, d)
}

// Each function serves only its own routes: API Gateway never sends it the
// others, and a misrouted request must not be served by the wrong role.
func TestFunctionsServeOnlyTheirRoutes(t *testing.T) {
	d, _ := memDeployment(t, localConfig(t, nil))
	tok := d.Token(t, "a", map[string][]string{"project_id": {"*"}})
	for _, fn := range app.Functions {
		for _, other := range app.Functions {
			if other.Name == fn.Name {
				continue
			}
			for _, e := range other.Endpoints {
				path := strings.ReplaceAll(e.Path, "{segmentId}", "sha256:00")
				resp := d.Invoke(t, fn.Name, apptest.Event(e.Method, path, map[string]string{"Authorization": "Bearer " + tok, "Content-Type": apptest.ContentType}, []byte("x")))
				if resp.StatusCode != 404 {
					t.Errorf("%s served %s %s: HTTP %d", fn.Name, e.Method, path, resp.StatusCode)
				}
			}
		}
	}
}

func TestMatch(t *testing.T) {
	cases := []struct {
		mount, method, path, want string
	}{
		{"", "POST", "/sync", "push"},
		{"", "POST", "/push", "push"},
		{"", "POST", "/pull", "pull"},
		{"", "GET", "/segments/sha256%3Aab", "segment"},
		{"", "GET", "/segments/", ""},
		{"", "GET", "/segments/a/b", ""},
		{"", "GET", "/sync", ""},
		{"/api", "POST", "/api/sync", "push"},
		{"/api", "POST", "/sync", ""},
	}
	for _, c := range cases {
		f, ok := app.Match(c.mount, c.method, c.path)
		if (c.want == "") == ok || f.Name != c.want {
			t.Errorf("%s %s %s: got %q %v", c.mount, c.method, c.path, f.Name, ok)
		}
	}
}

func TestBuildRejects(t *testing.T) {
	sch := todoSchema(t)
	deps := app.Deps{Schema: sch, Store: memstore.New(), Segments: memstore.NewSegments()}
	if _, err := app.Build(localConfig(t, map[string]string{"SYNC_SIGNED_URLS": "presign", "SYNC_SIGNING_KEY": ""}), app.Push, deps); err == nil || !strings.Contains(err.Error(), "presign") {
		t.Fatalf("presign without presigner: %v", err)
	}
	if _, err := app.Build(localConfig(t, map[string]string{"SYNC_SCOPES_MODE": "table"}), app.Push, deps); err == nil || !strings.Contains(err.Error(), "table") {
		t.Fatalf("table resolver without client: %v", err)
	}
	if _, err := app.Build(localConfig(t, nil), app.Push, app.Deps{}); err == nil {
		t.Fatal("built without stores")
	}
}

func TestClassifySecretRef(t *testing.T) {
	for ref, want := range map[string]app.SecretKind{
		"/syncular/signing-key": app.SecretSSM,
		"syncular-signing-key":  app.SecretSSM,
		"arn:aws:ssm:eu-west-1:123456789012:parameter/syncular/key":                  app.SecretSSM,
		"arn:aws:secretsmanager:eu-west-1:123456789012:secret:syncular/key-AbCdEf":   app.SecretsManager,
		"arn:aws-us-gov:secretsmanager:us-gov-west-1:123456789012:secret:key-AbCdEf": app.SecretsManager,
	} {
		if got := app.ClassifySecretRef(ref); got != want {
			t.Errorf("%s: %v, want %v", ref, got, want)
		}
	}
}

// With a partition claim configured, a token without it is a 401 (never a
// shared default partition), and two tenants never see each other's rows.
func TestPartitionClaim(t *testing.T) {
	d, _ := memDeployment(t, localConfig(t, map[string]string{"SYNC_PARTITION_CLAIM": "tenant"}))
	mint := func(claims auth.Claims) string {
		tok, err := auth.MintHS256(secret, claims, time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	scopes := map[string][]string{"project_id": {"*"}}
	noTenant := mint(auth.Claims{"sub": "a", "syncular_scopes": scopes})
	resp := d.Call(t, "push", "/sync", noTenant, []byte("x"), nil)
	if resp.StatusCode != 401 || !strings.Contains(string(apptest.Body(t, &resp)), `claim \"tenant\" is missing`) {
		t.Fatalf("no tenant claim: HTTP %d %s", resp.StatusCode, apptest.Body(t, &resp))
	}
	acme := mint(auth.Claims{"sub": "a", "tenant": "acme", "syncular_scopes": scopes})
	globex := mint(auth.Claims{"sub": "a", "tenant": "globex", "syncular_scopes": scopes})
	ea := d.Epoch(t, "push", "/sync", acme, "c")
	eg := d.Epoch(t, "push", "/sync", globex, "c")
	if ea == eg {
		t.Fatal("two partitions share a log epoch")
	}
	d.Push(t, acme, "c", ea, wire.PushCommit{ClientCommitID: "1", Operations: []wire.Operation{apptest.Upsert("projects", "p1", 0, d.Project(t, "p1"))}})
	hdr := wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows}
	sub := wire.Subscription{ID: "s", Table: "projects", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1}
	if sec := d.Pull(t, globex, "c", eg, hdr, sub); len(sec.Segments) != 1 || sec.Segments[0].Rows() != 0 {
		t.Fatalf("globex sees acme's rows: %+v", sec.Segments)
	}
	if sec := d.Pull(t, acme, "c", ea, hdr, sub); len(sec.Segments) != 1 || sec.Segments[0].Rows() != 1 {
		t.Fatalf("acme bootstrap: %+v", sec.Segments)
	}
}

// Issue 9 item 7: native signed URLs are built from SYNC_PUBLIC_URL only;
// a request's Host and X-Forwarded-* headers (which a client controls)
// never choose where other clients' tokens are sent.
func TestSignedURLsUseConfiguredBase(t *testing.T) {
	cfg := localConfig(t, nil)
	d, _ := memDeployment(t, cfg)
	refs := forgedHostPull(t, d)
	for _, r := range refs {
		if !r.URL.Present || !strings.HasPrefix(r.URL.Value, "https://sync.example.test/segments/") {
			t.Fatalf("signed URL %q not under the configured public URL", r.URL.Value)
		}
	}
	// Without a configured base (config refuses that for native mode; a
	// host built around it) no native URL is minted at all.
	cfg.PublicURL = ""
	d, _ = memDeployment(t, cfg)
	for _, r := range forgedHostPull(t, d) {
		if r.URL.Present {
			t.Fatalf("signed URL %q minted without a configured public URL", r.URL.Value)
		}
	}
}

// forgedHostPull bootstraps one task through the pull function with
// hostile Host and X-Forwarded-* headers and returns the SEGMENT_REFs.
func forgedHostPull(t *testing.T, d *apptest.Deployment) []*wire.SegmentRef {
	t.Helper()
	tok := d.Token(t, "a", map[string][]string{"project_id": {"p1"}})
	ep := d.Epoch(t, "push", "/sync", tok, "c1")
	d.Push(t, tok, "c1", ep, wire.PushCommit{ClientCommitID: "k1", Operations: []wire.Operation{apptest.Upsert("tasks", "t1", 0, d.Task(t, "t1", "p1", "x"))}})
	body := apptest.Request(t, wire.Version2, wire.ReqHeader{ClientID: "c1", SchemaVersion: d.Schema.Latest, LogEpoch: wire.Some(ep)},
		&wire.PullHeader{Accept: wire.AcceptExternalRows | wire.AcceptSignedURL},
		&wire.Subscription{ID: "s", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1})
	resp := d.Call(t, "pull", "/pull", tok, body, map[string]string{"Host": "evil.example", "X-Forwarded-Proto": "http", "X-Forwarded-Host": "evil.example"})
	b := apptest.Body(t, &resp)
	if resp.StatusCode != 200 {
		t.Fatalf("pull: %d %s", resp.StatusCode, b)
	}
	refs := apptest.Find[*wire.SegmentRef](apptest.Decode(t, b))
	if len(refs) == 0 {
		t.Fatal("no SEGMENT_REF")
	}
	return refs
}
