package engine_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// signedRef pulls one SEGMENT_REF with a native URL and returns the
// segment id and the token's decoded payload.
func signedRef(t *testing.T, h *enginetest.Harness) (string, map[string]any, string) {
	t.Helper()
	grantAll(h, projects("p1"), "alice")
	a := h.Client("tenant", "alice", "a")
	wantApplied(t, a.Push("seed", up("tasks", "t1", a.Task("t1", "p1", "x", false), 0)))
	a.BaseURL = "https://sync.example.test/segments"
	secs := mustPull(t, a, pullHdr(acceptExternal|wire.AcceptSignedURL), sub("s", "tasks", "p1", -1))
	if len(secs[0].Refs) == 0 || !secs[0].Refs[0].URL.Present {
		t.Fatal("no signed SEGMENT_REF")
	}
	u, err := url.Parse(secs[0].Refs[0].URL.Value)
	if err != nil {
		t.Fatal(err)
	}
	st := u.Query().Get("st")
	raw, err := base64.RawURLEncoding.DecodeString(st[:strings.IndexByte(st, '.')])
	if err != nil {
		t.Fatal(err)
	}
	claims := map[string]any{}
	if err := json.Unmarshal(raw, &claims); err != nil {
		t.Fatal(err)
	}
	return secs[0].Refs[0].SegmentID, claims, st
}

// sign builds a token over an arbitrary payload with the harness key, so
// the MAC is valid and only the claims are under test.
func signRaw(payload string) string {
	m := hmac.New(sha256.New, enginetest.SigningKey)
	m.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString([]byte(payload)) + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Issue 9 item 7 (§5.4): token claims are parsed strictly — exact key
// spelling, no unknown, duplicate or missing keys — and bound to the log
// epoch they were minted under.
func TestSegmentTokenClaimsStrict(t *testing.T) {
	h := newHarness(t, enginetest.Options{SignedURLs: engine.SignedURLsNative})
	segID, c, st := signedRef(t, h)
	if _, err := h.Fetch(engine.SegmentRequest{SegmentID: segID, Token: st}); err != nil {
		t.Fatalf("minted token: %v", err)
	}
	// Re-serialize the minted claims by hand so single keys can be
	// altered textually (a Go map would fold duplicates).
	str := func(k string) string { return string(must(json.Marshal(c[k]))) }
	body := `"v":` + str("v") + `,"seg":` + str("seg") + `,"sd":` + str("sd") + `,"pt":` + str("pt") + `,"ep":` + str("ep") + `,"exp":` + str("exp")
	if _, err := h.Fetch(engine.SegmentRequest{SegmentID: segID, Token: signRaw("{" + body + "}")}); err != nil {
		t.Fatalf("re-signed identical claims: %v", err)
	}
	for name, payload := range map[string]string{
		"differently cased key": "{" + strings.Replace(body, `"seg":`, `"SEG":`, 1) + "}",
		"unknown key":           "{" + body + `,"admin":true}`,
		"duplicate key":         "{" + body + `,"sd":` + str("sd") + "}",
		"missing epoch":         "{" + strings.Replace(body, `,"ep":`+str("ep"), "", 1) + "}",
		"empty epoch":           "{" + strings.Replace(body, `"ep":`+str("ep"), `"ep":""`, 1) + "}",
		"other epoch":           "{" + strings.Replace(body, `"ep":`+str("ep"), `"ep":"not-the-epoch"`, 1) + "}",
		"old version":           "{" + strings.Replace(body, `"v":`+str("v"), `"v":2`, 1) + "}",
		"version 2 claims":      "{" + strings.Replace(strings.Replace(body, `"v":`+str("v"), `"v":2`, 1), `"pt":`, `"aud":`, 1) + "}",
		"trailing data":         "{" + body + "} {}",
		"string exp":            "{" + strings.Replace(body, `"exp":`+str("exp"), `"exp":"`+str("exp")+`"`, 1) + "}",
	} {
		if payload == "{"+body+"}" {
			t.Fatalf("%s: case does not alter the claims", name)
		}
		_, err := h.Fetch(engine.SegmentRequest{SegmentID: segID, Token: signRaw(payload)})
		if enginetest.ErrCode(err) != syncerr.Forbidden {
			t.Errorf("%s: %v; want sync.forbidden", name, err)
		}
	}
	// §2.1: a rotation invalidates tokens minted under the old epoch.
	if err := h.Store.RotateEpoch(context.Background(), "tenant", "epoch-2", h.Clock.Now()); err != nil {
		t.Fatal(err)
	}
	_, err := h.Fetch(engine.SegmentRequest{SegmentID: segID, Token: st})
	wantCode(t, err, syncerr.Forbidden)
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
