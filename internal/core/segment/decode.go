package segment

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"unicode/utf8"

	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
)

var le = binary.LittleEndian

// source feeds the parser from either a whole buffer (slice mode, zero
// copy) or a stream (r != nil, one reusable buffer bounded by limit).
type source struct {
	buf     []byte
	r       io.Reader
	scratch []byte
	limit   int
	small   [4]byte // block headers; a field so reads through r do not allocate
}

// take returns the next n bytes. In stream mode the result is only valid
// until the next call.
func (s *source) take(n uint64, what string) ([]byte, error) {
	if s.r == nil {
		if n > uint64(len(s.buf)) {
			return nil, invalid("truncated in %s", what)
		}
		b := s.buf[:n]
		s.buf = s.buf[n:]
		return b, nil
	}
	if n > uint64(s.limit) {
		return nil, invalid("%s of %d bytes exceeds the decoder limit of %d bytes", what, n, s.limit)
	}
	if uint64(cap(s.scratch)) < n {
		// Grow with headroom so slowly growing blocks do not reallocate
		// each time; never beyond the limit.
		s.scratch = make([]byte, n, min(max(n, 2*uint64(cap(s.scratch)), 64), uint64(s.limit)))
	}
	b := s.scratch[:n]
	if _, err := io.ReadFull(s.r, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, invalid("truncated in %s", what)
		}
		return nil, err
	}
	return b, nil
}

// blockCount reads the rowCount that opens a block. eof reports that the
// input ended exactly where a block (or the end marker) was due.
func (s *source) blockCount() (rows uint32, eof bool, err error) {
	if s.r == nil {
		if len(s.buf) == 0 {
			return 0, true, nil
		}
		b, err := s.take(4, "block header")
		if err != nil {
			return 0, false, err
		}
		return le.Uint32(b), false, nil
	}
	b := s.small[:]
	switch _, err := io.ReadFull(s.r, b); {
	case err == io.EOF:
		return 0, true, nil
	case err == io.ErrUnexpectedEOF:
		return 0, false, invalid("truncated in block header")
	case err != nil:
		return 0, false, err
	}
	return le.Uint32(b), false, nil
}

// trailing reports whether any byte follows the end marker.
func (s *source) trailing() (bool, error) {
	if s.r == nil {
		return len(s.buf) != 0, nil
	}
	switch _, err := io.ReadFull(s.r, s.small[:1]); err {
	case nil:
		return true, nil
	case io.EOF:
		return false, nil
	default:
		return false, err
	}
}

func (s *source) str(what string) (string, error) {
	b, err := s.take(4, what)
	if err != nil {
		return "", err
	}
	b, err = s.take(uint64(le.Uint32(b)), what)
	if err != nil {
		return "", err
	}
	if !utf8.Valid(b) {
		return "", invalid("%s is not valid UTF-8", what)
	}
	return string(b), nil
}

// readHeader parses and checks everything before the first block.
func readHeader(s *source) (Header, *rowcodec.Codec, error) {
	var h Header
	b, err := s.take(fixedHeaderLen, "magic")
	if err != nil {
		return h, nil, err
	}
	if [4]byte(b[:4]) != Magic {
		return h, nil, invalid("bad magic % x", b[:4])
	}
	if v := le.Uint16(b[4:]); v != FormatVersion {
		return h, nil, invalid("unsupported formatVersion %d", v)
	}
	if f := le.Uint16(b[6:]); f != 0 {
		return h, nil, invalid("flags 0x%04x must be 0", f)
	}
	if h.Table, err = s.str("table name"); err != nil {
		return h, nil, err
	}
	if b, err = s.take(6, "header"); err != nil {
		return h, nil, err
	}
	h.SchemaVersion = int32(le.Uint32(b))
	n := int(le.Uint16(b[4:]))
	h.Columns = make([]rowcodec.Column, n)
	for i := range h.Columns {
		col := &h.Columns[i]
		if col.Name, err = s.str("column name"); err != nil {
			return h, nil, err
		}
		if b, err = s.take(2, "column record"); err != nil {
			return h, nil, err
		}
		col.Type = rowcodec.Type(b[0])
		if !col.Type.Valid() {
			return h, nil, invalid("column %q has unknown type tag %d", col.Name, b[0])
		}
		if b[1]&^1 != 0 {
			return h, nil, invalid("column %q has reserved flag bits set (0x%02x)", col.Name, b[1])
		}
		col.Nullable = b[1] == 1
	}
	codec, err := rowcodec.New(h.Columns)
	if err != nil {
		return h, nil, err
	}
	return h, codec, nil
}

// readBlock reads the next block. It returns rowCount 0 at the end marker,
// having verified that nothing follows it.
func readBlock(s *source, idx int) (uint32, []byte, error) {
	rows, eof, err := s.blockCount()
	if err != nil {
		return 0, nil, err
	}
	if eof {
		return 0, nil, invalid("missing end marker (input ends before block %d)", idx)
	}
	if rows == 0 {
		more, err := s.trailing()
		if err != nil {
			return 0, nil, err
		}
		if more {
			return 0, nil, invalid("trailing bytes after the end marker")
		}
		return 0, nil, nil
	}
	b, err := s.take(4, "block header")
	if err != nil {
		return 0, nil, err
	}
	data, err := s.take(uint64(le.Uint32(b)), "block rows")
	if err != nil {
		return 0, nil, err
	}
	return rows, data, nil
}

// checkBlockSize rejects a rowCount that cannot fit in byteLength before
// anything is sized by it (each record is ≥ 8 + bitmap bytes).
func checkBlockSize(c *rowcodec.Codec, rows uint32, data []byte, idx int) error {
	if uint64(rows)*uint64(8+c.BitmapLen()) > uint64(len(data)) {
		return invalid("block %d: %d rows cannot fit in byteLength %d", idx, rows, len(data))
	}
	return nil
}

// readServerVersion reads a record's serverVersion, which §5.2 requires to
// be ≥ 1 and the i64 contract caps at 2^53−1.
func readServerVersion(data []byte, off, idx, row int) (int64, error) {
	if len(data)-off < 8 {
		return 0, invalid("block %d row %d: truncated serverVersion", idx, row)
	}
	v := int64(le.Uint64(data[off:]))
	if v < 1 || v > rowcodec.MaxSafeInt {
		return 0, invalid("block %d row %d: serverVersion %d outside [1, 2^53-1]", idx, row, v)
	}
	return v, nil
}

// validateBlock checks every row record of a block and that they consume
// exactly byteLength. With record set, each record's start is appended to
// offs.
func validateBlock(c *rowcodec.Codec, data []byte, rows uint32, idx int, record bool, offs []int) ([]int, error) {
	if err := checkBlockSize(c, rows, data, idx); err != nil {
		return offs, err
	}
	off := 0
	for r := 0; r < int(rows); r++ {
		if _, err := readServerVersion(data, off, idx, r); err != nil {
			return offs, err
		}
		n, err := c.Validate(data[off+8:])
		if err != nil {
			return offs, rowErr(err, idx, r)
		}
		if record {
			offs = append(offs, off)
		}
		off += 8 + n
	}
	if off != len(data) {
		return offs, invalid("block %d: %d rows consume %d of byteLength %d", idx, rows, off, len(data))
	}
	return offs, nil
}

// Decode decodes a whole segment held in memory, including every row's
// values. Row.Raw and bytes values alias b.
func Decode(b []byte) (*Segment, error) {
	s := &source{buf: b}
	h, c, err := readHeader(s)
	if err != nil {
		return nil, err
	}
	seg := &Segment{Header: h}
	ncols := len(h.Columns)
	for idx := 0; ; idx++ {
		rows, data, err := readBlock(s, idx)
		if err != nil {
			return nil, err
		}
		if rows == 0 {
			return seg, nil
		}
		if err := checkBlockSize(c, rows, data, idx); err != nil {
			return nil, err
		}
		block := make([]Row, rows)
		vals := make([]rowcodec.Value, int(rows)*ncols)
		off := 0
		for r := range block {
			sv, err := readServerVersion(data, off, idx, r)
			if err != nil {
				return nil, err
			}
			v, n, err := c.DecodePrefix(data[off+8:], vals[r*ncols:(r+1)*ncols:(r+1)*ncols])
			if err != nil {
				return nil, rowErr(err, idx, r)
			}
			end := off + 8 + n
			block[r] = Row{ServerVersion: sv, Raw: data[off+8 : end : end], Values: v}
			off = end
		}
		if off != len(data) {
			return nil, invalid("block %d: %d rows consume %d of byteLength %d", idx, rows, off, len(data))
		}
		seg.Blocks = append(seg.Blocks, block)
	}
}

// ValidateStructure checks that payload is one structurally valid rows
// segment — every §5.2 rule, including the row codec against the
// segment's own column table — without materializing values. It is the
// check a SEGMENT_INLINE payload gets at envelope decode (§5.7); the
// schema comparison stays with the receiver (CheckColumns).
func ValidateStructure(payload []byte) error {
	s := &source{buf: payload}
	_, c, err := readHeader(s)
	if err != nil {
		return err
	}
	for idx := 0; ; idx++ {
		rows, data, err := readBlock(s, idx)
		if err != nil {
			return err
		}
		if rows == 0 {
			return nil
		}
		if _, err := validateBlock(c, data, rows, idx, false, nil); err != nil {
			return err
		}
	}
}

// DecoderOptions tunes a streaming Decoder.
type DecoderOptions struct {
	// MaxBlockBytes caps the bytes buffered for one block (and for any
	// header string); larger ones fail with sync.invalid_request.
	// 0 means DefaultMaxBlockBytes.
	MaxBlockBytes int
}

// Decoder reads a segment from a stream holding one block in memory, the
// §5.2 streaming model: NextBlock loads and fully validates a block before
// any of its rows is exposed, so a caller can apply each block in one
// transaction and never sees a row from a block that later proves invalid.
type Decoder struct {
	src      source
	hdr      Header
	codec    *rowcodec.Codec
	started  bool
	block    []byte
	offs     []int
	row      int
	blockIdx int
	done     bool
	err      error
}

// NewDecoder returns a Decoder reading from r. Unless r is already
// buffered (implements io.ByteReader) it is wrapped in a bufio.Reader.
func NewDecoder(r io.Reader, opts DecoderOptions) *Decoder {
	if opts.MaxBlockBytes <= 0 {
		opts.MaxBlockBytes = DefaultMaxBlockBytes
	}
	opts.MaxBlockBytes = max(opts.MaxBlockBytes, fixedHeaderLen)
	if _, ok := r.(io.ByteReader); !ok {
		r = bufio.NewReaderSize(r, 64<<10)
	}
	return &Decoder{src: source{r: r, limit: opts.MaxBlockBytes}, blockIdx: -1}
}

// Header reads (on first call) and returns the segment header.
func (d *Decoder) Header() (Header, error) {
	if !d.started {
		d.started = true
		d.hdr, d.codec, d.err = readHeader(&d.src)
	}
	if d.codec == nil {
		return d.hdr, d.err
	}
	return d.hdr, nil
}

// Codec returns the row codec of the segment's column table (nil before a
// successful Header).
func (d *Decoder) Codec() *rowcodec.Codec { return d.codec }

// NextBlock loads and validates the next block and returns its row count
// (always ≥ 1). After the end marker, with nothing trailing, it returns
// io.EOF; any other error is sticky.
func (d *Decoder) NextBlock() (int, error) {
	if _, err := d.Header(); err != nil {
		return 0, err
	}
	if d.err != nil {
		return 0, d.err
	}
	if d.done {
		return 0, io.EOF
	}
	d.blockIdx++
	d.offs = d.offs[:0]
	d.block = nil
	d.row = -1
	rows, data, err := readBlock(&d.src, d.blockIdx)
	if err != nil {
		d.err = err
		return 0, err
	}
	if rows == 0 {
		d.done = true
		return 0, io.EOF
	}
	if d.offs, err = validateBlock(d.codec, data, rows, d.blockIdx, true, d.offs); err != nil {
		d.offs = d.offs[:0]
		d.err = err
		return 0, err
	}
	d.block = data
	return int(rows), nil
}

// NextInBlock advances to the next row of the current block.
func (d *Decoder) NextInBlock() bool {
	if d.row+1 < len(d.offs) {
		d.row++
		return true
	}
	return false
}

// Next advances to the next row, loading blocks as needed. It returns
// false at the end of the segment or on error (see Err).
func (d *Decoder) Next() bool {
	for !d.NextInBlock() {
		if _, err := d.NextBlock(); err != nil {
			return false
		}
	}
	return true
}

// Err returns the first error met, or nil after a clean end of segment.
func (d *Decoder) Err() error { return d.err }

// BlockIndex is the zero-based index of the current block.
func (d *Decoder) BlockIndex() int { return d.blockIdx }

// ServerVersion is the current row's serverVersion (validated ≥ 1).
func (d *Decoder) ServerVersion() int64 {
	return int64(le.Uint64(d.block[d.offs[d.row]:]))
}

// Row returns the current row's row-codec bytes; they stay valid until the
// next block is loaded.
func (d *Decoder) Row() []byte {
	end := len(d.block)
	if d.row+1 < len(d.offs) {
		end = d.offs[d.row+1]
	}
	return d.block[d.offs[d.row]+8 : end : end]
}

// Values decodes the current row into dst (see rowcodec.Codec.Decode).
func (d *Decoder) Values(dst []rowcodec.Value) ([]rowcodec.Value, error) {
	return d.codec.Decode(d.Row(), dst)
}
