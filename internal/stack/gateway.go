package stack

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/core/httpapi"
	"github.com/skyfold/syncular-lambda/internal/core/limits"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/lambdahttp"
)

// IntegrationTimeout is API Gateway HTTP API's longest integration
// timeout: a function that has not answered by then gets a 503.
const IntegrationTimeout = 30 * time.Second

// gateway is a local API Gateway HTTP API (payload format 2.0) in front of
// the functions: it routes as the template routes (app.Functions is the
// route table template.yaml is tested against), turns each request into
// the v2 event, invokes the function through its emulator and turns the
// result back, enforcing what API Gateway and Lambda enforce:
//
//   - a request body over API Gateway's 10 MB, or an event over Lambda's
//     6 MB synchronous invoke payload (the binary body travels base64),
//     is refused with 413 and a §10 error body;
//   - a function response over 6 MB is a function error (Lambda refuses
//     it), which API Gateway answers 500;
//   - a function error is a 500, an invoke that outlives the 30 s
//     integration timeout a 503, an unknown route a 404 — each with API
//     Gateway's own {"message": …} body.
//
// GET <base>/realtime goes to the realtime proxy instead (on AWS, the load
// balancer's address; here one address for both).
type gateway struct {
	fns      map[string]*function // by app.Function name
	realtime http.Handler
	counts   func() map[string]int64 // GET /_stack/invocations (every function's)
	cors     *cors                   // the HTTP API's CorsConfiguration (nil: none)
	timeout  time.Duration
	log      *slog.Logger
	reqSeq   atomic.Uint64
}

func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.applyCORS(w, r) {
		return
	}
	if r.URL.Path == "/realtime" {
		if g.realtime == nil {
			gatewayError(w, http.StatusNotFound, "Not Found")
			return
		}
		g.realtime.ServeHTTP(w, r)
		return
	}
	if r.Method == http.MethodGet && r.URL.Path == "/_stack/invocations" {
		w.Header().Set("Content-Type", "application/json")
		counts := g.invocations
		if g.counts != nil {
			counts = g.counts
		}
		_ = json.NewEncoder(w).Encode(counts())
		return
	}
	fn, ok := app.Match("", r.Method, r.URL.EscapedPath())
	if !ok || g.fns[fn.Name] == nil {
		gatewayError(w, http.StatusNotFound, "Not Found")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limits.APIGatewayRequestBytes+1))
	if err != nil {
		gatewayError(w, http.StatusBadRequest, "Bad Request")
		return
	}
	if len(body) > limits.APIGatewayRequestBytes {
		tooLarge(w, "request body exceeds API Gateway's %d bytes", limits.APIGatewayRequestBytes)
		return
	}
	reqID := "stack-" + strconv.FormatUint(g.reqSeq.Add(1), 10)
	ev := lambdahttp.EventFromHTTP(r, body, r.Method+" "+routePath(fn, r.Method), reqID)
	payload, err := json.Marshal(ev)
	if err != nil {
		gatewayError(w, http.StatusInternalServerError, "Internal Server Error")
		return
	}
	if len(payload) > limits.LambdaPayloadBytes {
		tooLarge(w, "the request's Lambda event is %d bytes (the body travels base64), over Lambda's %d-byte invoke payload", len(payload), limits.LambdaPayloadBytes)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), g.timeout)
	defer cancel()
	out, fnErr, err := g.fns[fn.Name].invoke(ctx, payload)
	switch {
	case errors.Is(err, errInvokeTimeout):
		g.log.Warn("gateway: integration timeout", "function", fn.Name, "requestId", reqID)
		gatewayError(w, http.StatusServiceUnavailable, "Service Unavailable")
		return
	case err != nil || fnErr:
		g.log.Warn("gateway: function error", "function", fn.Name, "requestId", reqID, "error", errString(err))
		gatewayError(w, http.StatusInternalServerError, "Internal Server Error")
		return
	case len(out) > limits.LambdaPayloadBytes:
		g.log.Warn("gateway: response over Lambda's payload limit", "function", fn.Name, "bytes", len(out))
		gatewayError(w, http.StatusInternalServerError, "Internal Server Error")
		return
	}
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(out, &resp); err != nil || resp.StatusCode == 0 {
		g.log.Warn("gateway: malformed function response", "function", fn.Name)
		gatewayError(w, http.StatusInternalServerError, "Internal Server Error")
		return
	}
	_ = lambdahttp.WriteV2Response(w, &resp)
}

// applyCORS answers as API Gateway's CORS support does: an allowed
// origin gets Access-Control-Allow-Origin (and the exposed headers) on
// every answer, and a preflight (OPTIONS with Access-Control-Request-
// Method) is answered 204 by the gateway itself, without an invocation.
func (g *gateway) applyCORS(w http.ResponseWriter, r *http.Request) (answered bool) {
	origin := r.Header.Get("Origin")
	if g.cors == nil || origin == "" || !slices.ContainsFunc(g.cors.Origins, func(o string) bool { return o == "*" || strings.EqualFold(o, origin) }) {
		return false
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Add("Vary", "Origin")
	if len(g.cors.Expose) > 0 {
		h.Set("Access-Control-Expose-Headers", strings.Join(g.cors.Expose, ","))
	}
	if r.Method != http.MethodOptions || r.Header.Get("Access-Control-Request-Method") == "" {
		return false
	}
	h.Set("Access-Control-Allow-Methods", strings.Join(g.cors.Methods, ","))
	h.Set("Access-Control-Allow-Headers", strings.Join(g.cors.Headers, ","))
	if g.cors.MaxAge != "" {
		h.Set("Access-Control-Max-Age", g.cors.MaxAge)
	}
	w.WriteHeader(http.StatusNoContent)
	return true
}

// routePath is the route key's path (the template's pattern).
func routePath(fn app.Function, method string) string {
	for _, e := range fn.Endpoints {
		if e.Method == method {
			return e.Path
		}
	}
	return ""
}

func (g *gateway) invocations() map[string]int64 {
	m := map[string]int64{}
	for name, f := range g.fns {
		m[name] = f.count.Load()
	}
	return m
}

// tooLarge answers 413 with the §10 error body (sync.invalid_request).
func tooLarge(w http.ResponseWriter, format string, args ...any) {
	resp := httpapi.ErrorResponse(syncerr.New(syncerr.InvalidRequest, format, args...).WithStatus(http.StatusRequestEntityTooLarge))
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

// gatewayError is API Gateway's own error answer.
func gatewayError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]string{"message": msg})
	_, _ = w.Write(b)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
