package conformancehost

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// presignedS3 stands in front of the in-process S3 server and checks what
// S3 checks of a presigned request and gofakes3 does not: the SigV4 query
// signature over the method, path, query and signed headers (so a PUT
// whose body length differs from the Content-Length the grant signed, or
// any edited URL, is refused) and the expiry (X-Amz-Date + X-Amz-Expires,
// on the wall clock, as S3 does; the presigner signs with it too).
// Requests signed in headers (the adapters' own SDK calls) pass through.
type presignedS3 struct {
	next   http.Handler
	creds  aws.Credentials
	region string
}

func (p *presignedS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("X-Amz-Signature") {
		if code, err := p.verify(r, time.Now()); err != nil {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprintf(w, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s</Code><Message>%s</Message></Error>", code, err.Error())
			return
		}
	}
	p.next.ServeHTTP(w, r)
}

// verify re-signs the request as the presigner did and compares.
func (p *presignedS3) verify(r *http.Request, now time.Time) (code string, err error) {
	q := r.URL.Query()
	if q.Get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256" {
		return "AuthorizationQueryParametersError", errors.New("X-Amz-Algorithm must be AWS4-HMAC-SHA256")
	}
	at, err := time.Parse("20060102T150405Z", q.Get("X-Amz-Date"))
	if err != nil {
		return "AuthorizationQueryParametersError", errors.New("malformed X-Amz-Date")
	}
	secs, err := strconv.Atoi(q.Get("X-Amz-Expires"))
	if err != nil || secs < 1 || secs > 7*24*3600 {
		return "AuthorizationQueryParametersError", errors.New("malformed X-Amz-Expires")
	}
	if now.After(at.Add(time.Duration(secs) * time.Second)) {
		return "AccessDenied", errors.New("request has expired")
	}
	want := q.Get("X-Amz-Signature")
	q.Del("X-Amz-Signature")
	u := url.URL{Scheme: "http", Host: r.Host, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: q.Encode()}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, u.String(), nil)
	if err != nil {
		return "AccessDenied", err
	}
	req.Host = r.Host
	for _, h := range strings.Split(q.Get("X-Amz-SignedHeaders"), ";") {
		switch h {
		case "host", "":
		case "content-length":
			// The signer signs the request's length, not a header.
			req.ContentLength = r.ContentLength
		default:
			for _, v := range r.Header.Values(h) {
				req.Header.Add(h, v)
			}
		}
	}
	signed, _, err := v4.NewSigner().PresignHTTP(context.WithoutCancel(r.Context()), p.creds, req, "UNSIGNED-PAYLOAD", "s3", p.region, at)
	if err != nil {
		return "AccessDenied", err
	}
	su, err := url.Parse(signed)
	if err != nil {
		return "AccessDenied", err
	}
	if got := su.Query().Get("X-Amz-Signature"); !hmac.Equal([]byte(got), []byte(want)) {
		return "SignatureDoesNotMatch", errors.New("the request signature we calculated does not match the signature provided")
	}
	return "", nil
}
