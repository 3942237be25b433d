package wire

import (
	"encoding/binary"
	"unicode/utf8"

	"github.com/skyfold/syncular-lambda/internal/core/canonjson"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// MaxSafeInt is 2^53−1, the bound of every i64 on the wire (Conventions:
// the JavaScript safe-integer contract).
const MaxSafeInt = 1<<53 - 1

// rd reads the primitive encodings of the Conventions table from one frame
// payload. Errors are sticky: after the first failure every read returns a
// zero value, so frame decoders check r.err once per element instead of
// after every field, and nothing allocates on the success path.
type rd struct {
	b   []byte
	s   string // b as one string, made on the first str read; str fields are sliced from it (one copy per frame)
	off int
	err *syncerr.Error
}

func (r *rd) fail(format string, args ...any) {
	if r.err == nil {
		r.err = invalidf(format, args...)
	}
}

// at prefixes the pending error with the list element it occurred in.
func (r *rd) at(list string, i int) {
	if r.err != nil {
		r.err = syncerr.New(r.err.Code, "%s[%d]: %s", list, i, r.err.Message)
	}
}

func (r *rd) need(n int, what string) bool {
	if r.err != nil {
		return false
	}
	if len(r.b)-r.off < n {
		r.fail("%s: truncated (%d bytes needed, %d left in frame)", what, n, len(r.b)-r.off)
		return false
	}
	return true
}

func (r *rd) u8(what string) uint8 {
	if !r.need(1, what) {
		return 0
	}
	v := r.b[r.off]
	r.off++
	return v
}

func (r *rd) u16(what string) uint16 {
	if !r.need(2, what) {
		return 0
	}
	v := binary.LittleEndian.Uint16(r.b[r.off:])
	r.off += 2
	return v
}

func (r *rd) u32(what string) uint32 {
	if !r.need(4, what) {
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b[r.off:])
	r.off += 4
	return v
}

func (r *rd) i32(what string) int32 { return int32(r.u32(what)) }

// i64 enforces the ±(2^53−1) range (Conventions).
func (r *rd) i64(what string) int64 {
	if !r.need(8, what) {
		return 0
	}
	v := int64(binary.LittleEndian.Uint64(r.b[r.off:]))
	r.off += 8
	if v > MaxSafeInt || v < -MaxSafeInt {
		r.fail("%s: i64 %d outside ±(2^53−1)", what, v)
		return 0
	}
	return v
}

// boolean accepts only 0x00 and 0x01 (Conventions).
func (r *rd) boolean(what string) bool {
	v := r.u8(what)
	if v > 1 {
		r.fail("%s: bool byte 0x%02x (want 0x00 or 0x01)", what, v)
	}
	return v == 1
}

// present reads an opt() presence byte, 0x00 or 0x01 only (Conventions).
func (r *rd) present(what string) bool {
	v := r.u8(what)
	if v > 1 {
		r.fail("%s: opt presence byte 0x%02x (want 0x00 or 0x01)", what, v)
	}
	return v == 1
}

// str reads a u32-prefixed string that must be well-formed UTF-8.
func (r *rd) str(what string) string {
	n := r.u32(what)
	if !r.need(int(n), what) {
		return ""
	}
	if len(r.s) != len(r.b) {
		r.s = string(r.b)
	}
	v := r.s[r.off : r.off+int(n)]
	r.off += int(n)
	if !utf8.ValidString(v) {
		r.fail("%s: string is not well-formed UTF-8", what)
		return ""
	}
	return v
}

// bytes reads a u32-prefixed byte string aliasing the payload; the
// capacity is clipped so a caller's append cannot overwrite later fields.
func (r *rd) bytes(what string) []byte {
	n := r.u32(what)
	if !r.need(int(n), what) {
		return nil
	}
	v := r.b[r.off : r.off+int(n) : r.off+int(n)]
	r.off += int(n)
	return v
}

// json reads a `json` field: a str that must parse as one RFC 8259 value,
// kept verbatim (Conventions).
func (r *rd) json(what string) JSON {
	v := r.str(what)
	if r.err == nil && !canonjson.ValidSyntax(v) {
		r.fail("%s: not a JSON document", what)
	}
	return JSON(v)
}

// count reads a u32 element count and rejects counts that could not fit
// in the rest of the frame (each element takes at least minElem bytes),
// so a hostile count never drives a large allocation.
func (r *rd) count(what string, minElem int) int {
	n := int(r.u32(what))
	if !r.fits(what, n, minElem) {
		return 0
	}
	return n
}

// readList reads a u32-counted list whose elements take at least minElem
// bytes each (see count), reading each element with elem. An error inside
// an element is prefixed with the list name and index, and the list is
// then nil.
func readList[T any](r *rd, what string, minElem int, elem func(*T)) []T {
	return readListBuf(r, what, minElem, nil, elem)
}

// readListBuf is readList using buf (zero values, not used elsewhere)
// when the list fits in it.
func readListBuf[T any](r *rd, what string, minElem int, buf []T, elem func(*T)) []T {
	n := r.count(what, minElem)
	if r.err != nil {
		return nil
	}
	var out []T
	if n <= len(buf) {
		out = buf[:n:n]
	} else {
		out = make([]T, n)
	}
	for i := range out {
		elem(&out[i])
		if r.err != nil {
			r.at(what, i)
			return nil
		}
	}
	return out
}

// fits checks that n elements of at least minElem bytes each can fit in
// the rest of the frame.
func (r *rd) fits(what string, n, minElem int) bool {
	if r.err != nil {
		return false
	}
	if uint64(n)*uint64(minElem) > uint64(len(r.b)-r.off) {
		r.fail("%s: count %d exceeds the frame (%d bytes left)", what, n, len(r.b)-r.off)
		return false
	}
	return true
}

func (r *rd) optStr(what string) Opt[string] {
	if r.present(what) {
		return Opt[string]{Value: r.str(what), Present: true}
	}
	return Opt[string]{}
}

func (r *rd) optI64(what string) Opt[int64] {
	if r.present(what) {
		return Opt[int64]{Value: r.i64(what), Present: true}
	}
	return Opt[int64]{}
}

func (r *rd) optI32(what string) Opt[int32] {
	if r.present(what) {
		return Opt[int32]{Value: r.i32(what), Present: true}
	}
	return Opt[int32]{}
}

func (r *rd) optJSON(what string) Opt[JSON] {
	if r.present(what) {
		return Opt[JSON]{Value: r.json(what), Present: true}
	}
	return Opt[JSON]{}
}

func (r *rd) optBytes(what string) Opt[[]byte] {
	if r.present(what) {
		return Opt[[]byte]{Value: r.bytes(what), Present: true}
	}
	return Opt[[]byte]{}
}

// keyOrder enforces canonical map keys: unique and strictly ascending by
// UTF-16 code units (Conventions `map` row).
func (r *rd) keyOrder(what, prev, key string) {
	switch c := canonjson.CompareUTF16(prev, key); {
	case c == 0:
		r.fail("%s: duplicate map key %q", what, key)
	case c > 0:
		r.fail("%s: map key %q out of order after %q (keys must ascend by UTF-16 code units)", what, key, prev)
	}
}

// scopeMap reads a map str → list(str).
func (r *rd) scopeMap(what string) ScopeMap {
	n := r.count(what, 8)
	if n == 0 {
		return ScopeMap{}
	}
	if n == 1 {
		return r.scopeMap1(what)
	}
	m := make(ScopeMap, n)
	for i := range m {
		k := r.str(what)
		if i > 0 {
			r.keyOrder(what, m[i-1].Key, k)
		}
		vn := r.count(what, 4)
		if r.err != nil {
			return nil
		}
		vals := make([]string, vn)
		for j := range vals {
			vals[j] = r.str(what)
		}
		if r.err != nil {
			return nil
		}
		m[i] = ScopeEntry{Key: k, Values: vals}
	}
	return m
}

// scopeMap1 is scopeMap for a map of one key (the usual subscription):
// with one value, the entry and its value take one allocation.
func (r *rd) scopeMap1(what string) ScopeMap {
	k := r.str(what)
	vn := r.count(what, 4)
	if r.err != nil {
		return nil
	}
	var vals []string
	var m ScopeMap
	if vn == 1 {
		one := &struct {
			e [1]ScopeEntry
			v [1]string
		}{}
		vals, m = one.v[:], one.e[:]
	} else {
		vals, m = make([]string, vn), make(ScopeMap, 1)
	}
	for j := range vals {
		vals[j] = r.str(what)
	}
	if r.err != nil {
		return nil
	}
	m[0] = ScopeEntry{Key: k, Values: vals}
	return m
}

// storedScopes reads a map str → str.
func (r *rd) storedScopes(what string) StoredScopes {
	n := r.count(what, 8)
	if n == 0 {
		return StoredScopes{}
	}
	m := make(StoredScopes, n)
	for i := range m {
		k := r.str(what)
		if i > 0 {
			r.keyOrder(what, m[i-1].Key, k)
		}
		v := r.str(what)
		if r.err != nil {
			return nil
		}
		m[i] = StoredScope{Key: k, Value: v}
	}
	return m
}
