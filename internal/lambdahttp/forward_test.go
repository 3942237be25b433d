package lambdahttp

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

// The forwarding marker is a top-level member only a build adds: the
// event keeps every other member, a marked event decodes as forwarded,
// and a client's header of the same name marks nothing.
func TestForwardMarker(t *testing.T) {
	ev := events.APIGatewayV2HTTPRequest{Version: "2.0", RawPath: "/sync", Body: "AAEC", IsBase64Encoded: true,
		Headers:        map[string]string{"content-type": "application/vnd.syncular.sync.v2", ForwardedMember: "1", "x-" + ForwardedMember: "1"},
		RequestContext: events.APIGatewayV2HTTPRequestContext{RequestID: "r1", HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST"}}}
	raw := mustJSON(t, ev)
	c, err := decodeEvent(raw)
	if err != nil {
		t.Fatal(err)
	}
	if c.req.Forwarded || !bytes.Equal(c.req.Event, raw) {
		t.Fatalf("gateway event: forwarded %t, event kept %t; a header must not mark it", c.req.Forwarded, bytes.Equal(c.req.Event, raw))
	}
	marked, err := MarkForwarded(raw, "12")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(marked, &m); err != nil {
		t.Fatalf("marked event is not JSON: %v\n%s", err, marked)
	}
	if string(m[ForwardedMember]) != `"12"` {
		t.Fatalf("marker %s", m[ForwardedMember])
	}
	var back events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(marked, &back); err != nil || back.Body != ev.Body || back.RawPath != ev.RawPath || back.RequestContext.RequestID != "r1" || len(back.Headers) != 3 {
		t.Fatalf("marked event lost members: %+v %v", back, err)
	}
	c, err = decodeEvent(marked)
	if err != nil || !c.req.Forwarded || string(c.req.Body) != "\x00\x01\x02" {
		t.Fatalf("marked event: %+v %v", c, err)
	}
	if out, err := MarkForwarded([]byte(" { } "), "1"); err != nil || !json.Valid(out) || !bytes.HasPrefix(out, []byte(`{"`+ForwardedMember+`":"1"`)) {
		t.Fatalf("empty object: %s %v", out, err)
	}
	if _, err := MarkForwarded([]byte(`[1]`), "1"); err == nil {
		t.Fatal("marked a JSON array")
	}
	big := append([]byte(`{"body":"`), bytes.Repeat([]byte("a"), MaxForwardPayload-12)...)
	big = append(big, `"}`...)
	if _, err := MarkForwarded(big, "1"); err != ErrTooLargeToForward {
		t.Fatalf("over the invocation payload: %v", err)
	}
}

// A relayed answer keeps the other build's document byte for byte, and
// its §10 code reaches the request line.
func TestRelayedResponse(t *testing.T) {
	doc := mustJSON(t, events.APIGatewayV2HTTPResponse{StatusCode: 503, Headers: map[string]string{"Content-Type": "application/json", "Retry-After": "1"},
		Body: `{"code":"sync.schema_not_ready","retryable":true}`})
	resp, err := RelayedResponse(doc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(resp.Relayed, doc) || resp.Status != 503 || resp.Header.Get("Retry-After") != "1" || resp.Header.Get("X-Syncular-Error") != "sync.schema_not_ready" {
		t.Fatalf("relayed: %+v", resp)
	}
	doc = mustJSON(t, events.APIGatewayV2HTTPResponse{StatusCode: 200, Body: "AAEC", IsBase64Encoded: true})
	if resp, err = RelayedResponse(doc); err != nil || string(resp.Body) != "\x00\x01\x02" || resp.Header.Get("X-Syncular-Error") != "" {
		t.Fatalf("binary answer: %+v %v", resp, err)
	}
	for _, bad := range []string{`{"errorMessage":"boom","errorType":"Runtime.ExitError"}`, `not json`, `{"statusCode":200,"body":"!","isBase64Encoded":true}`} {
		if _, err := RelayedResponse([]byte(bad)); err == nil {
			t.Errorf("%s: relayed", bad)
		}
	}
}
