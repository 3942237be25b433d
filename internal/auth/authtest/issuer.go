// Package authtest runs a local OpenID provider for tests of token
// verification: OIDC discovery and a JWKS over HTTPS, keys the test
// controls (rotation, outage).
package authtest

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// Issuer serves /.well-known/openid-configuration (issuer = URL, jwks_uri
// = URL/jwks) and /jwks.
type Issuer struct {
	srv     *httptest.Server
	mu      sync.Mutex
	keys    []map[string]any
	down    bool
	fetches int
	// Key is an RSA key published as kid "k1" at start.
	Key *rsa.PrivateKey
}

// NewIssuer starts an issuer publishing Key as "k1".
func NewIssuer(t testing.TB) *Issuer {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	is := &Issuer{Key: k}
	is.keys = []map[string]any{RSAJWK("k1", &k.PublicKey)}
	is.srv = httptest.NewTLSServer(http.HandlerFunc(is.serve))
	t.Cleanup(is.srv.Close)
	return is
}

func (is *Issuer) serve(w http.ResponseWriter, r *http.Request) {
	is.mu.Lock()
	defer is.mu.Unlock()
	if is.down {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	switch r.URL.Path {
	case "/.well-known/openid-configuration":
		_ = json.NewEncoder(w).Encode(map[string]string{"issuer": is.srv.URL, "jwks_uri": is.srv.URL + "/jwks"})
	case "/jwks":
		is.fetches++
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": is.keys})
	default:
		http.NotFound(w, r)
	}
}

// URL is the issuer identifier (https://127.0.0.1:port).
func (is *Issuer) URL() string { return is.srv.URL }

// Client trusts the issuer's certificate.
func (is *Issuer) Client() *http.Client { return is.srv.Client() }

// CertFile writes the issuer's certificate as PEM, for SSL_CERT_FILE of a
// process that must trust it.
func (is *Issuer) CertFile(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "issuer.pem")
	b := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: is.srv.Certificate().Raw})
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// SetKeys replaces the published key set.
func (is *Issuer) SetKeys(keys ...map[string]any) {
	is.mu.Lock()
	is.keys = keys
	is.mu.Unlock()
}

// SetDown makes every request fail with 503 (down) or succeed again.
func (is *Issuer) SetDown(down bool) {
	is.mu.Lock()
	is.down = down
	is.mu.Unlock()
}

// Fetches counts JWKS downloads.
func (is *Issuer) Fetches() int {
	is.mu.Lock()
	defer is.mu.Unlock()
	return is.fetches
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// RSAJWK is the RFC 7518 §6.3.1 public JWK of k for RS256 signatures.
func RSAJWK(kid string, k *rsa.PublicKey) map[string]any {
	return map[string]any{"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
		"n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes())}
}

// ECJWK is the RFC 7518 §6.2.1 public JWK of a P-256 key (no alg member).
func ECJWK(kid string, k *ecdsa.PublicKey) map[string]any {
	b, err := k.Bytes() // 0x04 || X || Y, 32 bytes each on P-256
	if err != nil || len(b) != 65 {
		panic("authtest: not a P-256 public key")
	}
	return map[string]any{"kty": "EC", "kid": kid, "crv": "P-256", "x": b64(b[1:33]), "y": b64(b[33:])}
}

// Sign signs claims with method and key, naming kid in the header when
// it is not empty.
func Sign(t testing.TB, m jwt.SigningMethod, kid string, key any, c jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
