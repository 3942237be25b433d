package wire

// CompareUTF16 orders a and b by UTF-16 code units, the order JavaScript
// string comparison yields and the one SSP2 map keys (Conventions) and
// canonical JSON (§11.2) are sorted by. It returns -1, 0 or +1.
//
// For well-formed UTF-8, byte order equals code-point order, and
// code-point order equals UTF-16 order except when, at the first
// difference, one string has a character in U+E000–U+FFFF (lead byte
// 0xEE/0xEF) and the other a supplementary-plane character (lead byte
// 0xF0–0xF4), which UTF-16 encodes as a surrogate (0xD800–0xDBFF) and so
// sorts first. Those lead bytes never occur as continuation bytes, so the
// first differing byte is enough to detect the case without decoding.
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
