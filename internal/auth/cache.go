package auth

import (
	"sync"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
)

// A warm function instance sees the same bearer token on every request of
// a client until it expires; verifying it again each time (base64, HMAC,
// JSON decoding of the claims) was a visible share of a quiet request.
// tokenCache remembers successful verifications only, keyed by the whole
// token string (an HMAC signature binds header and claims, and a token
// that differs in any byte is a different key), until the token's own exp:
// a cached token is never accepted after the instant a full verification
// would start rejecting it (exp is checked with leeway there, without it
// here). Failures are never cached — a token that is not valid yet, or
// that failed for any other reason, is verified in full next time. The
// cache is bounded in entries and in token length.
type tokenCache struct {
	mu sync.Mutex
	m  map[string]cachedToken
}

type cachedToken struct {
	auth   engine.Auth
	claims Claims // shared between requests: read only
	exp    time.Time
}

const (
	// maxCachedTokens bounds the cache; at maxCachedTokenBytes each it
	// holds at most 4 MiB of keys.
	maxCachedTokens     = 1024
	maxCachedTokenBytes = 4096
)

func (c *tokenCache) get(tok string, now time.Time) (cachedToken, bool) {
	c.mu.Lock()
	e, ok := c.m[tok]
	if ok && !now.Before(e.exp) {
		delete(c.m, tok)
		ok = false
	}
	c.mu.Unlock()
	return e, ok
}

func (c *tokenCache) put(tok string, e cachedToken, now time.Time) {
	if len(tok) > maxCachedTokenBytes || !now.Before(e.exp) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]cachedToken)
	}
	if len(c.m) >= maxCachedTokens {
		// Drop what expired; if that frees nothing, an arbitrary eighth
		// (map order is unspecified), so a flood of distinct valid tokens
		// costs verifications, never memory.
		for k, v := range c.m {
			if !now.Before(v.exp) {
				delete(c.m, k)
			}
		}
		for k := range c.m {
			if len(c.m) < maxCachedTokens-maxCachedTokens/8 {
				break
			}
			delete(c.m, k)
		}
	}
	c.m[tok] = e
}
