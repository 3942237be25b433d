package engine

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// The hand-written registration encoding is encoding/json's, byte for
// byte (a stored registration compares equal across versions): checked
// against json.Marshal of the registration document over random
// subscription lists with escapes, HTML characters, invalid UTF-8,
// U+2028/2029, repeated scope keys, nil and empty value lists.
func TestEncodeRegistrationIsEncodingJSON(t *testing.T) {
	pieces := []string{"", "a", "project_id", "p1", "é", "日本", "\"", "\\", "<", ">", "&", "\n", "\t", "\r", "\b", "\f", "\x00", "\x1f", "\x7f", "\xff", "\xe2\x80", "\u2028", "\u2029", "/", "'", "💡"}
	rng := rand.New(rand.NewPCG(1, 2))
	str := func() string {
		s := ""
		for n := rng.IntN(4); n > 0; n-- {
			s += pieces[rng.IntN(len(pieces))]
		}
		return s
	}
	for i := 0; i < 3000; i++ {
		subs := make([]wire.Subscription, rng.IntN(4))
		doc := registrationDoc{SchemaVersion: rng.Int32N(100) - 3, Subs: make([]registeredSub, len(subs))}
		for j := range subs {
			subs[j] = wire.Subscription{ID: str(), Table: str()}
			m := map[string][]string{}
			for k := rng.IntN(4); k > 0; k-- {
				key := []string{"project_id", "org", str()}[rng.IntN(3)]
				var vals []string
				switch rng.IntN(3) {
				case 0: // nil
				case 1:
					vals = []string{}
				default:
					for n := 1 + rng.IntN(3); n > 0; n-- {
						vals = append(vals, str())
					}
				}
				subs[j].Scopes = append(subs[j].Scopes, wire.ScopeEntry{Key: key, Values: vals})
				m[key] = vals
			}
			doc.Subs[j] = registeredSub{ID: subs[j].ID, Table: subs[j].Table, Scopes: m}
		}
		want, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		if got := registrationOf("", doc.SchemaVersion, subs); got != string(want) {
			t.Fatalf("case %d:\n got %s\nwant %s", i, got, want)
		}
		if got := registrationOf(`{"sv":0,"subs":[]}`, doc.SchemaVersion, subs); got != string(want) {
			t.Fatalf("case %d, another stored registration:\n got %s\nwant %s", i, got, want)
		}
	}
}
