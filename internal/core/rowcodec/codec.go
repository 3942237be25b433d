package rowcodec

import (
	"encoding/binary"
	"math"
	"unicode/utf8"

	"github.com/skyfold/syncular-lambda/internal/core/canonjson"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// Codec encodes and decodes rows of one column list (one table at one
// schemaVersion, §2.4). It is immutable after New and safe for concurrent
// use.
//
// Wire layout of a row: a null bitmap of ceil(n/8) bytes (bit i = column
// i is NULL, LSB first), then each non-NULL value in column order.
type Codec struct {
	cols      []Column
	bitmapLen int
	// padMask marks the bitmap bits of the last byte that name no column;
	// they must be zero (§2.4 canonical encoding).
	padMask byte
	// notNull[j] marks the non-nullable columns of bitmap byte j.
	notNull []byte
	// textCols lists the columns that decode into Value.Str.
	textCols []int
}

// New compiles a codec for cols. It rejects a column with a tag outside
// §2.4. cols is copied.
func New(cols []Column) (*Codec, error) {
	c := &Codec{
		cols:      append([]Column(nil), cols...),
		bitmapLen: (len(cols) + 7) / 8,
	}
	c.notNull = make([]byte, c.bitmapLen)
	for i, col := range cols {
		if !col.Type.Valid() {
			return nil, syncerr.New(syncerr.InvalidRequest, "column %q has unknown type tag %d", col.Name, uint8(col.Type))
		}
		if !col.Nullable {
			c.notNull[i>>3] |= 1 << (i & 7)
		}
		switch col.Type {
		case TypeString, TypeJSON, TypeBlobRef:
			c.textCols = append(c.textCols, i)
		}
	}
	if r := len(cols) & 7; r != 0 {
		c.padMask = 0xFF << r
	}
	return c, nil
}

// Columns returns the codec's column list; callers must not modify it.
func (c *Codec) Columns() []Column { return c.cols }

// BitmapLen is the null bitmap size, ceil(len(columns)/8).
func (c *Codec) BitmapLen() int { return c.bitmapLen }

func decodeErr(format string, args ...any) error {
	return syncerr.New(syncerr.InvalidRequest, format, args...)
}

func (c *Codec) truncated(i int) error {
	col := &c.cols[i]
	return decodeErr("row truncated in column %q (%s)", col.Name, col.Type)
}

// checkBitmap enforces the §2.4 bitmap rules: zero padding bits and no
// NULL for a non-nullable column.
func (c *Codec) checkBitmap(bm []byte) error {
	if c.padMask != 0 && bm[len(bm)-1]&c.padMask != 0 {
		return decodeErr("row null bitmap has a padding bit set")
	}
	for j, b := range bm {
		if hit := b & c.notNull[j]; hit != 0 {
			for k := 0; k < 8; k++ {
				if hit&(1<<k) != 0 {
					return decodeErr("null bit set for non-nullable column %q", c.cols[j*8+k].Name)
				}
			}
		}
	}
	return nil
}

// Validate checks the row record at the start of b against every §2.4 rule
// and returns its length; b may continue past the row (rows segments pack
// records back to back). Nothing is allocated on success.
func (c *Codec) Validate(b []byte) (int, error) {
	return c.walk(b, nil)
}

// ValidateRow checks that b holds exactly one valid row.
func (c *Codec) ValidateRow(b []byte) error {
	n, err := c.walk(b, nil)
	if err == nil && n != len(b) {
		err = decodeErr("row has %d trailing bytes", len(b)-n)
	}
	return err
}

// Decode decodes b, which must hold exactly one row, into dst (reused
// when its capacity allows; one Value per column). Bytes values alias b.
// The Str values of a row share a single copy of the row's bytes, so
// decoding costs at most one allocation per row.
func (c *Codec) Decode(b []byte, dst []Value) ([]Value, error) {
	dst, n, err := c.DecodePrefix(b, dst)
	if err == nil && n != len(b) {
		err = decodeErr("row has %d trailing bytes", len(b)-n)
	}
	return dst, err
}

// DecodePrefix decodes the row at the start of b like Decode and also
// returns its length; b may continue past the row.
func (c *Codec) DecodePrefix(b []byte, dst []Value) ([]Value, int, error) {
	if cap(dst) < len(c.cols) {
		dst = make([]Value, len(c.cols))
	}
	dst = dst[:len(c.cols)]
	n, err := c.walk(b, dst)
	if err != nil {
		return dst[:0], 0, err
	}
	// One copy of the row backs every text value (no unsafe needed).
	var s string
	for _, i := range c.textCols {
		v := &dst[i]
		if v.Null {
			continue
		}
		if s == "" {
			s = string(b[:n])
		}
		off := int(v.Int)
		v.Str = s[off : off+len(v.Bytes)]
		v.Int, v.Bytes = 0, nil
	}
	return dst, n, nil
}

// walk validates one row at the start of b. With dst non-nil it fills dst
// as it goes; text columns are left as (Int = offset, Bytes = raw bytes)
// for DecodePrefix to turn into strings.
func (c *Codec) walk(b []byte, dst []Value) (int, error) {
	nb := c.bitmapLen
	if len(b) < nb {
		return 0, decodeErr("row truncated in null bitmap")
	}
	bm := b[:nb]
	if err := c.checkBitmap(bm); err != nil {
		return 0, err
	}
	off := nb
	for i := range c.cols {
		if bm[i>>3]&(1<<(i&7)) != 0 {
			if dst != nil {
				dst[i] = Value{Null: true}
			}
			continue
		}
		var v *Value
		if dst != nil {
			v = &dst[i]
		}
		var err error
		if off, err = c.value(b, off, i, v); err != nil {
			return 0, err
		}
	}
	return off, nil
}

// value validates the non-NULL value of column i at b[off:] and returns
// the offset after it. With v non-nil it stores the value; text columns
// are left as (Int = offset, Bytes = raw bytes) for the caller to turn
// into strings.
func (c *Codec) value(b []byte, off, i int, v *Value) (int, error) {
	switch t := c.cols[i].Type; t {
	case TypeInteger:
		if len(b)-off < 8 {
			return 0, c.truncated(i)
		}
		n := int64(binary.LittleEndian.Uint64(b[off:]))
		if n > MaxSafeInt || n < -MaxSafeInt {
			return 0, decodeErr("column %q: integer %d outside ±(2^53-1)", c.cols[i].Name, n)
		}
		if v != nil {
			*v = Value{Int: n}
		}
		return off + 8, nil
	case TypeFloat:
		if len(b)-off < 8 {
			return 0, c.truncated(i)
		}
		if v != nil {
			*v = Value{Float: math.Float64frombits(binary.LittleEndian.Uint64(b[off:]))}
		}
		return off + 8, nil
	case TypeBoolean:
		if off >= len(b) {
			return 0, c.truncated(i)
		}
		if b[off] > 1 {
			return 0, decodeErr("column %q: boolean byte 0x%02x is neither 0 nor 1", c.cols[i].Name, b[off])
		}
		if v != nil {
			*v = Value{Bool: b[off] == 1}
		}
		return off + 1, nil
	default: // length-prefixed: string, json, blob_ref, bytes, crdt
		if len(b)-off < 4 {
			return 0, c.truncated(i)
		}
		n := uint64(binary.LittleEndian.Uint32(b[off:]))
		off += 4
		if n > uint64(len(b)-off) {
			return 0, c.truncated(i)
		}
		end := off + int(n)
		raw := b[off:end:end]
		switch t {
		case TypeString, TypeJSON, TypeBlobRef:
			if !utf8.Valid(raw) {
				return 0, decodeErr("column %q (%s): value is not valid UTF-8", c.cols[i].Name, t)
			}
			if t == TypeJSON && !canonjson.ValidSyntax(raw) {
				return 0, decodeErr("column %q (json): value does not parse as a JSON document", c.cols[i].Name)
			}
			if t == TypeBlobRef {
				if p := blobRefProblem(raw); p != "" {
					return 0, decodeErr("column %q (blob_ref): value %s", c.cols[i].Name, p)
				}
			}
			if v != nil {
				*v = Value{Int: int64(off), Bytes: raw}
			}
		default: // bytes, crdt: opaque
			if v != nil {
				*v = Value{Bytes: raw}
			}
		}
		return end, nil
	}
}

// Append encodes row (one Value per column, in column order) onto dst. It
// refuses anything a decoder would reject, so its output always decodes:
// NULL in a non-nullable column, integers outside ±(2^53−1), invalid
// UTF-8 in text columns, json that does not parse, non-canonical
// blob_ref, values longer than a u32 length. On error dst is returned
// unchanged in length.
func (c *Codec) Append(dst []byte, row []Value) ([]byte, error) {
	if len(row) != len(c.cols) {
		return dst, syncerr.New(syncerr.InvalidRequest, "row has %d values for %d columns", len(row), len(c.cols))
	}
	start := len(dst)
	for range c.bitmapLen {
		dst = append(dst, 0)
	}
	for i := range row {
		v := &row[i]
		if v.Null {
			if !c.cols[i].Nullable {
				return dst[:start], syncerr.New(syncerr.InvalidRequest, "NULL for non-nullable column %q", c.cols[i].Name)
			}
			dst[start+(i>>3)] |= 1 << (i & 7)
			continue
		}
		var err error
		if dst, err = c.appendValue(dst, i, v); err != nil {
			return dst[:start], err
		}
	}
	return dst, nil
}

// appendValue encodes the non-NULL value v of column i onto dst, refusing
// what a decoder would reject. On error the returned slice is unusable
// and the caller truncates it.
func (c *Codec) appendValue(dst []byte, i int, v *Value) ([]byte, error) {
	col := &c.cols[i]
	switch col.Type {
	case TypeInteger:
		if v.Int > MaxSafeInt || v.Int < -MaxSafeInt {
			return dst, syncerr.New(syncerr.InvalidRequest, "column %q: integer %d outside ±(2^53-1)", col.Name, v.Int)
		}
		dst = binary.LittleEndian.AppendUint64(dst, uint64(v.Int))
	case TypeFloat:
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(v.Float))
	case TypeBoolean:
		if v.Bool {
			dst = append(dst, 1)
		} else {
			dst = append(dst, 0)
		}
	case TypeString, TypeJSON, TypeBlobRef:
		s := v.Str
		if uint64(len(s)) > math.MaxUint32 {
			return dst, syncerr.New(syncerr.InvalidRequest, "column %q: value longer than 2^32-1 bytes", col.Name)
		}
		if !utf8.ValidString(s) {
			return dst, syncerr.New(syncerr.InvalidRequest, "column %q (%s): value is not valid UTF-8", col.Name, col.Type)
		}
		if col.Type == TypeJSON && !canonjson.ValidSyntax(s) {
			return dst, syncerr.New(syncerr.InvalidRequest, "column %q (json): value does not parse as a JSON document", col.Name)
		}
		if col.Type == TypeBlobRef {
			if p := blobRefProblem(s); p != "" {
				return dst, syncerr.New(syncerr.InvalidRequest, "column %q (blob_ref): value %s", col.Name, p)
			}
		}
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(s)))
		dst = append(dst, s...)
	default: // bytes, crdt
		if uint64(len(v.Bytes)) > math.MaxUint32 {
			return dst, syncerr.New(syncerr.InvalidRequest, "column %q: value longer than 2^32-1 bytes", col.Name)
		}
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(v.Bytes)))
		dst = append(dst, v.Bytes...)
	}
	return dst, nil
}

// ValidBlobRef reports whether s is a canonical BlobRef document (§5.9.1),
// the check a blob_ref column applies at decode.
func ValidBlobRef(s string) bool { return utf8.ValidString(s) && blobRefProblem(s) == "" }
