package functions

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// hookStatus is one PutLifecycleEventHookExecutionStatus request as the
// CodeDeploy JSON protocol carries it.
type hookStatus struct {
	Target                        string
	DeploymentID                  string `json:"deploymentId"`
	LifecycleEventHookExecutionID string `json:"lifecycleEventHookExecutionId"`
	Status                        string `json:"status"`
	Signed                        bool
}

// hookUnderEmulator starts the hook function under the Lambda emulator
// over table on DynamoDB Local, deployed with the schema document doc,
// with extra environment.
func hookUnderEmulator(t *testing.T, endpoint, table string, doc []byte, extra map[string]string) *testenv.RIE {
	t.Helper()
	bin := testenv.BuildFunction(t, "./"+app.MigrateHookJob.Dir)
	if err := os.WriteFile(filepath.Join(filepath.Dir(bin), "schema.json"), doc, 0o644); err != nil {
		t.Fatal(err)
	}
	env := envLocal(t)
	env["SYNC_DYNAMODB_ENDPOINT"] = endpoint
	env["SYNC_TABLE_NAME"] = table
	env["AWS_LAMBDA_FUNCTION_TIMEOUT"] = "120"
	maps.Copy(env, extra)
	return testenv.LambdaRIE(t, bin, env)
}

// fakeCodeDeploy speaks the part of the CodeDeploy API (JSON 1.1 over
// POST, operation in X-Amz-Target) the hook calls, and records requests.
type fakeCodeDeploy struct {
	mu   sync.Mutex
	reqs []hookStatus
}

func (f *fakeCodeDeploy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var s hookStatus
	if err := json.Unmarshal(body, &s); err != nil || r.Method != http.MethodPost {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	s.Target = r.Header.Get("X-Amz-Target")
	s.Signed = strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ") && strings.Contains(r.Header.Get("Authorization"), "/codedeploy/aws4_request")
	f.mu.Lock()
	f.reqs = append(f.reqs, s)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	_ = json.NewEncoder(w).Encode(map[string]string{"lifecycleEventHookExecutionId": s.LifecycleEventHookExecutionID})
}

func (f *fakeCodeDeploy) received() []hookStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]hookStatus(nil), f.reqs...)
}

// The post-traffic hook under the Lambda emulator against DynamoDB Local,
// with CodeDeploy served locally (AWS_ENDPOINT_URL_CODEDEPLOY): a
// lifecycle event in; Succeeded reported with the event's ids before the
// migration (the deploy never waits on a backfill), then the marker
// raised to the schema's version and the checkpoint of SYNC_CHECKPOINTS
// declared table-wide with it, so every partition gates it at once. A run
// that runs out of time before its walk reached a partition still
// reported Succeeded and says timedOut; the next invocation walks the
// registered partitions, materialising the checkpoint in each (its
// writer fence raised with it) and activating it.
func TestMigrateHookUnderEmulator(t *testing.T) {
	ddb := testenv.DynamoDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := ddb.Client(t)
	table := testenv.UniqueName(t, "hook")
	if err := dynamostore.CreateTable(ctx, c, table); err != nil {
		t.Fatal(err)
	}
	st := dynamostore.New(c, table, dynamostore.Options{})
	now := time.Now().UnixMilli()
	parts := []string{"alpha", "beta#tenant"}
	for _, p := range parts {
		if _, err := st.TouchPartition(ctx, p, now, "e-"+p); err != nil {
			t.Fatal(err)
		}
		for seq := int64(1); seq <= 7; seq++ {
			id := "t" + strconv.FormatInt(seq, 10)
			payload := []byte(`{"id":"` + id + `"}`)
			if err := st.Commit(ctx, p, &store.CommitRequest{
				ExpectedMaxSeq: seq - 1,
				Commit: store.Commit{Seq: seq, CreatedAtMs: now, ClientID: "c", ClientCommitID: id,
					Changes: []store.Change{{Table: "tasks", RowID: id, Op: wire.OpUpsert, RowVersion: 1, Row: payload}}},
				Rows:    []store.RowWrite{{Table: "tasks", Row: store.Row{RowID: id, Version: 1, Payload: payload, CommitSeq: seq}}},
				Outcome: store.Outcome{Applied: true, CommitSeq: seq, RecordedAtMs: now},
			}); err != nil {
				t.Fatalf("seed %s #%d: %v", p, seq, err)
			}
		}
	}
	version := int64(todo(t).Latest)
	if m, err := st.SchemaMarker(ctx); err != nil || m >= version {
		t.Fatalf("marker before the hook: %d (%v), want below %d", m, err, version)
	}
	if l, err := st.StoredFormatLevel(ctx); err != nil || l != 0 {
		t.Fatalf("store-format level before the hook: %d (%v), want 0", l, err)
	}

	cd := &fakeCodeDeploy{}
	srv := httptest.NewServer(cd)
	t.Cleanup(srv.Close)

	sch, err := os.ReadFile(schemaPath)
	if err != nil {
		t.Fatal(err)
	}
	rie := hookUnderEmulator(t, ddb.Endpoint, table, sch, map[string]string{
		"SYNC_CHECKPOINTS": "proj=tasks", "AWS_ENDPOINT_URL_CODEDEPLOY": srv.URL,
	})

	invoke := func(ev string) app.HookResult {
		t.Helper()
		return invokeJob[app.HookResult](t, ctx, rie, ev)
	}

	// 1. Out of time after the step (budgetMs simulates the deadline).
	first := invoke(`{"DeploymentId":"d-TEST0001","LifecycleEventHookExecutionId":"hook-exec-1","budgetMs":1}`)
	if first.Status != "Succeeded" || !first.Reported || !first.TimedOut || first.Partitions != 0 {
		t.Fatalf("first run: %+v, want Succeeded reported, the declaration, then a timeout before any partition", first)
	}
	got := cd.received()
	if len(got) != 1 {
		t.Fatalf("CodeDeploy received %d status calls, want 1: %+v", len(got), got)
	}
	want := hookStatus{Target: "CodeDeploy_20141006.PutLifecycleEventHookExecutionStatus", DeploymentID: "d-TEST0001", LifecycleEventHookExecutionID: "hook-exec-1", Status: "Succeeded", Signed: true}
	if got[0] != want {
		t.Fatalf("status call %+v, want %+v", got[0], want)
	}
	if m, err := st.SchemaMarker(ctx); err != nil || m != version {
		t.Fatalf("marker %d (%v), want %d", m, err, version)
	}
	// Every request runs on this build now: writers may use its formats.
	if l, err := st.StoredFormatLevel(ctx); err != nil || l != dynamostore.FormatLevel || first.FormatLevel != l {
		t.Fatalf("store-format level %d (%v), result %d; want %d", l, err, first.FormatLevel, dynamostore.FormatLevel)
	}
	for _, p := range parts {
		g, err := st.ReadGate(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		// Gated as declared (a build that did not declare proj is
		// refused), before the walk materialised it there.
		if g.Unmaterialized == 0 || len(g.Pending) != 1 || g.Pending[0] != (store.PendingCheckpoint{Name: "proj", SchemaVersion: version}) {
			t.Errorf("%s: gate %+v, want the proj checkpoint pending, declared table-wide", p, g)
		}
	}

	// 2. The next invocation walks the registry and finishes.
	second := invoke(`{"DeploymentId":"d-TEST0002","LifecycleEventHookExecutionId":"hook-exec-2"}`)
	if second.Status != "Succeeded" || !second.Reported || second.Incomplete != 0 || second.Activated != len(parts) || second.Fenced != len(parts) {
		t.Fatalf("resumed run: %+v, want Succeeded with %d partitions fenced and activated", second, len(parts))
	}
	// An old writer (no writer version) is fenced now.
	h, _, _ := st.Head(ctx, "alpha")
	err = st.Commit(ctx, "alpha", &store.CommitRequest{
		ExpectedMaxSeq: h.MaxCommitSeq,
		Commit:         store.Commit{Seq: h.MaxCommitSeq + 1, CreatedAtMs: now, ClientID: "c", ClientCommitID: "late"},
		Outcome:        store.Outcome{Applied: true, CommitSeq: h.MaxCommitSeq + 1, RecordedAtMs: now},
	})
	if !errors.Is(err, store.ErrWriterFenced) {
		t.Fatalf("old writer after the walk: %v, want ErrWriterFenced", err)
	}
	got = cd.received()
	want = hookStatus{Target: "CodeDeploy_20141006.PutLifecycleEventHookExecutionStatus", DeploymentID: "d-TEST0002", LifecycleEventHookExecutionID: "hook-exec-2", Status: "Succeeded", Signed: true}
	if len(got) != 2 || got[1] != want {
		t.Fatalf("status calls %+v, want a second %+v", got, want)
	}
	for _, p := range parts {
		ck, err := st.GetCheckpoint(ctx, p, "proj")
		if err != nil || ck == nil || ck.State != store.CheckpointActivated || ck.ObservedRows != 7 {
			t.Errorf("%s: checkpoint %+v (%v), want activated after observing 7 rows", p, ck, err)
		}
		if g, _ := st.ReadGate(ctx, p); len(g.Pending) != 0 {
			t.Errorf("%s: still pending %+v", p, g.Pending)
		}
	}
	// A manual invocation (no ids) reports nothing.
	if res := invoke(`{}`); res.Status != "Succeeded" || res.Reported || len(cd.received()) != 2 {
		t.Errorf("manual run: %+v, %d status calls", res, len(cd.received()))
	}

	// 3. A newer build raised the store-format level: this build cannot
	// read everything stored, so its deploy fails (roll forward only).
	if _, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table),
		Key:              dynamostore.Key("SYS", "SCHEMA"),
		UpdateExpression: aws.String("SET fl = :l"), ExpressionAttributeValues: map[string]types.AttributeValue{":l": dynamostore.N(dynamostore.FormatLevel + 1)},
	}); err != nil {
		t.Fatal(err)
	}
	third := invoke(`{"DeploymentId":"d-TEST0003","LifecycleEventHookExecutionId":"hook-exec-3"}`)
	got = cd.received()
	if third.Status != "Failed" || !third.Reported || len(got) != 3 || got[2].Status != "Failed" || third.FormatLevel != dynamostore.FormatLevel+1 {
		t.Fatalf("run below the stored store-format level: %+v, status calls %+v; want Failed reported", third, got)
	}
}
