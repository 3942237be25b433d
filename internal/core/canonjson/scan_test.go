package canonjson

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestValid(t *testing.T) {
	good := []string{
		`true`, `false`, `null`, `7`, `-0`, `-0.0`, `1.5e-300`, `1E+400`, `1E-2`, `"x"`, `""`, `[]`, `{}`, ` 1 `,
		`123456789012345678901234567890`, `[[[[]]]]`, "\t[\n]\r\n", ` { "a" : [ 1 , 2 ] } `,
		" {\n\t\"a\" : [ 1 , 2.50 , -0 , 1e3 , 1E-2 ] ,\r\n \"b\" : { } } ",
		`{"k":"\u00e9\ud83d\ude00\n\"\\\/"}`, `{"a":1,"a":2}`, `"\ud800"`, `"\uDFFF"`,
		`{"tags": ["a", "b"],  "unicode": "𝔘"}`, `{"emoji":"😀","bmp":"\uffff"}`,
		strings.Repeat(`{"a":`, 1000) + `0` + strings.Repeat("}", 1000),
	}
	bad := []string{
		``, ` `, `{`, `}`, `[`, `[1,]`, `{"a":1,}`, `{"a"}`, `{"a" 1}`, `{a:1}`, `{,}`, `[,]`, `'x'`,
		`01`, `-01`, `1.`, `.5`, `1e`, `1e+`, `+1`, `--1`, `- 1`, `-`, `tru`, `nul`, `nulll`, `True`, `NaN`, `Infinity`,
		`"\x"`, `"\u12"`, `"\u12G4"`, "\"a\tb\"", "\"a\x01\"", `"abc`, `"unterminated`, `"\`,
		`1 2`, `{} {}`, `[1] x`, `[1 2]`, `{"a":1}}`, "\uFEFF1",
		strings.Repeat("[", 100) + strings.Repeat("]", 99),
		"\"\xff\"", "[\"a\xc3\"]",
	}
	for _, d := range good {
		if !json.Valid([]byte(d)) {
			t.Fatalf("test bug: %.40q is invalid per encoding/json", d)
		}
		if !Valid(d) || !ValidSyntax(d) || !ValidSyntax([]byte(d)) {
			t.Errorf("%.40q rejected", d)
		}
	}
	// Deeper than encoding/json goes (10000): no valid document is
	// rejected for depth.
	if deep := strings.Repeat("[", 200000) + strings.Repeat("]", 200000); !Valid(deep) {
		t.Error("deep nesting rejected")
	}
	for _, d := range bad {
		if Valid(d) {
			t.Errorf("%.40q accepted", d)
		}
		if utf8.ValidString(d) && (ValidSyntax(d) || ValidSyntax([]byte(d))) {
			t.Errorf("%.40q accepted by ValidSyntax", d)
		}
	}
}

// TestValidMatchesEncodingJSON: random inputs near the grammar.
func TestValidMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	atoms := []string{"{", "}", "[", "]", ",", ":", " ", "\"a\"", "\"\\u00e9\"", "\"\\q\"", "1", "-", "0", ".5", "e3", "1.0", "true", "null", "fals", "\"", "\\", "\n"}
	for range 200000 {
		var sb strings.Builder
		for range 1 + r.IntN(8) {
			sb.WriteString(atoms[r.IntN(len(atoms))])
		}
		s := sb.String()
		if got, want := Valid(s), json.Valid([]byte(s)); got != want {
			t.Fatalf("Valid(%q) = %t, encoding/json says %t", s, got, want)
		}
	}
}

// FuzzValid compares the recognizer with encoding/json, which accepts
// invalid UTF-8 inside strings where Valid does not.
func FuzzValid(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5e3,"x"]}`, ` 7 `, `"\ud800"`, `[`, `01`, `{"a":1,}`, `-0.0e+1`, "\"\xff\""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := Valid(s)
		if !utf8.ValidString(s) {
			if got {
				t.Fatalf("Valid(%q) accepted invalid UTF-8", s)
			}
			return
		}
		if want := json.Valid([]byte(s)); got != want {
			t.Fatalf("Valid(%q) = %v, encoding/json says %v", s, got, want)
		}
		if ValidSyntax([]byte(s)) != got {
			t.Fatalf("ValidSyntax disagrees between string and []byte on %q", s)
		}
	})
}

func TestScanString(t *testing.T) {
	for _, tc := range []struct {
		s    string
		i    int
		end  int
		okay bool
	}{
		{`"abc" x`, 0, 5, true},
		{`x"a\"b"`, 1, 7, true},
		{`"\u00e9\n"`, 0, 10, true},
		{`"abc`, 0, 0, false},
		{`"a\qb"`, 0, 0, false},
		{"\"a\nb\"", 0, 0, false},
	} {
		end, ok := ScanString(tc.s, tc.i)
		if ok != tc.okay || (ok && end != tc.end) {
			t.Errorf("ScanString(%q, %d) = %d, %t; want %d, %t", tc.s, tc.i, end, ok, tc.end, tc.okay)
		}
	}
	if got := SkipSpace(" \t\r\nx ", 0); got != 4 {
		t.Errorf("SkipSpace = %d, want 4", got)
	}
}
