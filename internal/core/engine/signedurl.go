package engine

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// Native signed URL tokens (§5.4):
//
//	st = base64url(payload) "." base64url(HMAC-SHA256(key, payload))
//
// with payload {"v":2,"seg":…,"sd":…,"aud":…,"ep":…,"exp":<unix seconds>}.
// aud is a keyed hash of the partition: stable per partition, and a client
// cannot derive the partition id from it. ep is the partition's log epoch
// at minting: after an epoch rotation (§2.1) the token no longer verifies.
// The payload is parsed strictly: exactly these keys, each once, spelled
// exactly so (no case folding), no trailing data.

// maxTokenSkewSeconds is the §5.4 verification allowance for clock error.
const maxTokenSkewSeconds = 60

// tokenVersion is the claims layout minted and accepted.
const tokenVersion = 2

type tokenClaims struct {
	V   int    `json:"v"`
	Seg string `json:"seg"`
	SD  string `json:"sd"`
	Aud string `json:"aud"`
	Ep  string `json:"ep"`
	Exp int64  `json:"exp"`
}

// parseTokenClaims decodes a token payload strictly. encoding/json alone
// would match keys case-insensitively, keep the last of duplicate keys and
// ignore unknown ones; a token must mean exactly one thing.
func parseTokenClaims(payload []byte) (tokenClaims, error) {
	var c tokenClaims
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return c, errors.New("not an object")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return c, err
		}
		key, _ := tok.(string)
		if seen[key] {
			return c, fmt.Errorf("duplicate claim %q", key)
		}
		seen[key] = true
		var dst any
		switch key {
		case "v":
			dst = &c.V
		case "seg":
			dst = &c.Seg
		case "sd":
			dst = &c.SD
		case "aud":
			dst = &c.Aud
		case "ep":
			dst = &c.Ep
		case "exp":
			dst = &c.Exp
		default:
			return c, fmt.Errorf("unknown claim %q", key)
		}
		if err := dec.Decode(dst); err != nil {
			return c, fmt.Errorf("claim %q: %w", key, err)
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return c, errors.New("unterminated object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return c, errors.New("trailing data")
	}
	if len(seen) != 6 {
		return c, errors.New("missing claims")
	}
	return c, nil
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

// MintToken returns a native token for segmentID bound to digest,
// partition and the partition's log epoch, expiring at expSeconds (unix
// seconds).
func (e *Engine) MintToken(segmentID, digest, partition, logEpoch string, expSeconds int64) string {
	return e.signToken(tokenClaims{V: tokenVersion, Seg: segmentID, SD: digest, Aud: e.audience(partition), Ep: logEpoch, Exp: expSeconds})
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
	c, err = parseTokenClaims(payload)
	if err != nil || c.V != tokenVersion || c.Ep == "" {
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
		tok := e.MintToken(segmentID, digest, rs.auth.Partition, rs.head.LogEpoch, expS)
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
