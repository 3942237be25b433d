package functions

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/app/apptest"
	"github.com/skyfold/syncular-lambda/internal/auth"
	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// bootstraps builds the three functions once per test process (as the
// Makefile does, but for the host architecture so the emulator can run
// them) and places schema.json beside each binary, as the SAM package must.
var bootstraps struct {
	once sync.Once
	path map[string]string
}

func buildAll(t *testing.T) map[string]string {
	bootstraps.once.Do(func() {
		bootstraps.path = map[string]string{}
		schema, err := os.ReadFile(schemaPath)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range app.Functions {
			// Not the first caller's TempDir: every later test uses
			// these binaries after that test ended.
			dir := filepath.Join(testenv.SharedDir(t), f.Name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			bin := testenv.BuildFunctionIn(t, "./"+f.Dir, dir)
			if err := os.WriteFile(filepath.Join(filepath.Dir(bin), "schema.json"), schema, 0o644); err != nil {
				t.Fatal(err)
			}
			bootstraps.path[f.Name] = bin
		}
	})
	if len(bootstraps.path) != len(app.Functions) {
		t.Fatal("function builds failed earlier")
	}
	return bootstraps.path
}

// emulated is one deployment: each function in its own emulator, sharing
// a DynamoDB Local table and an S3 bucket, with env.local.json's settings.
type emulated struct {
	rie    map[string]*testenv.RIE
	env    map[string]string
	first  map[string]time.Duration // start → first response (cold)
	second map[string]time.Duration // second response (warm)
}

// storageEnv is env.local.json's settings pointed at a fresh DynamoDB
// Local table and S3 bucket.
func storageEnv(t *testing.T) map[string]string {
	t.Helper()
	ddb := testenv.DynamoDB(t)
	s3 := testenv.S3(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	table, bucket := testenv.UniqueName(t, "sync"), testenv.UniqueName(t, "segments")
	if err := dynamostore.CreateTable(ctx, ddb.Client(t), table); err != nil {
		t.Fatal(err)
	}
	s3.CreateBucket(t, bucket)
	env := envLocal(t)
	env["SYNC_DYNAMODB_ENDPOINT"] = ddb.Endpoint
	env["SYNC_S3_ENDPOINT"] = s3.Endpoint
	env["SYNC_TABLE_NAME"] = table
	env["SYNC_BUCKET"] = bucket
	return env
}

func deploy(t *testing.T, overrides map[string]string) *emulated {
	bins := buildAll(t)
	env := storageEnv(t)
	for k, v := range overrides {
		env[k] = v
	}
	e := &emulated{rie: map[string]*testenv.RIE{}, env: env, first: map[string]time.Duration{}, second: map[string]time.Duration{}}
	for _, f := range app.Functions {
		e.rie[f.Name] = testenv.LambdaRIE(t, bins[f.Name], env)
	}
	return e
}

func (e *emulated) invoke(t testing.TB, fn string, payload []byte) events.APIGatewayV2HTTPResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	out, err := e.rie[fn].Invoke(ctx, payload)
	d := time.Since(start)
	if err != nil {
		t.Fatalf("%s: %v\n%s", fn, err, e.rie[fn].Logs())
	}
	if _, ok := e.first[fn]; !ok {
		e.first[fn] = d
	} else if _, ok := e.second[fn]; !ok {
		e.second[fn] = d
	}
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(out, &resp); err != nil || resp.StatusCode == 0 {
		t.Fatalf("%s: not an API Gateway response: %s\n%s", fn, out, e.rie[fn].Logs())
	}
	return resp
}

var initMs = regexp.MustCompile(`"msg":"init done"[^\n]*"initMs":([0-9.]+)`)

func (e *emulated) report(t *testing.T) {
	for _, f := range app.Functions {
		init := "?"
		if m := initMs.FindStringSubmatch(e.rie[f.Name].Logs()); m != nil {
			init = m[1] + " ms"
		}
		t.Logf("%-7s init %s, first response %v (cold, incl. process start), second %v (warm)", f.Name, init, e.first[f.Name].Round(time.Millisecond), e.second[f.Name].Round(100*time.Microsecond))
	}
}

// TestEmulator runs the functions under aws-lambda-rie. One parent test
// owns the builds (their temp dirs live as long as it does).
func TestEmulator(t *testing.T) {
	buildAll(t)
	t.Run("SampleEvents", testEmulatorSampleEvents)
	t.Run("Flow", testEmulatorFlow)
	t.Run("TableGrants", testEmulatorTableGrants)
	t.Run("BadConfig", testEmulatorBadConfig)
}

// The checked-in sample events replay under the emulator against DynamoDB
// Local and S3, exactly as `sam local invoke -e events/<fn>.json` would.
func testEmulatorSampleEvents(t *testing.T) {
	e := deploy(t, nil)
	files := map[string][]byte{}
	for _, f := range app.Functions {
		b, err := os.ReadFile(filepath.Join(eventsDir, f.Name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		files[f.Name] = b
	}
	invoke := func(fn string, ev []byte) events.APIGatewayV2HTTPResponse { return e.invoke(t, fn, ev) }
	replay(t, invoke, files["push"], files["pull"], files["segment"])
	replay(t, invoke, files["push"], files["pull"], files["segment"]) // warm, and the push replays as cached
	replayBlob(t, invoke, files["blob"])
	replayBlob(t, invoke, files["blob"]) // idempotent re-upload
	e.report(t)
	for _, f := range app.Functions {
		logs := e.rie[f.Name].Logs()
		if strings.Contains(logs, "Bearer ") || strings.Contains(logs, "eyJhbGciOi") {
			t.Errorf("%s logged a token", f.Name)
		}
		if !strings.Contains(logs, `"requestId":"sample-`+f.Name+`"`) {
			t.Errorf("%s: no request log line with the API Gateway request id:\n%s", f.Name, logs)
		}
	}
}

// The end-to-end flow through the three emulated functions, with S3
// presigned URLs fetched over plain HTTP from the S3 server.
func testEmulatorFlow(t *testing.T) {
	e := deploy(t, map[string]string{"SYNC_SIGNED_URLS": "presign"})
	secret := []byte(e.env["SYNC_HS256_SECRET"])
	d := &apptest.Deployment{
		Schema: todo(t),
		Invoke: func(t testing.TB, fn string, ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
			return e.invoke(t, fn, apptest.MustJSON(t, ev))
		},
		Token: func(t testing.TB, actor string, scopes map[string][]string) string {
			tok, err := auth.MintHS256(secret, auth.Claims{"sub": actor, "syncular_scopes": scopes}, time.Hour, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			return tok
		},
		FetchURL: func(t testing.TB, rawURL string) []byte {
			t.Helper()
			if !strings.HasPrefix(rawURL, e.env["SYNC_S3_ENDPOINT"]+"/") || !strings.Contains(rawURL, "X-Amz-Signature=") {
				t.Fatalf("not an S3 presigned URL: %s", rawURL)
			}
			resp, err := http.Get(rawURL)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("GET presigned URL: HTTP %d %v %s", resp.StatusCode, err, b)
			}
			return b
		},
	}
	apptest.RunFlow(t, d)
	e.report(t)
}

// SYNC_SCOPES_MODE=table: allowed scopes come from grant items in the
// table, read consistently on every request, so deleting a grant revokes
// on the very next pull.
func testEmulatorTableGrants(t *testing.T) {
	e := deploy(t, map[string]string{"SYNC_SCOPES_MODE": "table"})
	ddb := testenv.DynamoDB(t).Client(t)
	ctx := context.Background()
	table := aws.String(e.env["SYNC_TABLE_NAME"])
	grant := func(actor string, scopes engine.ScopeMap) {
		item := auth.GrantItem(dynamostore.AttrPK, dynamostore.AttrSK, "default", actor, scopes)
		if _, err := ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: table, Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	secret := []byte(e.env["SYNC_HS256_SECRET"])
	d := &apptest.Deployment{
		Schema: todo(t),
		Invoke: func(t testing.TB, fn string, ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
			return e.invoke(t, fn, apptest.MustJSON(t, ev))
		},
	}
	// No scopes claim at all: the token only authenticates.
	tok, err := auth.MintHS256(secret, auth.Claims{"sub": "alice"}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	grant("alice", engine.ScopeMap{"project_id": {"p1"}})
	epoch := d.Epoch(t, "push", "/sync", tok, "grants-a")
	d.Push(t, tok, "grants-a", epoch, wire.PushCommit{ClientCommitID: "g1", Operations: []wire.Operation{
		apptest.Upsert("projects", "p1", 0, d.Project(t, "p1")), apptest.Upsert("tasks", "t1", 0, d.Task(t, "t1", "p1", "granted")),
	}})
	hdr := wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows}
	sub := wire.Subscription{ID: "s", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1}
	if sec := d.Pull(t, tok, "grants-a", epoch, hdr, sub); sec.Start.Status != wire.SubActive {
		t.Fatalf("granted pull: %+v", sec.Start)
	}
	pk, sk := auth.GrantKey("default", "alice")
	if _, err := ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: table, Key: dynamostore.Key(pk, sk)}); err != nil {
		t.Fatal(err)
	}
	if sec := d.Pull(t, tok, "grants-a", epoch, hdr, sub); sec.Start.Status != wire.SubRevoked {
		t.Fatalf("after deleting the grant: %+v", sec.Start)
	}
}

// A bad configuration stops the function at init with one clear log line
// naming the variable; no request is served.
func testEmulatorBadConfig(t *testing.T) {
	bins := buildAll(t)
	env := envLocal(t)
	env["SYNC_AUTH_MODE"] = "cognito"
	env["SYNC_TABLE_NAME"] = ""
	r := testenv.LambdaRIE(t, bins["pull"], env)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, _ := os.ReadFile(filepath.Join(eventsDir, "pull.json"))
	out, _ := r.Invoke(ctx, b)
	if strings.Contains(string(out), `"statusCode"`) {
		t.Fatalf("served a request with a bad configuration: %s", out)
	}
	// The emulator answers the invoke as soon as the runtime exits; the
	// runtime's last output may still be on its way through the pipe.
	var lines []string
	for deadline := time.Now().Add(10 * time.Second); len(lines) == 0 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, l := range strings.Split(r.Logs(), "\n") {
			if strings.Contains(l, `"msg":"init failed"`) {
				lines = append(lines, l)
			}
		}
	}
	if len(lines) == 0 {
		t.Fatalf("no init failed line:\n%s", r.Logs())
	}
	for _, want := range []string{"SYNC_AUTH_MODE", "SYNC_TABLE_NAME is required", `"function":"pull"`} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("init failed line lacks %q: %s", want, lines[0])
		}
	}
}
