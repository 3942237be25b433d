package httpapi_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// At info the request line of a pull that delivered nothing leaves out the
// zero counters and the debug-only fields; at debug the same request's
// line has every field, zeros included. Both name the request, who made
// it and how it ended.
func TestRequestLineInfoAndDebug(t *testing.T) {
	line := func(level slog.Level) map[string]any {
		f := newFixture(t, engine.Limits{})
		var logs bytes.Buffer
		f.api.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: level}))
		if r := f.do("POST", "/api/pull", map[string]string{"Content-Type": "application/vnd.syncular.sync.v2"}, f.pullBody(t, wire.AcceptInlineRows)); r.Status != 200 {
			t.Fatalf("pull: HTTP %d %s", r.Status, r.Body)
		}
		var m map[string]any
		if err := json.Unmarshal(logs.Bytes(), &m); err != nil {
			t.Fatalf("%v: %s", err, logs.Bytes())
		}
		return m
	}
	info, debug := line(slog.LevelInfo), line(slog.LevelDebug)
	for _, m := range []map[string]any{info, debug} {
		for k, v := range map[string]any{"route": "pull", "status": float64(200), "partition": "tenant", "actor": "alice", "clientId": "a", "outcome": "ok"} {
			if m[k] != v {
				t.Errorf("%s = %v, want %v", k, m[k], v)
			}
		}
	}
	zeroOrDebug := []string{"method", "path", "wireVersion", "subscriptions", "pushCommits", "applied", "cached", "rejected", "deferred", "commitRacesLost", "segmentsReused"}
	for _, k := range zeroOrDebug {
		if _, ok := info[k]; ok {
			t.Errorf("info line has %s: %v", k, info)
		}
		if _, ok := debug[k]; !ok {
			t.Errorf("debug line lacks %s: %v", k, debug)
		}
	}
	if debug["applied"] != float64(0) || debug["subscriptions"] != float64(1) {
		t.Errorf("debug line: applied %v subscriptions %v", debug["applied"], debug["subscriptions"])
	}
}
