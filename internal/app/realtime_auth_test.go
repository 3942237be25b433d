package app

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/golang-jwt/jwt/v5"

	"github.com/skyfold/syncular-lambda/internal/auth"
	"github.com/skyfold/syncular-lambda/internal/auth/authtest"
	"github.com/skyfold/syncular-lambda/internal/config"
)

// In the deployed default mode (jwt-authorizer) $connect has no JWT
// authorizer in front of it: the realtime function verifies the token
// against SYNC_JWT_ISSUER's keys for SYNC_JWT_AUDIENCE (any of a comma
// list). A refused token is a 401 handshake (sync.auth_required); an
// issuer whose keys cannot be fetched is a retryable 500, not a verdict
// on the token. Claims of an attached Lambda authorizer take precedence.
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

	h := &RealtimeHandler{Auth: a, Logger: slog.New(slog.DiscardHandler)}
	connect := func(query map[string]string) (int, string) {
		t.Helper()
		resp, err := h.Handle(ctx, events.APIGatewayWebsocketProxyRequest{QueryStringParameters: query,
			RequestContext: events.APIGatewayWebsocketProxyRequestContext{RouteKey: "$connect", ConnectionID: "c1"}})
		if err != nil {
			t.Fatal(err)
		}
		var body struct{ Code string }
		_ = json.Unmarshal([]byte(resp.Body), &body)
		return resp.StatusCode, body.Code
	}
	for name, q := range map[string]map[string]string{
		"no token":       {"clientId": "c"},
		"wrong audience": {"clientId": "c", "token": authtest.Sign(t, jwt.SigningMethodRS256, "k1", is.Key, claims("other"))},
		"HS256":          {"clientId": "c", "access_token": authtest.Sign(t, jwt.SigningMethodHS256, "k1", []byte("0123456789abcdef0123456789abcdef"), claims("web"))},
	} {
		if st, code := connect(q); st != http.StatusUnauthorized || code != "sync.auth_required" {
			t.Errorf("%s: HTTP %d %s, want 401 sync.auth_required", name, st, code)
		}
	}
	is.SetDown(true)
	fresh, _ := RealtimeAuthenticator(cfg)
	fresh.(*auth.FirstOf).Token.(*auth.OIDC).HTTP = is.Client()
	h.Auth = fresh
	if st, code := connect(map[string]string{"clientId": "c", "token": authtest.Sign(t, jwt.SigningMethodRS256, "k1", is.Key, claims("web"))}); st != http.StatusInternalServerError || code != "sync.internal_error" {
		t.Fatalf("issuer down: HTTP %d %s, want 500 sync.internal_error", st, code)
	}

	// Without an issuer the mode keeps requiring authorizer claims.
	a, _ = RealtimeAuthenticator(&config.Config{AuthMode: config.AuthJWTAuthorizer, ActorClaim: "sub", DefaultPartition: "default"})
	if _, ok := a.(*auth.AuthorizerClaims); !ok {
		t.Fatalf("no issuer: %T", a)
	}
}
