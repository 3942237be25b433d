package lambdahttp

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

// BenchmarkInvoke is the adapter alone (a handler without an engine
// answering 415 before it): the Lambda path decoding the JSON event and
// encoding the response document, the typed event path, and the runner's
// direct conversion.
func BenchmarkInvoke(b *testing.B) {
	h := stubHandler()
	body := bytes.Repeat([]byte{0x53, 0x53, 0x50, 0x32, 0, 1, 2, 3}, 40)
	req := httptest.NewRequest("POST", "http://127.0.0.1:8787/sync", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Authorization", "Bearer ok")
	req.Header.Set("Accept-Encoding", "zstd, gzip")
	ev := EventFromHTTP(req, body, "POST /sync", "rid")
	payload, err := json.Marshal(ev)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			out, err := h.Invoke(ctx, payload)
			if err != nil {
				b.Fatal(err)
			}
			var resp events.APIGatewayV2HTTPResponse
			if err := json.Unmarshal(out, &resp); err != nil || resp.StatusCode != 415 {
				b.Fatal(resp.StatusCode, err)
			}
		}
	})
	b.Run("typed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			e := EventFromHTTP(req, body, "POST /sync", "rid")
			if r := h.InvokeV2(ctx, &e); r.Status != 415 {
				b.Fatal(r.Status)
			}
		}
	})
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r := req.Clone(ctx) // RequestFromHTTP adopts the header
			if resp := h.InvokeHTTP(ctx, r, body, "rid"); resp.Status != 415 {
				b.Fatal(resp.Status)
			}
		}
	})
}
