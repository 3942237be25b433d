package httpapi_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/httpapi"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// gzipped compresses b.
func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A gzip body that decodes past MaxBodyBytes (a gzip bomb, or a push too
// large even for the decoded cap) is a 413 §10.1 error naming the decoded
// cap; its request line names the client, read from the compressed
// body's first bytes, and counts the refusal. A host's over-cap refusal
// (Request.BodyOverCap) of a direct blob upload is blob.too_large
// (§5.9.3) pointing at the upload grant.
func TestOverCapAnswers(t *testing.T) {
	f := newFixture(t, engine.Limits{})
	var logs bytes.Buffer
	f.api.Logger = slog.New(slog.NewJSONHandler(&logs, nil))

	// A request whose one frame after the header is a 2 MiB commit of
	// zeros: gzip makes it a few KB, decoding makes it twice the cap.
	m := f.client.Request([]wire.PushCommit{{ClientCommitID: "c1", Operations: []wire.Operation{{
		Table: "tasks", RowID: "r1", Op: wire.OpUpsert, Payload: wire.Some(make([]byte, 2<<20)),
	}}}}, nil, nil)
	plain, err := wire.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	body := gzipped(t, plain)
	r := f.do("POST", "/api/sync", map[string]string{"Content-Type": httpapi.ContentType, "Content-Encoding": "gzip"}, body)
	b := errorBody(t, r)
	if r.Status != http.StatusRequestEntityTooLarge || b.Code != "sync.too_many_operations" || b.RecommendedAction != "splitBatch" ||
		!strings.Contains(b.Message, "SYNC_MAX_BODY_BYTES") {
		t.Fatalf("decoded over cap: %d %+v", r.Status, b)
	}
	var d struct {
		Limit      string `json:"limit"`
		LimitBytes int64  `json:"limitBytes"`
	}
	if err := json.Unmarshal(b.Details, &d); err != nil || d.Limit != "decoded" || d.LimitBytes != 1<<20 {
		t.Errorf("details %s", b.Details)
	}
	if r.Header.Get("X-Syncular-Over-Cap") != "" {
		t.Error("the internal marker header leaked into the response")
	}
	var line map[string]any
	if err := json.Unmarshal(logs.Bytes(), &line); err != nil {
		t.Fatalf("request line: %v: %s", err, logs.Bytes())
	}
	if line["clientId"] != "a" || line["requestsOverCap"] != float64(1) || line["bodyBytes"] != float64(len(body)) {
		t.Errorf("request line %v", line)
	}

	// The first OverCapPrefixBytes of a gzip stream name the client too.
	big := gzipped(t, bytes.Repeat(plain, 3))
	if id := httpapi.ClientIDOf(big[:httpapi.OverCapPrefixBytes], "gzip"); id != "a" {
		t.Errorf("clientId from a gzip prefix: %q", id)
	}
	if id := httpapi.ClientIDOf(plain[:64], "br"); id != "" {
		t.Errorf("clientId from an unsupported encoding: %q", id)
	}

	logs.Reset()
	resp := f.api.Serve(context.Background(), &httpapi.Request{
		Method: "PUT", Path: "/api/blobs/sha256:" + strings.Repeat("0", 64), Header: http.Header{},
		Body: []byte("first bytes"), BodyOverCap: 5 << 20,
		Auth: &engine.Auth{Partition: "tenant", ActorID: "alice"},
	})
	b = errorBody(t, resp)
	if resp.Status != http.StatusRequestEntityTooLarge || b.Code != "blob.too_large" || !strings.Contains(b.Message, "upload-grant") {
		t.Fatalf("blob upload over the request cap: %d %+v", resp.Status, b)
	}
	if !strings.Contains(logs.String(), `"requestsOverCap":1`) {
		t.Errorf("blob refusal not counted: %s", logs.String())
	}
}
