package apptest

import (
	"bytes"
	"encoding/base64"
	"io"
	"net/http"
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

// OverHTTP sends an API Gateway event as the plain HTTP request it stands
// for (to the local runner or the stack's gateway, so the flow exercises
// their own request → event → handler → response path) and returns the
// answer in the event's response shape.
func OverHTTP(t testing.TB, c *http.Client, base string, ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
	t.Helper()
	body := []byte(ev.Body)
	if ev.IsBase64Encoded {
		body, _ = base64.StdEncoding.DecodeString(ev.Body)
	}
	u := base + ev.RawPath
	if ev.RawQueryString != "" {
		u += "?" + ev.RawQueryString
	}
	req, err := http.NewRequest(ev.RequestContext.HTTP.Method, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range ev.Headers {
		if k != "host" && k != "x-forwarded-proto" {
			req.Header.Set(k, v)
		}
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := events.APIGatewayV2HTTPResponse{StatusCode: resp.StatusCode, Headers: map[string]string{}, Body: base64.StdEncoding.EncodeToString(b), IsBase64Encoded: true}
	for k := range resp.Header {
		out.Headers[k] = resp.Header.Get(k)
	}
	return out
}
