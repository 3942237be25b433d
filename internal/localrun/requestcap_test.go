package localrun

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/app/apptest"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/metrics"
)

// lockedBuffer is a log sink the server goroutines write to.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSpace(l.b.String()), "\n")
}

// prose is n bytes of lowercase words: text that gzip shrinks about as
// much as ordinary user text, unlike repeated bytes.
func prose(r *rand.Rand, n int) string {
	var b strings.Builder
	b.Grow(n)
	for b.Len() < n {
		if b.Len() > 0 && r.IntN(6) == 0 {
			b.WriteByte(' ')
			continue
		}
		b.WriteByte(byte('a' + r.IntN(26)))
	}
	return b.String()
}

// TestRequestCapAnswer: ten offline commits of about 0.5 MB each, which a
// stock client sends as one request (its only cap is 500 operations), are
// over what one Lambda invocation carries (4,669,440 bytes as sent). The
// runner answers as the deployed stack's edge would, 413, but with a §10.1
// body (§10.2 sync.too_many_operations: invalid-request, not retryable,
// splitBatch) whose message says what happened and what to change; the
// request line names the client (parsed from the REQ_HEADER, never the
// payload) and counts the refusal as the requestsOverCap EMF metric. The
// same request gzipped fits and is applied.
func TestRequestCapAnswer(t *testing.T) {
	var logs lockedBuffer
	logger := slog.New(metrics.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	rn, err := newRunner(context.Background(), testOptions(), logger)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rn)
	t.Cleanup(srv.Close)
	rn.setPublicURL(srv.URL)
	tok, err := rn.devToken("dev-user", map[string]any{"project_id": []any{"*"}})
	if err != nil {
		t.Fatal(err)
	}

	const clientID = "offline-device-1"
	const marker = "zzpayloadmarkerzz" // in every row; must never reach a log
	tasks, ok := rn.schema.Versions[rn.schema.Latest].Table("tasks")
	if !ok {
		t.Fatal("example schema has no tasks table")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var frames []wire.Frame
	for c := range 10 {
		var ops []wire.Operation
		for i := range 2 { // two rows of ~250 KB: each under the row limit
			id := fmt.Sprintf("t%d-%d", c, i)
			ops = append(ops, apptest.Upsert("tasks", id, 0, apptest.Row(t, tasks, map[string]any{
				"id": id, "project_id": "p1", "title": "offline edit", "done": false,
				"notes": marker + prose(rng, 250_000), "updated_at": 1,
			})))
		}
		frames = append(frames, &wire.PushCommit{ClientCommitID: fmt.Sprintf("c%d", c), Operations: ops})
	}
	// A first request binds the client and acquires the log epoch (§2.1),
	// as a stock client has done before it went offline.
	m := apptest.Decode(t, postSync(t, srv.URL, tok, apptest.Request(t, wire.Version2, wire.ReqHeader{ClientID: clientID, SchemaVersion: 1},
		&wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows})))
	epoch := m.Frames[0].(*wire.RespHeader).LogEpoch
	body := apptest.Request(t, wire.Version2, wire.ReqHeader{ClientID: clientID, SchemaVersion: 1, LogEpoch: wire.Some(epoch)}, frames...)
	const lambdaCap = 4_669_440 // 6 MiB event minus 64 KiB, as base64
	if len(body) <= lambdaCap || len(body) > 6<<20 {
		t.Fatalf("request of %d bytes: the scenario needs one just over %d", len(body), lambdaCap)
	}

	post := func(b []byte, gz bool) (int, http.Header, []byte) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/sync", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", apptest.ContentType)
		req.Header.Set("Authorization", "Bearer "+tok)
		if gz {
			req.Header.Set("Content-Encoding", "gzip")
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, resp.Header, out
	}

	status, hdr, out := post(body, false)
	if status != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413: %.300s", status, out)
	}
	if ct := hdr.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want the §10.1 JSON error", ct)
	}
	var e struct {
		Code              string `json:"code"`
		Category          string `json:"category"`
		Retryable         *bool  `json:"retryable"`
		RecommendedAction string `json:"recommendedAction"`
		Message           string `json:"message"`
		Details           struct {
			Limit      string `json:"limit"`
			LimitBytes int64  `json:"limitBytes"`
			BodyBytes  int64  `json:"bodyBytes"`
		} `json:"details"`
	}
	if err := json.Unmarshal(out, &e); err != nil {
		t.Fatalf("413 body is not JSON: %v: %.300s", err, out)
	}
	if e.Code != "sync.too_many_operations" || e.Category != "invalid-request" || e.Retryable == nil || *e.Retryable || e.RecommendedAction != "splitBatch" {
		t.Errorf("413 body %+v, want sync.too_many_operations / invalid-request / not retryable / splitBatch (§10.2)", e)
	}
	for _, want := range []string{fmt.Sprint(len(body)), fmt.Sprint(lambdaCap), "fewer commits", "gzip"} {
		if !strings.Contains(e.Message, want) {
			t.Errorf("message %q does not say %q", e.Message, want)
		}
	}
	if e.Details.Limit != "request" || e.Details.LimitBytes != lambdaCap || e.Details.BodyBytes != int64(len(body)) {
		t.Errorf("details %+v", e.Details)
	}

	var line map[string]any
	for _, l := range logs.lines() {
		if strings.Contains(l, marker) || strings.Contains(l, tok) {
			t.Fatalf("a log line carries the payload or the token: %.200s", l)
		}
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "request" && m["status"] == float64(413) {
			line = m
		}
	}
	if line == nil {
		t.Fatalf("no request line with status 413 in:\n%s", strings.Join(logs.lines(), "\n"))
	}
	if line["clientId"] != clientID || line["requestsOverCap"] != float64(1) || line["errorCode"] != "sync.too_many_operations" ||
		line["actor"] != "dev-user" || line["bodyBytes"] != float64(len(body)) {
		t.Errorf("request line %v", line)
	}
	declared := false
	if aws, ok := line["_aws"].(map[string]any); ok {
		cms, _ := aws["CloudWatchMetrics"].([]any)
		for _, cm := range cms {
			ms, _ := cm.(map[string]any)["Metrics"].([]any)
			for _, x := range ms {
				if x.(map[string]any)["Name"] == "requestsOverCap" {
					declared = true
				}
			}
		}
	}
	if !declared {
		t.Errorf("the line's EMF directive does not declare requestsOverCap: %v", line["_aws"])
	}

	// The same request gzipped is under the cap as sent: applied.
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	if _, err := zw.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if zb.Len() > lambdaCap {
		t.Fatalf("gzipped request is %d bytes, still over the cap", zb.Len())
	}
	status, hdr, out = post(zb.Bytes(), true)
	if status != http.StatusOK {
		t.Fatalf("gzipped: status %d: %.300s", status, out)
	}
	out, err = apptest.Decompress(hdr.Get("Content-Encoding"), out)
	if err != nil {
		t.Fatal(err)
	}
	res := apptest.Find[*wire.PushResult](apptest.Decode(t, out))
	if len(res) != 10 {
		t.Fatalf("gzipped: %d push results, want 10", len(res))
	}
	for _, r := range res {
		if r.Status != wire.PushApplied {
			t.Errorf("gzipped: commit %s: %+v", r.ClientCommitID, r)
		}
	}
}
