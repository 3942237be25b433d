// Package segment reads and writes SSG2 rows segments (SPEC §5.2): the
// mandatory bootstrap container. A segment is a header (table,
// schemaVersion, column table) followed by row blocks and a mandatory end
// marker; each row record is a serverVersion followed by the row in
// row-codec form (§2.4). Blocks exist so readers can stream: the Decoder
// holds one block at a time and the Encoder buffers one block at a time.
//
// Every structural failure is sync.invalid_request (§5.2 closed list);
// comparing the column table with the receiver's schema is separate
// (CheckColumns) and is the only source of sync.schema_mismatch.
package segment

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// Magic is the segment magic "SSG2".
var Magic = [4]byte{'S', 'S', 'G', '2'}

// FormatVersion is the only formatVersion this package reads and writes.
const FormatVersion = 1

// Default block limits: §5.2 asks encoders for blocks of ~1000 rows or
// ~256 KiB, whichever comes first.
const (
	DefaultBlockRows  = 1000
	DefaultBlockBytes = 256 << 10
)

// DefaultMaxBlockBytes bounds the block a streaming Decoder will buffer.
const DefaultMaxBlockBytes = 64 << 20

// fixedHeaderLen is magic + formatVersion + flags.
const fixedHeaderLen = 8

// Header is the segment header: what the rows are encoded for.
type Header struct {
	Table         string
	SchemaVersion int32
	Columns       []rowcodec.Column
}

// Row is one row record. Raw is the row in row-codec form (it aliases the
// decoded buffer); Values is its decoded form.
type Row struct {
	ServerVersion int64
	Raw           []byte
	Values        []rowcodec.Value
}

// Segment is a fully decoded rows segment. Blocks keep the wire block
// structure so Encode reproduces the original bytes.
type Segment struct {
	Header
	Blocks [][]Row
}

// Rows counts the rows over all blocks.
func (s *Segment) Rows() int {
	n := 0
	for _, b := range s.Blocks {
		n += len(b)
	}
	return n
}

// SegmentID is the §5.1 content address of an uncompressed segment:
// "sha256:" + lowercase hex SHA-256.
func SegmentID(b []byte) string {
	sum := sha256.Sum256(b)
	return formatID(sum[:])
}

func formatID(sum []byte) string {
	var buf [7 + 64]byte
	copy(buf[:], "sha256:")
	hex.Encode(buf[7:], sum)
	return string(buf[:])
}

// CheckColumns compares a segment's column table with the receiver's
// generated schema for (table, schemaVersion): §5.2 requires the same
// order, names, types and nullability. A difference is
// sync.schema_mismatch — the column table validates, it never informs.
func CheckColumns(got, want []rowcodec.Column) error {
	if len(got) != len(want) {
		return syncerr.New(syncerr.SchemaMismatch, "rows segment has %d columns, schema has %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		switch {
		case g.Name != w.Name:
			return syncerr.New(syncerr.SchemaMismatch, "rows segment column %d is %q, schema has %q", i, g.Name, w.Name)
		case g.Type != w.Type:
			return syncerr.New(syncerr.SchemaMismatch, "rows segment column %q has type %s, schema has %s", g.Name, g.Type, w.Type)
		case g.Nullable != w.Nullable:
			return syncerr.New(syncerr.SchemaMismatch, "rows segment column %q has nullable=%t, schema has %t", g.Name, g.Nullable, w.Nullable)
		}
	}
	return nil
}

func invalid(format string, args ...any) error {
	return syncerr.New(syncerr.InvalidRequest, "rows segment: "+format, args...)
}

// rowErr places a row-codec failure at its block and row.
func rowErr(err error, block, row int) error {
	msg := err.Error()
	if e := syncerr.As(err); e != nil {
		msg = e.Message
	}
	return invalid("block %d row %d: %s", block, row, msg)
}
