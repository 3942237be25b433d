package wire

import (
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/skyfold/syncular-lambda/internal/core/canonjson"
)

// Bounds of the §6.3.1 detailsJson shape. The object is recovery metadata
// replicated to clients, so every member is code-like and capped: a host
// cannot smuggle prose or row contents through it.
const (
	detailsMaxBytes        = 4096
	detailsMaxFieldPaths   = 32
	detailsMaxPathLen      = 160
	detailsMaxTokenLen     = 96
	detailsMaxReferences   = 16
	detailsMaxRefKeyLen    = 64
	detailsMaxRefValueByte = 256
)

// details is a parsed §6.3.1 detailsJson object.
type details struct {
	fieldPaths     []string
	reason         string
	requiredAction string
	refs           []StoredScope
	has            uint8 // bit set of the members present
}

const (
	hasFieldPaths = 1 << iota
	hasReason
	hasRequiredAction
	hasReferences
)

// NormalizeDetailsJSON validates a PUSH_RESULT_DETAILS detailsJson text
// against the bounded shape of §6.3.1 and returns its normalized encoding
// (members in table order, references sorted by key, no whitespace), the
// form a server should persist and emit. The decoder accepts any text
// that passes this validation and keeps it verbatim.
func NormalizeDetailsJSON(s string) (string, error) {
	d, err := parseDetails(s)
	if err != nil {
		return "", err
	}
	out := d.appendNormalized(make([]byte, 0, len(s)))
	if len(out) > detailsMaxBytes {
		return "", invalidf("detailsJson: normalized object is %d bytes, over the %d-byte limit", len(out), detailsMaxBytes)
	}
	return string(out), nil
}

// validateDetailsJSON is the §6.3.1 decode-time check of one entry.
func validateDetailsJSON(s string) error {
	_, err := NormalizeDetailsJSON(s)
	return err
}

func parseDetails(s string) (*details, error) {
	p := detailsParser{s: s}
	d := &details{}
	p.ws()
	if !p.eat('{') {
		return nil, invalidf("detailsJson: not a JSON object")
	}
	p.ws()
	if !p.eat('}') {
		for {
			key, ok := p.str()
			if !ok {
				return nil, invalidf("detailsJson: malformed member name")
			}
			p.ws()
			if !p.eat(':') {
				return nil, invalidf("detailsJson: malformed JSON after member %q", key)
			}
			p.ws()
			var bit uint8
			switch key {
			case "fieldPaths":
				bit = hasFieldPaths
			case "reason":
				bit = hasReason
			case "requiredAction":
				bit = hasRequiredAction
			case "references":
				bit = hasReferences
			default:
				return nil, invalidf("detailsJson: unknown member %q", key)
			}
			if d.has&bit != 0 {
				return nil, invalidf("detailsJson: duplicate member %q", key)
			}
			d.has |= bit
			var err error
			switch bit {
			case hasFieldPaths:
				d.fieldPaths, err = p.strArray(key)
			case hasReason:
				d.reason, err = p.strValue(key)
			case hasRequiredAction:
				d.requiredAction, err = p.strValue(key)
			case hasReferences:
				d.refs, err = p.strObject(key)
			}
			if err != nil {
				return nil, err
			}
			p.ws()
			if p.eat('}') {
				break
			}
			if !p.eat(',') {
				return nil, invalidf("detailsJson: malformed JSON after member %q", key)
			}
			p.ws()
		}
	}
	p.ws()
	if p.i != len(s) {
		return nil, invalidf("detailsJson: trailing bytes after the object")
	}
	if d.has == 0 {
		return nil, invalidf("detailsJson: no supported member")
	}
	return d, d.check()
}

func (d *details) check() error {
	if d.has&hasFieldPaths != 0 {
		if n := len(d.fieldPaths); n == 0 || n > detailsMaxFieldPaths {
			return invalidf("detailsJson: fieldPaths has %d entries, want 1-%d", n, detailsMaxFieldPaths)
		}
		for i, p := range d.fieldPaths {
			if len(p) > detailsMaxPathLen || !isFieldPath(p) {
				return invalidf("detailsJson: fieldPaths[%d] %q is not a schema path of at most %d characters", i, p, detailsMaxPathLen)
			}
			if slices.Contains(d.fieldPaths[:i], p) {
				return invalidf("detailsJson: duplicate field path %q", p)
			}
		}
	}
	if d.has&hasReason != 0 && !isToken(d.reason, detailsMaxTokenLen) {
		return invalidf("detailsJson: reason %q is not a stable token of at most %d characters", d.reason, detailsMaxTokenLen)
	}
	if d.has&hasRequiredAction != 0 && !isToken(d.requiredAction, detailsMaxTokenLen) {
		return invalidf("detailsJson: requiredAction %q is not a stable token of at most %d characters", d.requiredAction, detailsMaxTokenLen)
	}
	if d.has&hasReferences != 0 {
		if n := len(d.refs); n == 0 || n > detailsMaxReferences {
			return invalidf("detailsJson: references has %d entries, want 1-%d", n, detailsMaxReferences)
		}
		for i, r := range d.refs {
			if !isToken(r.Key, detailsMaxRefKeyLen) {
				return invalidf("detailsJson: reference key %q is not a stable token of at most %d characters", r.Key, detailsMaxRefKeyLen)
			}
			for _, q := range d.refs[:i] {
				if q.Key == r.Key {
					return invalidf("detailsJson: duplicate reference key %q", r.Key)
				}
			}
			if !isSafeRefValue(r.Value) {
				return invalidf("detailsJson: reference %q value must be a non-empty trimmed string without control characters of at most %d bytes", r.Key, detailsMaxRefValueByte)
			}
		}
		slices.SortFunc(d.refs, func(a, b StoredScope) int { return canonjson.CompareUTF16(a.Key, b.Key) })
	}
	return nil
}

func (d *details) appendNormalized(b []byte) []byte {
	b = append(b, '{')
	open := len(b)
	sep := func() {
		if len(b) > open {
			b = append(b, ',')
		}
	}
	if d.has&hasFieldPaths != 0 {
		b = append(b, `"fieldPaths":[`...)
		for i, p := range d.fieldPaths {
			if i > 0 {
				b = append(b, ',')
			}
			b = canonjson.AppendString(b, p)
		}
		b = append(b, ']')
	}
	if d.has&hasReason != 0 {
		sep()
		b = append(b, `"reason":`...)
		b = canonjson.AppendString(b, d.reason)
	}
	if d.has&hasRequiredAction != 0 {
		sep()
		b = append(b, `"requiredAction":`...)
		b = canonjson.AppendString(b, d.requiredAction)
	}
	if d.has&hasReferences != 0 {
		sep()
		b = append(b, `"references":{`...)
		for i, r := range d.refs {
			if i > 0 {
				b = append(b, ',')
			}
			b = canonjson.AppendString(b, r.Key)
			b = append(b, ':')
			b = canonjson.AppendString(b, r.Value)
		}
		b = append(b, '}')
	}
	return append(b, '}')
}

// isFieldPath matches identifier(.identifier)* with identifier
// [A-Za-z_][A-Za-z0-9_]*.
func isFieldPath(s string) bool {
	start := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '.':
			if start {
				return false
			}
			start = true
		case c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'):
			start = false
		case c >= '0' && c <= '9':
			if start {
				return false
			}
		default:
			return false
		}
	}
	return !start
}

// isToken matches the §6.3.1 stable token [a-z][a-z0-9]*([._-][a-z0-9]+)*
// of at most maxLen characters (tokens are ASCII, so bytes = characters).
func isToken(s string, maxLen int) bool {
	if len(s) == 0 || len(s) > maxLen || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	afterSep := false
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'):
			afterSep = false
		case c == '.' || c == '_' || c == '-':
			if afterSep {
				return false
			}
			afterSep = true
		default:
			return false
		}
	}
	return !afterSep
}

// isSafeRefValue: non-empty, at most 256 UTF-8 bytes, equal to its
// JavaScript trim(), no C0/DEL/C1 control character (§6.3.1).
func isSafeRefValue(s string) bool {
	if len(s) == 0 || len(s) > detailsMaxRefValueByte {
		return false
	}
	if r, _ := utf8.DecodeRuneInString(s); isJSSpace(r) {
		return false
	}
	if r, _ := utf8.DecodeLastRuneInString(s); isJSSpace(r) {
		return false
	}
	for _, r := range s {
		if r <= 0x1F || (r >= 0x7F && r <= 0x9F) {
			return false
		}
	}
	return true
}

// isJSSpace is the set String.prototype.trim removes: WhiteSpace and
// LineTerminator of ECMA-262.
func isJSSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0xA0, 0x1680, 0x2028, 0x2029,
		0x202F, 0x205F, 0x3000, 0xFEFF:
		return true
	}
	return r >= 0x2000 && r <= 0x200A
}

// detailsParser reads the restricted JSON grammar of a detailsJson
// object: anything outside the bounded shape is rejected as it is met.
type detailsParser struct {
	s string
	i int
}

func (p *detailsParser) ws() { p.i = canonjson.SkipSpace(p.s, p.i) }

func (p *detailsParser) eat(c byte) bool {
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *detailsParser) strValue(member string) (string, error) {
	v, ok := p.str()
	if !ok {
		return "", invalidf("detailsJson: %s must be a string", member)
	}
	return v, nil
}

func (p *detailsParser) strArray(member string) ([]string, error) {
	if !p.eat('[') {
		return nil, invalidf("detailsJson: %s must be an array of strings", member)
	}
	var out []string
	p.ws()
	if p.eat(']') {
		return out, nil
	}
	for {
		v, ok := p.str()
		if !ok {
			return nil, invalidf("detailsJson: %s must be an array of strings", member)
		}
		out = append(out, v)
		if len(out) > detailsMaxFieldPaths {
			return nil, invalidf("detailsJson: %s has more than %d entries", member, detailsMaxFieldPaths)
		}
		p.ws()
		if p.eat(']') {
			return out, nil
		}
		if !p.eat(',') {
			return nil, invalidf("detailsJson: malformed %s array", member)
		}
		p.ws()
	}
}

func (p *detailsParser) strObject(member string) ([]StoredScope, error) {
	if !p.eat('{') {
		return nil, invalidf("detailsJson: %s must be an object of strings", member)
	}
	var out []StoredScope
	p.ws()
	if p.eat('}') {
		return out, nil
	}
	for {
		k, ok := p.str()
		if !ok {
			return nil, invalidf("detailsJson: malformed %s key", member)
		}
		p.ws()
		if !p.eat(':') {
			return nil, invalidf("detailsJson: malformed %s object", member)
		}
		p.ws()
		v, ok := p.str()
		if !ok {
			return nil, invalidf("detailsJson: %s values must be strings", member)
		}
		out = append(out, StoredScope{Key: k, Value: v})
		if len(out) > detailsMaxReferences {
			return nil, invalidf("detailsJson: %s has more than %d entries", member, detailsMaxReferences)
		}
		p.ws()
		if p.eat('}') {
			return out, nil
		}
		if !p.eat(',') {
			return nil, invalidf("detailsJson: malformed %s object", member)
		}
		p.ws()
	}
}

// str reads a JSON string literal at the cursor and returns its value.
// Escapes are decoded; a lone surrogate escape is kept as generalized
// UTF-8 so the normalized form can reproduce it (JavaScript strings may
// hold one) and byte counts match a UTF-8 encoder's replacement char.
func (p *detailsParser) str() (string, bool) {
	s := p.s
	if p.i >= len(s) || s[p.i] != '"' {
		return "", false
	}
	end, ok := canonjson.ScanString(s, p.i)
	if !ok {
		return "", false
	}
	raw := s[p.i+1 : end-1]
	p.i = end
	esc := false
	for j := 0; j < len(raw); j++ {
		if raw[j] == '\\' {
			esc = true
			break
		}
	}
	if !esc {
		return raw, true
	}
	b := make([]byte, 0, len(raw))
	for j := 0; j < len(raw); j++ {
		c := raw[j]
		if c != '\\' {
			b = append(b, c)
			continue
		}
		j++
		switch raw[j] {
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			u := hex4(raw[j+1 : j+5])
			j += 4
			if u >= 0xD800 && u <= 0xDBFF && j+6 < len(raw) && raw[j+1] == '\\' && raw[j+2] == 'u' {
				if lo := hex4(raw[j+3 : j+7]); lo >= 0xDC00 && lo <= 0xDFFF {
					b = utf8.AppendRune(b, 0x10000+(u-0xD800)<<10+(lo-0xDC00))
					j += 6
					continue
				}
			}
			if u >= 0xD800 && u <= 0xDFFF {
				b = append(b, byte(0xE0|u>>12), byte(0x80|(u>>6)&0x3F), byte(0x80|u&0x3F))
				continue
			}
			b = utf8.AppendRune(b, u)
		default: // '"', '\\', '/'
			b = append(b, raw[j])
		}
	}
	return string(b), true
}

func hex4(s string) rune {
	v, _ := strconv.ParseUint(s, 16, 32)
	return rune(v)
}
