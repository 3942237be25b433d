package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
)

// OIDC verifies bearer tokens in-process with the rules of API Gateway's
// JWT authorizer, for the routes that authorizer cannot guard (WebSocket
// APIs have no JWT authorizer, so the realtime $connect verifies its token
// itself):
//
//   - iss equals Issuer;
//   - aud contains one of Audiences, or, for a token without aud (Cognito
//     access tokens), client_id is one of them;
//   - the signature verifies against a key of the issuer's JWKS, found by
//     OpenID Connect discovery (<issuer>/.well-known/openid-configuration →
//     jwks_uri) and selected by the token's kid;
//   - exp is required; exp, nbf and iat are checked with Leeway;
//   - only RS256 and ES256 (no "none", no HMAC, so a public key can never
//     double as an HMAC secret).
//
// Keys are fetched on first use, kept for KeyTTL, and fetched again early
// when a token names a kid the set lacks (a rotation), at most once per
// MinRefetch. A failure to obtain the keys is ErrKeysUnavailable (a
// server-side fault the caller answers retryably); every other failure
// means the token is not accepted. No error carries the token.
type OIDC struct {
	Issuer    string
	Audiences []string
	Mapping   Mapping
	Leeway    time.Duration
	// HTTP fetches discovery and JWKS documents; nil means a client with
	// a 5 s timeout.
	HTTP *http.Client
	// KeyTTL is how long a fetched key set is used (default 1 h).
	KeyTTL time.Duration
	// MinRefetch spaces refetches caused by an unknown kid (default 30 s;
	// negative means no spacing).
	MinRefetch time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	mu        sync.Mutex
	keys      jwk.Set
	fetchedAt time.Time
}

// ErrKeysUnavailable reports that the issuer's keys could not be fetched:
// the token was not judged, and a later attempt may succeed.
var ErrKeysUnavailable = errors.New("auth: the issuer's signing keys could not be fetched")

// oidcAlgs are the accepted signature algorithms.
var oidcAlgs = []string{jwt.SigningMethodRS256.Alg(), jwt.SigningMethodES256.Alg()}

// maxDocBytes bounds a discovery or JWKS document.
const maxDocBytes = 1 << 20

func (o *OIDC) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// Authenticate verifies the bearer token and maps its claims.
func (o *OIDC) Authenticate(ctx context.Context, cr Credentials) (engine.Auth, Claims, error) {
	if cr.Authorization == "" {
		return engine.Auth{}, nil, ErrNoCredentials
	}
	tok, ok := bearer(cr.Authorization)
	if !ok {
		return engine.Auth{}, nil, errors.New("the Authorization header is not a Bearer token")
	}
	if o.Issuer == "" || len(o.Audiences) == 0 {
		return engine.Auth{}, nil, errors.New("token verification is not configured (issuer and audience)")
	}
	t := o.now()
	var keyErr error
	mc := jwt.MapClaims{}
	_, err := jwt.NewParser(
		jwt.WithValidMethods(oidcAlgs),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithJSONNumber(),
		jwt.WithLeeway(o.Leeway),
		jwt.WithIssuer(o.Issuer),
		jwt.WithTimeFunc(func() time.Time { return t }),
	).ParseWithClaims(tok, mc, func(jt *jwt.Token) (any, error) {
		if _, ok := jt.Header["crit"]; ok {
			return nil, errCritical
		}
		kid, _ := jt.Header["kid"].(string)
		if kid == "" {
			return nil, errNoKid
		}
		k, err := o.key(ctx, kid, jt.Method.Alg())
		if errors.Is(err, ErrKeysUnavailable) {
			keyErr = err
		}
		return k, err
	})
	if keyErr != nil {
		return engine.Auth{}, nil, keyErr
	}
	if err != nil {
		switch {
		case errors.Is(err, errNoKid), errors.Is(err, errUnknownKid):
			return engine.Auth{}, nil, errUnknownKid
		case errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrTokenUnverifiable):
			return engine.Auth{}, nil, errors.New("token signature or algorithm invalid (RS256 or ES256 with a key of the issuer)")
		}
		return engine.Auth{}, nil, tokenError(err)
	}
	if !o.audienceOK(mc) {
		return engine.Auth{}, nil, errors.New("token audience not accepted")
	}
	c := Claims(mc)
	au, err := o.Mapping.Map(c)
	if err != nil {
		return engine.Auth{}, nil, err
	}
	return au, c, nil
}

var (
	errNoKid      = errors.New("token header has no kid")
	errUnknownKid = errors.New("token names no key of the issuer (kid missing or unknown)")
)

// audienceOK applies API Gateway's audience rule: one of aud, or, when
// the token has no aud, its client_id, is an accepted audience.
func (o *OIDC) audienceOK(mc jwt.MapClaims) bool {
	if _, has := mc["aud"]; has {
		aud, err := mc.GetAudience()
		if err != nil {
			return false
		}
		return slices.ContainsFunc(aud, func(a string) bool { return slices.Contains(o.Audiences, a) })
	}
	cid, ok := mc["client_id"].(string)
	return ok && slices.Contains(o.Audiences, cid)
}

// key returns the public key of kid for alg, fetching the key set when it
// is absent, stale, or lacks kid (rate limited).
func (o *OIDC) key(ctx context.Context, kid, alg string) (any, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.now()
	ttl := o.KeyTTL
	if ttl <= 0 {
		ttl = time.Hour
	}
	if o.keys == nil || t.Sub(o.fetchedAt) >= ttl {
		if err := o.refresh(ctx, t); err != nil {
			return nil, err
		}
	}
	k, ok := o.keys.LookupKeyID(kid)
	if !ok {
		minRe := o.MinRefetch
		if minRe == 0 {
			minRe = 30 * time.Second
		}
		if t.Sub(o.fetchedAt) < minRe {
			return nil, errUnknownKid
		}
		if err := o.refresh(ctx, t); err != nil {
			return nil, err
		}
		if k, ok = o.keys.LookupKeyID(kid); !ok {
			return nil, errUnknownKid
		}
	}
	if use, ok := k.KeyUsage(); ok && use != "" && use != "sig" {
		return nil, errUnknownKid
	}
	if ka, ok := k.Algorithm(); ok && ka.String() != "" && ka.String() != alg {
		return nil, fmt.Errorf("key %q is for %s, not %s", kid, ka, alg)
	}
	var raw any
	if err := jwk.Export(k, &raw); err != nil {
		return nil, fmt.Errorf("key %q unusable: %w", kid, err)
	}
	switch pk := raw.(type) {
	case *rsa.PublicKey:
		if alg == jwt.SigningMethodRS256.Alg() && pk.N.BitLen() >= 2048 {
			return pk, nil
		}
	case *ecdsa.PublicKey:
		if alg == jwt.SigningMethodES256.Alg() && pk.Curve == elliptic.P256() {
			return pk, nil
		}
	}
	return nil, fmt.Errorf("key %q does not fit %s", kid, alg)
}

// refresh fetches the discovery document and the key set. Called with
// o.mu held. On failure the previous set stays, but it is only used again
// while it is fresh.
func (o *OIDC) refresh(ctx context.Context, t time.Time) error {
	var disc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := o.getJSON(ctx, strings.TrimSuffix(o.Issuer, "/")+"/.well-known/openid-configuration", &disc); err != nil {
		return fmt.Errorf("%w: discovery: %v", ErrKeysUnavailable, err)
	}
	// OpenID Connect Discovery §4.3: the document's issuer is the issuer.
	if disc.Issuer != o.Issuer {
		return fmt.Errorf("%w: discovery document names issuer %q", ErrKeysUnavailable, disc.Issuer)
	}
	var raw json.RawMessage
	if err := o.getJSON(ctx, disc.JWKSURI, &raw); err != nil {
		return fmt.Errorf("%w: jwks: %v", ErrKeysUnavailable, err)
	}
	set, err := jwk.Parse(raw)
	if err != nil {
		return fmt.Errorf("%w: jwks: %v", ErrKeysUnavailable, err)
	}
	o.keys, o.fetchedAt = set, t
	return nil
}

func (o *OIDC) getJSON(ctx context.Context, u string, dst any) error {
	pu, err := url.Parse(u)
	if err != nil || pu.Scheme != "https" || pu.Host == "" {
		return fmt.Errorf("%q is not an https URL", u)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	hc := o.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 5 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", u, resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxDocBytes+1))
	if err != nil {
		return err
	}
	if len(b) > maxDocBytes {
		return fmt.Errorf("GET %s: document over %d bytes", u, maxDocBytes)
	}
	return json.Unmarshal(b, dst)
}

// FirstOf authenticates with the claims an authorizer already verified
// when the request carries them, and otherwise with Token.
type FirstOf struct {
	Authorizer *AuthorizerClaims
	Token      Authenticator
}

// Authenticate implements Authenticator.
func (f *FirstOf) Authenticate(ctx context.Context, cr Credentials) (engine.Auth, Claims, error) {
	if len(cr.AuthorizerClaims) > 0 {
		return f.Authorizer.Authenticate(ctx, cr)
	}
	return f.Token.Authenticate(ctx, cr)
}
