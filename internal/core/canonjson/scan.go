package canonjson

import "unicode/utf8"

// An RFC 8259 recognizer. The codecs must accept exactly the documents a
// JavaScript JSON.parse accepts (wire `json` fields, Conventions; row
// codec json columns, §2.4 tag 5) without building any value, so it only
// walks the bytes. Nesting depth is unbounded: the container stack lives
// on the heap once it outgrows 32 levels, so hostile input cannot exhaust
// the goroutine stack and no valid document is rejected for depth.

// Text is what the scanners read: a string or a byte slice, so decoders
// can check a field in place without copying it.
type Text interface{ ~string | ~[]byte }

// Valid reports whether s is valid UTF-8 and exactly one RFC 8259 JSON
// text: a value of any kind (top-level scalars included) with optional
// surrounding whitespace. It accepts exactly what encoding/json.Valid
// accepts on valid UTF-8.
func Valid(s string) bool { return utf8.ValidString(s) && ValidSyntax(s) }

// ValidSyntax is Valid for input the caller has already checked is valid
// UTF-8: it checks the grammar only, and bytes above 0x7F inside string
// literals pass uninspected.
func ValidSyntax[T Text](s T) bool {
	var stackArr [32]byte
	stack := stackArr[:0]
	i := 0
	var ok bool
	for {
		// A value is expected at i.
		i = SkipSpace(s, i)
		if i >= len(s) {
			return false
		}
		switch c := s[i]; c {
		case '{', '[':
			end := byte('}')
			if c == '[' {
				end = ']'
			}
			i = SkipSpace(s, i+1)
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
			if i, ok = ScanString(s, i); !ok {
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
			i = SkipSpace(s, i)
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

// IsSpace reports whether c is JSON insignificant whitespace.
func IsSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// SkipSpace returns the offset of the first byte at or after i that is
// not JSON whitespace.
func SkipSpace[T Text](s T, i int) int {
	for i < len(s) && IsSpace(s[i]) {
		i++
	}
	return i
}

// ScanString scans the string literal whose opening quote is s[i] and
// returns the offset just past its closing quote; ok is false if the
// literal is malformed or unterminated. Escapes are checked, not decoded.
func ScanString[T Text](s T, i int) (end int, ok bool) {
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

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isHex(c byte) bool {
	return isDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// hasAt reports whether lit occurs in s at offset i. (The conversion
// does not allocate: the compiler compares the bytes in place.)
func hasAt[T Text](s T, i int, lit string) bool {
	return len(s)-i >= len(lit) && string(s[i:i+len(lit)]) == lit
}

// scanNumber scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at i.
func scanNumber[T Text](s T, i int) (int, bool) {
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
func scanKey[T Text](s T, i int) (int, bool) {
	i = SkipSpace(s, i)
	if i >= len(s) || s[i] != '"' {
		return i, false
	}
	i, ok := ScanString(s, i)
	if !ok {
		return i, false
	}
	i = SkipSpace(s, i)
	if i >= len(s) || s[i] != ':' {
		return i, false
	}
	return i + 1, true
}
