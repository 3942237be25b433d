package lambdahttp

import (
	"encoding/base64"
	"mime"
	"net"
	"net/http"
	"net/textproto"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

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
