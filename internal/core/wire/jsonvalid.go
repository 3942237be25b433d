package wire

// validJSON reports whether s is exactly one RFC 8259 JSON text: a value
// of any type (top-level scalars included) with optional surrounding
// whitespace. It is the check the Conventions `json` row asks of a
// decoder; the text itself is never re-serialized. Nesting depth is
// bounded only by the input length (the container stack is explicit), so
// no valid document is rejected for depth. s is assumed to be valid UTF-8
// (every str is checked for that first).
func validJSON(s string) bool {
	var stackBuf [32]byte
	stack := stackBuf[:0]
	i := skipWS(s, 0)
	const (
		wantValue = iota
		wantKey
		afterValue
	)
	state := wantValue
	for {
		switch state {
		case wantValue:
			if i >= len(s) {
				return false
			}
			switch c := s[i]; {
			case c == '{':
				i = skipWS(s, i+1)
				if i < len(s) && s[i] == '}' {
					i++
					state = afterValue
					continue
				}
				stack = append(stack, '{')
				state = wantKey
				continue
			case c == '[':
				i = skipWS(s, i+1)
				if i < len(s) && s[i] == ']' {
					i++
					state = afterValue
					continue
				}
				stack = append(stack, '[')
				continue // still wantValue
			case c == '"':
				j, ok := scanJSONString(s, i)
				if !ok {
					return false
				}
				i = j
			case c == 't':
				if len(s)-i < 4 || s[i:i+4] != "true" {
					return false
				}
				i += 4
			case c == 'f':
				if len(s)-i < 5 || s[i:i+5] != "false" {
					return false
				}
				i += 5
			case c == 'n':
				if len(s)-i < 4 || s[i:i+4] != "null" {
					return false
				}
				i += 4
			case c == '-' || (c >= '0' && c <= '9'):
				j, ok := scanJSONNumber(s, i)
				if !ok {
					return false
				}
				i = j
			default:
				return false
			}
			state = afterValue
		case wantKey:
			if i >= len(s) || s[i] != '"' {
				return false
			}
			j, ok := scanJSONString(s, i)
			if !ok {
				return false
			}
			i = skipWS(s, j)
			if i >= len(s) || s[i] != ':' {
				return false
			}
			i = skipWS(s, i+1)
			state = wantValue
		case afterValue:
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
				i = skipWS(s, i+1)
				if top == '{' {
					state = wantKey
				} else {
					state = wantValue
				}
			case (c == '}' && top == '{') || (c == ']' && top == '['):
				stack = stack[:len(stack)-1]
				i++
			default:
				return false
			}
		}
	}
}

func skipWS(s string, i int) int {
	for i < len(s) {
		switch s[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// scanJSONString scans the string literal starting at the quote s[i] and
// returns the index just past its closing quote.
func scanJSONString(s string, i int) (int, bool) {
	i++
	for i < len(s) {
		c := s[i]
		switch {
		case c == '"':
			return i + 1, true
		case c == '\\':
			if i+1 >= len(s) {
				return 0, false
			}
			switch s[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(s)-i < 6 || !isHex(s[i+2]) || !isHex(s[i+3]) || !isHex(s[i+4]) || !isHex(s[i+5]) {
					return 0, false
				}
				i += 6
			default:
				return 0, false
			}
		case c < 0x20:
			return 0, false
		default:
			i++
		}
	}
	return 0, false
}

// scanJSONNumber scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func scanJSONNumber(s string, i int) (int, bool) {
	if s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		i = skipDigits(s, i+1)
	default:
		return 0, false
	}
	if i < len(s) && s[i] == '.' {
		j := skipDigits(s, i+1)
		if j == i+1 {
			return 0, false
		}
		i = j
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := skipDigits(s, i)
		if j == i {
			return 0, false
		}
		i = j
	}
	return i, true
}

func skipDigits(s string, i int) int {
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}
