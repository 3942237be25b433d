// Package apptest builds what a Syncular client would send through API
// Gateway (SSP2 request bodies, row payloads, v2 events) and reads what
// comes back, for the adapter, runner and emulator tests. Test-only.
package apptest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/klauspost/compress/zstd"

	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// ContentType is the SSP2 media type.
const ContentType = "application/vnd.syncular.sync.v2"

// Row encodes a row of table from values by column name (string, int,
// int64, bool, or nil for NULL).
func Row(t testing.TB, table *schema.Table, vals map[string]any) []byte {
	t.Helper()
	row := make([]rowcodec.Value, len(table.Columns))
	for i, c := range table.Columns {
		v, ok := vals[c.Name]
		if !ok || v == nil {
			row[i] = rowcodec.Value{Null: true}
			continue
		}
		switch x := v.(type) {
		case string:
			row[i] = rowcodec.Value{Str: x}
		case int:
			row[i] = rowcodec.Value{Int: int64(x)}
		case int64:
			row[i] = rowcodec.Value{Int: x}
		case bool:
			row[i] = rowcodec.Value{Bool: x}
		default:
			t.Fatalf("apptest: unsupported value %T for %s", v, c.Name)
		}
	}
	b, err := table.Codec.Append(nil, row)
	if err != nil {
		t.Fatalf("apptest: encode row: %v", err)
	}
	return b
}

// Request encodes an SSP2 request: REQ_HEADER then frames.
func Request(t testing.TB, version uint16, hdr wire.ReqHeader, frames ...wire.Frame) []byte {
	t.Helper()
	all := append([]wire.Frame{&hdr}, frames...)
	b, err := wire.Encode(&wire.Message{WireVersion: version, Kind: wire.KindRequest, Frames: all})
	if err != nil {
		t.Fatalf("apptest: encode request: %v", err)
	}
	return b
}

// Upsert is one PUSH_COMMIT operation inserting or updating a row.
func Upsert(table, rowID string, base int64, payload []byte) wire.Operation {
	op := wire.Operation{Table: table, RowID: rowID, Op: wire.OpUpsert, Payload: wire.Some(payload)}
	if base > 0 {
		op.BaseVersion = wire.Some(base)
	}
	return op
}

// Event builds an HTTP API v2 event as API Gateway sends it: lower-case
// headers, binary bodies base64 encoded.
func Event(method, rawPath string, headers map[string]string, body []byte) events.APIGatewayV2HTTPRequest {
	h := map[string]string{"host": "abc123.execute-api.us-east-1.amazonaws.com", "x-forwarded-proto": "https"}
	for k, v := range headers {
		h[strings.ToLower(k)] = v
	}
	path, query, _ := strings.Cut(rawPath, "?")
	ev := events.APIGatewayV2HTTPRequest{
		Version:        "2.0",
		RouteKey:       "$default",
		RawPath:        path,
		RawQueryString: query,
		Headers:        h,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RequestID:  "req-1",
			DomainName: "abc123.execute-api.us-east-1.amazonaws.com",
			Stage:      "$default",
			HTTP:       events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: method, Path: path},
		},
	}
	if len(body) > 0 {
		ev.Body = base64.StdEncoding.EncodeToString(body)
		ev.IsBase64Encoded = true
	}
	return ev
}

// MustJSON marshals v.
func MustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Invoke runs ev through a function handler's Invoke in process and
// decodes its answer.
func Invoke(t testing.TB, invoke func(context.Context, []byte) ([]byte, error), ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
	t.Helper()
	out, err := invoke(context.Background(), MustJSON(t, ev))
	if err != nil {
		t.Fatal(err)
	}
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatal(err)
	}
	return resp
}

// Body returns the decoded, decompressed body of a v2 response.
func Body(t testing.TB, resp *events.APIGatewayV2HTTPResponse) []byte {
	t.Helper()
	b := []byte(resp.Body)
	if resp.IsBase64Encoded {
		var err error
		if b, err = base64.StdEncoding.DecodeString(resp.Body); err != nil {
			t.Fatalf("apptest: response base64: %v", err)
		}
	}
	var enc string
	for k, v := range resp.Headers {
		if strings.EqualFold(k, "Content-Encoding") {
			enc = v
		}
	}
	out, err := Decompress(enc, b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Decompress undoes a response Content-Encoding.
func Decompress(enc string, b []byte) ([]byte, error) {
	switch enc {
	case "":
		return b, nil
	case "gzip":
		r, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		return io.ReadAll(r)
	case "zstd":
		d, err := zstd.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		defer d.Close()
		return io.ReadAll(d)
	}
	return nil, fmt.Errorf("apptest: unknown Content-Encoding %q", enc)
}

// Decode decodes an SSP2 response body.
func Decode(t testing.TB, b []byte) *wire.Message {
	t.Helper()
	m, err := wire.Decode(b)
	if err != nil {
		t.Fatalf("apptest: decode response (%d bytes, %q...): %v", len(b), head(b), err)
	}
	if m.Kind != wire.KindResponse {
		t.Fatalf("apptest: got a %s message", m.Kind)
	}
	return m
}

func head(b []byte) string {
	if len(b) > 120 {
		b = b[:120]
	}
	return string(b)
}

// Find returns the frames of type T in m.
func Find[T wire.Frame](m *wire.Message) []T {
	var out []T
	for _, f := range m.Frames {
		if x, ok := f.(T); ok {
			out = append(out, x)
		}
	}
	return out
}

// ErrorCode returns the §10.1 code of a JSON error body ("" if none).
func ErrorCode(b []byte) string {
	var e struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(b, &e)
	return e.Code
}
