package rowcodec

import (
	"encoding/base64"
	"math"
	"strconv"

	"github.com/skyfold/syncular-lambda/internal/core/canonjson"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// String renders v as the text the protocol uses when a column value
// becomes a string — rowId (§2.2) and stored scope values (§3.1). The
// rendering matches JavaScript's String(value), which the reference
// implementations use:
//
//   - string, json, blob_ref: the text itself (json/blob_ref raw, as stored)
//   - integer: decimal
//   - boolean: "true" / "false"
//   - float: shortest round-trip form in ECMAScript Number::toString layout
//     ("0.1", "1e+21", "1.5e-7", "-0" → "0", "NaN", "Infinity")
//   - bytes, crdt: standard base64 (these never form rowIds or scope
//     values, §5.9.1/§5.10.1; the form only keeps the function total)
//   - NULL: "" (primary keys are never NULL; callers needing to tell NULL
//     from an empty string check v.Null)
func (v Value) String(t Type) string {
	if v.Null {
		return ""
	}
	switch t {
	case TypeInteger:
		return strconv.FormatInt(v.Int, 10)
	case TypeFloat:
		return string(AppendFloat(nil, v.Float))
	case TypeBoolean:
		if v.Bool {
			return "true"
		}
		return "false"
	case TypeBytes, TypeCRDT:
		return base64.StdEncoding.EncodeToString(v.Bytes)
	default:
		return v.Str
	}
}

// AppendFloat appends f as ECMAScript Number::toString does: the shortest
// digits that round-trip, positional notation for decimal exponents in
// [-7, 21), otherwise d.ddde±x; -0 as "0"; NaN and ±Infinity by name.
func AppendFloat(dst []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, "NaN"...)
	case math.IsInf(f, 1):
		return append(dst, "Infinity"...)
	case math.IsInf(f, -1):
		return append(dst, "-Infinity"...)
	case f == 0:
		return append(dst, '0')
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	// 'e' with precision -1 yields the shortest round-trip digits as
	// d[.ddd]e±XX; re-lay them out per ECMAScript.
	var buf [32]byte
	e := strconv.AppendFloat(buf[:0], f, 'e', -1, 64)
	var digits [24]byte
	k := 0
	i := 0
	for ; e[i] != 'e'; i++ {
		if e[i] != '.' {
			digits[k] = e[i]
			k++
		}
	}
	exp, _ := strconv.Atoi(string(e[i+1:]))
	n := exp + 1 // decimal point position relative to the digits
	d := digits[:k]
	switch {
	case k <= n && n <= 21:
		dst = append(dst, d...)
		for j := k; j < n; j++ {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, d[:n]...)
		dst = append(dst, '.')
		dst = append(dst, d[n:]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for j := n; j < 0; j++ {
			dst = append(dst, '0')
		}
		dst = append(dst, d...)
	default:
		dst = append(dst, d[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, d[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst
}

// RenderValue appends the §11.1 rule 8 JSON rendering of one column value:
// NULL → null; string → JSON string (JSON.stringify escaping); integer →
// exact number; float → shortest round-trip number, non-finite → null
// (rule 10); boolean → true/false; json and blob_ref → the document itself,
// embedded parsed (rule 7) with insignificant whitespace dropped; bytes and
// crdt → standard base64 string. It fails only for json/blob_ref text that
// is not a JSON document, which a decoded Value never holds.
func RenderValue(dst []byte, t Type, v Value) ([]byte, error) {
	if v.Null {
		return append(dst, "null"...), nil
	}
	switch t {
	case TypeString:
		return canonjson.AppendString(dst, v.Str), nil
	case TypeInteger:
		return strconv.AppendInt(dst, v.Int, 10), nil
	case TypeFloat:
		if math.IsNaN(v.Float) || math.IsInf(v.Float, 0) {
			return append(dst, "null"...), nil
		}
		return AppendFloat(dst, v.Float), nil
	case TypeBoolean:
		return strconv.AppendBool(dst, v.Bool), nil
	case TypeJSON, TypeBlobRef:
		if !canonjson.Valid(v.Str) {
			return dst, syncerr.New(syncerr.InvalidRequest, "%s value does not parse as a JSON document", t)
		}
		return appendCompact(dst, v.Str), nil
	case TypeBytes, TypeCRDT:
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, v.Bytes)
		return append(dst, '"'), nil
	}
	return dst, syncerr.New(syncerr.InvalidRequest, "unknown column type tag %d", uint8(t))
}

// RenderRow appends row as the §11.1 rule 8 `values` object: column name →
// RenderValue, in column order.
func (c *Codec) RenderRow(dst []byte, row []Value) ([]byte, error) {
	if len(row) != len(c.cols) {
		return dst, syncerr.New(syncerr.InvalidRequest, "row has %d values for %d columns", len(row), len(c.cols))
	}
	dst = append(dst, '{')
	var err error
	for i := range c.cols {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = canonjson.AppendString(dst, c.cols[i].Name)
		dst = append(dst, ':')
		if dst, err = RenderValue(dst, c.cols[i].Type, row[i]); err != nil {
			return dst, err
		}
	}
	return append(dst, '}'), nil
}
