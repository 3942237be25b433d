// Package canonjson produces the canonical JSON of SPEC §11.2, the one JSON
// form the protocol hashes: the scope digest (§3.5) and the
// X-Syncular-Scopes header (§5.5). Digests must agree byte for byte with
// every other implementation, so ordering follows JavaScript string
// comparison (UTF-16 code units) and string escaping follows
// JSON.stringify.
package canonjson

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"unicode/utf8"
)

// CompareUTF16 orders a and b the way JavaScript compares strings: by
// UTF-16 code units. This differs from byte (code point) order only when a
// supplementary-plane character meets a BMP character in U+E000–U+FFFF:
// the supplementary one is encoded with a leading surrogate (0xD800–0xDBFF)
// and therefore sorts first. Canonical map keys (Conventions `map`) and
// the §11.2 rendering rely on this order.
//
// Invalid UTF-8 bytes compare as U+FFFD; two different invalid sequences at
// the same position fall back to byte order, so the result is 0 only for
// identical strings.
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
	// Step back to the start of the rune holding the first difference;
	// bytes before i are equal, so one cursor serves both strings.
	for i > 0 && (isCont(a[i]) || isCont(b[i])) {
		i--
	}
	ra, _ := utf8.DecodeRuneInString(a[i:])
	rb, _ := utf8.DecodeRuneInString(b[i:])
	if ra == rb {
		return cmpBytes(a[i:], b[i:])
	}
	ua, ub := firstUnit(ra), firstUnit(rb)
	if ua != ub {
		if ua < ub {
			return -1
		}
		return 1
	}
	// Same leading surrogate: the trailing surrogates follow code point
	// order.
	if ra < rb {
		return -1
	}
	return 1
}

func isCont(c byte) bool { return c&0xC0 == 0x80 }

// firstUnit is the first UTF-16 code unit of r.
func firstUnit(r rune) rune {
	if r < 0x10000 {
		return r
	}
	return 0xD800 + (r-0x10000)>>10
}

func cmpBytes(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// AppendString appends s as a JSON string literal exactly as JavaScript's
// JSON.stringify writes it: `"` and `\` escaped, control characters below
// U+0020 as \b \t \n \f \r or \u00xx (lowercase hex), everything else —
// non-ASCII, U+007F, U+2028/U+2029 — raw UTF-8. Digests (§11.2) depend on
// this exact form.
//
// Go strings may hold invalid UTF-8, which JavaScript strings cannot; each
// invalid byte is written as U+FFFD. Protocol inputs are validated UTF-8,
// so this never triggers on wire data.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
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
				const hexDigits = "0123456789abcdef"
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, "\uFFFD"...)
			i++
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
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
