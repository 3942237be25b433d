package canonjson

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// utf16Ref is the obvious reference: encode to UTF-16 and compare units.
func utf16Ref(a, b string) int {
	ua, ub := utf16.Encode([]rune(a)), utf16.Encode([]rune(b))
	return slices.Compare(ua, ub)
}

func TestCompareUTF16(t *testing.T) {
	samples := []string{
		"", "a", "b", "ab", "a\u0000", "z", "é", "\u00ff", "\u0100", "\ud7ff",
		"\ue000", "\uffff", "\uff61", "𐀀", "𝄞", "😀", "\U0010ffff", "a😀", "a\uffff",
		"😀a", "\uffffa", "中文", "中", "p1", "p10", "p2",
	}
	for _, a := range samples {
		for _, b := range samples {
			if got, want := CompareUTF16(a, b), utf16Ref(a, b); got != want {
				t.Fatalf("CompareUTF16(%q, %q) = %d, want %d", a, b, got, want)
			}
		}
	}
	// The documented divergence from byte order.
	if CompareUTF16("😀", "\uffff") >= 0 || "😀" < "\uffff" {
		t.Fatal("supplementary character must sort before U+FFFF in UTF-16 order")
	}
	// Invalid UTF-8: a total order, zero only for equal strings.
	if CompareUTF16("a\xff", "a\xfe") == 0 || CompareUTF16("a\xff", "a\xff") != 0 {
		t.Fatal("invalid UTF-8 ordering")
	}
}

func FuzzCompareUTF16(f *testing.F) {
	f.Add("a", "b")
	f.Add("😀", "\uffff")
	f.Fuzz(func(t *testing.T, a, b string) {
		got := CompareUTF16(a, b)
		if got != -CompareUTF16(b, a) {
			t.Fatal("not antisymmetric")
		}
		if (got == 0) != (a == b) {
			t.Fatal("zero iff equal")
		}
		// Valid strings without U+FFFD ambiguity must match the reference.
		if isPlainUTF8(a) && isPlainUTF8(b) {
			if want := utf16Ref(a, b); got != want {
				t.Fatalf("CompareUTF16(%q, %q) = %d, want %d", a, b, got, want)
			}
		}
	})
}

func isPlainUTF8(s string) bool {
	return !strings.ContainsRune(s, '\uFFFD') && strings.ToValidUTF8(s, "") == s
}

func TestAppendString(t *testing.T) {
	cases := map[string]string{
		"":               `""`,
		"abc":            `"abc"`,
		"q\"b\\s/":       `"q\"b\\s/"`,
		"\b\f\n\r\t":     `"\b\f\n\r\t"`,
		"\x00\x01\x1f":   `"\u0000\u0001\u001f"`,
		"\x7f":           "\"\x7f\"",
		"é😀\u2028\u2029": "\"é😀\u2028\u2029\"",
		"<>&'":           `"<>&'"`,
		"a\xffb":         "\"a\uFFFDb\"",
	}
	for in, want := range cases {
		if got := string(AppendString(nil, in)); got != want {
			t.Errorf("%q: got %s want %s", in, got, want)
		}
	}
}

func TestScopeMap(t *testing.T) {
	m := map[string][]string{
		"project": {"p2", "p1", "p2", "p10"},
		"a":       nil,
		"😀":       {"\uffff", "😀"},
		"\uffff":  {"x"},
		"q\"":     {"line\nbreak"},
	}
	got := string(ScopeMap(m))
	want := `{"a":[],"project":["p1","p10","p2"],"q\"":["line\nbreak"],"😀":["😀","` + "\uffff" + `"],"` + "\uffff" + `":["x"]}`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if len(m["project"]) != 4 || m["project"][0] != "p2" {
		t.Fatal("input was modified")
	}
	if got := string(ScopeMap(nil)); got != "{}" {
		t.Fatalf("empty map: %s", got)
	}
	var back map[string][]string
	if err := json.Unmarshal([]byte(want), &back); err != nil {
		t.Fatal(err)
	}
}

// TestScopeDigestVector checks the digest against the golden response
// vector whose SUB_START carries effectiveScopes {"project":["p1"]} and
// whose SEGMENT_REF frames carry the matching scopeDigest.
func TestScopeDigestVector(t *testing.T) {
	if got, want := ScopeDigest(map[string][]string{"project": {"p1"}}),
		"5a993aa4d503af6f5dc77acc12ad399ff2e9d933c393f4de6af5f6aef4fa2977"; got != want {
		t.Fatalf("digest %s, want %s", got, want)
	}
	dir := os.Getenv("SSP2_VECTORS")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "..", "shared", "ssp2-vectors")
		if _, err := os.Stat(dir); err != nil {
			t.Skip("golden vectors not found; set SSP2_VECTORS")
		}
	}
	raw, err := os.ReadFile(filepath.Join(dir, "response", "bootstrap-segments.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Frames []struct {
			Type            string              `json:"type"`
			EffectiveScopes map[string][]string `json:"effectiveScopes"`
			ScopeDigest     string              `json:"scopeDigest"`
		} `json:"frames"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var scopes map[string][]string
	checked := 0
	for _, f := range doc.Frames {
		switch f.Type {
		case "SUB_START":
			scopes = f.EffectiveScopes
		case "SEGMENT_REF":
			if got := ScopeDigest(scopes); got != f.ScopeDigest {
				t.Fatalf("digest of %v = %s, vector says %s", scopes, got, f.ScopeDigest)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no SEGMENT_REF frames in the vector")
	}
	t.Logf("scope digest matches %d SEGMENT_REF frames", checked)
}

func TestParseScopeMap(t *testing.T) {
	good := map[string]map[string][]string{
		`{}`:                 {},
		`{"project":["p1"]}`: {"project": {"p1"}},
		` { "b" : [ "y" , "x", "x" ] , "a":[] } `: {"b": {"y", "x", "x"}, "a": {}},
		`{"k":["\u00e9\ud83d\ude00"]}`:            {"k": {"é😀"}},
	}
	for in, want := range good {
		got, err := ParseScopeMap([]byte(in))
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: got %v", in, got)
		}
		for k, v := range want {
			if !slices.Equal(got[k], v) || got[k] == nil {
				t.Fatalf("%s: key %s got %v want %v", in, k, got[k], v)
			}
		}
	}
	bad := []string{
		``, `null`, `[]`, `"x"`, `{"a":"b"}`, `{"a":[1]}`, `{"a":[null]}`, `{"a":null}`,
		`{"a":["x"],"a":["y"]}`, `{"a":["x"]} {}`, `{"a":["x"]`, `{"a" ["x"]}`, `{"a":["x"],}`,
		`{"a":["x",]}`, `{a:["x"]}`, "{\"a\":[\"\xff\"]}", `{"a":[["x"]]}`, `{"a":[{}]}`,
	}
	for _, in := range bad {
		_, err := ParseScopeMap([]byte(in))
		if !syncerr.HasCode(err, syncerr.InvalidRequest) {
			t.Fatalf("%q: got %v, want sync.invalid_request", in, err)
		}
	}
	// Parse then canonicalize equals canonical input.
	m, err := ParseScopeMap([]byte(`{"z":["b","a","b"],"y":["c"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(ScopeMap(m)); got != `{"y":["c"],"z":["a","b"]}` {
		t.Fatalf("canonical: %s", got)
	}
}
