package wiring

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/skyfold/syncular-lambda/internal/auth"
	"github.com/skyfold/syncular-lambda/internal/auth/authtest"
	"github.com/skyfold/syncular-lambda/internal/config"
)

// In the deployed default mode (jwt-authorizer) no JWT authorizer stands
// in front of the realtime tier: it verifies the token against
// SYNC_JWT_ISSUER's keys for SYNC_JWT_AUDIENCE (any of a comma list). A
// refused token is a refusal; an issuer whose keys cannot be fetched is
// auth.ErrKeysUnavailable (a retryable 500), not a verdict on the token.
func TestRealtimeConnectVerifiesTokenInJWTAuthorizerMode(t *testing.T) {
	is := authtest.NewIssuer(t)
	cfg := &config.Config{AuthMode: config.AuthJWTAuthorizer, ActorClaim: "sub", DefaultPartition: "default",
		JWTIssuer: is.URL(), JWTAudience: "web, mobile"}
	a, err := RealtimeAuthenticator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	first, ok := a.(*auth.FirstOf)
	if !ok {
		t.Fatalf("authenticator %T, want a token verifier", a)
	}
	first.Token.(*auth.OIDC).HTTP = is.Client()

	claims := func(aud string) jwt.MapClaims {
		return jwt.MapClaims{"iss": is.URL(), "aud": aud, "sub": "alice", "exp": time.Now().Add(time.Hour).Unix()}
	}
	ctx := context.Background()
	if au, _, err := a.Authenticate(ctx, auth.Credentials{Authorization: "Bearer " + authtest.Sign(t, jwt.SigningMethodRS256, "k1", is.Key, claims("mobile"))}); err != nil ||
		au.ActorID != "alice" || au.Partition != "default" {
		t.Fatalf("valid token: %+v %v", au, err)
	}
	if au, _, err := a.Authenticate(ctx, auth.Credentials{AuthorizerClaims: auth.Claims{"sub": "bob"}}); err != nil || au.ActorID != "bob" {
		t.Fatalf("authorizer claims: %+v %v", au, err)
	}

	for name, tok := range map[string]string{
		"no token":       "",
		"wrong audience": authtest.Sign(t, jwt.SigningMethodRS256, "k1", is.Key, claims("other")),
		"HS256":          authtest.Sign(t, jwt.SigningMethodHS256, "k1", []byte("0123456789abcdef0123456789abcdef"), claims("web")),
	} {
		cr := auth.Credentials{}
		if tok != "" {
			cr.Authorization = "Bearer " + tok
		}
		if _, _, err := a.Authenticate(ctx, cr); err == nil || errors.Is(err, auth.ErrKeysUnavailable) {
			t.Errorf("%s: %v, want a refusal of the token", name, err)
		}
	}
	is.SetDown(true)
	fresh, _ := RealtimeAuthenticator(cfg)
	fresh.(*auth.FirstOf).Token.(*auth.OIDC).HTTP = is.Client()
	if _, _, err := fresh.Authenticate(ctx, auth.Credentials{Authorization: "Bearer " + authtest.Sign(t, jwt.SigningMethodRS256, "k1", is.Key, claims("web"))}); !errors.Is(err, auth.ErrKeysUnavailable) {
		t.Fatalf("issuer down: %v, want auth.ErrKeysUnavailable (the tier answers a retryable 500)", err)
	}

	// Without an issuer the mode keeps requiring authorizer claims.
	a, _ = RealtimeAuthenticator(&config.Config{AuthMode: config.AuthJWTAuthorizer, ActorClaim: "sub", DefaultPartition: "default"})
	if _, ok := a.(*auth.AuthorizerClaims); !ok {
		t.Fatalf("no issuer: %T", a)
	}
}
