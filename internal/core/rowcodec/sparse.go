package rowcodec

import (
	"math/bits"

	"github.com/skyfold/syncular-lambda/internal/core/canonjson"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// Sparse rows (§2.4 "Sparse rows", §6.1) are the push-operation payload of
// wire version 3: the subset of a row's columns an operation writes.
//
//	presence bitmap  ceil(n/8) bytes, bit i = column i present
//	null bitmap      ceil(p/8) bytes over the p present columns, bit j =
//	                 the j-th present column (declaration order) is NULL
//	values           the present non-NULL values in column order
//
// Both bitmaps are LSB-first with zero padding bits. A full row is the
// case with every presence bit set; its bytes still differ from the
// full-row codec's because both bitmaps are carried.

// PresenceBitmap returns the §2.4 presence bitmap of n columns: ceil(n/8)
// bytes, bit i set when present[i]. Entries of present beyond n are
// ignored; missing entries count as absent. The same layout carries
// conflictColumns in v3 conflict records (§6.3).
func PresenceBitmap(n int, present []bool) []byte {
	bm := make([]byte, (n+7)/8)
	for i := 0; i < n && i < len(present); i++ {
		if present[i] {
			bm[i>>3] |= 1 << (i & 7)
		}
	}
	return bm
}

// DecodePresence decodes a presence bitmap that is the whole of b (the
// conflictColumns field, §6.3): exactly ceil(n/8) bytes with zero padding
// bits. It returns one flag per column.
func (c *Codec) DecodePresence(b []byte) ([]bool, error) {
	if len(b) != c.bitmapLen {
		return nil, decodeErr("presence bitmap has %d bytes, want %d for %d columns", len(b), c.bitmapLen, len(c.cols))
	}
	if c.padMask != 0 && b[len(b)-1]&c.padMask != 0 {
		return nil, decodeErr("presence bitmap has a padding bit set")
	}
	out := make([]bool, len(c.cols))
	for i := range out {
		out[i] = b[i>>3]&(1<<(i&7)) != 0
	}
	return out, nil
}

// DecodeSparse decodes b, which must hold exactly one sparse row, into dst
// and present (each reused when its capacity allows; one entry per
// column). Absent columns get the zero Value. pk is the primary-key
// column index, which must be present.
//
// The §2.4 decode-error order is kept: a set presence padding bit, then an
// absent primary key, then a set null-bitmap padding bit (a NULL for an
// absent column), then a NULL for a non-nullable column; value errors and
// trailing bytes come after. Every error is sync.invalid_request. Memory
// is bounded by the column count plus one copy of b backing the text
// values, whatever b claims.
func (c *Codec) DecodeSparse(b []byte, pk int, dst []Value, present []bool) ([]Value, []bool, error) {
	n := len(c.cols)
	if cap(dst) < n {
		dst = make([]Value, n)
	}
	dst = dst[:n]
	clear(dst)
	if cap(present) < n {
		present = make([]bool, n)
	}
	present = present[:n]
	clear(present)
	fail := func(err error) ([]Value, []bool, error) { return dst[:0], present[:0], err }

	if pk < 0 || pk >= n {
		return fail(syncerr.New(syncerr.InvalidRequest, "primary-key column index %d outside %d columns", pk, n))
	}
	pb := c.bitmapLen
	if len(b) < pb {
		return fail(decodeErr("sparse row truncated in presence bitmap"))
	}
	pres := b[:pb]
	// 1. presence padding bits.
	if c.padMask != 0 && pres[pb-1]&c.padMask != 0 {
		return fail(decodeErr("sparse row presence bitmap has a padding bit set"))
	}
	// 2. the primary key must be present (§6.1).
	if pres[pk>>3]&(1<<(pk&7)) == 0 {
		return fail(decodeErr("sparse row omits the primary-key column %q", c.cols[pk].Name))
	}
	np := 0
	for _, x := range pres {
		np += bits.OnesCount8(x)
	}
	nb := (np + 7) / 8
	if len(b)-pb < nb {
		return fail(decodeErr("sparse row truncated in null bitmap"))
	}
	nulls := b[pb : pb+nb]
	// 3. null-bitmap padding: a NULL for a column that is not present.
	if r := np & 7; r != 0 && nulls[nb-1]&(0xFF<<r) != 0 {
		return fail(decodeErr("sparse row null bitmap has a bit set beyond the %d present columns", np))
	}
	// 4. NULL for a non-nullable column.
	j := 0
	for i := 0; i < n; i++ {
		if pres[i>>3]&(1<<(i&7)) == 0 {
			continue
		}
		present[i] = true
		if nulls[j>>3]&(1<<(j&7)) != 0 {
			if !c.cols[i].Nullable {
				return fail(decodeErr("null bit set for non-nullable column %q", c.cols[i].Name))
			}
			dst[i].Null = true
		}
		j++
	}
	off := pb + nb
	text := false
	for i := 0; i < n; i++ {
		if !present[i] || dst[i].Null {
			continue
		}
		var err error
		if off, err = c.value(b, off, i, &dst[i]); err != nil {
			return fail(err)
		}
		switch c.cols[i].Type {
		case TypeString, TypeJSON, TypeBlobRef:
			text = true
		}
	}
	if off != len(b) {
		return fail(decodeErr("sparse row has %d trailing bytes", len(b)-off))
	}
	if text {
		// One copy of the row backs every text value.
		s := string(b)
		for _, i := range c.textCols {
			v := &dst[i]
			if !present[i] || v.Null {
				continue
			}
			o := int(v.Int)
			v.Str = s[o : o+len(v.Bytes)]
			v.Int, v.Bytes = 0, nil
		}
	}
	return dst, present, nil
}

// AppendSparse encodes row as a sparse row onto dst: only the columns
// whose present flag is set are carried (row and present hold one entry
// per column). Like Append it refuses anything a decoder would reject,
// except that it does not know the primary key: callers make sure it is
// present. On error dst is returned unchanged in length.
func (c *Codec) AppendSparse(dst []byte, row []Value, present []bool) ([]byte, error) {
	n := len(c.cols)
	if len(row) != n || len(present) != n {
		return dst, syncerr.New(syncerr.InvalidRequest, "sparse row has %d values and %d presence flags for %d columns", len(row), len(present), n)
	}
	start := len(dst)
	np := 0
	for range c.bitmapLen {
		dst = append(dst, 0)
	}
	for i, p := range present {
		if p {
			dst[start+(i>>3)] |= 1 << (i & 7)
			np++
		}
	}
	nullAt := len(dst)
	for range (np + 7) / 8 {
		dst = append(dst, 0)
	}
	j := 0
	for i := range row {
		if !present[i] {
			continue
		}
		v := &row[i]
		if v.Null {
			if !c.cols[i].Nullable {
				return dst[:start], syncerr.New(syncerr.InvalidRequest, "NULL for non-nullable column %q", c.cols[i].Name)
			}
			dst[nullAt+(j>>3)] |= 1 << (j & 7)
		} else {
			var err error
			if dst, err = c.appendValue(dst, i, v); err != nil {
				return dst[:start], err
			}
		}
		j++
	}
	return dst, nil
}

// RenderSparse appends the JSON `values` object of a sparse row: only the
// present columns, name → RenderValue, in column order (the push/ vector
// rendering).
func (c *Codec) RenderSparse(dst []byte, row []Value, present []bool) ([]byte, error) {
	if len(row) != len(c.cols) || len(present) != len(c.cols) {
		return dst, syncerr.New(syncerr.InvalidRequest, "sparse row has %d values and %d presence flags for %d columns", len(row), len(present), len(c.cols))
	}
	dst = append(dst, '{')
	first := true
	var err error
	for i := range c.cols {
		if !present[i] {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = canonjson.AppendString(dst, c.cols[i].Name)
		dst = append(dst, ':')
		if dst, err = RenderValue(dst, c.cols[i].Type, row[i]); err != nil {
			return dst, err
		}
	}
	return append(dst, '}'), nil
}

// RenderSparseDocument appends the whole push/ vector rendering of a
// sparse row: {"columns":[{name,type,nullable}…],"values":{present only}}.
func (c *Codec) RenderSparseDocument(dst []byte, row []Value, present []bool) ([]byte, error) {
	dst = append(dst, `{"columns":[`...)
	for i, col := range c.cols {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"name":`...)
		dst = canonjson.AppendString(dst, col.Name)
		dst = append(dst, `,"type":`...)
		dst = canonjson.AppendString(dst, col.Type.String())
		if col.Nullable {
			dst = append(dst, `,"nullable":true}`...)
		} else {
			dst = append(dst, `,"nullable":false}`...)
		}
	}
	dst = append(dst, `],"values":`...)
	dst, err := c.RenderSparse(dst, row, present)
	if err != nil {
		return dst, err
	}
	return append(dst, '}'), nil
}
