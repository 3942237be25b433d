package functions

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/app/apptest"
	"github.com/skyfold/syncular-lambda/internal/auth"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/lambdahttp"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// TestForwardThroughLambdaInvoke (issue 20, item 1) runs the forwarding
// path as deployed: two versions of the push function under the Lambda
// emulator on one DynamoDB Local table, the old build (version 1, the
// todo schema) and the new one (version 2, a schema that changes the
// tasks table's layout). The new version's first push fences the
// partition from the old one; a request to the old version is then
// answered through the real aws-sdk-go-v2 Lambda client invoking the new
// version (the emulator serves the Invoke API's path), and the old
// version's request line counts it forwarded. An event carrying the
// forwarding marker is never forwarded again: the old version refuses it
// (503 sync.schema_not_ready, retryable). It reports the added latency
// of a forwarded request against the new version answering directly.
func TestForwardThroughLambdaInvoke(t *testing.T) {
	bins := buildAll(t)
	env := storageEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The new build's schema document: version 2 only, with a column
	// added to tasks (a layout version 1 cannot read).
	var doc map[string]any
	if err := json.Unmarshal(mustRead(t, schemaPath), &doc); err != nil {
		t.Fatal(err)
	}
	doc["version"] = 2
	for _, tb := range doc["tables"].([]any) {
		if m := tb.(map[string]any); m["name"] == "tasks" {
			m["columns"] = append(m["columns"].([]any), map[string]any{"name": "estimate", "type": "integer", "nullable": true})
		}
	}
	raw, _ := json.Marshal(doc)
	v2, err := schema.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	v2Path := filepath.Join(t.TempDir(), "schema-v2.json")
	if err := os.WriteFile(v2Path, raw, 0o644); err != nil {
		t.Fatal(err)
	}

	newEnv := map[string]string{"AWS_LAMBDA_FUNCTION_VERSION": "2", "SYNC_SCHEMA_PATH": v2Path, "SYNC_LOG_LEVEL": "info"}
	oldEnv := map[string]string{"AWS_LAMBDA_FUNCTION_VERSION": "1", "SYNC_LOG_LEVEL": "info"}
	for k, v := range env {
		for _, m := range []map[string]string{newEnv, oldEnv} {
			if _, set := m[k]; !set {
				m[k] = v
			}
		}
	}
	newRIE := testenv.LambdaRIE(t, bins["push"], newEnv)
	// The emulator serves one function at the Invoke API's path for the
	// name "function" (the name it gives the function, as testenv does).
	oldEnv["SYNC_LAMBDA_ENDPOINT"] = newRIE.Endpoint
	oldRIE := testenv.LambdaRIE(t, bins["push"], oldEnv)

	tok, err := auth.MintHS256([]byte(env["SYNC_HS256_SECRET"]), auth.Claims{"sub": "actor-1", "syncular_scopes": map[string][]string{"project_id": {"p1"}}}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tasks, _ := v2.Versions[2].Table("tasks")
	var epoch string
	request := func(commit *wire.PushCommit) []byte {
		hdr := &wire.ReqHeader{ClientID: "client-1", SchemaVersion: 2}
		if epoch != "" {
			hdr.LogEpoch = wire.Some(epoch)
		}
		frames := []wire.Frame{hdr}
		if commit != nil {
			frames = append(frames, commit)
		}
		frames = append(frames, &wire.PullHeader{Accept: wire.AcceptInlineRows},
			&wire.Subscription{ID: "tasks", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1})
		b, err := wire.Encode(&wire.Message{WireVersion: wire.Version3, Kind: wire.KindRequest, Frames: frames})
		if err != nil {
			t.Fatal(err)
		}
		return apptest.MustJSON(t, apptest.Event("POST", "/sync", map[string]string{"Content-Type": apptest.ContentType, "Authorization": "Bearer " + tok}, b))
	}
	invoke := func(r *testenv.RIE, ev []byte) (events.APIGatewayV2HTTPResponse, time.Duration) {
		t.Helper()
		start := time.Now()
		out, err := r.Invoke(ctx, ev)
		d := time.Since(start)
		var resp events.APIGatewayV2HTTPResponse
		if err != nil || json.Unmarshal(out, &resp) != nil || resp.StatusCode == 0 {
			t.Fatalf("invoke: %v %s\n%s", err, out, r.Logs())
		}
		return resp, d
	}
	rowsOf := func(resp events.APIGatewayV2HTTPResponse) []string {
		t.Helper()
		if resp.StatusCode != 200 {
			t.Fatalf("HTTP %d %s", resp.StatusCode, resp.Body)
		}
		body, _ := base64.StdEncoding.DecodeString(resp.Body)
		m, err := wire.Decode(body)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m.Frames {
			if h, ok := f.(*wire.RespHeader); ok {
				epoch = h.LogEpoch
			}
		}
		secs, err := enginetest.ParseSections(m)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, s := range secs {
			for _, seg := range s.Segments {
				for _, b := range seg.Blocks {
					for _, r := range b {
						ids = append(ids, r.Values[0].Str) // tasks' first column is its key
					}
				}
			}
			for _, c := range s.Commits {
				for _, ch := range c.Changes {
					ids = append(ids, ch.RowID)
				}
			}
		}
		return ids
	}

	// The new version writes tasks in its layout (after the epoch
	// acquisition, §2.1): the partition is fenced from version 1.
	resp, _ := invoke(newRIE, request(nil))
	rowsOf(resp)
	payload, err := tasks.Codec.AppendSparse(nil, []rowcodec.Value{{Str: "t1"}, {Str: "p1"}, {Str: "task 1"}, {Bool: false}, {Null: true}, {Null: true}, {Null: true}, {Int: 1}, {Int: 3}},
		[]bool{true, true, true, true, true, true, true, true, true})
	if err != nil {
		t.Fatal(err)
	}
	resp, _ = invoke(newRIE, request(&wire.PushCommit{ClientCommitID: "c1", Operations: []wire.Operation{apptest.Upsert("tasks", "t1", 0, payload)}}))
	if ids := rowsOf(resp); !slices.Contains(ids, "t1") {
		t.Fatalf("the new version's push+pull returned rows %v, want t1", ids)
	}
	st := dynamostore.New(testenv.DynamoDB(t).Client(t), env["SYNC_TABLE_NAME"], dynamostore.Options{})
	g, err := st.ReadGate(ctx, "default")
	if err != nil || g.WriterFence != 2 {
		t.Fatalf("partition gate after the new version's write: %+v %v, want writer fence 2", g, err)
	}

	// The old version meets the fence and answers through version 2.
	pull := request(nil)
	resp, _ = invoke(oldRIE, pull)
	if ids := rowsOf(resp); !slices.Contains(ids, "t1") {
		t.Fatalf("the old version's forwarded pull returned rows %v, want t1", ids)
	}
	if n := strings.Count(oldRIE.Logs(), `"forwarded":1`); n != 1 {
		t.Fatalf("old version: %d request lines with forwarded=1, want 1:\n%s", n, oldRIE.Logs())
	}

	// A marked event is never forwarded again: refused, retryably.
	marked, err := lambdahttp.MarkForwarded(pull, "9")
	if err != nil {
		t.Fatal(err)
	}
	resp, _ = invoke(oldRIE, marked)
	var e struct {
		Code      string `json:"code"`
		Retryable bool   `json:"retryable"`
	}
	if resp.StatusCode != 503 || json.Unmarshal([]byte(resp.Body), &e) != nil || e.Code != "sync.schema_not_ready" || !e.Retryable || resp.Headers["Retry-After"] != "1" {
		t.Fatalf("marked event to the old version: HTTP %d %v %s, want 503 sync.schema_not_ready with Retry-After", resp.StatusCode, resp.Headers, resp.Body)
	}
	if n := strings.Count(oldRIE.Logs(), `"forwarded":1`); n != 1 {
		t.Fatalf("the marked event was forwarded (%d forwarded lines)", n)
	}

	// Added latency: the same pull, forwarded through version 1 and sent
	// to version 2 directly (both warm), alternating.
	const rounds = 15
	var direct, forwarded []time.Duration
	for range rounds {
		r, d := invoke(newRIE, pull)
		rowsOf(r)
		direct = append(direct, d)
		r, d = invoke(oldRIE, pull)
		rowsOf(r)
		forwarded = append(forwarded, d)
	}
	slices.Sort(direct)
	slices.Sort(forwarded)
	t.Logf("pull of a fenced partition, %d rounds each: answered by version 2 directly p50 %v (min %v); through version 1, forwarded, p50 %v (min %v): %v added at p50",
		rounds, direct[rounds/2].Round(10*time.Microsecond), direct[0].Round(10*time.Microsecond),
		forwarded[rounds/2].Round(10*time.Microsecond), forwarded[0].Round(10*time.Microsecond),
		(forwarded[rounds/2] - direct[rounds/2]).Round(10*time.Microsecond))
	for _, r := range []*testenv.RIE{oldRIE, newRIE} {
		if logs := r.Logs(); strings.Contains(logs, "Bearer ") || strings.Contains(logs, "eyJhbGciOi") {
			t.Errorf("a function logged a token")
		}
	}
	_ = app.Push
}
