package auth

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var (
	key   = []byte("0123456789abcdef0123456789abcdef")
	now   = time.Unix(1_800_000_000, 0)
	clock = func() time.Time { return now }
)

func sign(t *testing.T, method jwt.SigningMethod, k any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, claims).SignedString(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// signHeader signs claims with HS256 and extra protected header fields.
func signHeader(t *testing.T, extra map[string]any, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
	for k, v := range extra {
		tok.Header[k] = v
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func verifier(m Mapping) *HS256 { return &HS256{Key: key, Mapping: m, Now: clock} }

func TestHS256Good(t *testing.T) {
	tok := sign(t, jwt.SigningMethodHS256, key, jwt.MapClaims{"sub": "alice", "tenant": "acme", "exp": now.Add(time.Hour).Unix(), "syncular_scopes": map[string]any{"project_id": []any{"p1"}}})
	au, c, err := verifier(Mapping{PartitionClaim: "tenant"}).Authenticate(context.Background(), Credentials{Authorization: "Bearer " + tok})
	if err != nil {
		t.Fatal(err)
	}
	if au != (engine.Auth{Partition: "acme", ActorID: "alice"}) {
		t.Fatalf("auth %+v", au)
	}
	if c["sub"] != "alice" {
		t.Fatalf("claims %v", c)
	}
	// Scheme is case-insensitive; default partition applies without a claim.
	au, _, err = verifier(Mapping{DefaultPartition: "default"}).Authenticate(context.Background(), Credentials{Authorization: "bearer  " + tok})
	if err != nil || au.Partition != "default" || au.ActorID != "alice" {
		t.Fatalf("got %+v %v", au, err)
	}
}

func TestMintedTokenVerifies(t *testing.T) {
	tok, err := MintHS256(key, Claims{"sub": "dev"}, time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	au, _, err := verifier(Mapping{DefaultPartition: "p"}).Authenticate(context.Background(), Credentials{Authorization: "Bearer " + tok})
	if err != nil || au.ActorID != "dev" {
		t.Fatalf("got %+v %v", au, err)
	}
}

// Every bad credential is rejected with a token-free reason.
func TestHS256Rejects(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	good := jwt.MapClaims{"sub": "alice", "exp": now.Add(time.Hour).Unix()}
	with := func(k string, v any) jwt.MapClaims {
		c := jwt.MapClaims{}
		for a, b := range good {
			c[a] = b
		}
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	none := sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, good)
	cases := []struct {
		name, header, want string
		m                  Mapping
	}{
		{"missing", "", "no credentials", Mapping{}},
		{"basic scheme", "Basic YWxpY2U6cHc=", "not a Bearer token", Mapping{}},
		{"garbage", "Bearer not.a.jwt", "malformed", Mapping{}},
		{"expired", "Bearer " + sign(t, jwt.SigningMethodHS256, key, with("exp", now.Add(-time.Minute).Unix())), "expired", Mapping{}},
		{"no exp", "Bearer " + sign(t, jwt.SigningMethodHS256, key, with("exp", nil)), "required claim", Mapping{}},
		{"wrong key", "Bearer " + sign(t, jwt.SigningMethodHS256, []byte("another-key-another-key-another-k"), good), "signature", Mapping{}},
		{"HS384", "Bearer " + sign(t, jwt.SigningMethodHS384, key, good), "algorithm", Mapping{}},
		{"RS256", "Bearer " + sign(t, jwt.SigningMethodRS256, rsaKey, good), "algorithm", Mapping{}},
		{"alg none", "Bearer " + none, "algorithm", Mapping{}},
		{"no sub", "Bearer " + sign(t, jwt.SigningMethodHS256, key, with("sub", nil)), `claim "sub" is missing`, Mapping{DefaultPartition: "d"}},
		{"empty sub", "Bearer " + sign(t, jwt.SigningMethodHS256, key, with("sub", "")), `claim "sub" is empty`, Mapping{DefaultPartition: "d"}},
		{"numeric-object sub", "Bearer " + sign(t, jwt.SigningMethodHS256, key, with("sub", map[string]any{"x": 1})), "not a string", Mapping{DefaultPartition: "d"}},
		{"no partition claim", "Bearer " + sign(t, jwt.SigningMethodHS256, key, good), `claim "custom:tenant" is missing`, Mapping{PartitionClaim: "custom:tenant", DefaultPartition: "ignored"}},
		// Issue 9 item 7: numbers are not silently equated with strings.
		{"numeric sub", "Bearer " + sign(t, jwt.SigningMethodHS256, key, with("sub", 42)), `claim "sub" is a number`, Mapping{DefaultPartition: "d"}},
		{"numeric partition", "Bearer " + sign(t, jwt.SigningMethodHS256, key, with("tenant", 7)), `claim "tenant" is a number`, Mapping{PartitionClaim: "tenant"}},
		// RFC 7515 §4.1.11: unknown critical extensions reject the token.
		{"crit header", "Bearer " + signHeader(t, map[string]any{"crit": []string{"exp-ext"}, "exp-ext": true}, good), `"crit" header`, Mapping{DefaultPartition: "d"}},
		{"empty crit", "Bearer " + signHeader(t, map[string]any{"crit": []string{}}, good), `"crit" header`, Mapping{DefaultPartition: "d"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := verifier(tc.m).Authenticate(context.Background(), Credentials{Authorization: tc.header})
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to mention %q", err, tc.want)
			}
			if tok, ok := bearer(tc.header); ok && strings.Contains(err.Error(), tok) {
				t.Fatal("error message carries the token")
			}
		})
	}
}

func TestHS256IssuerAudience(t *testing.T) {
	v := verifier(Mapping{DefaultPartition: "d"})
	v.Issuer, v.Audience = "https://issuer", "app"
	good := sign(t, jwt.SigningMethodHS256, key, jwt.MapClaims{"sub": "a", "exp": now.Add(time.Hour).Unix(), "iss": "https://issuer", "aud": "app"})
	if _, _, err := v.Authenticate(context.Background(), Credentials{Authorization: "Bearer " + good}); err != nil {
		t.Fatal(err)
	}
	bad := sign(t, jwt.SigningMethodHS256, key, jwt.MapClaims{"sub": "a", "exp": now.Add(time.Hour).Unix(), "iss": "https://evil", "aud": "app"})
	if _, _, err := v.Authenticate(context.Background(), Credentials{Authorization: "Bearer " + bad}); err == nil || !strings.Contains(err.Error(), "issuer") {
		t.Fatalf("got %v", err)
	}
}

func TestAuthorizerClaims(t *testing.T) {
	a := &AuthorizerClaims{Mapping: Mapping{ActorClaim: "sub", PartitionClaim: "custom:tenant"}}
	au, c, err := a.Authenticate(context.Background(), Credentials{AuthorizerClaims: Claims{"sub": "u1", "custom:tenant": "t1"}})
	if err != nil || au != (engine.Auth{Partition: "t1", ActorID: "u1"}) || c["sub"] != "u1" {
		t.Fatalf("got %+v %v %v", au, c, err)
	}
	// Fail closed: no authorizer claims at all, or the partition claim missing.
	if _, _, err := a.Authenticate(context.Background(), Credentials{Authorization: "Bearer x"}); err == nil {
		t.Fatal("accepted a request without authorizer claims")
	}
	if _, _, err := a.Authenticate(context.Background(), Credentials{AuthorizerClaims: Claims{"sub": "u1"}}); err == nil {
		t.Fatal("accepted claims without the partition claim")
	}
	// Control characters in ids are refused (they become key parts and log fields).
	if _, _, err := a.Authenticate(context.Background(), Credentials{AuthorizerClaims: Claims{"sub": "u1\n", "custom:tenant": "t"}}); err == nil {
		t.Fatal("accepted a control character")
	}
}
