package stack

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

func record(name, pk, sk, seq string, ts float64) map[string]any {
	return map[string]any{"eventName": name, "dynamodb": map[string]any{
		"Keys":           map[string]any{"pk": map[string]any{"S": pk}, "sk": map[string]any{"S": sk}},
		"SequenceNumber": seq, "ApproximateCreationDateTime": ts,
	}}
}

func pattern(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// Lambda event filtering (the syntax the template's FilterCriteria use):
// nested objects AND, arrays OR, content filters on string leaves.
func TestFilterPatterns(t *testing.T) {
	ins := record("INSERT", "P#default", "L#00000000000000000001", "1", 0)
	mod := record("MODIFY", "P#default", "L#00000000000000000001", "2", 0)
	grant := record("INSERT", "GRANT#default", "alice", "3", 0)
	cases := []struct {
		pattern string
		want    []bool // ins, mod, grant
	}{
		{`{"eventName":["INSERT"]}`, []bool{true, false, true}},
		{`{"eventName":["INSERT","MODIFY"]}`, []bool{true, true, true}},
		{`{"dynamodb":{"Keys":{"pk":{"S":[{"prefix":"P#"}]}}}}`, []bool{true, true, false}},
		{`{"eventName":["INSERT"],"dynamodb":{"Keys":{"sk":{"S":[{"prefix":"L#"}]}}}}`, []bool{true, false, false}},
		{`{"eventName":[{"anything-but":["MODIFY"]}]}`, []bool{true, false, true}},
		{`{"dynamodb":{"NewImage":[{"exists":false}]}}`, []bool{true, true, true}},
		{`{"dynamodb":{"Keys":{"pk":{"S":[{"suffix":"#default"}]}}}}`, []bool{true, true, true}},
		{`{"dynamodb":{"Keys":{"nope":{"S":["x"]}}}}`, []bool{false, false, false}},
	}
	for _, c := range cases {
		p := pattern(t, c.pattern)
		for i, rec := range []map[string]any{ins, mod, grant} {
			if got := matchesAny([]map[string]any{p}, rec); got != c.want[i] {
				t.Errorf("%s on record %d: %v, want %v", c.pattern, i, got, c.want[i])
			}
		}
	}
	// Several filters are ORed; none passes everything.
	two := []map[string]any{pattern(t, `{"eventName":["MODIFY"]}`), pattern(t, `{"dynamodb":{"Keys":{"pk":{"S":["GRANT#default"]}}}}`)}
	if matchesAny(two, ins) || !matchesAny(two, mod) || !matchesAny(two, grant) || !matchesAny(nil, ins) {
		t.Error("filters are not ORed, or no filter does not pass everything")
	}
}

// fakeFunction records the batches a consumer sends and fails any batch
// that holds a poisoned sequence number.
type fakeFunction struct {
	poison  map[string]bool
	batches [][]string
}

func (f *fakeFunction) invoke(_ context.Context, payload []byte) ([]byte, bool, error) {
	var ev struct {
		Records []map[string]any `json:"Records"`
	}
	if err := json.Unmarshal(payload, &ev); err != nil {
		return nil, false, err
	}
	var seqs []string
	bad := false
	for _, r := range ev.Records {
		s := seqOf(r)
		seqs = append(seqs, s)
		bad = bad || f.poison[s]
	}
	f.batches = append(f.batches, seqs)
	if bad {
		return []byte(`{"errorMessage":"boom","errorType":"errorString"}`), true, nil
	}
	return []byte(`null`), false, nil
}

func (f *fakeFunction) trace() string {
	var b []string
	for _, x := range f.batches {
		b = append(b, strings.Join(x, ","))
	}
	return strings.Join(b, " | ")
}

func newConsumer(m *mapping, f *fakeFunction) *consumer {
	return &consumer{m: m, invoke: f.invoke, log: slog.New(slog.NewJSONHandler(io.Discard, nil))}
}

func batchOf(seqs ...string) []map[string]any {
	var out []map[string]any
	now := float64(time.Now().Unix())
	for _, s := range seqs {
		out = append(out, record("INSERT", "P#default", "L#"+s, s, now))
	}
	return out
}

// A failing batch is retried MaximumRetryAttempts times, then given up
// (the on-failure destination) — every try with the same records in order.
func TestConsumerRetriesThenGivesUp(t *testing.T) {
	f := &fakeFunction{poison: map[string]bool{"3": true}}
	c := newConsumer(&mapping{BatchSize: 100, MaxRetries: 2, MaxRecordAge: -1}, f)
	c.settle(context.Background(), batchOf("1", "2", "3", "4"), c.m.MaxRetries, 0)
	if got, want := f.trace(), "1,2,3,4 | 1,2,3,4 | 1,2,3,4"; got != want {
		t.Fatalf("batches %q, want %q", got, want)
	}
	if s := c.Stats(); s.Discarded != 4 || s.Failures != 3 || s.Batches != 3 {
		t.Fatalf("stats %+v", s)
	}
}

// With bisect, a failing batch is split (a split is not a retry) until the
// poisoned record is alone; only it is given up, the others are delivered
// in order.
func TestConsumerBisects(t *testing.T) {
	f := &fakeFunction{poison: map[string]bool{"3": true}}
	c := newConsumer(&mapping{BatchSize: 100, MaxRetries: 1, MaxRecordAge: -1, Bisect: true}, f)
	c.settle(context.Background(), batchOf("1", "2", "3", "4"), c.m.MaxRetries, 0)
	if got, want := f.trace(), "1,2,3,4 | 1,2 | 3,4 | 3 | 3 | 4"; got != want {
		t.Fatalf("batches %q, want %q", got, want)
	}
	if s := c.Stats(); s.Discarded != 1 || s.Bisects != 2 {
		t.Fatalf("stats %+v", s)
	}
}

// Reported item failures (ReportBatchItemFailures) retry from the first
// failed record; records before it count as delivered.
func TestConsumerItemFailures(t *testing.T) {
	calls := 0
	c := &consumer{m: &mapping{BatchSize: 100, MaxRetries: 3, MaxRecordAge: -1, ReportFailures: true},
		log: slog.New(slog.NewJSONHandler(io.Discard, nil))}
	var seen []string
	c.invoke = func(_ context.Context, payload []byte) ([]byte, bool, error) {
		calls++
		var ev struct{ Records []map[string]any }
		_ = json.Unmarshal(payload, &ev)
		var s []string
		for _, r := range ev.Records {
			s = append(s, seqOf(r))
		}
		seen = append(seen, strings.Join(s, ","))
		if calls == 1 {
			return []byte(`{"batchItemFailures":[{"itemIdentifier":"3"}]}`), false, nil
		}
		return []byte(`{"batchItemFailures":[]}`), false, nil
	}
	c.settle(context.Background(), batchOf("1", "2", "3", "4"), 3, 0)
	if got := strings.Join(seen, " | "); got != "1,2,3,4 | 3,4" {
		t.Fatalf("batches %q", got)
	}
}

// Records older than MaximumRecordAgeInSeconds are given up unsent.
func TestConsumerRecordAge(t *testing.T) {
	f := &fakeFunction{}
	c := newConsumer(&mapping{BatchSize: 100, MaxRetries: 0, MaxRecordAge: 60}, f)
	old := batchOf("1", "2")
	for _, r := range old {
		r["dynamodb"].(map[string]any)["ApproximateCreationDateTime"] = float64(time.Now().Add(-2 * time.Minute).Unix())
	}
	c.settle(context.Background(), append(old, batchOf("3")...), 0, 0)
	if got := f.trace(); got != "3" {
		t.Fatalf("batches %q", got)
	}
	if s := c.Stats(); s.Discarded != 2 {
		t.Fatalf("stats %+v", s)
	}
}

// The template's own mapping is read: a batch size, retries, bisect and
// at least one filter; the function it names exists in the template.
func TestTemplateMapping(t *testing.T) {
	repo, err := findRepo()
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := loadTemplate(repo)
	if err != nil {
		t.Fatal(err)
	}
	m, err := tpl.StreamMapping()
	if err != nil {
		t.Fatal(err)
	}
	if m.BatchSize <= 0 || m.MaxRetries < 0 || len(m.Filters) == 0 {
		t.Fatalf("mapping %+v", m)
	}
	fn := tpl.FunctionOf(m.ID)
	if node(tpl.root, "Resources", fn, "Type") == nil {
		t.Fatalf("mapping %s invokes %q, which the template does not declare", m.ID, fn)
	}
	env := tpl.FunctionEnv("PushFunction")
	if env["SYNC_SCOPES_CLAIM"] != "syncular_scopes" || env["SYNC_AUTH_MODE"] != "jwt-authorizer" {
		t.Fatalf("push env (parameter defaults resolved): %v", fmt.Sprint(env))
	}
	if tier := tpl.TaskEnv(); tier != nil && tier["SYNC_SCOPES_CLAIM"] != "syncular_scopes" {
		t.Fatalf("tier env: %v", tier)
	}
	if c := tpl.HTTPAPICors(); c == nil || len(c.Origins) == 0 || !slices.Contains(c.Methods, "POST") || !slices.Contains(c.Headers, "authorization") {
		t.Fatalf("the HTTP API's CORS: %+v", c)
	}
	if tpl.StreamViewType() == "" {
		t.Fatal("no stream view type")
	}
}

// fakeEmulator answers invokes as the Lambda emulator would for a
// function that behaves as answer says.
func fakeEmulator(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) *function {
	srv := httptest.NewServer(http.HandlerFunc(answer))
	t.Cleanup(srv.Close)
	return &function{name: "fake", url: srv.URL, sem: make(chan struct{}, 1), hc: srv.Client()}
}

// API Gateway's answers when the function misbehaves: the integration
// timeout is a 503, a function error and a response over Lambda's 6 MB
// payload are 500s, each with API Gateway's {"message"} body; a good
// response passes through.
func TestGatewayFunctionFailures(t *testing.T) {
	// The timeout leaves room for moving the 6 MB response below on a
	// loaded machine (race detector, parallel packages): only the push
	// function, which never answers, may reach it.
	g := &gateway{timeout: 3 * time.Second, log: slog.New(slog.NewJSONHandler(io.Discard, nil)), fns: map[string]*function{
		"push": fakeEmulator(t, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second): // past the timeout; Close waits for it
			}
		}),
		"pull": fakeEmulator(t, func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(`{"errorMessage":"boom","errorType":"errorString"}`))
		}),
		"segment": fakeEmulator(t, func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(`{"statusCode":200,"body":"` + strings.Repeat("x", 6<<20) + `"}`))
		}),
		"blob": fakeEmulator(t, func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(`{"statusCode":201,"headers":{"X-Fn":"yes"},"body":"made"}`))
		}),
	}}
	g.cors = &cors{Origins: []string{"https://app.example"}, Methods: []string{"GET", "POST"}, Headers: []string{"authorization"}, MaxAge: "600"}
	srv := httptest.NewServer(g)
	defer srv.Close()
	// A preflight from an allowed origin is the gateway's own 204; one
	// from another origin goes on to routing (no OPTIONS route: 404).
	for origin, want := range map[string]int{"https://app.example": 204, "https://other.example": 404} {
		req, _ := http.NewRequest(http.MethodOptions, srv.URL+"/sync", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		allow := resp.Header.Get("Access-Control-Allow-Origin")
		if resp.StatusCode != want || (want == 204) != (allow == origin) {
			t.Errorf("preflight from %s: HTTP %d, allow-origin %q", origin, resp.StatusCode, allow)
		}
	}
	cases := []struct {
		method, path string
		status       int
		body         string
	}{
		{"POST", "/sync", 503, `{"message":"Service Unavailable"}`},
		{"POST", "/pull", 500, `{"message":"Internal Server Error"}`},
		{"GET", "/segments/s1", 500, `{"message":"Internal Server Error"}`},
		{"GET", "/blobs/b1", 201, `made`},
		{"DELETE", "/blobs/b1", 404, `{"message":"Not Found"}`},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, nil)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || string(b) != c.body {
			t.Errorf("%s %s: HTTP %d %.80s, want %d %s", c.method, c.path, resp.StatusCode, b, c.status, c.body)
		}
	}
	if n := g.invocations(); n["push"] != 1 || n["pull"] != 1 || n["segment"] != 1 || n["blob"] != 1 {
		t.Errorf("invocations %v, want one each", n)
	}
}
