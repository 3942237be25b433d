package httpapi_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/httpapi"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

func decodeLine(t *testing.T, logs []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(logs, &m); err != nil {
		t.Fatalf("%v: %s", err, logs)
	}
	return m
}

// At info the request line of a pull that delivered nothing names who
// made it, its status and time, and nothing else: zero counters, the
// request's identifiers and the DynamoDB usage are debug fields. At
// debug the same request's line has every field, zeros included.
func TestRequestLineInfoAndDebug(t *testing.T) {
	line := func(level slog.Level) map[string]any {
		f := newFixture(t, engine.Limits{})
		var logs bytes.Buffer
		f.api.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: level}))
		f.api.Meter = func(ctx context.Context) (context.Context, func() []slog.Attr) {
			return ctx, func() []slog.Attr { return []slog.Attr{slog.Int("ddbRoundTrips", 1), slog.Float64("rcu", 0.5)} }
		}
		if r := f.do("POST", "/api/pull", map[string]string{"Content-Type": "application/vnd.syncular.sync.v2"}, f.pullBody(t, wire.AcceptInlineRows)); r.Status != 200 {
			t.Fatalf("pull: HTTP %d %s", r.Status, r.Body)
		}
		return decodeLine(t, logs.Bytes())
	}
	info, debug := line(slog.LevelInfo), line(slog.LevelDebug)
	for _, m := range []map[string]any{info, debug} {
		for k, v := range map[string]any{"status": float64(200), "partition": "tenant", "actor": "alice"} {
			if m[k] != v {
				t.Errorf("%s = %v, want %v", k, m[k], v)
			}
		}
		if _, ok := m["ms"].(float64); !ok {
			t.Errorf("no ms: %v", m)
		}
		if _, ok := m["errorCode"]; ok {
			t.Errorf("a successful request's line has errorCode: %v", m)
		}
	}
	debugOnly := []string{"requestId", "route", "outcome", "clientId", "method", "path", "wireVersion", "subscriptions",
		"pushCommits", "bytesOut", "ddbRoundTrips", "rcu", "applied", "cached", "rejected", "deferred", "commitRacesLost", "segmentsReused"}
	for _, k := range debugOnly {
		if _, ok := info[k]; ok {
			t.Errorf("info line has %s: %v", k, info)
		}
		if _, ok := debug[k]; !ok {
			t.Errorf("debug line lacks %s: %v", k, debug)
		}
	}
	if debug["applied"] != float64(0) || debug["subscriptions"] != float64(1) || debug["route"] != "pull" || debug["outcome"] != "ok" || debug["clientId"] != "a" {
		t.Errorf("debug line: %v", debug)
	}
}

// A failed request's info line carries what traces it: the §10 code,
// the request id, the route, and for a sync request the client id and
// the commits it pushed.
func TestRequestLineOfAFailure(t *testing.T) {
	f := newFixture(t, engine.Limits{})
	var logs bytes.Buffer
	f.api.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	r := f.api.Serve(context.Background(), &httpapi.Request{Method: "POST", Path: "/api/pull", RequestID: "rid-1",
		Header: http.Header{"Content-Type": {httpapi.ContentType}}, Body: f.pullBody(t, wire.AcceptInlineRows)})
	if r.Status != 401 {
		t.Fatalf("unauthenticated pull: HTTP %d", r.Status)
	}
	m := decodeLine(t, logs.Bytes())
	for k, v := range map[string]any{"status": float64(401), "errorCode": "sync.auth_required", "requestId": "rid-1", "route": "pull"} {
		if m[k] != v {
			t.Errorf("%s = %v, want %v (%v)", k, m[k], v, m)
		}
	}
}

// Ids up to 24 bytes are written whole; a longer one as its first 8
// bytes (never splitting a character), "~" and 8 hex digits of its
// SHA-256, so two long ids with the same beginning stay apart.
func TestShortID(t *testing.T) {
	sub := "f81d4fae-7dec-11d0-a765-00a0c91e6bf6" // a Cognito sub's shape
	sum := sha256.Sum256([]byte(sub))
	for in, want := range map[string]string{
		"":                      "",
		"alice":                 "alice",
		strings.Repeat("x", 24): strings.Repeat("x", 24),
		sub:                     "f81d4fae~" + hex.EncodeToString(sum[:4]),
	} {
		if got := httpapi.ShortID(in); got != want {
			t.Errorf("ShortID(%q) = %q, want %q", in, got, want)
		}
	}
	a, b := httpapi.ShortID("auth0|"+strings.Repeat("a", 30)), httpapi.ShortID("auth0|"+strings.Repeat("b", 30))
	if a == b || len(a) != 17 {
		t.Errorf("shared prefixes: %q %q", a, b)
	}
	multi := "ééééééééééééééé" // 2-byte characters, 30 bytes
	if got := httpapi.ShortID(multi); !utf8.ValidString(got) || !strings.HasPrefix(got, "éééé~") {
		t.Errorf("ShortID(%q) = %q", multi, got)
	}
}
