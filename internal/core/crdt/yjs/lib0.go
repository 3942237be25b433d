package yjs

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// maxSafeInteger is JavaScript's Number.MAX_SAFE_INTEGER: lib0 refuses
// variable-length integers above it, and so do we (clients and clocks are
// JavaScript numbers on the producing side).
const maxSafeInteger = 1<<53 - 1

// maxAnyDepth bounds the nesting of lib0 "any" values (arrays and objects
// inside arrays and objects), so a hostile update cannot make the decoder
// recurse without limit. Yjs documents nest a handful of levels.
const maxAnyDepth = 256

// ErrMalformed is wrapped by every decode error: the bytes are not a Yjs
// version-1 update.
var ErrMalformed = errors.New("yjs: malformed update")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// reader decodes lib0's binary encoding. Every method checks the remaining
// length before reading, so a truncated or hostile input ends in an error,
// never a panic or an allocation larger than the input.
type reader struct {
	buf []byte
	pos int
}

func (r *reader) remaining() int { return len(r.buf) - r.pos }

func (r *reader) byte() (byte, error) {
	if r.pos >= len(r.buf) {
		return 0, malformed("unexpected end of input at byte %d", r.pos)
	}
	b := r.buf[r.pos]
	r.pos++
	return b, nil
}

// varUint reads lib0's unsigned LEB128 (7 bits a byte, low groups first).
func (r *reader) varUint() (uint64, error) {
	var n uint64
	for shift := uint(0); ; shift += 7 {
		b, err := r.byte()
		if err != nil {
			return 0, err
		}
		if shift > 49 {
			return 0, malformed("integer above 2^53 at byte %d", r.pos)
		}
		n |= uint64(b&0x7f) << shift
		if n > maxSafeInteger {
			return 0, malformed("integer above 2^53 at byte %d", r.pos)
		}
		if b < 0x80 {
			return n, nil
		}
	}
}

// count reads a varuint announcing how many elements follow, each taking
// at least one byte: a count above the remaining input is malformed, which
// bounds every allocation sized by a count.
func (r *reader) count(what string) (int, error) {
	n, err := r.varUint()
	if err != nil {
		return 0, err
	}
	if n > uint64(r.remaining()) {
		return 0, malformed("%s count %d exceeds the remaining %d bytes", what, n, r.remaining())
	}
	return int(n), nil
}

// varInt skips lib0's signed variable-length integer (6 data bits and a
// sign bit in the first byte, 7 data bits in the next).
func (r *reader) varInt() error {
	b, err := r.byte()
	if err != nil {
		return err
	}
	if b&0x80 == 0 {
		return nil
	}
	n := uint64(b & 0x3f)
	for shift := uint(6); ; shift += 7 {
		b, err = r.byte()
		if err != nil {
			return err
		}
		if shift > 49 {
			return malformed("integer above 2^53 at byte %d", r.pos)
		}
		n |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return nil
		}
		if n > maxSafeInteger {
			return malformed("integer above 2^53 at byte %d", r.pos)
		}
	}
}

// bytes reads a varuint-length-prefixed byte array, returning a subslice
// of the input.
func (r *reader) bytes() ([]byte, error) {
	n, err := r.varUint()
	if err != nil {
		return nil, err
	}
	if n > uint64(r.remaining()) {
		return nil, malformed("byte array of %d bytes exceeds the remaining %d", n, r.remaining())
	}
	b := r.buf[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return b, nil
}

// fixed skips n bytes.
func (r *reader) fixed(n int) error {
	if n > r.remaining() {
		return malformed("unexpected end of input at byte %d", r.pos)
	}
	r.pos += n
	return nil
}

// str reads a varuint-length-prefixed UTF-8 string. lib0 decodes with a
// fatal UTF-8 decoder, so invalid UTF-8 is malformed here too.
func (r *reader) str() (string, error) {
	b, err := r.bytes()
	if err != nil {
		return "", err
	}
	if !utf8.Valid(b) {
		return "", malformed("string is not valid UTF-8 at byte %d", r.pos-len(b))
	}
	return string(b), nil
}

// lib0 "any" type tags (the first byte of each value).
const (
	anyUndefined = 127
	anyNull      = 126
	anyInteger   = 125
	anyFloat32   = 124
	anyFloat64   = 123
	anyBigInt    = 122
	anyFalse     = 121
	anyTrue      = 120
	anyString    = 119
	anyObject    = 118
	anyArray     = 117
	anyBytes     = 116
)

// skipAny validates one lib0 "any" value and moves past it.
func (r *reader) skipAny(depth int) error {
	if depth > maxAnyDepth {
		return malformed("value nested deeper than %d levels", maxAnyDepth)
	}
	tag, err := r.byte()
	if err != nil {
		return err
	}
	switch tag {
	case anyUndefined, anyNull, anyFalse, anyTrue:
		return nil
	case anyInteger:
		return r.varInt()
	case anyFloat32:
		return r.fixed(4)
	case anyFloat64, anyBigInt:
		return r.fixed(8)
	case anyString:
		_, err = r.str()
		return err
	case anyBytes:
		_, err = r.bytes()
		return err
	case anyObject:
		n, err := r.count("object key")
		if err != nil {
			return err
		}
		for range n {
			if _, err := r.str(); err != nil {
				return err
			}
			if err := r.skipAny(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case anyArray:
		n, err := r.count("array element")
		if err != nil {
			return err
		}
		for range n {
			if err := r.skipAny(depth + 1); err != nil {
				return err
			}
		}
		return nil
	default:
		return malformed("unknown value type %d at byte %d", tag, r.pos-1)
	}
}

// writer is lib0's binary encoding, appended to a byte slice.
type writer struct{ buf []byte }

func (w *writer) byte(b byte) { w.buf = append(w.buf, b) }

func (w *writer) varUint(n uint64) {
	for n >= 0x80 {
		w.buf = append(w.buf, byte(n)|0x80)
		n >>= 7
	}
	w.buf = append(w.buf, byte(n))
}

func (w *writer) str(s string) {
	w.varUint(uint64(len(s)))
	w.buf = append(w.buf, s...)
}

func (w *writer) raw(b []byte) { w.buf = append(w.buf, b...) }
