package engine

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"strings"

	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// Native signed URL tokens (§5.4):
//
//	st = base64url(payload) "." base64url(HMAC-SHA256(key, payload))
//
// with payload {"v":1,"seg":…,"sd":…,"aud":…,"exp":<unix seconds>}. aud is
// a keyed hash of the partition: stable per partition, and a client cannot
// derive the partition id from it.

// maxTokenSkewSeconds is the §5.4 verification allowance for clock error.
const maxTokenSkewSeconds = 60

type tokenClaims struct {
	V   int    `json:"v"`
	Seg string `json:"seg"`
	SD  string `json:"sd"`
	Aud string `json:"aud"`
	Exp int64  `json:"exp"`
}

// audience derives the token audience of a partition.
func (e *Engine) audience(partition string) string {
	m := hmac.New(sha256.New, e.cfg.SigningKey)
	m.Write([]byte("syncular-segment-aud\x00"))
	m.Write([]byte(partition))
	return hex.EncodeToString(m.Sum(nil))[:32]
}

func (e *Engine) signToken(c tokenClaims) string {
	payload, _ := json.Marshal(c) // fixed struct: cannot fail
	m := hmac.New(sha256.New, e.cfg.SigningKey)
	m.Write(payload)
	return base64.RawURLEncoding.EncodeToString(payload) + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// MintToken returns a native token for segmentID bound to digest and
// partition, expiring at expSeconds (unix seconds).
func (e *Engine) MintToken(segmentID, digest, partition string, expSeconds int64) string {
	return e.signToken(tokenClaims{V: 1, Seg: segmentID, SD: digest, Aud: e.audience(partition), Exp: expSeconds})
}

// verifyToken checks the MAC and the claims that need no storage: version,
// expiry (with skew) and the segment id. sd and aud are checked against
// the segment's publications by the caller.
func (e *Engine) verifyToken(st, segmentID string, nowMs int64) (tokenClaims, error) {
	var c tokenClaims
	deny := func(why string) (tokenClaims, error) {
		return c, syncerr.New(syncerr.Forbidden, "segment token rejected: %s", why)
	}
	if len(e.cfg.SigningKey) == 0 {
		return deny("this server does not issue native tokens")
	}
	dot := strings.IndexByte(st, '.')
	if dot <= 0 || dot == len(st)-1 {
		return deny("malformed")
	}
	payload, err := base64.RawURLEncoding.DecodeString(st[:dot])
	if err != nil {
		return deny("malformed payload")
	}
	mac, err := base64.RawURLEncoding.DecodeString(st[dot+1:])
	if err != nil {
		return deny("malformed signature")
	}
	m := hmac.New(sha256.New, e.cfg.SigningKey)
	m.Write(payload)
	if !hmac.Equal(mac, m.Sum(nil)) {
		return deny("bad signature")
	}
	if err := json.Unmarshal(payload, &c); err != nil || c.V != 1 {
		return deny("unsupported claims")
	}
	if c.Seg != segmentID {
		return deny("issued for another segment")
	}
	if nowMs/1000 > c.Exp+maxTokenSkewSeconds {
		return c, syncerr.New(syncerr.SegmentExpired, "segment URL expired; pull again for a fresh one (§5.4)")
	}
	return c, nil
}

// signedURL mints a URL for a descriptor when the host issues them (§5.4).
func (e *Engine) signedURL(ctx context.Context, rs *reqState, segmentID, digest string) (string, int64, bool, error) {
	ttl := e.limits.SignedURLTTL.Milliseconds()
	switch e.cfg.SignedURLs {
	case SignedURLsNative:
		if rs.opts.SegmentBaseURL == "" {
			return "", 0, false, nil
		}
		expMs := rs.now + ttl
		expS := expMs / 1000
		tok := e.MintToken(segmentID, digest, rs.auth.Partition, expS)
		u := strings.TrimRight(rs.opts.SegmentBaseURL, "/") + "/" + url.PathEscape(segmentID) + "?st=" + url.QueryEscape(tok)
		return u, expS * 1000, true, nil
	case SignedURLsPresign:
		u, exp, err := e.cfg.Presigner.PresignGet(ctx, segmentID, rs.now, ttl)
		if err != nil {
			return "", 0, false, storeErr(err, "presign segment URL")
		}
		return u, exp, true, nil
	}
	return "", 0, false, nil
}
