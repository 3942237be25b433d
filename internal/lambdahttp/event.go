// Package lambdahttp adapts API Gateway proxy events (HTTP API payload v2
// and REST API v1) to the transport-neutral httpapi surface. It holds no
// protocol logic: it converts events, authenticates, calls
// httpapi.Handler.Serve and converts the response back, base64 where the
// body is binary.
package lambdahttp

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/skyfold/syncular-lambda/internal/auth"
	"github.com/skyfold/syncular-lambda/internal/core/httpapi"
)

// rawEvent is the union of the v1 and v2 proxy event shapes, decoded in
// one pass over the (possibly large) body. requestContext is decoded
// separately once the version is known.
type rawEvent struct {
	Version                         string              `json:"version"`
	RawPath                         string              `json:"rawPath"`
	RawQueryString                  string              `json:"rawQueryString"`
	HTTPMethod                      string              `json:"httpMethod"`
	Path                            string              `json:"path"`
	Headers                         map[string]string   `json:"headers"`
	MultiValueHeaders               map[string][]string `json:"multiValueHeaders"`
	QueryStringParameters           map[string]string   `json:"queryStringParameters"`
	MultiValueQueryStringParameters map[string][]string `json:"multiValueQueryStringParameters"`
	RequestContext                  json.RawMessage     `json:"requestContext"`
	Body                            string              `json:"body"`
	IsBase64Encoded                 bool                `json:"isBase64Encoded"`
	// ForwardedBy is the forwarding marker (forward.go): a top-level
	// member API Gateway never writes, so no client can set it.
	ForwardedBy string `json:"syncularForwardedBy"`
}

// v2Context is the part of the v2 request context we use. Claims decode
// as any: API Gateway sends strings, but a hand-written event or a Lambda
// authorizer context may carry numbers or objects, and a strict
// map[string]string would reject the whole event.
type v2Context struct {
	RequestID  string `json:"requestId"`
	DomainName string `json:"domainName"`
	HTTP       struct {
		Method string `json:"method"`
	} `json:"http"`
	Authorizer *struct {
		JWT *struct {
			Claims map[string]any `json:"claims"`
		} `json:"jwt"`
		Lambda map[string]any `json:"lambda"`
	} `json:"authorizer"`
}

// v1Context is the part of the REST API request context we use.
type v1Context struct {
	RequestID  string         `json:"requestId"`
	DomainName string         `json:"domainName"`
	Authorizer map[string]any `json:"authorizer"`
}

// converted is one request ready for authentication and Serve.
type converted struct {
	req   *httpapi.Request
	creds auth.Credentials
	v1    bool
}

var errUnknownEvent = errors.New("lambdahttp: event is neither an API Gateway v2 (version 2.0) nor a v1 proxy event")

// decodeEvent parses a raw invocation payload.
func decodeEvent(payload []byte) (*converted, error) {
	var ev rawEvent
	if err := json.Unmarshal(payload, &ev); err != nil {
		return nil, fmt.Errorf("lambdahttp: decode event: %w", err)
	}
	switch {
	case ev.Version == "2.0":
		var rc v2Context
		if len(ev.RequestContext) > 0 {
			if err := json.Unmarshal(ev.RequestContext, &rc); err != nil {
				return nil, fmt.Errorf("lambdahttp: decode requestContext: %w", err)
			}
		}
		var claims auth.Claims
		if a := rc.Authorizer; a != nil {
			switch {
			case a.JWT != nil && len(a.JWT.Claims) > 0:
				claims = a.JWT.Claims
			case len(a.Lambda) > 0:
				claims = a.Lambda
			}
		}
		c, err := fromV2Parts(ev.RawPath, ev.RawQueryString, ev.QueryStringParameters, rc.HTTP.Method, ev.Headers, ev.Body, ev.IsBase64Encoded, rc.RequestID, rc.DomainName, claims)
		if err == nil {
			// The event as received, for a Forwarder; a forwarded one is
			// never forwarded again.
			c.req.Event, c.req.Forwarded = payload, ev.ForwardedBy != ""
		}
		return c, err
	case ev.HTTPMethod != "":
		var rc v1Context
		if len(ev.RequestContext) > 0 {
			if err := json.Unmarshal(ev.RequestContext, &rc); err != nil {
				return nil, fmt.Errorf("lambdahttp: decode requestContext: %w", err)
			}
		}
		return fromV1Parts(ev.HTTPMethod, ev.Path, ev.Headers, ev.MultiValueHeaders, ev.QueryStringParameters, ev.MultiValueQueryStringParameters, ev.Body, ev.IsBase64Encoded, rc.RequestID, rc.DomainName, v1Claims(rc.Authorizer))
	}
	return nil, errUnknownEvent
}

// FromV2 converts a typed HTTP API v2 event.
func FromV2(ev *events.APIGatewayV2HTTPRequest) (*httpapi.Request, auth.Credentials, error) {
	var claims auth.Claims
	if a := ev.RequestContext.Authorizer; a != nil {
		switch {
		case a.JWT != nil && len(a.JWT.Claims) > 0:
			claims = make(auth.Claims, len(a.JWT.Claims))
			for k, v := range a.JWT.Claims {
				claims[k] = v
			}
		case len(a.Lambda) > 0:
			claims = a.Lambda
		}
	}
	c, err := fromV2Parts(ev.RawPath, ev.RawQueryString, ev.QueryStringParameters, ev.RequestContext.HTTP.Method, ev.Headers, ev.Body, ev.IsBase64Encoded, ev.RequestContext.RequestID, ev.RequestContext.DomainName, claims)
	if err != nil {
		return nil, auth.Credentials{}, err
	}
	return c.req, c.creds, nil
}

// FromV1 converts a typed REST API v1 proxy event.
func FromV1(ev *events.APIGatewayProxyRequest) (*httpapi.Request, auth.Credentials, error) {
	c, err := fromV1Parts(ev.HTTPMethod, ev.Path, ev.Headers, ev.MultiValueHeaders, ev.QueryStringParameters, ev.MultiValueQueryStringParameters, ev.Body, ev.IsBase64Encoded, ev.RequestContext.RequestID, ev.RequestContext.DomainName, v1Claims(ev.RequestContext.Authorizer))
	if err != nil {
		return nil, auth.Credentials{}, err
	}
	return c.req, c.creds, nil
}

// v1Claims finds verified claims in a REST API authorizer context: a
// Cognito user pool authorizer puts them under "claims", an HTTP-API-style
// JWT context under "jwt.claims"; a Lambda authorizer's context is flat.
func v1Claims(a map[string]any) auth.Claims {
	if len(a) == 0 {
		return nil
	}
	if c, ok := a["claims"].(map[string]any); ok {
		return c
	}
	if j, ok := a["jwt"].(map[string]any); ok {
		if c, ok := j["claims"].(map[string]any); ok {
			return c
		}
	}
	flat := make(auth.Claims, len(a))
	for k, v := range a {
		if k == "principalId" || k == "integrationLatency" {
			continue
		}
		flat[k] = v
	}
	if len(flat) == 0 {
		return nil
	}
	return flat
}

func fromV2Parts(rawPath, rawQuery string, qp map[string]string, method string, headers map[string]string, body string, b64 bool, requestID, _ string, claims auth.Claims) (*converted, error) {
	h := make(http.Header, len(headers))
	// v2 joins repeated headers with commas already: one value per name,
	// all in one backing array (h.Set would allocate a slice per header).
	vals := make([]string, 0, len(headers))
	for k, v := range headers {
		vals = append(vals, v)
		h[textproto.CanonicalMIMEHeaderKey(k)] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	var q url.Values // nil for no query: reads of a nil map are empty
	var err error
	if rawQuery != "" {
		q, err = url.ParseQuery(rawQuery)
	}
	if err != nil || (rawQuery == "" && len(qp) > 0) {
		q = url.Values{}
		for k, v := range qp {
			q.Set(k, v)
		}
	}
	if rawPath == "" {
		rawPath = "/"
	}
	data, err := decodeBody(body, b64)
	if err != nil {
		return nil, err
	}
	return &converted{
		req: &httpapi.Request{
			Method:    strings.ToUpper(method),
			Path:      rawPath, // still percent-encoded: segment ids decode once, in httpapi
			Query:     q,
			Header:    h,
			Body:      data,
			RequestID: requestID,
		},
		creds: auth.Credentials{Authorization: h.Get("Authorization"), AuthorizerClaims: claims},
	}, nil
}

func fromV1Parts(method, path string, headers map[string]string, mvh map[string][]string, qp map[string]string, mvq map[string][]string, body string, b64 bool, requestID, _ string, claims auth.Claims) (*converted, error) {
	h := make(http.Header, len(headers))
	if len(mvh) > 0 {
		for k, vs := range mvh {
			for _, v := range vs {
				h.Add(k, v)
			}
		}
	} else {
		for k, v := range headers {
			h.Set(k, v)
		}
	}
	q := url.Values{}
	if len(mvq) > 0 {
		for k, vs := range mvq {
			q[k] = append([]string(nil), vs...)
		}
	} else {
		for k, v := range qp {
			q.Set(k, v)
		}
	}
	data, err := decodeBody(body, b64)
	if err != nil {
		return nil, err
	}
	// v1 delivers the decoded path; re-escape it so httpapi's single
	// unescape of the segment id is right.
	escaped := (&url.URL{Path: path}).EscapedPath()
	if escaped == "" {
		escaped = "/"
	}
	return &converted{
		req: &httpapi.Request{
			Method:    strings.ToUpper(method),
			Path:      escaped,
			Query:     q,
			Header:    h,
			Body:      data,
			RequestID: requestID,
		},
		creds: auth.Credentials{Authorization: h.Get("Authorization"), AuthorizerClaims: claims},
		v1:    true,
	}, nil
}

// errBadBase64 is a client-visible 400: API Gateway never sends it, but a
// hand-written event can.
var errBadBase64 = errors.New("request body is not valid base64")

func decodeBody(body string, b64 bool) ([]byte, error) {
	if !b64 {
		return []byte(body), nil
	}
	b, err := base64.StdEncoding.DecodeString(body)
	if err != nil {
		return nil, errBadBase64
	}
	return b, nil
}
