package rowcodec

import "github.com/skyfold/syncular-lambda/internal/core/canonjson"

// JSON text checks particular to the row codec. The RFC 8259 recognizer
// itself (what JSON.parse accepts) is canonjson.ValidSyntax; input here is
// already known to be valid UTF-8.

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// hasAt reports whether lit occurs in s at offset i.
func hasAt[T canonjson.Text](s T, i int, lit string) bool {
	return len(s)-i >= len(lit) && string(s[i:i+len(lit)]) == lit
}

// blobRefProblem checks the canonical BlobRef shape of §5.9.1 and returns
// "" when s conforms, else what is wrong. The shape is checked on the
// raw text because canonical form is the point: exact key order blobId,
// byteLength, mediaType, name; optional keys omitted rather than null; no
// insignificant whitespace; keys written literally. byteLength must be a
// plain non-negative integer (no sign, fraction, exponent or leading zero —
// the only form JSON.stringify emits) of at most 2^53−1. The two optional
// fields accept any JSON string.
func blobRefProblem[T canonjson.Text](s T) string {
	if p := blobRefShape(s); p != "" {
		if !canonjson.ValidSyntax(s) {
			return "does not parse as a JSON document"
		}
		return "is not a canonical BlobRef (§5.9.1): " + p
	}
	return ""
}

func blobRefShape[T canonjson.Text](s T) string {
	const idKey = `{"blobId":`
	if !hasAt(s, 0, idKey) {
		return `it must be a JSON object starting with the "blobId" key, without whitespace`
	}
	i := len(idKey)
	if !hasAt(s, i, `"sha256:`) {
		return `blobId must be "sha256:" followed by 64 lowercase hex digits`
	}
	i += len(`"sha256:`)
	for j := 0; j < 64; j++ {
		if i >= len(s) || !(isDigit(s[i]) || (s[i] >= 'a' && s[i] <= 'f')) {
			return `blobId must be "sha256:" followed by 64 lowercase hex digits`
		}
		i++
	}
	if i >= len(s) || s[i] != '"' {
		return `blobId must be "sha256:" followed by 64 lowercase hex digits`
	}
	i++
	const lenKey = `,"byteLength":`
	if !hasAt(s, i, lenKey) {
		return `"byteLength" must follow "blobId"`
	}
	i += len(lenKey)
	start := i
	var n uint64
	for i < len(s) && isDigit(s[i]) && i-start <= 16 {
		n = n*10 + uint64(s[i]-'0')
		i++
	}
	switch {
	case i == start || (s[start] == '0' && i-start > 1):
		return "byteLength must be a non-negative integer in plain decimal"
	case i < len(s) && (isDigit(s[i]) || s[i] == '.' || s[i] == 'e' || s[i] == 'E'):
		return "byteLength must be a non-negative integer in plain decimal"
	case n > MaxSafeInt:
		return "byteLength exceeds 2^53-1"
	}
	var ok bool
	for _, key := range [...]string{`,"mediaType":`, `,"name":`} {
		if !hasAt(s, i, key) {
			continue
		}
		i += len(key)
		if i >= len(s) || s[i] != '"' {
			return key[2:len(key)-2] + " must be a string"
		}
		if i, ok = canonjson.ScanString(s, i); !ok {
			return key[2:len(key)-2] + " must be a string"
		}
	}
	if i != len(s)-1 || s[i] != '}' {
		return "unknown key, key out of canonical order, or insignificant whitespace"
	}
	return ""
}

// appendCompact appends the valid JSON text s without insignificant
// whitespace.
func appendCompact[T canonjson.Text](dst []byte, s T) []byte {
	inStr := false
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if inStr {
			switch c {
			case '\\':
				i++
			case '"':
				inStr = false
			}
			continue
		}
		switch {
		case c == '"':
			inStr = true
		case canonjson.IsSpace(c):
			dst = append(dst, s[start:i]...)
			start = i + 1
		}
	}
	return append(dst, s[start:]...)
}
