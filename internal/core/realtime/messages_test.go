package realtime

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/vectors"
)

// TestVectors runs the golden realtime JSON vectors (valid and invalid,
// both vector sets): valid messages parse and re-encode to the same JSON
// value; invalid ones fail with the manifest's error code, never panic.
func TestVectors(t *testing.T) {
	for env, dir := range map[string]string{"SSP2_VECTORS": vectors.Dir(t), "SSP2_VECTORS_V3": vectors.DirV3(t)} {
		dir = filepath.Join(dir, "realtime")
		raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
		if err != nil {
			t.Fatal(err)
		}
		var man struct {
			Cases []struct {
				Name, JSON string
			} `json:"cases"`
			Invalid []struct {
				Name, JSON, Error string
			} `json:"invalid"`
		}
		if err := json.Unmarshal(raw, &man); err != nil {
			t.Fatal(err)
		}
		if len(man.Cases) == 0 || len(man.Invalid) == 0 {
			t.Fatalf("%s: empty manifest", dir)
		}
		for _, c := range man.Cases {
			t.Run(env+"/"+c.Name, func(t *testing.T) {
				b, err := os.ReadFile(filepath.Join(dir, c.JSON))
				if err != nil {
					t.Fatal(err)
				}
				m, err := Parse(b)
				if err != nil {
					t.Fatalf("valid vector rejected: %v", err)
				}
				var out []byte
				switch m := m.(type) {
				case *Hello:
					out = EncodeHello(*m)
				case *Wake:
					out = EncodeWake(m.Cursor, m.Reason, m.Timestamp)
				case *PresenceFanout:
					out = EncodePresence(*m)
				case *PresencePublish:
					out, _ = json.Marshal(map[string]any{"event": "presence", "data": map[string]any{"scopeKey": m.ScopeKey, "doc": m.Doc}})
				default:
					t.Fatalf("parsed as %T", m)
				}
				if !sameJSON(t, b, out) {
					t.Errorf("re-encoded\n%s\nwant\n%s", out, b)
				}
			})
		}
		for _, c := range man.Invalid {
			t.Run(env+"/invalid/"+c.Name, func(t *testing.T) {
				b, err := os.ReadFile(filepath.Join(dir, c.JSON))
				if err != nil {
					t.Fatal(err)
				}
				_, err = Parse(b)
				se := syncerr.As(err)
				if se == nil || string(se.Code) != c.Error {
					t.Fatalf("got %v, want %s", err, c.Error)
				}
			})
		}
	}
}

func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(x, y)
}

// TestParseShapes covers the §8.1–§8.6 rules beyond the vectors.
func TestParseShapes(t *testing.T) {
	bad := []string{
		`[]`, `{"event":"hello"}`, `{"event":"hello","data":[]}`,
		`{"event":"sync","data":{"cursor":1,"requiresPull":true,"reason":"later","timestamp":1}}`,
		`{"event":"sync","data":{"cursor":1,"requiresPull":"true","reason":"catchup-required","timestamp":1}}`,
		`{"event":"sync","data":{"cursor":9007199254740992,"requiresPull":true,"reason":"catchup-required","timestamp":1}}`,
		`{"event":"sync","data":{"cursor":1e3,"requiresPull":true,"reason":"catchup-required","timestamp":1}}`,
		`{"event":"heartbeat","data":{"timestamp":1.5}}`,
		`{"event":"presence","data":{"scopeKey":"","doc":null}}`,
		`{"event":"presence","data":{"scopeKey":"project:p1","doc":[1]}}`,
		`{"event":"presence","data":{"scopeKey":"project:p1"}}`,
		`{"event":"presence","data":{"scopeKey":"project:p1","kind":"leave","actorId":"a","clientId":"c","doc":{},"timestamp":1}}`,
		`{"event":"presence","data":{"scopeKey":"project:p1","kind":"join","actorId":"a","clientId":"c","doc":null,"timestamp":1}}`,
		`{"event":"presence","data":{"scopeKey":"project:p1","error":"presence.other","timestamp":1}}`,
		`{"type":"ack","cursor":"5"}`, `{"type":"ack","cursor":5.5}`, `{"type":"ack"}`,
	}
	for _, s := range bad {
		if _, err := Parse([]byte(s)); syncerr.As(err) == nil || syncerr.As(err).Code != syncerr.InvalidRequest {
			t.Errorf("%s: got %v, want sync.invalid_request", s, err)
		}
	}
	good := map[string]any{
		`{"event":"later","data":7}`:                                &Unknown{Name: "later"},
		`{"type":"nudge"}`:                                          &Unknown{Name: "nudge"},
		`{"type":"ack","cursor":-1}`:                                &Ack{Cursor: -1},
		`{"type":"ack","cursor":9007199254740991}`:                  &Ack{Cursor: 1<<53 - 1},
		`{"event":"heartbeat","data":{"timestamp":5}}`:              &Heartbeat{Timestamp: 5},
		`{"event":"presence","data":{"scopeKey":"k:v","doc":null}}`: &PresencePublish{ScopeKey: "k:v"},
	}
	for s, want := range good {
		got, err := Parse([]byte(s))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %#v, %v; want %#v", s, got, err, want)
		}
	}
	if !bytes.Contains(EncodeWake(3, ReasonCatchupRequired, 9), []byte(`"requiresPull":true`)) {
		t.Error("wake without requiresPull true")
	}
}

// FuzzParse: no input panics; accepted known messages re-parse.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"type":"ack","cursor":5}`))
	f.Add([]byte(`{"event":"presence","data":{"scopeKey":"project:p1","doc":{"a":1}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = Parse(b)
	})
}
