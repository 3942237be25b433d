package httpapi_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/skyfold/syncular-lambda/internal/core/canonjson"
	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/httpapi"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

type fixture struct {
	h      *enginetest.Harness
	api    *httpapi.Handler
	client *enginetest.Client
}

func newFixture(t testing.TB, limits engine.Limits) *fixture {
	h := enginetest.New(t, memstore.New(), memstore.NewSegments(), enginetest.Options{Limits: limits, SignedURLs: engine.SignedURLsNative})
	h.Grants.Set("alice", engine.ScopeMap{"project_id": {"p1"}})
	return &fixture{
		h:      h,
		api:    &httpapi.Handler{Engine: h.Engine, Mount: "/api", Routes: httpapi.RouteAll, MaxBodyBytes: 1 << 20},
		client: h.Client("tenant", "alice", "a"),
	}
}

func (f *fixture) pullBody(t testing.TB, accept uint8) []byte {
	t.Helper()
	m := f.client.Request(nil, &wire.PullHeader{Accept: accept}, []wire.Subscription{{
		ID: "s", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1,
	}})
	b, err := wire.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (f *fixture) do(method, path string, hdr map[string]string, body []byte) *httpapi.Response {
	u, _ := url.Parse(path)
	h := http.Header{}
	for k, v := range hdr {
		h.Set(k, v)
	}
	return f.api.Serve(context.Background(), &httpapi.Request{
		Method: method, Path: u.Path, Query: u.Query(), Header: h, Body: body,
		Auth: &engine.Auth{Partition: "tenant", ActorID: "alice"}, BaseURL: "https://sync.example.com",
	})
}

func errorBody(t *testing.T, r *httpapi.Response) syncerr.Body {
	t.Helper()
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("error content type %q", ct)
	}
	var b syncerr.Body
	if err := json.Unmarshal(r.Body, &b); err != nil {
		t.Fatalf("error body: %v", err)
	}
	return b
}

func TestContentTypeSizeAndAuthErrors(t *testing.T) {
	f := newFixture(t, engine.Limits{})
	body := f.pullBody(t, 3)

	r := f.do("POST", "/api/sync", map[string]string{"Content-Type": "application/json"}, body)
	if r.Status != 415 || errorBody(t, r).Code != syncerr.InvalidRequest {
		t.Fatalf("wrong content type: %d %s", r.Status, r.Body)
	}
	big := make([]byte, 2<<20)
	r = f.do("POST", "/api/sync", map[string]string{"Content-Type": httpapi.ContentType}, big)
	if r.Status != 413 {
		t.Fatalf("oversized body: %d", r.Status)
	}
	r = f.api.Serve(context.Background(), &httpapi.Request{Method: "POST", Path: "/api/sync", Header: http.Header{"Content-Type": {httpapi.ContentType}}, Body: body})
	b := errorBody(t, r)
	if r.Status != 401 || b.Code != syncerr.AuthRequired || b.Category != "auth-required" || !b.Retryable || b.RecommendedAction != "refreshAuth" {
		t.Fatalf("missing auth: %d %+v", r.Status, b)
	}
	// §1.1: the media type is checked first: an unauthenticated request
	// with the wrong content type is a 415, not a 401.
	for _, ct := range []string{"application/json", ""} {
		r = f.api.Serve(context.Background(), &httpapi.Request{Method: "POST", Path: "/api/sync", Header: http.Header{"Content-Type": {ct}}, Body: body})
		if r.Status != 415 || errorBody(t, r).Code != syncerr.InvalidRequest {
			t.Fatalf("unauthenticated, content type %q: %d %s; want 415", ct, r.Status, r.Body)
		}
	}
	r = f.do("POST", "/api/sync", map[string]string{"Content-Type": httpapi.ContentType}, []byte("SSP2garbage"))
	if r.Status != 400 || errorBody(t, r).Code != syncerr.InvalidRequest {
		t.Fatalf("garbage body: %d %s", r.Status, r.Body)
	}
	r = f.do("POST", "/sync", map[string]string{"Content-Type": httpapi.ContentType}, body)
	if r.Status != 404 {
		t.Fatalf("outside the mount: %d", r.Status)
	}
}

func TestGzipRequestAndEncodedResponses(t *testing.T) {
	f := newFixture(t, engine.Limits{})
	body := f.pullBody(t, 3)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(body)
	zw.Close()

	// A response below MinCompressBytes goes out as is whatever the
	// client accepts (§1.3 leaves the choice to the server), still with
	// Vary: Accept-Encoding.
	for _, accept := range []string{"zstd, gzip", "gzip", ""} {
		r := f.do("POST", "/api/sync", map[string]string{"Content-Type": httpapi.ContentType, "Accept-Encoding": accept}, body)
		if r.Status != 200 || len(r.Body) >= httpapi.MinCompressBytes || r.Header.Get("Content-Encoding") != "" || r.Header.Get("Vary") != "Accept-Encoding" {
			t.Fatalf("small response, accept %q: %d, %d bytes, %v", accept, r.Status, len(r.Body), r.Header)
		}
		if _, err := wire.Decode(r.Body); err != nil {
			t.Fatalf("small response, accept %q: %v", accept, err)
		}
	}
	// Rows enough for a bootstrap page above the threshold.
	for i := 0; i < 20; i++ {
		id := fmt.Sprintf("t%02d", i)
		f.client.Push("c"+id, enginetest.Upsert("tasks", id, f.client.Task(id, "p1", strings.Repeat("a task title ", 8), false), 0))
	}

	plain := f.do("POST", "/api/sync", map[string]string{"Content-Type": httpapi.ContentType}, body)
	if plain.Status != 200 || plain.Header.Get("Content-Encoding") != "" || len(plain.Body) < httpapi.MinCompressBytes {
		t.Fatalf("plain: %d %v, %d bytes", plain.Status, plain.Header, len(plain.Body))
	}
	for _, tc := range []struct{ accept, want string }{{"gzip", "gzip"}, {"zstd, gzip", "zstd"}, {"gzip;q=1, zstd;q=0", "gzip"}, {"br", ""}} {
		r := f.do("POST", "/api/sync", map[string]string{"Content-Type": httpapi.ContentType, "Content-Encoding": "gzip", "Accept-Encoding": tc.accept}, gz.Bytes())
		if r.Status != 200 || r.Header.Get("Content-Encoding") != tc.want {
			t.Fatalf("accept %q: status %d encoding %q", tc.accept, r.Status, r.Header.Get("Content-Encoding"))
		}
		got := decompress(t, tc.want, r.Body)
		if _, err := wire.Decode(got); err != nil {
			t.Fatalf("accept %q: body does not decode: %v", tc.accept, err)
		}
		if !bytes.Equal(got, plain.Body) {
			t.Fatalf("accept %q: decoded body differs from identity response", tc.accept)
		}
	}
	r := f.do("POST", "/api/sync", map[string]string{"Content-Type": httpapi.ContentType, "Content-Encoding": "gzip"}, []byte("not gzip"))
	if r.Status != 400 {
		t.Fatalf("bad gzip: %d", r.Status)
	}
}

func decompress(t *testing.T, enc string, b []byte) []byte {
	t.Helper()
	switch enc {
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		out, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		return out
	case "zstd":
		d, err := zstd.NewReader(nil)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		out, err := d.DecodeAll(b, nil)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	return b
}

// TestSegmentDownload covers §5.5: re-authorization from X-Syncular-Scopes,
// ETag/If-None-Match, headers, and the §5.4 token path.
func TestSegmentDownload(t *testing.T) {
	f := newFixture(t, engine.Limits{})
	for i := 0; i < 3; i++ {
		id := string(rune('a' + i))
		f.client.Push("c"+id, enginetest.Upsert("tasks", id, f.client.Task(id, "p1", "t", false), 0))
	}
	// External-only with signed URLs: the descriptor carries a url.
	f.client.BaseURL = "https://sync.example.com/api/segments"
	resp, err := f.client.Send(f.client.Request(nil, &wire.PullHeader{Accept: wire.AcceptExternalRows | wire.AcceptSignedURL}, []wire.Subscription{{
		ID: "s", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1,
	}}))
	if err != nil {
		t.Fatal(err)
	}
	secs := enginetest.Sections(t, resp)
	if len(secs[0].Refs) != 1 || !secs[0].Refs[0].URL.Present {
		t.Fatalf("want one SEGMENT_REF with url, got %+v", secs[0].Refs)
	}
	ref := secs[0].Refs[0]
	scopes := string(canonjson.ScopeMap(map[string][]string{"project_id": {"p1"}}))
	path := "/api/segments/" + url.PathEscape(ref.SegmentID)

	r := f.do("GET", path, map[string]string{"X-Syncular-Scopes": scopes, "Accept-Encoding": "gzip"}, nil)
	if r.Status != 200 {
		t.Fatalf("download: %d %s", r.Status, r.Body)
	}
	if r.Header.Get("ETag") != `"`+ref.SegmentID+`"` || r.Header.Get("Cache-Control") != "private, max-age=0" ||
		r.Header.Get("Vary") != "Authorization, X-Syncular-Scopes, Accept-Encoding" || r.Header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("headers: %v", r.Header)
	}
	body := decompress(t, r.Header.Get("Content-Encoding"), r.Body)
	if int64(len(body)) != ref.ByteLength {
		t.Fatalf("length %d, descriptor says %d", len(body), ref.ByteLength)
	}
	r = f.do("GET", path, map[string]string{"X-Syncular-Scopes": scopes, "If-None-Match": `"` + ref.SegmentID + `"`}, nil)
	if r.Status != 304 || len(r.Body) != 0 {
		t.Fatalf("If-None-Match: %d", r.Status)
	}
	other := string(canonjson.ScopeMap(map[string][]string{"project_id": {"p2"}}))
	r = f.do("GET", path, map[string]string{"X-Syncular-Scopes": other}, nil)
	if r.Status != 403 || errorBody(t, r).Code != syncerr.Forbidden {
		t.Fatalf("other scopes: %d %s", r.Status, r.Body)
	}
	r = f.do("GET", "/api/segments/sha256%3A"+string(bytes.Repeat([]byte("0"), 64)), map[string]string{"X-Syncular-Scopes": scopes}, nil)
	if r.Status != 404 || errorBody(t, r).Code != syncerr.NotFound {
		t.Fatalf("unknown: %d %s", r.Status, r.Body)
	}
	// The signed URL works without authentication.
	u, err := url.Parse(ref.URL.Value)
	if err != nil {
		t.Fatal(err)
	}
	r = f.api.Serve(context.Background(), &httpapi.Request{Method: "GET", Path: u.EscapedPath(), Query: u.Query(), Header: http.Header{}})
	if r.Status != 200 || int64(len(r.Body)) != ref.ByteLength {
		t.Fatalf("signed URL fetch: %d %s", r.Status, r.Body)
	}
	q := u.Query()
	q.Set("st", q.Get("st")+"x")
	r = f.api.Serve(context.Background(), &httpapi.Request{Method: "GET", Path: u.EscapedPath(), Query: q, Header: http.Header{}})
	if r.Status != 403 {
		t.Fatalf("tampered token: %d", r.Status)
	}
}

// The constant headers of /sync responses are shared between responses:
// a caller appending to one response's header (as a CORS layer adds to
// Vary) must not change the next response's.
func TestSyncResponseHeadersAreNotShared(t *testing.T) {
	f := newFixture(t, engine.Limits{})
	body := f.pullBody(t, wire.AcceptInlineRows)
	hdr := map[string]string{"Content-Type": httpapi.ContentType}
	first := f.do("POST", "/api/sync", hdr, body)
	first.Header.Add("Vary", "Origin")
	first.Header["Cache-Control"] = append(first.Header["Cache-Control"], "private")
	next := f.do("POST", "/api/sync", hdr, body)
	if got := next.Header.Values("Vary"); len(got) != 1 || got[0] != "Accept-Encoding" {
		t.Errorf("Vary of the next response: %q", got)
	}
	if got := next.Header.Values("Cache-Control"); len(got) != 1 || got[0] != "no-store" {
		t.Errorf("Cache-Control of the next response: %q", got)
	}
	if got := next.Header.Get("Content-Type"); got != httpapi.ContentType {
		t.Errorf("Content-Type of the next response: %q", got)
	}
}
