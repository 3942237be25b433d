package lambdahttp

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/aws/aws-lambda-go/events"

	"github.com/skyfold/syncular-lambda/internal/core/httpapi"
	"github.com/skyfold/syncular-lambda/internal/core/limits"
)

// Forwarding between builds (httpapi.Forwarder; the decision and the
// transport are internal/app's). A forwarded event is the received API
// Gateway v2 event with one top-level member added, ForwardedMember,
// naming the forwarding build. API Gateway builds the events it sends
// from the client's request and never writes a top-level member of that
// name, so a client cannot forge the marker (a header could be); the
// build receiving it serves the request and never forwards it again.

// ForwardedMember is the marker's member name in a forwarded event.
const ForwardedMember = "syncularForwardedBy"

// MaxForwardPayload is the largest forwarded event: Lambda's synchronous
// invocation payload.
const MaxForwardPayload = limits.LambdaPayloadBytes

// ErrTooLargeToForward: the event with its marker is over the limit.
var ErrTooLargeToForward = errors.New("lambdahttp: the forwarded event would exceed the Lambda invocation payload")

// MarkForwarded returns event (a JSON object) with the marker naming the
// forwarding build as its first member.
func MarkForwarded(event []byte, by string) ([]byte, error) {
	rest := bytes.TrimLeft(event, " \t\r\n")
	if len(rest) == 0 || rest[0] != '{' {
		return nil, errors.New("lambdahttp: forward: the event is not a JSON object")
	}
	rest = rest[1:]
	member, err := json.Marshal(by)
	if err != nil {
		return nil, fmt.Errorf("lambdahttp: forward: %w", err)
	}
	out := make([]byte, 0, len(event)+len(ForwardedMember)+len(member)+8)
	out = append(out, `{"`+ForwardedMember+`":`...)
	out = append(out, member...)
	if t := bytes.TrimLeft(rest, " \t\r\n"); len(t) > 0 && t[0] != '}' {
		out = append(out, ',')
	}
	out = append(out, rest...)
	if len(out) > MaxForwardPayload {
		return nil, ErrTooLargeToForward
	}
	return out, nil
}

// RelayedResponse decodes the v2 response document another build
// answered with into a response that relays it unchanged (Relayed). The
// §10 code of an error answer goes in X-Syncular-Error, where the
// request line reads it (httpapi strips it before the response leaves).
func RelayedResponse(doc []byte) (*httpapi.Response, error) {
	var v2 events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(doc, &v2); err != nil {
		return nil, fmt.Errorf("lambdahttp: relayed response: %w", err)
	}
	if v2.StatusCode < 100 || v2.StatusCode > 599 {
		return nil, fmt.Errorf("lambdahttp: relayed response: status %d is not an HTTP status", v2.StatusCode)
	}
	resp := &httpapi.Response{Status: v2.StatusCode, Header: make(http.Header, len(v2.Headers)), Relayed: doc}
	for k, v := range v2.Headers {
		resp.Header.Set(k, v)
	}
	resp.Body = []byte(v2.Body)
	if v2.IsBase64Encoded {
		b, err := base64.StdEncoding.DecodeString(v2.Body)
		if err != nil {
			return nil, fmt.Errorf("lambdahttp: relayed response body: %w", err)
		}
		resp.Body = b
	}
	if resp.Status >= 400 {
		var e struct {
			Code string `json:"code"`
		}
		if json.Unmarshal(resp.Body, &e) == nil && e.Code != "" {
			resp.Header.Set("X-Syncular-Error", e.Code)
		} else {
			resp.Header.Set("X-Syncular-Error", "http."+strconv.Itoa(resp.Status))
		}
	}
	return resp, nil
}
