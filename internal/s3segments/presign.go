package s3segments

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// credentialSkew is kept between a URL's expiry and its credentials'
// expiry: a URL signed with temporary credentials stops working when they
// expire, whatever X-Amz-Expires says.
const credentialSkew = 30 * time.Second

// PresignGet implements store.Presigner (§5.4 delegated presign): an S3
// presigned GET of the segment's object, whose key embeds the segment id.
// The lifetime is the smallest of ttlMs, 15 minutes and the signing
// credentials' remaining life; the returned expiry is never later than
// nowMs+ttlMs nor than the signature's own expiry.
func (s *Segments) PresignGet(ctx context.Context, segmentID string, nowMs, ttlMs int64) (string, int64, error) {
	key, ok := s.ObjectKey(segmentID)
	if !ok {
		return "", 0, fmt.Errorf("s3segments: malformed segment id %q", segmentID)
	}
	ttl := min(time.Duration(ttlMs)*time.Millisecond, MaxURLTTL)
	prov := s.s3.Options().Credentials
	if prov == nil {
		return "", 0, errors.New("s3segments: the S3 client has no credentials to sign with")
	}
	creds, err := prov.Retrieve(ctx)
	if err != nil {
		return "", 0, fmt.Errorf("s3segments: signing credentials: %w", err)
	}
	signAt := s.opts.Now()
	if creds.CanExpire {
		ttl = min(ttl, creds.Expires.Sub(signAt)-credentialSkew)
	}
	ttl = ttl.Truncate(time.Second) // X-Amz-Expires is whole seconds
	if ttl < time.Second {
		return "", 0, errors.New("s3segments: signing credentials expire too soon to presign a URL")
	}
	req, err := s3.NewPresignClient(s.s3).PresignGetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(key),
	}, s3.WithPresignExpires(ttl))
	if err != nil {
		return "", 0, fmt.Errorf("s3segments: presign: %w", err)
	}
	exp := nowMs + ttl.Milliseconds()
	if signed, ok := signedExpiry(req.URL); ok {
		exp = min(exp, signed)
	}
	return req.URL, exp, nil
}

// signedExpiry reads X-Amz-Date + X-Amz-Expires from a SigV4 URL (ms).
func signedExpiry(u string) (int64, bool) {
	pu, err := url.Parse(u)
	if err != nil {
		return 0, false
	}
	q := pu.Query()
	t, err := time.Parse("20060102T150405Z", q.Get("X-Amz-Date"))
	if err != nil {
		return 0, false
	}
	sec, err := strconv.ParseInt(q.Get("X-Amz-Expires"), 10, 64)
	if err != nil {
		return 0, false
	}
	return t.Add(time.Duration(sec) * time.Second).UnixMilli(), true
}
