package auth

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
)

// HS256 verifies HS256 bearer tokens in-process. The algorithm is pinned
// (no "none", no RS/HS confusion) and exp is required, so a leaked token
// stops working on its own.
type HS256 struct {
	Key     []byte
	Mapping Mapping
	// Issuer and Audience are enforced when non-empty.
	Issuer   string
	Audience string
	// Leeway tolerates clock skew on exp/nbf/iat.
	Leeway time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	// cache holds successful verifications until their exp (cache.go).
	cache tokenCache
}

// Authenticate verifies the bearer token and maps its claims. Errors name
// what failed, never the token.
func (h *HS256) Authenticate(_ context.Context, cr Credentials) (engine.Auth, Claims, error) {
	if cr.Authorization == "" {
		return engine.Auth{}, nil, ErrNoCredentials
	}
	tok, ok := bearer(cr.Authorization)
	if !ok {
		return engine.Auth{}, nil, errors.New("the Authorization header is not a Bearer token")
	}
	now := time.Now
	if h.Now != nil {
		now = h.Now
	}
	t := now()
	if e, ok := h.cache.get(tok, t); ok {
		return e.auth, e.claims, nil
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithJSONNumber(),
		jwt.WithLeeway(h.Leeway),
	}
	opts = append(opts, jwt.WithTimeFunc(func() time.Time { return t }))
	if h.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(h.Issuer))
	}
	if h.Audience != "" {
		opts = append(opts, jwt.WithAudience(h.Audience))
	}
	mc := jwt.MapClaims{}
	_, err := jwt.NewParser(opts...).ParseWithClaims(tok, mc, func(t *jwt.Token) (any, error) {
		// RFC 7515 §4.1.11: a recipient must reject a token whose "crit"
		// header names extensions it does not process — and this verifier
		// processes none (the JWT library ignores "crit" otherwise).
		if _, ok := t.Header["crit"]; ok {
			return nil, errCritical
		}
		return h.Key, nil
	})
	if err != nil {
		return engine.Auth{}, nil, tokenError(err)
	}
	c := Claims(mc)
	au, err := h.Mapping.Map(c)
	if err != nil {
		return engine.Auth{}, nil, err
	}
	if exp, err := mc.GetExpirationTime(); err == nil && exp != nil {
		h.cache.put(tok, cachedToken{auth: au, claims: c, exp: exp.Time}, t)
	}
	return au, c, nil
}

// errCritical rejects tokens carrying a "crit" header.
var errCritical = errors.New(`token has a "crit" header naming extensions this server does not process`)

// tokenError condenses a jwt error to a fixed, token-free message.
func tokenError(err error) error {
	switch {
	case errors.Is(err, errCritical):
		return errCritical
	case errors.Is(err, jwt.ErrTokenExpired):
		return errors.New("token expired")
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return errors.New("token lacks a required claim (exp)")
	case errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrTokenUnverifiable):
		// Wrong key and a non-HS256 alg land here alike.
		return errors.New("token signature or algorithm invalid (HS256 only)")
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return errors.New("token not valid yet")
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return errors.New("token issuer not accepted")
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return errors.New("token audience not accepted")
	case errors.Is(err, jwt.ErrTokenMalformed):
		return errors.New("token malformed")
	}
	return errors.New("token invalid")
}

// MintHS256 signs claims with key, adding iat and exp (now+ttl). For the
// local runner's dev token and for tests; production tokens come from the
// app's identity provider.
func MintHS256(key []byte, claims Claims, ttl time.Duration, now time.Time) (string, error) {
	if len(key) == 0 {
		return "", errors.New("auth: empty HS256 key")
	}
	mc := jwt.MapClaims{}
	for k, v := range claims {
		mc[k] = v
	}
	mc["iat"] = now.Unix()
	mc["exp"] = now.Add(ttl).Unix()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, mc).SignedString(key)
	if err != nil {
		return "", fmt.Errorf("auth: sign token: %w", err)
	}
	return s, nil
}
