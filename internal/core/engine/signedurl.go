package engine

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
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
// with payload {"v":3,"seg":…,"sd":…,"pt":…,"ep":…,"exp":<unix seconds>}.
// pt is the partition sealed under a key derived from the signing key:
// stable per partition, a client cannot read the partition id from it,
// and the server recovers it, so a download looks up only the
// publications of that partition, epoch and digest (issue 11 item 5;
// version 2 carried a one-way hash of the partition instead, which left
// no way to find them but reading every tenant's). ep is the partition's
// log epoch at minting: after an epoch rotation (§2.1) the token no longer
// verifies.
// The payload is parsed strictly: exactly these keys, each once, spelled
// exactly so (no case folding), no trailing data.

// maxTokenSkewSeconds is the §5.4 verification allowance for clock error.
const maxTokenSkewSeconds = 60

// tokenVersion is the claims layout minted and accepted.
const tokenVersion = 3

type tokenClaims struct {
	V   int    `json:"v"`
	Seg string `json:"seg"`
	SD  string `json:"sd"`
	PT  string `json:"pt"`
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
		case "pt":
			dst = &c.PT
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

// tokenKey derives a purpose-bound key from the signing key.
func (e *Engine) tokenKey(purpose string) []byte {
	m := hmac.New(sha256.New, e.cfg.SigningKey)
	m.Write([]byte(purpose))
	m.Write([]byte{0})
	return m.Sum(nil)
}

// partitionAEAD is AES-256-GCM under the pt sealing key.
func (e *Engine) partitionAEAD() cipher.AEAD {
	b, err := aes.NewCipher(e.tokenKey("syncular-segment-pt-key"))
	if err != nil {
		panic(err) // a 32-byte key always makes a cipher
	}
	a, err := cipher.NewGCM(b)
	if err != nil {
		panic(err)
	}
	return a
}

// sealPartition renders the pt claim: nonce ‖ AES-GCM(partition), the
// nonce a keyed hash of the partition (a synthetic IV: one partition
// always seals to one claim, two partitions never share a nonce).
func (e *Engine) sealPartition(partition string) string {
	a := e.partitionAEAD()
	m := hmac.New(sha256.New, e.tokenKey("syncular-segment-pt-nonce"))
	m.Write([]byte(partition))
	nonce := m.Sum(nil)[:a.NonceSize()]
	return base64.RawURLEncoding.EncodeToString(a.Seal(nonce, nonce, []byte(partition), []byte("pt")))
}

// openPartition recovers the partition from a pt claim.
func (e *Engine) openPartition(pt string) (string, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(pt)
	a := e.partitionAEAD()
	if err != nil || len(raw) < a.NonceSize() {
		return "", false
	}
	p, err := a.Open(nil, raw[:a.NonceSize()], raw[a.NonceSize():], []byte("pt"))
	if err != nil {
		return "", false
	}
	return string(p), true
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
	return e.signToken(tokenClaims{V: tokenVersion, Seg: segmentID, SD: digest, PT: e.sealPartition(partition), Ep: logEpoch, Exp: expSeconds})
}

// verifyToken checks the MAC and the claims that need no storage: version,
// expiry (with skew) and the segment id, and recovers the partition from
// pt. sd and ep are checked against the segment's publications by the
// caller.
func (e *Engine) verifyToken(st, segmentID string, nowMs int64) (tokenClaims, string, error) {
	var c tokenClaims
	deny := func(why string) (tokenClaims, string, error) {
		return c, "", syncerr.New(syncerr.Forbidden, "segment token rejected: %s", why)
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
	partition, ok := e.openPartition(c.PT)
	if !ok {
		return deny("unreadable partition claim")
	}
	if nowMs/1000 > c.Exp+maxTokenSkewSeconds {
		return c, "", syncerr.New(syncerr.SegmentExpired, "segment URL expired; pull again for a fresh one (§5.4)")
	}
	return c, partition, nil
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
