package localrun

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/skyfold/syncular-lambda/internal/app/apptest"
	"github.com/skyfold/syncular-lambda/internal/auth"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/testenv"
	"github.com/skyfold/syncular-lambda/internal/vectors"
)

const testSecret = "runner-test-secret-runner-test-secret"

func testOptions() options {
	return options{
		schemaPath: "../../examples/todo/schema.json", secret: testSecret, actor: "dev-user",
		partition: "default", signedURLs: "native", logLevel: "error", table: "t", bucket: "b",
	}
}

func startRunner(t testing.TB, o options) (*runner, *httptest.Server) {
	t.Helper()
	rn, err := newRunner(context.Background(), o, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rn)
	t.Cleanup(srv.Close)
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	go rn.hub.Run(ctx) // as main does: hints reach sockets through it
	if o.publicURL == "" {
		rn.setPublicURL(srv.URL)
	}
	return rn, srv
}

// noDecompress keeps Content-Encoding for apptest.Body to undo, as a
// Syncular client sees it.
func noDecompress() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 30 * time.Second}
}

// The flow runs twice: with each request converted directly (InvokeHTTP,
// the default) and with the JSON documents of the Lambda runtime
// (-json-events).
func TestRunnerFlow(t *testing.T) {
	for _, jsonEvents := range []bool{false, true} {
		t.Run(fmt.Sprintf("json-events=%v", jsonEvents), func(t *testing.T) {
			o := testOptions()
			o.jsonEvents = jsonEvents
			runnerFlow(t, o)
		})
	}
}

func runnerFlow(t *testing.T, o options) {
	rn, srv := startRunner(t, o)
	c := noDecompress()
	d := &apptest.Deployment{
		Schema: rn.schema,
		Invoke: func(t testing.TB, _ string, ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
			return apptest.OverHTTP(t, c, srv.URL, ev) // the runner routes by path, like API Gateway
		},
		Token: func(t testing.TB, actor string, scopes map[string][]string) string {
			tok, err := auth.MintHS256([]byte(testSecret), auth.Claims{"sub": actor, "syncular_scopes": scopes}, time.Hour, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			return tok
		},
		FetchURL: func(t testing.TB, rawURL string) []byte {
			t.Helper()
			if !strings.HasPrefix(rawURL, srv.URL+"/segments/") || !strings.Contains(rawURL, "st=") {
				t.Fatalf("native URL does not point at this runner: %s", rawURL)
			}
			resp, err := c.Get(rawURL) // no credentials: the st token is the capability
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 {
				t.Fatalf("native URL: HTTP %d %s", resp.StatusCode, b)
			}
			out, err := apptest.Decompress(resp.Header.Get("Content-Encoding"), b)
			if err != nil {
				t.Fatal(err)
			}
			return out
		},
	}
	apptest.RunFlow(t, d)

	// Unknown routes answer in the §10.1 shape, like the deployed API's 404.
	resp, err := c.Get(srv.URL + "/nope")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || apptest.ErrorCode(b) != "sync.not_found" {
		t.Fatalf("unknown route: HTTP %d %s", resp.StatusCode, b)
	}
}

// The banner's token and curl work as printed.
func TestRunnerBanner(t *testing.T) {
	var out, errOut bytes.Buffer
	o := testOptions()
	args := []string{"-addr", "127.0.0.1:0", "-schema", o.schemaPath, "-secret", testSecret}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	var mu sync.Mutex
	w := &lockedWriter{mu: &mu, w: &out}
	go func() { done <- runCtx(ctx, args, w, &errOut) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		s := out.String()
		mu.Unlock()
		if strings.Contains(s, "Ctrl-C stops.") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no banner: %s %s", s, errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	banner := out.String()
	mu.Unlock()
	var base, token string
	for _, l := range strings.Split(banner, "\n") {
		f := strings.Fields(l)
		if len(f) >= 3 && f[0] == "base" && f[1] == "URL" {
			base = f[2]
		}
		if len(f) >= 3 && f[0] == "dev" && f[1] == "token" {
			token = f[2]
		}
	}
	if base == "" || token == "" || !strings.Contains(banner, "curl -sS "+base+"/sync") {
		t.Fatalf("banner:\n%s", banner)
	}
	body := pullFileBytes(t)
	// The curl's body file is this run's own, holds the pull, and is
	// removed when the runner stops (no fixed path shared by runners).
	_, after, _ := strings.Cut(banner, "--data-binary @")
	pullPath := strings.Trim(strings.Fields(after + " ")[0], "'")
	if filepath.Base(pullPath) == "syncular-local-pull.bin" || !strings.HasPrefix(filepath.Base(pullPath), "syncular-local-pull-") {
		t.Errorf("demo pull body at %q, want a per-run temporary file", pullPath)
	}
	if got, err := os.ReadFile(pullPath); err != nil || !bytes.Equal(got, body) {
		t.Errorf("demo pull body %s: %v (%d bytes, want the %d-byte pull)", pullPath, err, len(got), len(body))
	}
	b := postSync(t, base, token, body)
	m := apptest.Decode(t, b)
	if ss := apptest.Find[*wire.SubStart](m); len(ss) != 1 || ss[0].Status != wire.SubActive {
		t.Fatalf("pull: %+v", m.Frames)
	}
	var rendered bytes.Buffer
	if err := renderStdin(bytes.NewReader(b), &rendered); err != nil || !strings.Contains(rendered.String(), `"SUB_START"`) {
		t.Fatalf("render: %v %s", err, rendered.String())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("shutdown: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no clean shutdown")
	}
	if _, err := os.Stat(pullPath); !os.IsNotExist(err) {
		t.Errorf("demo pull body %s left behind after shutdown (%v)", pullPath, err)
	}
}

// postSync POSTs body to base's /sync as a bearer of token and returns
// the 200 answer's body; any other status fails t.
func postSync(t *testing.T, base, token string, body []byte) []byte {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/sync", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", apptest.ContentType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s/sync: HTTP %d %s", base, resp.StatusCode, b)
	}
	return b
}

func pullFileBytes(t *testing.T) []byte {
	var out bytes.Buffer
	o := testOptions()
	if err := runCtx(context.Background(), []string{"-print-pull", "-schema", o.schemaPath}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestRunnerFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-schema", "does-not-exist.json"},
		{"-schema", "../../examples/todo/schema.json", "-secret", "short"},
		{"-schema", "../../examples/todo/schema.json", "-signed-urls", "presign"},
		{"-schema", "../../examples/todo/schema.json", "-scopes", "{not json"},
	} {
		if err := runCtx(context.Background(), append(args, "-addr", "127.0.0.1:0"), io.Discard, io.Discard); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

// Warm request latency through the runner over loopback HTTP: a one-op
// push and a quiet pull (cursor at the head), the two most frequent
// requests of a synced app.
func BenchmarkRunnerPush(b *testing.B) {
	rn, srv := startRunner(b, testOptions())
	c := noDecompress()
	d := benchDeployment(b, rn, srv, c)
	tok := d.Token(b, "bench", map[string][]string{"project_id": {"*"}})
	epoch := d.Epoch(b, "push", "/sync", tok, "bench-client")
	d.Push(b, tok, "bench-client", epoch, wire.PushCommit{ClientCommitID: "p", Operations: []wire.Operation{apptest.Upsert("projects", "p1", 0, d.Project(b, "p1"))}})
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := fmt.Sprintf("t%09d", i)
		d.Push(b, tok, "bench-client", epoch, wire.PushCommit{ClientCommitID: id, Operations: []wire.Operation{apptest.Upsert("tasks", id, 0, d.Task(b, id, "p1", "bench"))}})
	}
}

func BenchmarkRunnerQuietPull(b *testing.B) {
	rn, srv := startRunner(b, testOptions())
	c := noDecompress()
	d := benchDeployment(b, rn, srv, c)
	tok := d.Token(b, "bench", map[string][]string{"project_id": {"*"}})
	epoch := d.Epoch(b, "pull", "/pull", tok, "bench-client")
	d.Push(b, tok, "bench-writer", d.Epoch(b, "push", "/sync", tok, "bench-writer"), wire.PushCommit{ClientCommitID: "p", Operations: []wire.Operation{
		apptest.Upsert("projects", "p1", 0, d.Project(b, "p1")), apptest.Upsert("tasks", "t1", 0, d.Task(b, "t1", "p1", "x")),
	}})
	hdr := wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows}
	sub := wire.Subscription{ID: "s", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1}
	for sub.Cursor < 0 || sub.BootstrapState.Present {
		sec := d.Pull(b, tok, "bench-client", epoch, hdr, sub)
		sub.Cursor, sub.BootstrapState = sec.End.NextCursor, sec.End.BootstrapState
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if sec := d.Pull(b, tok, "bench-client", epoch, hdr, sub); len(sec.Commits) != 0 {
			b.Fatal("pull was not quiet")
		}
	}
}

func benchDeployment(b testing.TB, rn *runner, srv *httptest.Server, c *http.Client) *apptest.Deployment {
	return &apptest.Deployment{
		Schema: rn.schema,
		Invoke: func(t testing.TB, _ string, ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
			return apptest.OverHTTP(t, c, srv.URL, ev)
		},
		Token: func(t testing.TB, actor string, scopes map[string][]string) string {
			tok, err := auth.MintHS256([]byte(testSecret), auth.Claims{"sub": actor, "syncular_scopes": scopes}, time.Hour, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			return tok
		},
	}
}

func TestMain(m *testing.M) { testenv.Main(m) }

// -dynamodb-endpoint / -s3-endpoint / -create: the runner over DynamoDB
// Local and an S3 server, with S3 presigned segment URLs.
func TestRunnerRealEndpoints(t *testing.T) {
	ddb := testenv.DynamoDB(t)
	s3 := testenv.S3(t)
	o := testOptions()
	o.dynamoEndpoint, o.s3Endpoint, o.create = ddb.Endpoint, s3.Endpoint, true
	o.table, o.bucket = testenv.UniqueName(t, "runner"), testenv.UniqueName(t, "runner")
	o.signedURLs = "presign"
	rn, srv := startRunner(t, o)
	if !strings.Contains(rn.backend, "DynamoDB "+ddb.Endpoint) {
		t.Fatalf("backend %q", rn.backend)
	}
	c := noDecompress()
	d := benchDeployment(t, rn, srv, c)
	d.FetchURL = func(t testing.TB, rawURL string) []byte {
		t.Helper()
		if !strings.HasPrefix(rawURL, s3.Endpoint+"/"+o.bucket+"/segments/") {
			t.Fatalf("not a presigned URL of the bucket: %s", rawURL)
		}
		resp, err := http.Get(rawURL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("presigned GET: HTTP %d %s", resp.StatusCode, b)
		}
		return b
	}
	apptest.RunFlow(t, d)
}

// A browser client on another origin can sync: preflights are answered
// like the deployed API's CorsConfiguration, and responses carry
// Access-Control-Allow-Origin for allowed origins only.
func TestRunnerCORS(t *testing.T) {
	o := testOptions()
	o.corsOrigins = []string{"http://localhost:5173"}
	_, srv := startRunner(t, o)

	req, _ := http.NewRequest(http.MethodOptions, srv.URL+"/sync", nil)
	req.Header.Set("Origin", "http://localhost:5173")
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "authorization, content-type")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "http://localhost:5173" ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "authorization") ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Methods"), "POST") {
		t.Fatalf("preflight: %d %v", resp.StatusCode, resp.Header)
	}

	for origin, want := range map[string]string{"http://localhost:5173": "http://localhost:5173", "http://evil.example": ""} {
		req, _ = http.NewRequest(http.MethodPost, srv.URL+"/sync", strings.NewReader("x"))
		req.Header.Set("Origin", origin)
		req.Header.Set("Content-Type", "application/vnd.syncular.sync.v2")
		resp, err = srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Access-Control-Allow-Origin") != want {
			t.Fatalf("origin %s: status %d, ACAO %q, want %q", origin, resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"), want)
		}
	}
}

// `make run` serves current (wire version 3) clients: the v3 golden
// request pull-minimal — an epoch acquisition, no logEpoch — is answered
// with a v3 response whose RESP_HEADER decodes and asks for the reset.
func TestRunnerAnswersWireV3(t *testing.T) {
	dir := vectors.DirV3(t)
	body, err := os.ReadFile(filepath.Join(dir, "request", "pull-minimal.bin"))
	if err != nil {
		t.Fatal(err)
	}
	_, srv := startRunner(t, testOptions())
	tok, err := auth.MintHS256([]byte(testSecret), auth.Claims{"sub": "dev-user", "syncular_scopes": map[string][]string{"project": {"p1"}}}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b := postSync(t, srv.URL, tok, body)
	if len(b) < 8 || string(b[:4]) != "SSP2" || binary.LittleEndian.Uint16(b[4:6]) != wire.Version3 {
		t.Fatalf("not a wire-version 3 response: % x", b[:min(len(b), 8)])
	}
	m, err := wire.Decode(b)
	if err != nil {
		t.Fatalf("response does not decode: %v", err)
	}
	hdr, ok := m.Frames[0].(*wire.RespHeader)
	if !ok || m.Kind != wire.KindResponse || hdr.LogEpoch == "" || !hdr.ResetRequired {
		t.Fatalf("want a RESP_HEADER acquiring the epoch, got %+v", m.Frames)
	}
}

// The runner refuses exactly what the deployed function can never receive:
// a body whose base64 form does not fit Lambda's 6 MiB event. API
// Gateway's own 10 MB cap is not the one that bites.
func TestRunnerRequestBodyLimit(t *testing.T) {
	rn, srv := startRunner(t, testOptions())
	tok, err := rn.devToken("dev-user", map[string]any{"project_id": []any{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	post := func(n int) int {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/sync", bytes.NewReader(make([]byte, n)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/vnd.syncular.sync.v2")
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// 6 MiB of event minus 64 KiB for headers and context, base64: 4,669,440.
	const lambdaMax = (6<<20 - 64<<10) / 4 * 3
	if got := post(lambdaMax + 1); got != http.StatusRequestEntityTooLarge {
		t.Errorf("body of %d bytes: status %d, want 413 (it cannot reach a Lambda function)", lambdaMax+1, got)
	}
	if got := post(lambdaMax); got == http.StatusRequestEntityTooLarge {
		t.Errorf("body of %d bytes: 413, but it fits a Lambda invocation", lambdaMax)
	}
}

// §5.9 over the runner's memory store: an upload grant is a URL on the
// runner itself that a plain PUT without host authentication consumes;
// the bytes then count for the uploader (a second grant says present),
// a direct upload of other bytes is blob.hash_mismatch, and a download
// with no referencing row is blob.forbidden.
func TestRunnerBlobs(t *testing.T) {
	rn, srv := startRunner(t, testOptions())
	tok, err := rn.devToken("dev-user", map[string]any{"project_id": []any{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte("runner blob")
	sum := sha256.Sum256(body)
	id := "sha256:" + hex.EncodeToString(sum[:])
	send := func(method, u string, auth bool, b []byte) (int, []byte) {
		req, err := http.NewRequest(method, u, bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if auth {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, out
	}
	grant := func() map[string]any {
		st, b := send(http.MethodPost, srv.URL+"/blobs/"+id+"/upload-grant", true, []byte(`{"byteLength":11}`))
		if st != http.StatusOK {
			t.Fatalf("grant: %d %s", st, b)
		}
		var g map[string]any
		if err := json.Unmarshal(b, &g); err != nil {
			t.Fatal(err)
		}
		return g
	}
	g := grant()
	u, _ := g["url"].(string)
	if !strings.HasPrefix(u, srv.URL+"/blobs/") {
		t.Fatalf("grant %v does not point at the runner", g)
	}
	if st, b := send(http.MethodPut, u, false, []byte("other bytes")); st != http.StatusOK {
		t.Fatalf("presigned PUT: %d %s", st, b)
	}
	// The staged bytes do not match: verification drops them.
	if g := grant(); g["url"] == nil {
		t.Fatalf("forged upload counted: %v", g)
	}
	u, _ = grant()["url"].(string)
	if st, b := send(http.MethodPut, u, false, body); st != http.StatusOK {
		t.Fatalf("presigned PUT: %d %s", st, b)
	}
	if g := grant(); g["present"] != true {
		t.Fatalf("after the upload: %v", g)
	}
	if st, b := send(http.MethodPut, srv.URL+"/blobs/"+id, true, []byte("wrong")); st != http.StatusBadRequest || !strings.Contains(string(b), "blob.hash_mismatch") {
		t.Fatalf("wrong bytes: %d %s", st, b)
	}
	if st, b := send(http.MethodPut, srv.URL+"/blobs/"+id, false, body); st != http.StatusUnauthorized {
		t.Fatalf("unauthenticated upload: %d %s", st, b)
	}
	if st, b := send(http.MethodGet, srv.URL+"/blobs/"+id, true, nil); st != http.StatusForbidden || !strings.Contains(string(b), "blob.forbidden") {
		t.Fatalf("download without a referencing row: %d %s", st, b)
	}
}
