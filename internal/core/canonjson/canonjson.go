// Package canonjson produces the canonical JSON of SPEC §11.2, the one JSON
// form the protocol hashes: the scope digest (§3.5) and the
// X-Syncular-Scopes header (§5.5). Digests must agree byte for byte with
// every other implementation, so ordering follows JavaScript string
// comparison (UTF-16 code units) and string escaping follows
// JSON.stringify.
//
// It is also the single home of the JavaScript-exact JSON primitives the
// codecs share: CompareUTF16 (map-key order, wire and canonical JSON),
// AppendString (JSON.stringify string escaping, for every rendering) and
// the RFC 8259 recognizer Valid / ValidSyntax with its scanners (what
// JSON.parse accepts, for json fields and json columns). It imports no
// other codec package, so wire and rowcodec can both build on it.
package canonjson

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"unicode/utf8"
)

// CompareUTF16 orders a and b the way JavaScript compares strings: by
// UTF-16 code units. It returns -1, 0 or +1. SSP2 map keys (Conventions
// `map`), the §6.3.1 details references and the §11.2 rendering are
// sorted by it.
//
// For well-formed UTF-8, byte order equals code-point order, and
// code-point order equals UTF-16 order except when, at the first
// difference, one string has a character in U+E000–U+FFFF (lead byte
// 0xEE/0xEF) and the other a supplementary-plane character (lead byte
// 0xF0–0xF4), which UTF-16 encodes as a surrogate (0xD800–0xDBFF) and so
// sorts first. Those lead bytes never occur as continuation bytes, so the
// first differing byte is enough to detect the case without decoding.
//
// On invalid UTF-8 the result is still a total order (byte order with
// 0xF0–0xFF moved before 0xEE–0xEF) and 0 only for identical strings, but
// it does not model any JavaScript string; callers that must treat
// invalid bytes as U+FFFD replace them first, as ScopeMap does.
func CompareUTF16(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == n {
		switch {
		case len(a) < len(b):
			return -1
		case len(a) > len(b):
			return 1
		}
		return 0
	}
	ca, cb := a[i], b[i]
	if ca >= 0xF0 && (cb == 0xEE || cb == 0xEF) {
		return -1
	}
	if cb >= 0xF0 && (ca == 0xEE || ca == 0xEF) {
		return 1
	}
	if ca < cb {
		return -1
	}
	return 1
}

// AppendString appends s as a JSON string literal exactly as JavaScript's
// JSON.stringify writes it: `"` and `\` escaped, control characters below
// U+0020 as \b \t \n \f \r or \u00xx (lowercase hex), everything else —
// non-ASCII, U+007F, U+2028/U+2029 — raw UTF-8. Digests (§11.2) depend on
// this exact form.
//
// A JavaScript string may hold a lone surrogate, which JSON.stringify
// writes as a \udxxx escape; in a Go string such a string arrives as
// WTF-8, the surrogate encoded like any BMP character (0xED 0xA0–0xBF
// 0x80–0xBF), and is escaped the same way (the §6.3.1 details normalizer
// relies on this). Any other invalid UTF-8 byte, which no JavaScript
// string can hold, is written as U+FFFD. Protocol inputs are validated
// UTF-8, so neither case arises on wire data.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start, i := 0, 0
	for {
		for i < len(s) && plain[s[i]] {
			i++
		}
		if i == len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\r':
				dst = append(dst, '\\', 'r')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			if u, ok := wtf8Surrogate(s, i); ok {
				dst = append(dst, '\\', 'u', hexDigits[u>>12], hexDigits[u>>8&0xF], hexDigits[u>>4&0xF], hexDigits[u&0xF])
				i += 3
			} else {
				dst = append(dst, "\uFFFD"...)
				i++
			}
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

const hexDigits = "0123456789abcdef"

// plain holds the bytes AppendString copies as they are without a closer
// look: printable ASCII other than '"' and '\\'.
var plain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// wtf8Surrogate decodes the 3-byte WTF-8 encoding of a surrogate code
// point (U+D800–U+DFFF) at s[i], which utf8 treats as invalid.
func wtf8Surrogate(s string, i int) (rune, bool) {
	if len(s)-i < 3 || s[i] != 0xED || s[i+1] < 0xA0 || s[i+1] > 0xBF || s[i+2]&0xC0 != 0x80 {
		return 0, false
	}
	return 0xD000 | rune(s[i+1]&0x3F)<<6 | rune(s[i+2]&0x3F), true
}

// sanitize replaces each invalid UTF-8 byte with U+FFFD up front, so that
// sorting, deduplication and encoding all see the same string.
func sanitize(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	out := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			out = append(out, "\uFFFD"...)
		} else {
			out = append(out, s[i:i+size]...)
		}
		i += size
	}
	return string(out)
}

// ScopeMap renders an effective- or requested-scope map as §11.2 canonical
// JSON: no whitespace, keys in UTF-16 code-unit order, each value list
// sorted the same way and deduplicated. A nil or empty list renders as [].
// The input is not modified.
func ScopeMap(m map[string][]string) []byte {
	keys := make([]string, 0, len(m))
	orig := make(map[string]string, len(m))
	for k := range m {
		sk := sanitize(k)
		keys = append(keys, sk)
		orig[sk] = k
	}
	slices.SortFunc(keys, CompareUTF16)
	size := 2
	for _, k := range keys {
		size += len(k) + 6
		for _, v := range m[orig[k]] {
			size += len(v) + 3
		}
	}
	out := make([]byte, 0, size)
	out = append(out, '{')
	var vals []string
	for i, k := range keys {
		if i > 0 && k == keys[i-1] {
			// Two keys that differ only in invalid bytes collapse to
			// one; keep the first (the map holds no canonical winner).
			continue
		}
		if i > 0 {
			out = append(out, ',')
		}
		out = AppendString(out, k)
		out = append(out, ':', '[')
		vals = vals[:0]
		for _, v := range m[orig[k]] {
			vals = append(vals, sanitize(v))
		}
		slices.SortFunc(vals, CompareUTF16)
		vals = slices.Compact(vals)
		for j, v := range vals {
			if j > 0 {
				out = append(out, ',')
			}
			out = AppendString(out, v)
		}
		out = append(out, ']')
	}
	return append(out, '}')
}

// ScopeDigest is the §3.5 scope digest: lowercase hex SHA-256 of
// ScopeMap(m).
func ScopeDigest(m map[string][]string) string {
	sum := sha256.Sum256(ScopeMap(m))
	return hex.EncodeToString(sum[:])
}
