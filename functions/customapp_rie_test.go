package functions

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/app/apptest"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// webhook records what the example app's reaction handler posts.
type webhook struct {
	mu   sync.Mutex
	keys []string
	body []string
	got  chan struct{}
}

func (w *webhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	w.mu.Lock()
	w.keys = append(w.keys, r.Header.Get("Idempotency-Key"))
	w.body = append(w.body, string(b))
	w.mu.Unlock()
	select {
	case w.got <- struct{}{}:
	default:
	}
}

// TestExampleAppUnderEmulator builds the example app's own push and
// reactions functions (examples/customapp, written against the public
// package syncular) and runs them under the Lambda emulator on DynamoDB
// Local: a push through the app's function plans its reaction in the
// commit, and the app's reactions function, invoked with the stream
// record of that commit as the template's mapping delivers it, posts the
// reaction to the app's webhook with its idempotency key.
func TestExampleAppUnderEmulator(t *testing.T) {
	hook := &webhook{got: make(chan struct{}, 4)}
	srv := httptest.NewServer(hook)
	defer srv.Close()
	env := storageEnv(t)
	env["NOTIFY_WEBHOOK_URL"] = srv.URL
	env["AWS_LAMBDA_FUNCTION_TIMEOUT"] = "30"
	schema, err := os.ReadFile(schemaPath)
	if err != nil {
		t.Fatal(err)
	}
	start := func(dir string) *testenv.RIE {
		bin := testenv.BuildFunction(t, "./examples/customapp/functions/"+dir)
		if err := os.WriteFile(filepath.Join(filepath.Dir(bin), "schema.json"), schema, 0o644); err != nil {
			t.Fatal(err)
		}
		return testenv.LambdaRIE(t, bin, env)
	}
	push, rx := start("push"), start("reactions")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	body, _ := sampleBodies(t, todo(t))
	ev := apptest.MustJSON(t, sampleEvent("push", "POST", "/sync", devToken(t, env["SYNC_HS256_SECRET"]), map[string]string{"content-type": apptest.ContentType}, body))
	out, err := push.Invoke(ctx, ev)
	if err != nil || !strings.Contains(string(out), `"statusCode":200`) {
		t.Fatalf("push: %v %s\n%s", err, out, push.Logs())
	}
	// The stream record of commit 1 of the sample's partition, as the
	// mapping's filter passes it (KEYS_ONLY).
	part := "default"
	if p := env["SYNC_DEFAULT_PARTITION"]; p != "" {
		part = p
	}
	rec, _ := json.Marshal(map[string]any{"Records": []any{map[string]any{
		"eventName": "INSERT", "eventSource": "aws:dynamodb",
		"dynamodb": map[string]any{"Keys": map[string]any{
			"pk": map[string]string{"S": dynamostore.PartitionPK(part) + "#L"},
			"sk": map[string]string{"S": "00000000000000000001"},
		}, "StreamViewType": "KEYS_ONLY"},
	}}})
	if out, err := rx.Invoke(ctx, rec); err != nil || strings.Contains(string(out), "errorMessage") {
		t.Fatalf("reactions: %v %s\n%s", err, out, rx.Logs())
	}
	select {
	case <-hook.got:
	case <-time.After(20 * time.Second):
		t.Fatalf("the webhook got nothing\n%s", rx.Logs())
	}
	hook.mu.Lock()
	keys, bodies := append([]string(nil), hook.keys...), append([]string(nil), hook.body...)
	hook.mu.Unlock()
	if len(keys) != 1 || keys[0] != `["`+part+`","sample-client","sample-commit-1","task:t1"]` {
		t.Fatalf("idempotency keys %q", keys)
	}
	if bodies[0] != `{"by":"dev-user","project":"p1","task":"t1","title":"Try Syncular on Lambda"}` {
		t.Fatalf("payload %s", bodies[0])
	}
	// The schedule's sweep finds nothing left to deliver.
	if out, err := rx.Invoke(ctx, []byte(`{"source":"aws.events","detail-type":"Scheduled Event","detail":{}}`)); err != nil || strings.Contains(string(out), "errorMessage") {
		t.Fatalf("sweep: %v %s\n%s", err, out, rx.Logs())
	}
	if l := rx.WaitLogs(`"msg":"reactions sweep"`, 10*time.Second); !strings.Contains(l, `"msg":"reactions sweep"`) {
		t.Fatalf("no sweep line\n%s", l)
	}
	hook.mu.Lock()
	n := len(hook.keys)
	hook.mu.Unlock()
	if n != 1 {
		t.Fatalf("the sweep delivered again: %d posts", n)
	}

	// The app's rule: a blank title is refused with the app's code, and
	// nothing is written.
	sch := todo(t)
	d := &apptest.Deployment{Schema: sch}
	blank := apptest.Request(t, wire.Version1, wire.ReqHeader{ClientID: "sample-client", SchemaVersion: sch.Latest},
		&wire.PushCommit{ClientCommitID: "blank-1", Operations: []wire.Operation{
			apptest.Upsert("tasks", "t2", 0, d.Task(t, "t2", "p1", " ")),
		}})
	resp := apptest.Invoke(t, push.Invoke, sampleEvent("push", "POST", "/sync", devToken(t, env["SYNC_HS256_SECRET"]), map[string]string{"content-type": apptest.ContentType}, blank))
	if resp.StatusCode != 200 {
		t.Fatalf("blank title: HTTP %d %s", resp.StatusCode, resp.Body)
	}
	res := apptest.Find[*wire.PushResult](apptest.Decode(t, apptest.Body(t, &resp)))
	if len(res) != 1 || res[0].Status != wire.PushRejected || res[0].Results[0].Code != "task.title_invalid" {
		t.Fatalf("blank title: %+v", res)
	}
}
