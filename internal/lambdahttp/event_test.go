package lambdahttp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/skyfold/syncular-lambda/internal/auth"
	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/httpapi"
)

const v2Event = `{
  "version": "2.0",
  "routeKey": "GET /segments/{segmentId}",
  "rawPath": "/segments/sha256%3Aabc%2Fdef",
  "rawQueryString": "st=a.b&x=1&x=2",
  "headers": {"content-type": "application/vnd.syncular.sync.v2", "authorization": "Bearer T", "x-syncular-scopes": "{\"p\":[\"1\"]}", "host": "api.example.com", "x-forwarded-proto": "https"},
  "queryStringParameters": {"st": "a.b", "x": "1,2"},
  "requestContext": {
    "requestId": "rid-1",
    "domainName": "abc.execute-api.eu-west-1.amazonaws.com",
    "http": {"method": "get", "path": "/segments/sha256:abc/def"},
    "authorizer": {"jwt": {"claims": {"sub": "u1", "exp": 1700000000, "custom:tenant": "t1", "nested": {"a": 1}}, "scopes": null}}
  },
  "body": "AAEC/w==",
  "isBase64Encoded": true
}`

func TestDecodeV2(t *testing.T) {
	c, err := decodeEvent([]byte(v2Event))
	if err != nil {
		t.Fatal(err)
	}
	r := c.req
	if c.v1 || r.Method != "GET" || r.Path != "/segments/sha256%3Aabc%2Fdef" || r.RequestID != "rid-1" {
		t.Fatalf("request %+v", r)
	}
	if !bytes.Equal(r.Body, []byte{0, 1, 2, 0xff}) {
		t.Fatalf("body %x", r.Body)
	}
	// Header lookups are case-insensitive whatever case API Gateway used.
	if r.Header.Get("Content-Type") != "application/vnd.syncular.sync.v2" || r.Header.Get("X-SYNCULAR-SCOPES") != `{"p":["1"]}` {
		t.Fatalf("headers %v", r.Header)
	}
	if got := r.Query["x"]; len(got) != 2 || r.Query.Get("st") != "a.b" {
		t.Fatalf("query %v", r.Query)
	}
	// Issue 9 item 7: the base of signed URLs never comes from the
	// request's Host or domain name.
	if r.BaseURL != "" {
		t.Fatalf("base URL %q derived from the request", r.BaseURL)
	}
	// Non-string claims (numbers, objects) do not break decoding.
	if c.creds.AuthorizerClaims["sub"] != "u1" || c.creds.AuthorizerClaims["custom:tenant"] != "t1" || c.creds.Authorization != "Bearer T" {
		t.Fatalf("creds %+v", c.creds)
	}
}

func TestDecodeV1(t *testing.T) {
	ev := events.APIGatewayProxyRequest{
		HTTPMethod:                      "POST",
		Path:                            "/segments/sha256:abc def",
		MultiValueHeaders:               map[string][]string{"Content-Type": {"application/json"}, "X-Forwarded-Proto": {"http"}, "Host": {"localhost:3000"}},
		Headers:                         map[string]string{"Content-Type": "ignored when multi-value headers exist"},
		MultiValueQueryStringParameters: map[string][]string{"st": {"tok"}},
		Body:                            "hello",
		RequestContext:                  events.APIGatewayProxyRequestContext{RequestID: "v1-id", Authorizer: map[string]any{"claims": map[string]any{"sub": "u"}, "principalId": "x"}},
		IsBase64Encoded:                 false,
	}
	b, _ := json.Marshal(ev)
	c, err := decodeEvent(b)
	if err != nil {
		t.Fatal(err)
	}
	r := c.req
	if !c.v1 || r.Method != "POST" || r.Path != "/segments/sha256:abc%20def" || string(r.Body) != "hello" || r.Query.Get("st") != "tok" {
		t.Fatalf("request %+v", r)
	}
	if r.Header.Get("content-type") != "application/json" || r.BaseURL != "" || r.RequestID != "v1-id" {
		t.Fatalf("request %+v", r)
	}
	if c.creds.AuthorizerClaims["sub"] != "u" {
		t.Fatalf("claims %v", c.creds.AuthorizerClaims)
	}
	// The typed path agrees.
	req, cr, err := FromV1(&ev)
	if err != nil || req.Path != r.Path || cr.AuthorizerClaims["sub"] != "u" {
		t.Fatalf("FromV1: %+v %v", req, err)
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, p := range []string{`[]`, `{"foo":1}`, `not json`} {
		if _, err := decodeEvent([]byte(p)); err == nil {
			t.Errorf("%s: decoded", p)
		}
	}
	if _, err := decodeEvent([]byte(`{"version":"2.0","rawPath":"/sync","body":"!!!","isBase64Encoded":true}`)); err != errBadBase64 {
		t.Fatalf("bad base64: %v", err)
	}
}

// stubAuth accepts "Bearer ok".
type stubAuth struct{}

func (stubAuth) Authenticate(_ context.Context, cr auth.Credentials) (engine.Auth, auth.Claims, error) {
	if cr.Authorization != "Bearer ok" {
		return engine.Auth{}, nil, auth.ErrNoCredentials
	}
	return engine.Auth{Partition: "p", ActorID: "a"}, auth.Claims{"sub": "a"}, nil
}

// An httpapi handler without an engine still answers routing, auth and
// content-type errors, which is all the response conversion needs.
func stubHandler() *Handler {
	return &Handler{API: &httpapi.Handler{Routes: httpapi.RouteAll}, Auth: stubAuth{}}
}

func invoke(t *testing.T, h *Handler, ev any) events.APIGatewayV2HTTPResponse {
	t.Helper()
	out, err := h.Invoke(context.Background(), mustJSON(t, ev))
	if err != nil {
		t.Fatal(err)
	}
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatal(err)
	}
	return resp
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestErrorResponses(t *testing.T) {
	h := stubHandler()
	ev := events.APIGatewayV2HTTPRequest{Version: "2.0", RawPath: "/sync", Headers: map[string]string{"content-type": "application/vnd.syncular.sync.v2"},
		RequestContext: events.APIGatewayV2HTTPRequestContext{HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST"}}}
	resp := invoke(t, h, ev)
	if resp.StatusCode != 401 || resp.IsBase64Encoded || !strings.Contains(resp.Body, `"code":"sync.auth_required"`) || resp.Headers["Www-Authenticate"] == "" {
		t.Fatalf("401: %+v", resp)
	}
	if _, ok := resp.Headers["X-Syncular-Error"]; ok {
		t.Fatal("internal header leaked")
	}
	// §1.1: 415 before 401 — no credentials and the wrong media type.
	ev.Headers["content-type"] = "text/plain"
	if resp := invoke(t, h, ev); resp.StatusCode != 415 || !strings.Contains(resp.Body, "sync.invalid_request") {
		t.Fatalf("unauthenticated 415: %+v", resp)
	}
	ev.Headers["authorization"] = "Bearer ok"
	if resp := invoke(t, h, ev); resp.StatusCode != 415 || !strings.Contains(resp.Body, "sync.invalid_request") {
		t.Fatalf("415: %+v", resp)
	}
	ev.RawPath = "/nowhere"
	if resp := invoke(t, h, ev); resp.StatusCode != 404 {
		t.Fatalf("404: %+v", resp)
	}
	bad := `{"version":"2.0","rawPath":"/sync","requestContext":{"http":{"method":"POST"}},"body":"%%%","isBase64Encoded":true}`
	out, err := h.Invoke(context.Background(), []byte(bad))
	if err != nil || !strings.Contains(string(out), `"statusCode":400`) {
		t.Fatalf("bad base64: %s %v", out, err)
	}
	// Not an API Gateway event at all: an invocation error, not a response.
	if _, err := h.Invoke(context.Background(), []byte(`{"Records":[]}`)); err == nil {
		t.Fatal("accepted an S3 event")
	}
	// v1 in, v1 out.
	v1 := events.APIGatewayProxyRequest{HTTPMethod: "POST", Path: "/sync", Headers: map[string]string{"Content-Type": "application/vnd.syncular.sync.v2"}}
	out, err = h.Invoke(context.Background(), mustJSON(t, v1))
	if err != nil {
		t.Fatal(err)
	}
	var r1 events.APIGatewayProxyResponse
	if err := json.Unmarshal(out, &r1); err != nil || r1.StatusCode != 401 {
		t.Fatalf("v1: %s", out)
	}
	if r2 := h.ServeV1(context.Background(), &v1); r2.StatusCode != 401 {
		t.Fatalf("ServeV1: %+v", r2)
	}
}

func TestResponseEncoding(t *testing.T) {
	bin := &httpapi.Response{Status: 200, Header: http.Header{"Content-Type": {"application/vnd.syncular.sync.v2"}}, Body: []byte{0, 0xff, 'S'}}
	r := toV2(bin)
	if !r.IsBase64Encoded || r.Body != base64.StdEncoding.EncodeToString(bin.Body) || r.Headers["Content-Type"] != "application/vnd.syncular.sync.v2" {
		t.Fatalf("binary: %+v", r)
	}
	gz := &httpapi.Response{Status: 200, Header: http.Header{"Content-Type": {"application/json"}, "Content-Encoding": {"gzip"}}, Body: []byte{0x1f, 0x8b}}
	if r := toV2(gz); !r.IsBase64Encoded {
		t.Fatal("compressed JSON must be base64")
	}
	js := &httpapi.Response{Status: 404, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"a":1}`)}
	if r := toV2(js); r.IsBase64Encoded || r.Body != `{"a":1}` {
		t.Fatalf("json: %+v", r)
	}
	if r := toV1(bin); !r.IsBase64Encoded {
		t.Fatal("v1 binary not base64")
	}
	empty := &httpapi.Response{Status: 304, Header: http.Header{}}
	if r := toV2(empty); r.IsBase64Encoded || r.Body != "" {
		t.Fatalf("empty: %+v", r)
	}
}

// EventFromHTTP and WriteV2Response are inverse to the conversions above:
// a net/http request survives the trip into an event and back.
func TestNetHTTPRoundTrip(t *testing.T) {
	req := httptest.NewRequest("GET", "http://127.0.0.1:8787/segments/sha256%3Aab?st=x.y", nil)
	req.Header.Set("X-Syncular-Scopes", `{"p":["1"]}`)
	req.Header.Add("Accept-Encoding", "gzip")
	req.Header.Add("Accept-Encoding", "zstd")
	ev := EventFromHTTP(req, []byte{1, 2, 3}, "GET /segments/{segmentId}", "rid")
	if ev.RawPath != "/segments/sha256%3Aab" || ev.RawQueryString != "st=x.y" || !ev.IsBase64Encoded || ev.Headers["x-forwarded-proto"] != "http" || ev.Headers["host"] != "127.0.0.1:8787" {
		t.Fatalf("event %+v", ev)
	}
	r, _, err := FromV2(&ev)
	if err != nil {
		t.Fatal(err)
	}
	if r.BaseURL != "" || r.Header.Get("Accept-Encoding") != "gzip,zstd" || !bytes.Equal(r.Body, []byte{1, 2, 3}) {
		t.Fatalf("request %+v", r)
	}
	w := httptest.NewRecorder()
	resp := toV2(&httpapi.Response{Status: 201, Header: http.Header{"Content-Type": {"application/octet-stream"}}, Body: []byte{9, 8}})
	if err := WriteV2Response(w, &resp); err != nil {
		t.Fatal(err)
	}
	if w.Code != 201 || !bytes.Equal(w.Body.Bytes(), []byte{9, 8}) || w.Header().Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("written %d %x %v", w.Code, w.Body.Bytes(), w.Header())
	}
}

// Every header keeps its own value under its lower-case name (API
// Gateway's v2 convention), however many there are, and comes back
// under its canonical name.
func TestEventFromHTTPHeaderNames(t *testing.T) {
	req := httptest.NewRequest("POST", "http://127.0.0.1:8787/sync", nil)
	want := map[string]string{}
	for i := 0; i < 40; i++ {
		name := fmt.Sprintf("X-Header-%d-%s", i, strings.Repeat("Ab", i%5))
		req.Header.Set(name, fmt.Sprintf("value %d", i))
		want[strings.ToLower(name)] = fmt.Sprintf("value %d", i)
	}
	ev := EventFromHTTP(req, nil, "POST /sync", "rid")
	for k, v := range want {
		if ev.Headers[k] != v {
			t.Fatalf("header %s = %q, want %q", k, ev.Headers[k], v)
		}
	}
	if len(ev.Headers) != len(want)+2 { // + host, x-forwarded-proto
		t.Fatalf("%d headers, want %d: %v", len(ev.Headers), len(want)+2, ev.Headers)
	}
	r, _, err := FromV2(&ev)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		name := fmt.Sprintf("X-Header-%d-%s", i, strings.Repeat("Ab", i%5))
		if got := r.Header[http.CanonicalHeaderKey(name)]; len(got) != 1 || got[0] != fmt.Sprintf("value %d", i) {
			t.Fatalf("back: %s = %q", name, got)
		}
	}
}

// The runner's direct conversion gives the request the event path gives:
// FromV2(EventFromHTTP(r)) is the reference, for requests as net/http's
// server parses them and for hand-built ones with odd header names.
func TestRequestFromHTTPMatchesEvent(t *testing.T) {
	raw := func(s string) func() *http.Request {
		return func() *http.Request {
			r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(strings.ReplaceAll(s, "\n", "\r\n"))))
			if err != nil {
				t.Fatal(err)
			}
			r.RemoteAddr = "127.0.0.1:40000"
			return r
		}
	}
	built := func(method, target string, h http.Header) func() *http.Request {
		return func() *http.Request {
			r := httptest.NewRequest(method, target, nil)
			for k, vs := range h {
				r.Header[k] = append([]string(nil), vs...)
			}
			return r
		}
	}
	cases := map[string]struct {
		req  func() *http.Request
		body []byte
	}{
		"sync":          {raw("POST /sync HTTP/1.1\nHost: 127.0.0.1:8787\nContent-Type: application/vnd.syncular.sync.v2\nAuthorization: Bearer abc.def.ghi\nAccept-Encoding: zstd\nAccept-Encoding: gzip\nContent-Length: 4\n\n"), []byte{0x53, 0x53, 0x50, 0x32}},
		"json body":     {raw("PUT /blobs/x HTTP/1.1\nHost: h\nContent-Type: application/json\nX-Forwarded-Proto: https\n\n"), []byte(`{"a":1}`)},
		"segment query": {raw("GET /segments/sha256%3Aab?st=x.y&st=z&e=1 HTTP/1.1\nHost: h\nIf-None-Match: \"e\"\n\n"), nil},
		"bad query":     {raw("GET /segments/a?st=%zz&ok=1&ok=2 HTTP/1.1\nHost: h\n\n"), nil},
		"empty path":    {built("GET", "http://h", nil), nil},
		"odd names": {built("post", "http://h/sync?x", http.Header{
			"content-type": {"text/plain"}, "X-Odd Name": {"1", "2"}, "x-lower": {"v"}, "X-Many": {"a", "b", "c"},
		}), []byte("hello")},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r1 := c.req()
			ev := EventFromHTTP(r1, c.body, r1.Method+" "+r1.URL.Path, "rid")
			want, wantCreds, err := FromV2(&ev)
			if err != nil {
				t.Fatal(err)
			}
			r2 := c.req()
			got, gotCreds := RequestFromHTTP(r2, bytes.Clone(c.body), "rid")
			if got.Method != want.Method || got.Path != want.Path || got.RequestID != want.RequestID || !bytes.Equal(got.Body, want.Body) || (got.Body == nil) != (want.Body == nil) {
				t.Errorf("request line/body: got %s %s %q %q, want %s %s %q %q", got.Method, got.Path, got.RequestID, got.Body, want.Method, want.Path, want.RequestID, want.Body)
			}
			if !reflect.DeepEqual(got.Header, want.Header) {
				t.Errorf("headers:\n got %v\nwant %v", got.Header, want.Header)
			}
			if !reflect.DeepEqual(got.Query, want.Query) {
				t.Errorf("query: got %v, want %v", got.Query, want.Query)
			}
			if !reflect.DeepEqual(gotCreds, wantCreds) {
				t.Errorf("credentials: got %+v, want %+v", gotCreds, wantCreds)
			}
		})
	}
}
