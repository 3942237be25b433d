package lambdahttp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/skyfold/syncular-lambda/internal/auth"
	"github.com/skyfold/syncular-lambda/internal/core/httpapi"
	"github.com/skyfold/syncular-lambda/internal/core/limits"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// MaxResponsePayload is Lambda's synchronous response limit (6 MB for the
// whole JSON document, base64 body included).
const MaxResponsePayload = limits.LambdaPayloadBytes

// Handler serves API Gateway events for one function. It implements
// lambda.Handler, so the function's main hands it to lambda.Start and the
// local runner calls the very same Invoke.
type Handler struct {
	API  *httpapi.Handler
	Auth auth.Authenticator
	// PublicURL is the configured scheme://host[/base] that native signed
	// segment URLs point at (SYNC_PUBLIC_URL). It is never taken from the
	// request (a forged Host header would otherwise send clients and their
	// tokens elsewhere); empty means no native URLs are minted and clients
	// use the authenticated segment route.
	PublicURL string
	Logger    *slog.Logger
	// DeadlineMargin is how long before the invocation deadline the
	// request is stopped (default DefaultDeadlineMargin, at most a quarter
	// of the time left), so it still writes its request line, with the
	// partition and an SSP2 error code, and answers a retryable
	// sync.internal_error instead of Lambda killing it silently at the
	// function timeout (API Gateway would answer a bare 503 and no line
	// would say which partition was slow).
	DeadlineMargin time.Duration
}

// DefaultDeadlineMargin is the soft deadline's distance from the
// function timeout: enough to log and return the error response.
const DefaultDeadlineMargin = 1500 * time.Millisecond

// softDeadline shortens ctx to the invocation deadline minus the margin.
func (h *Handler) softDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		return ctx, func() {}
	}
	margin := h.DeadlineMargin
	if margin <= 0 {
		margin = DefaultDeadlineMargin
	}
	margin = min(margin, time.Until(dl)/4)
	return context.WithDeadline(ctx, dl.Add(-margin))
}

// Invoke decodes a v2 or v1 proxy event and returns the matching response
// document. An error return is reserved for payloads that are not API
// Gateway events at all (a deployment mistake, not a client error).
func (h *Handler) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	ctx, cancel := h.softDeadline(ctx)
	defer cancel()
	c, err := decodeEvent(payload)
	var resp *httpapi.Response
	switch {
	case errors.Is(err, errBadBase64):
		resp = httpapi.ErrorResponse(syncerr.New(syncerr.InvalidRequest, "%s", err.Error()))
		c = &converted{req: &httpapi.Request{}}
	case err != nil:
		h.logger().ErrorContext(ctx, "unsupported invocation payload", "error", err.Error())
		return nil, err
	default:
		resp = h.serve(ctx, c)
	}
	if resp.Relayed != nil {
		// Another build's answer (httpapi.Forwarder), relayed unchanged:
		// it fitted that build's Lambda response, so it fits this one.
		return resp.Relayed, nil
	}
	out, err := marshal(resp, c.v1)
	if err != nil {
		return nil, err
	}
	if len(out) > MaxResponsePayload {
		// Lambda would fail the invocation and API Gateway answer a bare
		// 502; a §10.1 error says what happened. httpapi already caps the
		// body (and logs the status it sends), so only headers beyond the
		// reserve of the limits package get here.
		h.logger().ErrorContext(ctx, "response document exceeds the Lambda payload limit; sending 500 instead of the logged status", "requestId", c.req.RequestID, "bytes", len(out))
		return marshal(httpapi.ErrorResponse(syncerr.Internal(errors.New("response too large for Lambda"))), c.v1)
	}
	return out, nil
}

// InvokeV2 serves a typed HTTP API v2 event exactly as Invoke serves its
// JSON form — same conversion, soft deadline, authentication and Lambda
// response-size rule — but without the JSON and base64 round trip of the
// response document, for an in-process host that has the event. With
// TestInvokeV2MatchesInvoke and TestRequestFromHTTPMatchesEvent it links
// the local runner's InvokeHTTP to the Lambda runtime's Invoke.
func (h *Handler) InvokeV2(ctx context.Context, ev *events.APIGatewayV2HTTPRequest) *httpapi.Response {
	req, cr, err := FromV2(ev)
	if err != nil {
		// FromV2 fails only on a body that is not base64 (Invoke's 400).
		return httpapi.ErrorResponse(syncerr.New(syncerr.InvalidRequest, "%s", err.Error()))
	}
	return h.invoke(ctx, &converted{req: req, creds: cr})
}

// invoke is the in-process hosts' common path: soft deadline, serve, and
// Invoke's response-size rule.
func (h *Handler) invoke(ctx context.Context, c *converted) *httpapi.Response {
	ctx, cancel := h.softDeadline(ctx)
	defer cancel()
	resp := h.serve(ctx, c)
	if !fitsLambda(resp) {
		h.logger().ErrorContext(ctx, "response document exceeds the Lambda payload limit; sending 500 instead of the logged status", "requestId", c.req.RequestID)
		return httpapi.ErrorResponse(syncerr.Internal(errors.New("response too large for Lambda")))
	}
	return resp
}

// fitsLambda reports whether resp's v2 response document is within
// MaxResponsePayload, as Invoke measures it. A bound on the document size
// decides the common case without building it: base64 grows the body by
// 4/3, JSON escaping a header byte to at most 6 bytes.
func fitsLambda(resp *httpapi.Response) bool {
	bound := 128 + (len(resp.Body)+2)/3*4
	for k, vs := range resp.Header {
		bound += 6 * (len(k) + 6)
		for _, v := range vs {
			bound += 6 * (len(v) + 2)
		}
	}
	if bound <= MaxResponsePayload {
		return true
	}
	out, err := json.Marshal(toV2(resp))
	return err == nil && len(out) <= MaxResponsePayload
}

func marshal(resp *httpapi.Response, v1 bool) ([]byte, error) {
	if v1 {
		return json.Marshal(toV1(resp))
	}
	return json.Marshal(toV2(resp))
}

// ServeV2 serves a typed HTTP API v2 event (tests, tools).
func (h *Handler) ServeV2(ctx context.Context, ev *events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
	req, cr, err := FromV2(ev)
	if err != nil {
		return toV2(httpapi.ErrorResponse(syncerr.New(syncerr.InvalidRequest, "%s", err.Error())))
	}
	return toV2(h.serve(ctx, &converted{req: req, creds: cr}))
}

// ServeV1 serves a typed REST API v1 proxy event.
func (h *Handler) ServeV1(ctx context.Context, ev *events.APIGatewayProxyRequest) events.APIGatewayProxyResponse {
	req, cr, err := FromV1(ev)
	if err != nil {
		return toV1(httpapi.ErrorResponse(syncerr.New(syncerr.InvalidRequest, "%s", err.Error())))
	}
	return toV1(h.serve(ctx, &converted{req: req, creds: cr, v1: true}))
}

// serve authenticates and calls the engine surface. A failed
// authentication is not answered here: httpapi decides (a native `st`
// segment download needs no credentials; everything else is a 401).
func (h *Handler) serve(ctx context.Context, c *converted) *httpapi.Response {
	r := c.req
	if r.RequestID == "" {
		if lc, ok := lambdacontext.FromContext(ctx); ok {
			r.RequestID = lc.AwsRequestID
		}
	}
	r.BaseURL = h.PublicURL
	au, claims, err := h.Auth.Authenticate(ctx, c.creds)
	if err == nil {
		r.Auth = &au
		ctx = auth.WithClaims(ctx, claims)
	} else {
		r.AuthError = err
	}
	resp := h.API.Serve(ctx, r)
	if resp.Status == http.StatusUnauthorized {
		if resp.Header == nil {
			resp.Header = http.Header{}
		}
		resp.Header.Set("WWW-Authenticate", `Bearer realm="syncular"`)
	}
	return resp
}

func (h *Handler) logger() *slog.Logger {
	if h.Logger != nil {
		return h.Logger
	}
	return slog.Default()
}

// isText reports whether a response body can travel as a JSON string:
// uncompressed JSON or text. Everything else (SSP2, segments, any
// Content-Encoding) is base64 encoded.
func isText(hdr http.Header) bool {
	if ce := hdr.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return false
	}
	mt, _, err := mime.ParseMediaType(hdr.Get("Content-Type"))
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasPrefix(mt, "text/")
}

func flatHeaders(hdr http.Header) map[string]string {
	out := make(map[string]string, len(hdr))
	for k, vs := range hdr {
		out[k] = strings.Join(vs, ", ")
	}
	return out
}

func body(resp *httpapi.Response) (string, bool) {
	if len(resp.Body) == 0 {
		return "", false
	}
	if isText(resp.Header) {
		return string(resp.Body), false
	}
	return base64.StdEncoding.EncodeToString(resp.Body), true
}

// toV2 renders a response for an HTTP API (payload format 2.0).
func toV2(resp *httpapi.Response) events.APIGatewayV2HTTPResponse {
	b, b64 := body(resp)
	return events.APIGatewayV2HTTPResponse{StatusCode: resp.Status, Headers: flatHeaders(resp.Header), Body: b, IsBase64Encoded: b64}
}

// toV1 renders a response for a REST API proxy integration (binary bodies
// need the API's binaryMediaTypes to include them, e.g. */*).
func toV1(resp *httpapi.Response) events.APIGatewayProxyResponse {
	b, b64 := body(resp)
	return events.APIGatewayProxyResponse{StatusCode: resp.Status, Headers: flatHeaders(resp.Header), Body: b, IsBase64Encoded: b64}
}
