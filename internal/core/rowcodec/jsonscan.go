package rowcodec

// A small RFC 8259 recognizer. The row codec must accept exactly the
// documents a JavaScript JSON.parse accepts (§2.4 tag 5: decode validates
// what the §11 rendering later parses) without building any value, so it
// only walks the bytes. Inputs are already known to be valid UTF-8, which
// lets string contents above 0x7F pass without inspection.

type text interface{ ~string | ~[]byte }

func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipWS[T text](s T, i int) int {
	for i < len(s) && isWS(s[i]) {
		i++
	}
	return i
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isHex(c byte) bool {
	return isDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// hasAt reports whether lit occurs in s at offset i.
func hasAt[T text](s T, i int, lit string) bool {
	if len(s)-i < len(lit) {
		return false
	}
	for j := 0; j < len(lit); j++ {
		if s[i+j] != lit[j] {
			return false
		}
	}
	return true
}

// scanString scans the string literal whose opening quote is s[i] and
// returns the offset just past its closing quote.
func scanString[T text](s T, i int) (int, bool) {
	i++
	for i < len(s) {
		c := s[i]
		switch {
		case c == '"':
			return i + 1, true
		case c == '\\':
			if i+1 >= len(s) {
				return i, false
			}
			switch s[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(s)-i < 6 || !isHex(s[i+2]) || !isHex(s[i+3]) || !isHex(s[i+4]) || !isHex(s[i+5]) {
					return i, false
				}
				i += 6
			default:
				return i, false
			}
		case c < 0x20:
			return i, false
		default:
			i++
		}
	}
	return i, false
}

// scanNumber scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at i.
func scanNumber[T text](s T, i int) (int, bool) {
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i >= len(s):
		return i, false
	case s[i] == '0':
		i++
	case isDigit(s[i]):
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	default:
		return i, false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if i >= len(s) || !isDigit(s[i]) {
			return i, false
		}
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i >= len(s) || !isDigit(s[i]) {
			return i, false
		}
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	}
	return i, true
}

// scanKey scans `"key" ws :` starting at i (whitespace before the key
// allowed) and returns the offset after the colon.
func scanKey[T text](s T, i int) (int, bool) {
	i = skipWS(s, i)
	if i >= len(s) || s[i] != '"' {
		return i, false
	}
	i, ok := scanString(s, i)
	if !ok {
		return i, false
	}
	i = skipWS(s, i)
	if i >= len(s) || s[i] != ':' {
		return i, false
	}
	return i + 1, true
}

// validJSON reports whether s is exactly one JSON value (any top-level
// kind) with optional surrounding whitespace. Nesting depth is unbounded;
// the container stack lives on the heap once it outgrows 32 levels, so
// hostile input cannot exhaust the goroutine stack.
func validJSON[T text](s T) bool {
	var stackArr [32]byte
	stack := stackArr[:0]
	i := 0
	var ok bool
	for {
		// A value is expected at i.
		i = skipWS(s, i)
		if i >= len(s) {
			return false
		}
		switch c := s[i]; c {
		case '{', '[':
			end := byte('}')
			if c == '[' {
				end = ']'
			}
			i = skipWS(s, i+1)
			if i < len(s) && s[i] == end {
				i++
				break // empty container: a complete value
			}
			stack = append(stack, c)
			if c == '{' {
				if i, ok = scanKey(s, i); !ok {
					return false
				}
			}
			continue
		case '"':
			if i, ok = scanString(s, i); !ok {
				return false
			}
		case 't':
			if !hasAt(s, i, "true") {
				return false
			}
			i += 4
		case 'f':
			if !hasAt(s, i, "false") {
				return false
			}
			i += 5
		case 'n':
			if !hasAt(s, i, "null") {
				return false
			}
			i += 4
		default:
			if i, ok = scanNumber(s, i); !ok {
				return false
			}
		}
		// A value just ended: close containers and find the next slot.
	after:
		for {
			i = skipWS(s, i)
			if len(stack) == 0 {
				return i == len(s)
			}
			if i >= len(s) {
				return false
			}
			top := stack[len(stack)-1]
			switch c := s[i]; {
			case c == ',':
				i++
				if top == '{' {
					if i, ok = scanKey(s, i); !ok {
						return false
					}
				}
				break after
			case (top == '{' && c == '}') || (top == '[' && c == ']'):
				stack = stack[:len(stack)-1]
				i++
			default:
				return false
			}
		}
	}
}

// blobRefProblem checks the canonical BlobRef shape of §5.9.1 and returns
// "" when s conforms, else what is wrong. The shape is checked on the
// raw text because canonical form is the point: exact key order blobId,
// byteLength, mediaType, name; optional keys omitted rather than null; no
// insignificant whitespace; keys written literally. byteLength must be a
// plain non-negative integer (no sign, fraction, exponent or leading zero —
// the only form JSON.stringify emits) of at most 2^53−1. The two optional
// fields accept any JSON string.
func blobRefProblem[T text](s T) string {
	if p := blobRefShape(s); p != "" {
		if !validJSON(s) {
			return "does not parse as a JSON document"
		}
		return "is not a canonical BlobRef (§5.9.1): " + p
	}
	return ""
}

func blobRefShape[T text](s T) string {
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
		if i, ok = scanString(s, i); !ok {
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
func appendCompact[T text](dst []byte, s T) []byte {
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
		case isWS(c):
			dst = append(dst, s[start:i]...)
			start = i + 1
		}
	}
	return append(dst, s[start:]...)
}
