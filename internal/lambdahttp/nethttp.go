package lambdahttp

import (
	"context"
	"encoding/base64"
	"mime"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/skyfold/syncular-lambda/internal/auth"
	"github.com/skyfold/syncular-lambda/internal/core/httpapi"
)

// EventFromHTTP builds the HTTP API v2 event API Gateway would send for r
// (with body already read), so a plain HTTP server — the local runner —
// can drive the same Invoke path as Lambda. routeKey is e.g.
// "POST /sync"; API Gateway's conventions are mirrored: lower-case header
// names with repeated values comma-joined, the raw (still escaped) path,
// a base64 body for non-text content, and X-Forwarded-Proto.
func EventFromHTTP(r *http.Request, body []byte, routeKey, requestID string) events.APIGatewayV2HTTPRequest {
	h := make(map[string]string, len(r.Header)+3)
	// The lower-case names are cut from one string (one allocation, not
	// one per header), in the order the names were visited.
	var keyBuf [24]string
	keys := keyBuf[:0]
	n := 0
	for k := range r.Header {
		keys = append(keys, k)
		n += len(k)
	}
	lower := make([]byte, 0, n)
	for _, k := range keys {
		for i := 0; i < len(k); i++ {
			c := k[i]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			lower = append(lower, c)
		}
	}
	names := string(lower)
	for _, k := range keys {
		h[names[:len(k)]] = strings.Join(r.Header[k], ",")
		names = names[len(k):]
	}
	h["host"] = r.Host
	proto := "http"
	if r.TLS != nil {
		proto = "https"
	}
	if _, ok := h["x-forwarded-proto"]; !ok {
		h["x-forwarded-proto"] = proto
	}
	var qp map[string]string
	if r.URL.RawQuery != "" {
		if q := r.URL.Query(); len(q) > 0 {
			qp = make(map[string]string, len(q))
			for k, vs := range q {
				qp[k] = strings.Join(vs, ",")
			}
		}
	}
	sourceIP, _, _ := net.SplitHostPort(r.RemoteAddr)
	now := time.Now()
	ev := events.APIGatewayV2HTTPRequest{
		Version:               "2.0",
		RouteKey:              routeKey,
		RawPath:               r.URL.EscapedPath(),
		RawQueryString:        r.URL.RawQuery,
		Headers:               h,
		QueryStringParameters: qp,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey:   routeKey,
			Stage:      "$default",
			RequestID:  requestID,
			DomainName: r.Host,
			Time:       now.UTC().Format("02/Jan/2006:15:04:05 -0700"),
			TimeEpoch:  now.UnixMilli(),
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
				Method:    r.Method,
				Path:      r.URL.Path,
				Protocol:  r.Proto,
				SourceIP:  sourceIP,
				UserAgent: r.UserAgent(),
			},
		},
	}
	if len(body) > 0 {
		if textual(r.Header.Get("Content-Type"), r.Header.Get("Content-Encoding")) {
			ev.Body = string(body)
		} else {
			ev.Body = base64.StdEncoding.EncodeToString(body)
			ev.IsBase64Encoded = true
		}
	}
	return ev
}

// RequestFromHTTP converts r (its body already read into body) straight
// into the request that FromV2(EventFromHTTP(r, body, …)) yields, without
// building the event in between: no lower-cased header map, no base64
// round trip of the body, no second canonicalisation of every header name.
// It is the local runner's per-request path; TestRequestFromHTTPMatchesEvent
// holds it equal to the event path, which stays the reference.
//
// It adopts r.Header (repeated values are joined with commas, Host and
// X-Forwarded-Proto are added, as API Gateway does) and body, so the
// caller must not use either afterwards.
func RequestFromHTTP(r *http.Request, body []byte, requestID string) (*httpapi.Request, auth.Credentials) {
	h := r.Header
	if h == nil {
		h = make(http.Header, 2)
	}
	for k, vs := range h {
		name := k
		if textproto.CanonicalMIMEHeaderKey(k) != k || !isToken(k) {
			// The event path lower-cases every name and canonicalises it
			// again, which changes only a name that was not canonical or
			// (left as it is by textproto) not a valid token. net/http's
			// server never delivers either; a hand-built request may.
			name = textproto.CanonicalMIMEHeaderKey(strings.ToLower(k))
		}
		switch {
		case name != k:
			delete(h, k)
			// Two spellings of one name share one event key: which one
			// the event keeps depends on map order, so any is faithful.
			h[name] = []string{strings.Join(vs, ",")}
		case len(vs) > 1:
			h[k] = []string{strings.Join(vs, ",")}
		}
	}
	h["Host"] = []string{r.Host}
	if _, ok := h["X-Forwarded-Proto"]; !ok {
		if r.TLS != nil {
			h["X-Forwarded-Proto"] = httpsProto
		} else {
			h["X-Forwarded-Proto"] = httpProto
		}
	}
	var q url.Values // nil for no query, as FromV2 gives
	var err error
	if r.URL.RawQuery != "" {
		q, err = url.ParseQuery(r.URL.RawQuery)
	}
	if err != nil {
		// The event carries the parameters url.Values could parse, each
		// comma-joined, and FromV2 falls back to them.
		q = url.Values{}
		for k, vs := range r.URL.Query() {
			q.Set(k, strings.Join(vs, ","))
		}
	}
	path := r.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	if body == nil {
		body = []byte{}
	}
	return &httpapi.Request{
		Method:    strings.ToUpper(r.Method),
		Path:      path,
		Query:     q,
		Header:    h,
		Body:      body,
		RequestID: requestID,
	}, auth.Credentials{Authorization: h.Get("Authorization")}
}

// isToken reports whether name is an RFC 9110 token (the header name
// syntax).
func isToken(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// The added header values, shared and capped (an append copies them).
var (
	httpProto  = []string{"http"}[:1:1]
	httpsProto = []string{"https"}[:1:1]
)

// InvokeHTTP serves a net/http request exactly as InvokeV2 serves the v2
// event EventFromHTTP would build from it: same soft deadline,
// authentication, handler and response-size rule, with the request
// converted by RequestFromHTTP (which adopts r.Header and body).
func (h *Handler) InvokeHTTP(ctx context.Context, r *http.Request, body []byte, requestID string) *httpapi.Response {
	req, cr := RequestFromHTTP(r, body, requestID)
	return h.invoke(ctx, &converted{req: req, creds: cr})
}

// RefuseHTTP answers a net/http request whose body the host refused to
// read because it exceeds the request cap, as API Gateway refuses one
// Lambda could not carry: prefix is the body's first bytes (at most
// httpapi.OverCapPrefixBytes are kept) and sent its size as sent (-1 when
// unknown). The answer is httpapi's 413 §10 error, logged and counted by
// the function's handler (authenticated when the credentials verify, so
// the line names the actor).
func (h *Handler) RefuseHTTP(ctx context.Context, r *http.Request, prefix []byte, sent int64, requestID string) *httpapi.Response {
	if len(prefix) > httpapi.OverCapPrefixBytes {
		prefix = prefix[:httpapi.OverCapPrefixBytes]
	}
	if sent == 0 {
		sent = -1
	}
	req, cr := RequestFromHTTP(r, prefix, requestID)
	req.BodyOverCap = sent
	return h.invoke(ctx, &converted{req: req, creds: cr})
}

func textual(contentType, contentEncoding string) bool {
	if contentEncoding != "" && !strings.EqualFold(contentEncoding, "identity") {
		return false
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasPrefix(mt, "text/")
}

// WriteV2Response writes a v2 response document to w as API Gateway would.
func WriteV2Response(w http.ResponseWriter, resp *events.APIGatewayV2HTTPResponse) error {
	b := []byte(resp.Body)
	if resp.IsBase64Encoded {
		var err error
		if b, err = base64.StdEncoding.DecodeString(resp.Body); err != nil {
			http.Error(w, "bad base64 response body from function", http.StatusBadGateway)
			return err
		}
	}
	for k, v := range resp.Headers {
		w.Header().Set(k, v)
	}
	for k, vs := range resp.MultiValueHeaders {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	status := resp.StatusCode
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, err := w.Write(b)
	return err
}

// WriteResponse writes resp to w as API Gateway delivers a v2 response
// document: each header once, repeated values joined with ", " (the v2
// document has no multi-value headers), status 200 when unset.
func WriteResponse(w http.ResponseWriter, resp *httpapi.Response) error {
	wh := w.Header()
	for k, vs := range resp.Header {
		switch len(vs) {
		case 0:
			wh.Set(k, "")
		case 1:
			// The response's own one-value slice, capped so an append
			// by a later writer copies it: no allocation per header.
			wh[textproto.CanonicalMIMEHeaderKey(k)] = vs[:1:1]
		default:
			wh.Set(k, strings.Join(vs, ", "))
		}
	}
	status := resp.Status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, err := w.Write(resp.Body)
	return err
}

// ResponseBody returns the decoded body of a v2 response document.
func ResponseBody(resp *events.APIGatewayV2HTTPResponse) ([]byte, error) {
	if !resp.IsBase64Encoded {
		return []byte(resp.Body), nil
	}
	return base64.StdEncoding.DecodeString(resp.Body)
}
