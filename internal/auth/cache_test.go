package auth

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
)

// A verified token is remembered, but never past the instant a full
// verification rejects it, and a failure is never remembered.
func TestHS256CacheFailClosed(t *testing.T) {
	at := now
	h := &HS256{Key: key, Leeway: 30 * time.Second, Now: func() time.Time { return at }}
	ctx := context.Background()
	exp := now.Add(time.Minute)
	tok := sign(t, jwt.SigningMethodHS256, key, jwt.MapClaims{"sub": "alice", "exp": exp.Unix()})
	h.Mapping.DefaultPartition = "p"
	for i := 0; i < 3; i++ {
		au, c, err := h.Authenticate(ctx, Credentials{Authorization: "Bearer " + tok})
		if err != nil || au.ActorID != "alice" || c["sub"] != "alice" {
			t.Fatalf("round %d: %+v %v %v", i, au, c, err)
		}
	}
	if len(h.cache.m) != 1 {
		t.Fatalf("cache holds %d entries after three verifications of one token", len(h.cache.m))
	}
	// Another signature over the same header and claims is another key,
	// and it is verified (and rejected) in full.
	forged := tok[:len(tok)-2] + "AA"
	if forged == tok {
		forged = tok[:len(tok)-2] + "BB"
	}
	if _, _, err := h.Authenticate(ctx, Credentials{Authorization: "Bearer " + forged}); err == nil {
		t.Fatal("a token with another signature was accepted")
	}
	// Past exp and its leeway the cached token is rejected like any other.
	at = exp.Add(31 * time.Second)
	if _, _, err := h.Authenticate(ctx, Credentials{Authorization: "Bearer " + tok}); err == nil {
		t.Fatal("expired token accepted from the cache")
	}
	if len(h.cache.m) != 0 {
		t.Fatal("expired token still cached")
	}

	// Not valid yet: rejected, not remembered, accepted once nbf passes.
	at = now
	early := sign(t, jwt.SigningMethodHS256, key, jwt.MapClaims{"sub": "bob", "nbf": now.Add(time.Minute).Unix(), "exp": now.Add(time.Hour).Unix()})
	if _, _, err := h.Authenticate(ctx, Credentials{Authorization: "Bearer " + early}); err == nil {
		t.Fatal("token accepted before nbf")
	}
	at = now.Add(2 * time.Minute)
	if au, _, err := h.Authenticate(ctx, Credentials{Authorization: "Bearer " + early}); err != nil || au.ActorID != "bob" {
		t.Fatalf("after nbf: %+v %v", au, err)
	}
	// A verified token whose claims do not map (no partition) is an
	// error every time, and is not cached either.
	h2 := &HS256{Key: key, Mapping: Mapping{PartitionClaim: "tenant"}, Now: func() time.Time { return at }}
	for i := 0; i < 2; i++ {
		if _, _, err := h2.Authenticate(ctx, Credentials{Authorization: "Bearer " + early}); err == nil {
			t.Fatal("token without the partition claim accepted")
		}
	}
	if len(h2.cache.m) != 0 {
		t.Fatal("unmappable token cached")
	}
}

// The cache never grows past its bound, whatever number of distinct valid
// tokens arrives.
func TestHS256CacheBounded(t *testing.T) {
	h := &HS256{Key: key, Mapping: Mapping{DefaultPartition: "p"}, Now: clock}
	for i := 0; i < maxCachedTokens+300; i++ {
		tok := sign(t, jwt.SigningMethodHS256, key, jwt.MapClaims{"sub": fmt.Sprintf("u%d", i), "exp": now.Add(time.Hour).Unix()})
		if _, _, err := h.Authenticate(context.Background(), Credentials{Authorization: "Bearer " + tok}); err != nil {
			t.Fatal(err)
		}
		if n := len(h.cache.m); n > maxCachedTokens {
			t.Fatalf("cache grew to %d entries", n)
		}
	}
}

// Concurrent verification of the same and of different tokens (run with
// -race).
func TestHS256CacheConcurrent(t *testing.T) {
	h := &HS256{Key: key, Mapping: Mapping{DefaultPartition: "p"}, Now: clock}
	toks := make([]string, 8)
	for i := range toks {
		toks[i] = sign(t, jwt.SigningMethodHS256, key, jwt.MapClaims{"sub": fmt.Sprintf("u%d", i), "exp": now.Add(time.Hour).Unix()})
	}
	done := make(chan error)
	for g := 0; g < 4; g++ {
		go func() {
			var err error
			for i := 0; i < 200 && err == nil; i++ {
				var au engine.Auth
				au, _, err = h.Authenticate(context.Background(), Credentials{Authorization: "Bearer " + toks[i%len(toks)]})
				if err == nil && au.ActorID != fmt.Sprintf("u%d", i%len(toks)) {
					err = fmt.Errorf("token %d mapped to %s", i%len(toks), au.ActorID)
				}
			}
			done <- err
		}()
	}
	for g := 0; g < 4; g++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

func BenchmarkHS256(b *testing.B) {
	s, err := MintHS256(key, Claims{"sub": "alice", "syncular_scopes": map[string]any{"project_id": []any{"*"}}}, time.Hour, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	h := &HS256{Key: key, Mapping: Mapping{DefaultPartition: "p"}, Leeway: 30 * time.Second}
	cr := Credentials{Authorization: "Bearer " + s}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := h.Authenticate(context.Background(), cr); err != nil {
			b.Fatal(err)
		}
	}
}
