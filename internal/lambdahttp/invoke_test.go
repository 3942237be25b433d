package lambdahttp

import (
	"bytes"
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/skyfold/syncular-lambda/internal/core/httpapi"
)

// written is what a host writes to the client for one response.
type written struct {
	status int
	header http.Header
	body   []byte
}

// viaInvoke is the Lambda path: the JSON event through Invoke, the JSON
// response document written back as API Gateway does.
func viaInvoke(t *testing.T, h *Handler, ev events.APIGatewayV2HTTPRequest) written {
	t.Helper()
	resp := invoke(t, h, ev)
	w := httptest.NewRecorder()
	if err := WriteV2Response(w, &resp); err != nil {
		t.Fatal(err)
	}
	return written{w.Code, w.Header(), w.Body.Bytes()}
}

// viaInvokeV2 is the in-process path of the local runner.
func viaInvokeV2(t *testing.T, h *Handler, ev events.APIGatewayV2HTTPRequest) written {
	t.Helper()
	w := httptest.NewRecorder()
	if err := WriteResponse(w, h.InvokeV2(context.Background(), &ev)); err != nil {
		t.Fatal(err)
	}
	return written{w.Code, w.Header(), w.Body.Bytes()}
}

// InvokeV2 answers every event as Invoke does: status, headers and body
// as the client receives them.
func TestInvokeV2MatchesInvoke(t *testing.T) {
	h := stubHandler()
	post := func(path string, hdr map[string]string, body string, b64 bool) events.APIGatewayV2HTTPRequest {
		return events.APIGatewayV2HTTPRequest{Version: "2.0", RawPath: path, Headers: hdr, Body: body, IsBase64Encoded: b64,
			RequestContext: events.APIGatewayV2HTTPRequestContext{RequestID: "r", HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST"}}}
	}
	cases := map[string]events.APIGatewayV2HTTPRequest{
		"401":        post("/sync", map[string]string{"content-type": "application/vnd.syncular.sync.v2"}, "", false),
		"415":        post("/sync", map[string]string{"content-type": "text/plain", "authorization": "Bearer ok"}, "hi", false),
		"404":        post("/nowhere", map[string]string{"authorization": "Bearer ok"}, "", false),
		"bad base64": post("/sync", map[string]string{"content-type": "application/vnd.syncular.sync.v2"}, "%%%", true),
		"405": func() events.APIGatewayV2HTTPRequest {
			e := post("/push", nil, "", false)
			e.RequestContext.HTTP.Method = "GET"
			return e
		}(),
		"bad body": post("/sync", map[string]string{"content-type": "application/vnd.syncular.sync.v2", "authorization": "Bearer ok", "content-encoding": "br"}, base64.StdEncoding.EncodeToString([]byte{1, 2}), true),
	}
	for name, ev := range cases {
		a, b := viaInvoke(t, h, ev), viaInvokeV2(t, h, ev)
		if a.status != b.status || !bytes.Equal(a.body, b.body) || len(a.header) != len(b.header) {
			t.Errorf("%s: Invoke %d %v %s, InvokeV2 %d %v %s", name, a.status, a.header, a.body, b.status, b.header, b.body)
			continue
		}
		for k := range a.header {
			if a.header.Get(k) != b.header.Get(k) {
				t.Errorf("%s: header %s: %q vs %q", name, k, a.header.Get(k), b.header.Get(k))
			}
		}
	}
}

// fitsLambda agrees with the size of the document Invoke builds, on both
// sides of the limit and for bodies whose headers decide it.
func TestFitsLambda(t *testing.T) {
	for _, n := range []int{0, 1, 1 << 20, MaxResponsePayload/4*3 - 200, MaxResponsePayload/4*3 - 40, MaxResponsePayload/4*3 + 3} {
		for _, hv := range []string{"", strings.Repeat("\x01", 100), strings.Repeat("a", 300)} {
			resp := &httpapi.Response{Status: 200, Header: http.Header{"Content-Type": {"application/vnd.syncular.sync.v2"}, "X-Big": {hv}}, Body: make([]byte, n)}
			doc, err := marshal(resp, false)
			if err != nil {
				t.Fatal(err)
			}
			if want := len(doc) <= MaxResponsePayload; fitsLambda(resp) != want {
				t.Errorf("body %d, header %d bytes: fitsLambda %v, document %d bytes", n, len(hv), !want, len(doc))
			}
		}
	}
}
