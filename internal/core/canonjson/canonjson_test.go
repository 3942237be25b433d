package canonjson

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/vectors"
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

// TestCompareUTF16MatchesReference draws short strings over the alphabet
// where UTF-16 and UTF-8 byte order disagree: ASCII, U+E000–U+FFFF and
// the supplementary planes.
func TestCompareUTF16MatchesReference(t *testing.T) {
	alphabet := []rune{'a', 'b', 'z', 0x7F, 0xE9, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xE001, 0xFFFD, 0xFFFF, 0x10000, 0x10001, 0x1F600, 0x10FFFF}
	r := rand.New(rand.NewPCG(1, 2))
	key := func() string {
		rs := make([]rune, r.IntN(4))
		for i := range rs {
			rs[i] = alphabet[r.IntN(len(alphabet))]
		}
		return string(rs)
	}
	for range 200000 {
		a, b := key(), key()
		if got, want := CompareUTF16(a, b), utf16Ref(a, b); got != want {
			t.Fatalf("CompareUTF16(%+q, %+q) = %d, want %d", a, b, got, want)
		}
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
		// Lone surrogates (WTF-8) are escaped as JSON.stringify does.
		"x\xed\xa0\x80y": `"x\ud800y"`,
		"\xed\xbf\xbf":   `"\udfff"`,
		"\xed\xb3\x9a":   `"\udcda"`,
		"\xed\xa0":       "\"\uFFFD\uFFFD\"",
		"\xed\xa0\x7f":   "\"\uFFFD\uFFFD\x7f\"",
		"\ud7ff\ue000":   "\"\ud7ff\ue000\"",
	}
	for in, want := range cases {
		if got := string(AppendString(nil, in)); got != want {
			t.Errorf("%q: got %s want %s", in, got, want)
		}
	}
}

// FuzzAppendString checks AppendString against encoding/json: the output
// decodes back to the input (invalid bytes as U+FFFD, lone surrogates as
// the escape), and it is encoding/json's own encoding with the escapes
// JSON.stringify does not make (U+2028, U+2029, U+FFFD for invalid bytes)
// written raw instead.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "abc", "q\"b\\s/", "\b\f\n\r\t\x00\x1f\x7f", "é😀\u2028\u2029<>&", "a\xffb", "\xed\xa0\x80", `\u2028`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := AppendString([]byte("prefix"), s)
		if string(out[:6]) != "prefix" {
			t.Fatal("dst prefix clobbered")
		}
		out = out[6:]
		var back string
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("AppendString(%q) = %s, not JSON: %v", s, out, err)
		}
		if utf8.ValidString(s) && back != s {
			t.Fatalf("AppendString(%q) = %s decodes to %q", s, out, back)
		}
		if strings.Contains(s, "\xed") {
			return // may hold WTF-8 surrogates, which encoding/json replaces
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		if want := unescapeNonStringify(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))); string(out) != want {
			t.Fatalf("AppendString(%q) = %s, want %s", s, out, want)
		}
	})
}

// unescapeNonStringify rewrites encoding/json's \u2028, \u2029 and \ufffd
// escapes as the raw characters, leaving every other escape alone.
func unescapeNonStringify(b []byte) string {
	var out strings.Builder
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			out.WriteByte(b[i])
			continue
		}
		if b[i+1] == 'u' {
			switch string(b[i+2 : i+6]) {
			case "2028", "2029", "fffd":
				r, _ := strconv.ParseUint(string(b[i+2:i+6]), 16, 32)
				out.WriteRune(rune(r))
				i += 5
				continue
			}
			out.Write(b[i : i+6])
			i += 5
			continue
		}
		out.Write(b[i : i+2])
		i++
	}
	return out.String()
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
	dir := vectors.Dir(t)
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
