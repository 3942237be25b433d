package localrun

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/skyfold/syncular-lambda/internal/app/apptest"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// quietPullFixture is a runner with one task in project p1 and the HTTP
// request of a client whose cursor is at the head: the quiet pull, the
// most frequent request of a synced app.
type quietPullFixture struct {
	rn     *runner
	body   []byte
	header http.Header
	path   string
	// For push-pull rounds: the pull's client, epoch and cursor.
	d      *apptest.Deployment
	tok    string
	epoch  string
	cursor int64
}

func newQuietPullFixture(t testing.TB, o options) *quietPullFixture {
	// The runner's own logger (runCtx), writing nowhere.
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		t.Fatal(err)
	}
	rn, err := newRunner(context.Background(), o, slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: level})))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rn)
	t.Cleanup(srv.Close)
	rn.setPublicURL(srv.URL)
	c := noDecompress()
	d := benchDeployment(t, rn, srv, c)
	var last events.APIGatewayV2HTTPRequest
	send := d.Invoke
	d.Invoke = func(t testing.TB, fn string, ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
		last = ev
		return send(t, fn, ev)
	}
	tok := d.Token(t, "bench", map[string][]string{"project_id": {"*"}})
	epoch := d.Epoch(t, "pull", "/pull", tok, "bench-client")
	d.Push(t, tok, "bench-writer", d.Epoch(t, "push", "/sync", tok, "bench-writer"), wire.PushCommit{ClientCommitID: "p", Operations: []wire.Operation{
		apptest.Upsert("projects", "p1", 0, d.Project(t, "p1")), apptest.Upsert("tasks", "t1", 0, d.Task(t, "t1", "p1", "x")),
	}})
	hdr := wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows}
	sub := wire.Subscription{ID: "s", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1}
	for sub.Cursor < 0 || sub.BootstrapState.Present {
		sec := d.Pull(t, tok, "bench-client", epoch, hdr, sub)
		sub.Cursor, sub.BootstrapState = sec.End.NextCursor, sec.End.BootstrapState
	}
	if sec := d.Pull(t, tok, "bench-client", epoch, hdr, sub); len(sec.Commits) != 0 {
		t.Fatal("pull at the head returned commits")
	}
	f := &quietPullFixture{rn: rn, header: http.Header{}, path: last.RawPath, d: d, tok: tok, epoch: epoch, cursor: sub.Cursor}
	f.body = []byte(last.Body)
	if last.IsBase64Encoded {
		f.body, _ = base64.StdEncoding.DecodeString(last.Body)
	}
	for k, v := range last.Headers {
		if k != "host" && k != "x-forwarded-proto" {
			f.header.Set(k, v)
		}
	}
	return f
}

// serve runs one quiet pull through the runner's handler in process (no
// socket, no HTTP client): only the server's share of a request.
func (f *quietPullFixture) serve(t testing.TB, w *httptest.ResponseRecorder) {
	f.serveBody(t, w, f.path, f.body)
}

func (f *quietPullFixture) serveBody(t testing.TB, w *httptest.ResponseRecorder, path string, body []byte) {
	r, err := http.NewRequest(http.MethodPost, "http://127.0.0.1:8787"+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Header, r.RemoteAddr = f.header, "127.0.0.1:40000"
	f.rn.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Fatalf("quiet pull: HTTP %d %s", w.Code, w.Body.Bytes())
	}
}

// The server's share of a quiet pull: HTTP request → API Gateway event →
// auth → engine → encode → response. Allocations drive its CPU (GC
// marking and allocation were a quarter of the runner's profile).
// With log=info every request writes its line (as `make run` and the
// functions do); with log=error the line is off.
func BenchmarkRunnerServeQuietPull(b *testing.B) {
	for _, level := range []string{"info", "error"} {
		b.Run("log="+level, func(b *testing.B) {
			o := testOptions()
			o.logLevel = level
			f := newQuietPullFixture(b, o)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				f.serve(b, httptest.NewRecorder())
			}
		})
	}
}

// The push-pull round of the load generators (cmd/syncular-load, the
// reference's push-pull scenario): one upsert pushed and the client's
// subscription pulled in one /sync request, through the runner's handler
// in process. Request bodies are built with the timer stopped.
func BenchmarkRunnerServePushPull(b *testing.B) {
	f := newQuietPullFixture(b, testOptions())
	sch := f.d.Schema
	hdr := wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows, LimitCommits: 100}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		id := fmt.Sprintf("t%d", i%20)
		push := wire.PushCommit{ClientCommitID: fmt.Sprintf("pp-%d", i), Operations: []wire.Operation{apptest.Upsert("tasks", id, 0, f.d.Task(b, id, "p1", "round"))}}
		sub := wire.Subscription{ID: "s", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: f.cursor}
		body := apptest.Request(b, wire.Version2, wire.ReqHeader{ClientID: "bench-client", SchemaVersion: sch.Latest, LogEpoch: wire.Some(f.epoch)}, &push, &hdr, &sub)
		w := httptest.NewRecorder()
		b.StartTimer()
		f.serveBody(b, w, "/sync", body)
		b.StopTimer()
		secs, err := enginetest.ParseSections(apptest.Decode(b, w.Body.Bytes()))
		if err != nil || len(secs) != 1 || len(secs[0].Commits) != 1 {
			b.Fatalf("round %d: %v, %d sections", i, err, len(secs))
		}
		f.cursor = secs[0].End.NextCursor
		b.StartTimer()
	}
}
