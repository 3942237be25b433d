package functions

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/metrics"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// opRecorder is a reverse proxy in front of DynamoDB Local that records
// the operation (X-Amz-Target) of every request the function makes.
type opRecorder struct {
	mu  sync.Mutex
	ops map[string]int
}

func (o *opRecorder) count(op string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ops[op]
}

func recordOps(t *testing.T, target string) (*opRecorder, string) {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rec := &opRecorder{ops: map[string]int{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, op, _ := strings.Cut(r.Header.Get("X-Amz-Target"), ".")
		rec.mu.Lock()
		rec.ops[op]++
		rec.mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return rec, srv.URL
}

// The scheduled prune function under the Lambda emulator against DynamoDB
// Local: it finds partitions through the registry (no Scan), prunes with
// the normative §4.6 floors (the newest 1000 commits stay), resumes from
// its saved cursor after a bounded run, and a further pass is a no-op.
func TestPruneFunctionUnderEmulator(t *testing.T) {
	ddb := testenv.DynamoDB(t)
	s3 := testenv.S3(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := ddb.Client(t)
	table, bucket := testenv.UniqueName(t, "prune"), testenv.UniqueName(t, "segments")
	if err := dynamostore.CreateTable(ctx, c, table); err != nil {
		t.Fatal(err)
	}
	s3.CreateBucket(t, bucket)
	st := dynamostore.New(c, table, dynamostore.Options{})
	now := time.Now().UnixMilli()
	commits := map[string]int64{"big": 1012, "small": 5, "other#tenant": 1001}
	for p, n := range commits {
		if _, err := st.TouchPartition(ctx, p, now, "e-"+p); err != nil {
			t.Fatal(err)
		}
		for seq := int64(1); seq <= n; seq++ {
			if err := st.Commit(ctx, p, &store.CommitRequest{
				ExpectedMaxSeq: seq - 1,
				Commit:         store.Commit{Seq: seq, CreatedAtMs: now, ClientID: "c", ClientCommitID: strconv.FormatInt(seq, 10)},
				Outcome:        store.Outcome{Applied: true, CommitSeq: seq, RecordedAtMs: now},
			}); err != nil {
				t.Fatalf("seed %s #%d: %v", p, seq, err)
			}
		}
	}

	bin := testenv.BuildFunction(t, "./"+app.PruneJob.Dir)
	schema, err := os.ReadFile(schemaPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(bin), "schema.json"), schema, 0o644); err != nil {
		t.Fatal(err)
	}
	rec, endpoint := recordOps(t, ddb.Endpoint)
	env := envLocal(t)
	env["SYNC_DYNAMODB_ENDPOINT"] = endpoint
	env["SYNC_S3_ENDPOINT"] = s3.Endpoint
	env["SYNC_TABLE_NAME"] = table
	env["SYNC_BUCKET"] = bucket
	env["SYNC_METRICS_NAMESPACE"] = "Prune/Test"
	env["AWS_LAMBDA_FUNCTION_TIMEOUT"] = "120"
	rie := testenv.LambdaRIE(t, bin, env)

	run := func(ev string) app.PruneResult {
		t.Helper()
		return invokeJob[app.PruneResult](t, ctx, rie, ev)
	}
	first := run(`{"maxPartitions":2}`)
	if first.Done || first.Partitions != 2 || first.ShardsLeft == 0 {
		t.Fatalf("bounded run: %+v, want 2 partitions and shards left", first)
	}
	second := run(`{"parallel":16}`) // what the schedule sends: resumes
	if !second.Done || second.Partitions != 1 || second.Failed != 0 {
		t.Fatalf("resumed run: %+v, want the 1 remaining partition and done", second)
	}
	if got := first.Removed + second.Removed; got != 12+1 {
		t.Errorf("removed %d commits, want 13 (12 of big, 1 of other#tenant: the newest 1000 stay)", got)
	}
	for p, n := range commits {
		h, ok, err := st.Head(ctx, p)
		if err != nil || !ok {
			t.Fatal(p, err)
		}
		if want := max(0, n-1000); h.HorizonSeq != want || h.MaxCommitSeq != n {
			t.Errorf("%s: horizon %d max %d, want horizon %d", p, h.HorizonSeq, h.MaxCommitSeq, want)
		}
	}
	for i := range dynamostore.RegistryShards {
		if c, _ := st.JobCursor(ctx, app.PruneShardJob(i)); c != "" {
			t.Errorf("a finished pass left shard %d at %q", i, c)
		}
	}
	third := run(`{}`)
	if !third.Done || third.Partitions != 3 || third.Removed != 0 {
		t.Errorf("a new pass: %+v, want 3 partitions visited and nothing removed", third)
	}
	if n := rec.count("Scan"); n != 0 {
		t.Errorf("the prune function made %d Scan requests", n)
	}
	if rec.count("Query") == 0 {
		t.Error("no Query went through the recording proxy: the function bypassed it")
	}
	// One EMF "prune run" line per invocation. The emulator answers an
	// invoke before the runtime's last output has crossed the pipe, so
	// wait for the lines rather than read once.
	var runs []metrics.Document
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		runs = runs[:0]
		for _, line := range strings.Split(rie.Logs(), "\n") {
			if !strings.Contains(line, `"msg":"prune run"`) {
				continue
			}
			doc, err := metrics.Parse([]byte(line))
			if err != nil {
				t.Fatalf("prune run line is not valid EMF: %v\n%s", err, line)
			}
			runs = append(runs, doc)
		}
		if len(runs) >= 3 || time.Now().After(deadline) {
			break
		}
	}
	if len(runs) != 3 {
		t.Fatalf("%d prune run lines, want 3\n%s", len(runs), rie.Logs())
	}
	// At SYNC_LOG_LEVEL=debug (env.local.json) init reports its time once.
	if m := initMs.FindAllString(rie.Logs(), -1); len(m) != 1 || !strings.Contains(m[0], `"function":"prune"`) {
		t.Errorf("want one init done line of the prune function with initMs, got %q", m)
	}
	for i, want := range []map[string]float64{
		{"prunedPartitions": 2, "pruneIncomplete": 1, "pruneFailures": 0},
		// A finished pass runs the blob sweep (an empty bucket here).
		{"prunedPartitions": 1, "pruneIncomplete": 0, "pruneFailures": 0, "blobsSwept": 0},
		{"prunedPartitions": 3, "prunedCommits": 0, "pruneIncomplete": 0, "blobsSwept": 0},
	} {
		if runs[i]["function"] != "prune" || runs[i].Namespace() != "Prune/Test" {
			t.Errorf("run %d: function %v namespace %q", i, runs[i]["function"], runs[i].Namespace())
		}
		for k, v := range want {
			if n, ok := runs[i].Number(k); !ok || n != v {
				t.Errorf("run %d: %s = %v, want %v", i, k, n, v)
			}
		}
	}
}

// invokeJob invokes a function without routes under the emulator and
// decodes its result; an invocation error or an error document fails t.
func invokeJob[T any](t *testing.T, ctx context.Context, rie *testenv.RIE, ev string) T {
	t.Helper()
	out, err := rie.Invoke(ctx, []byte(ev))
	if err != nil {
		t.Fatalf("%v\n%s", err, rie.Logs())
	}
	var res T
	if err := json.Unmarshal(out, &res); err != nil || strings.Contains(string(out), "errorMessage") {
		t.Fatalf("%s returned %s\n%s", ev, out, rie.Logs())
	}
	return res
}
