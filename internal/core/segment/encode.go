package segment

import (
	"bytes"
	"crypto/sha256"
	"hash"
	"io"
	"math"
	"unicode/utf8"

	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// EncoderOptions tunes an Encoder. Zero values pick the §5.2 defaults.
type EncoderOptions struct {
	// BlockRows cuts a block once it holds this many rows (default 1000).
	BlockRows int
	// BlockBytes cuts a block before a row would push its rows past this
	// many bytes (default 256 KiB). A single larger row gets a block of its
	// own.
	BlockBytes int
	// TrustRows skips row-codec validation in AppendRow. Rows read back
	// from storage that this server encoded itself can take this path; a
	// corrupt row then yields a segment that receivers reject.
	TrustRows bool
}

// Stats describes a finished segment.
type Stats struct {
	Rows   int64
	Blocks int
	// Bytes is the uncompressed segment size.
	Bytes int64
	// SegmentID is the §5.1 content address of the bytes written.
	SegmentID string
}

// Encoder streams a rows segment to a writer, buffering one block (its
// byteLength precedes it) and hashing everything it writes so the segment
// id is known at Close without re-reading. It is not safe for concurrent
// use.
type Encoder struct {
	w      io.Writer
	h      hash.Hash
	codec  *rowcodec.Codec
	opts   EncoderOptions
	block  []byte
	nrows  int // rows in the current block
	stats  Stats
	err    error
	closed bool
	// hdr holds a block header; kept here so writing it through the
	// io.Writer interface does not allocate per block.
	hdr [8]byte
}

// NewEncoder validates the header, writes it to w and returns an Encoder
// for rows of cols.
func NewEncoder(w io.Writer, table string, schemaVersion int32, cols []rowcodec.Column, opts EncoderOptions) (*Encoder, error) {
	if opts.BlockRows <= 0 {
		opts.BlockRows = DefaultBlockRows
	}
	if opts.BlockBytes <= 0 {
		opts.BlockBytes = DefaultBlockBytes
	}
	if len(cols) > math.MaxUint16 {
		return nil, syncerr.New(syncerr.InvalidRequest, "rows segment: %d columns exceed the u16 column count", len(cols))
	}
	if !utf8.ValidString(table) {
		return nil, syncerr.New(syncerr.InvalidRequest, "rows segment: table name is not valid UTF-8")
	}
	for _, c := range cols {
		if !utf8.ValidString(c.Name) {
			return nil, syncerr.New(syncerr.InvalidRequest, "rows segment: column name %q is not valid UTF-8", c.Name)
		}
	}
	codec, err := rowcodec.New(cols)
	if err != nil {
		return nil, err
	}
	e := &Encoder{w: w, h: sha256.New(), codec: codec, opts: opts}
	hdr := make([]byte, 0, 64)
	hdr = append(hdr, Magic[:]...)
	hdr = le.AppendUint16(hdr, FormatVersion)
	hdr = le.AppendUint16(hdr, 0)
	hdr = appendStr(hdr, table)
	hdr = le.AppendUint32(hdr, uint32(schemaVersion))
	hdr = le.AppendUint16(hdr, uint16(len(cols)))
	for _, c := range cols {
		hdr = appendStr(hdr, c.Name)
		var flags byte
		if c.Nullable {
			flags = 1
		}
		hdr = append(hdr, byte(c.Type), flags)
	}
	if err := e.write(hdr); err != nil {
		return nil, err
	}
	// The block grows by append up to BlockBytes: preallocating the
	// full 256 KiB cost every bootstrap page that much garbage, though
	// most pages (an empty or small scope) hold a few hundred bytes.
	e.block = make([]byte, 0, min(opts.BlockBytes, initialBlockBytes)+8)
	return e, nil
}

// initialBlockBytes is the block buffer's starting capacity.
const initialBlockBytes = 4 << 10

func appendStr(b []byte, s string) []byte {
	b = le.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// Codec returns the row codec rows must be encoded with.
func (e *Encoder) Codec() *rowcodec.Codec { return e.codec }

func (e *Encoder) write(p []byte) error {
	if e.err != nil {
		return e.err
	}
	if _, err := e.w.Write(p); err != nil {
		e.err = err
		return err
	}
	e.h.Write(p) // a hash.Hash never fails
	e.stats.Bytes += int64(len(p))
	return nil
}

func checkServerVersion(v int64) error {
	if v < 1 || v > rowcodec.MaxSafeInt {
		return syncerr.New(syncerr.InvalidRequest, "rows segment: serverVersion %d outside [1, 2^53-1]", v)
	}
	return nil
}

func (e *Encoder) usable() error {
	if e.closed {
		return syncerr.New(syncerr.InvalidRequest, "rows segment: encoder is closed")
	}
	return e.err
}

// AppendRow adds one row already in row-codec form for the encoder's
// columns — the bootstrap path, where stored rows are copied byte for byte.
// Unless TrustRows is set the row is validated first. The row bytes are
// copied; the caller may reuse them.
func (e *Encoder) AppendRow(serverVersion int64, row []byte) error {
	if err := e.usable(); err != nil {
		return err
	}
	if err := checkServerVersion(serverVersion); err != nil {
		return err
	}
	if !e.opts.TrustRows {
		if err := e.codec.ValidateRow(row); err != nil {
			return err
		}
	}
	if e.nrows > 0 && len(e.block)+8+len(row) > e.opts.BlockBytes {
		if err := e.EndBlock(); err != nil {
			return err
		}
	}
	if uint64(len(e.block))+8+uint64(len(row)) > math.MaxUint32 {
		return syncerr.New(syncerr.InvalidRequest, "rows segment: row of %d bytes does not fit a block", len(row))
	}
	e.block = le.AppendUint64(e.block, uint64(serverVersion))
	e.block = append(e.block, row...)
	return e.rowAdded()
}

// AppendValues encodes row with the encoder's codec and adds it.
func (e *Encoder) AppendValues(serverVersion int64, row []rowcodec.Value) error {
	if err := e.usable(); err != nil {
		return err
	}
	if err := checkServerVersion(serverVersion); err != nil {
		return err
	}
	start := len(e.block)
	b := le.AppendUint64(e.block, uint64(serverVersion))
	b, err := e.codec.Append(b, row)
	if err != nil {
		e.block = b[:start]
		return err
	}
	if e.nrows > 0 && len(b) > e.opts.BlockBytes {
		// The new record overflows the block: flush the rows before it,
		// then slide it to the front of the reused buffer.
		e.block = b[:start]
		if err := e.EndBlock(); err != nil {
			return err
		}
		n := copy(b, b[start:])
		b = b[:n]
		start = 0
	}
	if uint64(len(b)) > math.MaxUint32 {
		e.block = b[:start]
		return syncerr.New(syncerr.InvalidRequest, "rows segment: row does not fit a block")
	}
	e.block = b
	return e.rowAdded()
}

func (e *Encoder) rowAdded() error {
	e.nrows++
	e.stats.Rows++
	if e.nrows >= e.opts.BlockRows {
		return e.EndBlock()
	}
	return nil
}

// EndBlock writes the buffered rows as one block now (a no-op when the
// block is empty). Encoding normally cuts blocks by itself; this exists to
// reproduce a given block structure.
func (e *Encoder) EndBlock() error {
	if e.err != nil {
		return e.err
	}
	if e.nrows == 0 {
		return nil
	}
	le.PutUint32(e.hdr[:], uint32(e.nrows))
	le.PutUint32(e.hdr[4:], uint32(len(e.block)))
	if err := e.write(e.hdr[:]); err != nil {
		return err
	}
	if err := e.write(e.block); err != nil {
		return err
	}
	e.block = e.block[:0]
	e.nrows = 0
	e.stats.Blocks++
	return nil
}

// Close writes the last block and the mandatory end marker and returns
// the segment's stats. It does not close the underlying writer.
func (e *Encoder) Close() (Stats, error) {
	if err := e.usable(); err != nil {
		return Stats{}, err
	}
	if err := e.EndBlock(); err != nil {
		return Stats{}, err
	}
	clear(e.hdr[:4])
	if err := e.write(e.hdr[:4]); err != nil {
		return Stats{}, err
	}
	e.closed = true
	e.stats.SegmentID = formatID(e.h.Sum(nil))
	return e.stats, nil
}

// Encode re-encodes a Segment keeping its block structure, so a decoded
// segment comes back byte for byte. A row's Raw bytes are used when
// present (validated), otherwise its Values are encoded.
func Encode(seg *Segment) ([]byte, error) {
	var buf bytes.Buffer
	e, err := NewEncoder(&buf, seg.Table, seg.SchemaVersion, seg.Columns, EncoderOptions{
		BlockRows:  math.MaxInt,
		BlockBytes: math.MaxInt,
	})
	if err != nil {
		return nil, err
	}
	for i, block := range seg.Blocks {
		if len(block) == 0 {
			return nil, syncerr.New(syncerr.InvalidRequest, "rows segment: block %d is empty", i)
		}
		for j := range block {
			r := &block[j]
			if r.Raw != nil {
				err = e.AppendRow(r.ServerVersion, r.Raw)
			} else {
				err = e.AppendValues(r.ServerVersion, r.Values)
			}
			if err != nil {
				return nil, rowErr(err, i, j)
			}
		}
		if err := e.EndBlock(); err != nil {
			return nil, err
		}
	}
	if _, err := e.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
