package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/skyfold/syncular-lambda/internal/auth/authtest"
)

// The $connect verifier follows API Gateway's JWT authorizer: issuer,
// audience (aud, else client_id), signature by a key of the issuer's
// discovered JWKS, exp required, RS256/ES256 only; claims map like the
// HTTP path's.
func TestOIDCVerifiesLikeTheJWTAuthorizer(t *testing.T) {
	p := authtest.NewIssuer(t)
	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	ek, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	otherRK, _ := rsa.GenerateKey(rand.Reader, 2048)
	p.SetKeys(authtest.RSAJWK("r1", &rk.PublicKey), authtest.ECJWK("e1", &ek.PublicKey))
	iss := p.URL()
	o := &OIDC{Issuer: iss, Audiences: []string{"app-a", "app-b"}, Leeway: 30 * time.Second,
		Mapping: Mapping{PartitionClaim: "tenant"}, HTTP: p.Client(), Now: clock}
	good := func() jwt.MapClaims {
		return jwt.MapClaims{"iss": iss, "aud": "app-b", "sub": "u1", "tenant": "t1",
			"exp": now.Add(time.Hour).Unix(), "iat": now.Unix()}
	}
	with := func(k string, v any) jwt.MapClaims {
		c := good()
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	ctx := context.Background()
	accept := func(name, tok string) {
		t.Helper()
		a, c, err := o.Authenticate(ctx, Credentials{Authorization: "Bearer " + tok})
		if err != nil {
			t.Fatalf("%s: refused: %v", name, err)
		}
		if a.ActorID != "u1" || a.Partition != "t1" || c["sub"] != "u1" {
			t.Fatalf("%s: auth %+v", name, a)
		}
	}
	accept("RS256", authtest.Sign(t, jwt.SigningMethodRS256, "r1", rk, good()))
	accept("ES256", authtest.Sign(t, jwt.SigningMethodES256, "e1", ek, good()))
	accept("aud list", authtest.Sign(t, jwt.SigningMethodRS256, "r1", rk, with("aud", []string{"x", "app-a"})))
	cid := with("aud", nil)
	cid["client_id"] = "app-a"
	accept("client_id", authtest.Sign(t, jwt.SigningMethodRS256, "r1", rk, cid))
	accept("exp within leeway", authtest.Sign(t, jwt.SigningMethodRS256, "r1", rk, with("exp", now.Add(-10*time.Second).Unix())))

	noneTok, _ := jwt.NewWithClaims(jwt.SigningMethodNone, good()).SignedString(jwt.UnsafeAllowNoneSignatureType)
	// HS256 with the RSA modulus as the secret: the key-confusion attack.
	hsTok := authtest.Sign(t, jwt.SigningMethodHS256, "r1", rk.PublicKey.N.Bytes(), good())
	refused := map[string]string{
		"wrong issuer":     authtest.Sign(t, jwt.SigningMethodRS256, "r1", rk, with("iss", "https://evil.example")),
		"wrong audience":   authtest.Sign(t, jwt.SigningMethodRS256, "r1", rk, with("aud", "app-c")),
		"no audience":      authtest.Sign(t, jwt.SigningMethodRS256, "r1", rk, with("aud", nil)),
		"expired":          authtest.Sign(t, jwt.SigningMethodRS256, "r1", rk, with("exp", now.Add(-time.Minute).Unix())),
		"no exp":           authtest.Sign(t, jwt.SigningMethodRS256, "r1", rk, with("exp", nil)),
		"not yet valid":    authtest.Sign(t, jwt.SigningMethodRS256, "r1", rk, with("nbf", now.Add(time.Minute).Unix())),
		"issued in future": authtest.Sign(t, jwt.SigningMethodRS256, "r1", rk, with("iat", now.Add(time.Minute).Unix())),
		"alg none":         noneTok,
		"HS256":            hsTok,
		"other key":        authtest.Sign(t, jwt.SigningMethodRS256, "r1", otherRK, good()),
		"unknown kid":      authtest.Sign(t, jwt.SigningMethodRS256, "r9", otherRK, good()),
		"no kid":           authtest.Sign(t, jwt.SigningMethodRS256, "", rk, good()),
		"RS key as ES256":  authtest.Sign(t, jwt.SigningMethodES256, "r1", ek, good()),
		"RS384":            authtest.Sign(t, jwt.SigningMethodRS384, "r1", rk, good()),
		"no partition":     authtest.Sign(t, jwt.SigningMethodRS256, "r1", rk, with("tenant", nil)),
	}
	for name, tok := range refused {
		_, _, err := o.Authenticate(ctx, Credentials{Authorization: "Bearer " + tok})
		t.Logf("%s: %v", name, err)
		if err == nil || errors.Is(err, ErrKeysUnavailable) {
			t.Errorf("%s: want a refusal, got %v", name, err)
		}
		if err != nil && strings.Contains(err.Error(), tok) {
			t.Errorf("%s: error carries the token", name)
		}
	}
	if _, _, err := o.Authenticate(ctx, Credentials{}); !errors.Is(err, ErrNoCredentials) {
		t.Fatalf("no credentials: %v", err)
	}
}

// A rotation: a token signed by a key published after the set was fetched
// is accepted once the set is fetched again for its unknown kid; such
// refetches are spaced by MinRefetch, and a stale set is refreshed after
// KeyTTL, so a removed key stops verifying.
func TestOIDCKeyRotation(t *testing.T) {
	p := authtest.NewIssuer(t)
	k1, _ := rsa.GenerateKey(rand.Reader, 2048)
	k2, _ := rsa.GenerateKey(rand.Reader, 2048)
	p.SetKeys(authtest.RSAJWK("k1", &k1.PublicKey))
	iss := p.URL()
	t0 := now
	o := &OIDC{Issuer: iss, Audiences: []string{"app"}, Mapping: Mapping{DefaultPartition: "p"},
		HTTP: p.Client(), Now: func() time.Time { return t0 }, KeyTTL: time.Hour, MinRefetch: 30 * time.Second}
	tok := func(kid string, k *rsa.PrivateKey) Credentials {
		return Credentials{Authorization: "Bearer " + authtest.Sign(t, jwt.SigningMethodRS256, kid, k,
			jwt.MapClaims{"iss": iss, "aud": "app", "sub": "u", "exp": t0.Add(3 * time.Hour).Unix()})}
	}
	ctx := context.Background()
	if _, _, err := o.Authenticate(ctx, tok("k1", k1)); err != nil {
		t.Fatal(err)
	}
	p.SetKeys(authtest.RSAJWK("k1", &k1.PublicKey), authtest.RSAJWK("k2", &k2.PublicKey))
	// Within MinRefetch of the last fetch the unknown kid is refused
	// without asking the issuer again.
	t0 = t0.Add(10 * time.Second)
	if _, _, err := o.Authenticate(ctx, tok("k2", k2)); err == nil || errors.Is(err, ErrKeysUnavailable) {
		t.Fatalf("k2 before refetch allowed: %v", err)
	}
	if p.Fetches() != 1 {
		t.Fatalf("fetches %d, want 1", p.Fetches())
	}
	t0 = t0.Add(30 * time.Second)
	if _, _, err := o.Authenticate(ctx, tok("k2", k2)); err != nil {
		t.Fatalf("k2 after rotation: %v", err)
	}
	if p.Fetches() != 2 {
		t.Fatalf("fetches %d, want 2", p.Fetches())
	}
	// k1 is retired; after KeyTTL the set is fetched again and k1 tokens
	// stop verifying.
	p.SetKeys(authtest.RSAJWK("k2", &k2.PublicKey))
	t0 = t0.Add(time.Hour)
	if _, _, err := o.Authenticate(ctx, tok("k1", k1)); err == nil {
		t.Fatal("retired k1 still accepted")
	}
	// The issuer is down and the set is stale: keys unavailable, not a
	// judgement on the token.
	p.SetDown(true)
	t0 = t0.Add(2 * time.Hour)
	if _, _, err := o.Authenticate(ctx, tok("k2", k2)); !errors.Is(err, ErrKeysUnavailable) {
		t.Fatalf("issuer down: %v", err)
	}
}

// A discovery document naming another issuer is not trusted (OpenID
// Connect Discovery §4.3), and the issuer must be HTTPS.
func TestOIDCDiscoveryChecks(t *testing.T) {
	p := authtest.NewIssuer(t)
	k, _ := rsa.GenerateKey(rand.Reader, 2048)
	p.SetKeys(authtest.RSAJWK("k", &k.PublicKey))
	for _, iss := range []string{p.URL() + "/other", strings.Replace(p.URL(), "https", "http", 1)} {
		o := &OIDC{Issuer: iss, Audiences: []string{"app"}, Mapping: Mapping{DefaultPartition: "p"}, HTTP: p.Client(), Now: clock}
		tok := authtest.Sign(t, jwt.SigningMethodRS256, "k", k, jwt.MapClaims{"iss": iss, "aud": "app", "sub": "u", "exp": now.Add(time.Hour).Unix()})
		if _, _, err := o.Authenticate(context.Background(), Credentials{Authorization: "Bearer " + tok}); !errors.Is(err, ErrKeysUnavailable) {
			t.Fatalf("issuer %s: %v", iss, err)
		}
	}
}
