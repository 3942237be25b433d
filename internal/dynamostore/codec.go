package dynamostore

import (
	"encoding/binary"
	"errors"
	"strconv"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// Commit log body encoding, compact and self-delimiting:
//
//	u8      format (1 or 2)
//	uvarint table count, then each table name as str
//	uvarint change count, then per change:
//	        uvarint table index, str rowId, u8 op, varint rowVersion,
//	        scopes, bytes row, [format 2: bytes columnVersions]
//	u8      flags: logHasRows when explicit row writes follow (only
//	        when the request's Rows are not derivable from its Changes),
//	        logHasRefs when reference-index writes follow (§6.11)
//	[rows]  uvarint count and per write: uvarint table index, str rowId,
//	        u8 delete, varint version, scopes, bytes payload,
//	        [format 2: bytes columnVersions]
//	[refs]  uvarint count (≥ 1) and per write: str child table, str
//	        column, str parent id, str child id, u8 remove
//	[reactions] (flag logHasReactions) uvarint count (≥ 1) and per §6.9
//	        record: str key, str type, varint version, varint
//	        maxAttempts, bytes payload
//
// str/bytes are uvarint length + raw bytes; scopes are uvarint count +
// (str key, str value) pairs in stored (canonical) order. Table names are
// interned because a commit usually touches one or two tables. A change's
// columnVersions are those of the row write it materializes, encoded by
// encodeCV (empty = none); format 1, written before column versions
// existed, has none and still decodes. Bodies written before references
// existed have flags 0 or logHasRows and decode unchanged. Format 3 is a
// format-2 body compressed whole (logzstd.go, packLogBody).
const logFormat = 2

var errCorrupt = errors.New("dynamostore: corrupt encoded data")

type enc struct{ b []byte }

func (e *enc) u8(v byte)        { e.b = append(e.b, v) }
func (e *enc) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *enc) varint(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *enc) str(s string)     { e.uvarint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *enc) bytes(p []byte)   { e.uvarint(uint64(len(p))); e.b = append(e.b, p...) }
func (e *enc) scopes(s wire.StoredScopes) {
	e.uvarint(uint64(len(s)))
	for _, kv := range s {
		e.str(kv.Key)
		e.str(kv.Value)
	}
}

type dec struct {
	b   []byte
	err error
}

func (d *dec) fail() { d.err = errCorrupt; d.b = nil }

func (d *dec) u8() byte {
	if d.err != nil || len(d.b) < 1 {
		d.fail()
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *dec) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a length that must be satisfiable by the remaining input
// (each element needs at least min bytes), so corrupt input cannot make
// the decoder allocate unbounded memory.
func (d *dec) count(min int) int {
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)/max(min, 1)+1) {
		d.fail()
		return 0
	}
	return int(n)
}

func (d *dec) raw() []byte {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *dec) str() string { return string(d.raw()) }

// bytes returns an owned copy (callers may keep and modify it).
func (d *dec) bytes() []byte {
	r := d.raw()
	if len(r) == 0 {
		return nil
	}
	return append([]byte(nil), r...)
}

func (d *dec) scopes() wire.StoredScopes {
	n := d.count(2)
	if n == 0 {
		return nil
	}
	out := make(wire.StoredScopes, 0, n)
	for range n {
		k := d.str()
		v := d.str()
		out = append(out, wire.StoredScope{Key: k, Value: v})
	}
	return out
}

func encodeScopes(s wire.StoredScopes) []byte {
	if len(s) == 0 {
		return nil
	}
	e := &enc{}
	e.scopes(s)
	return e.b
}

func decodeScopes(b []byte) (wire.StoredScopes, error) {
	if len(b) == 0 {
		return nil, nil
	}
	d := &dec{b: b}
	s := d.scopes()
	if d.err == nil && len(d.b) != 0 {
		d.fail()
	}
	return s, d.err
}

// Column versions (store.Row.ColumnVersions) are encoded relative to the
// row's version, run-length compressed, because nearly every column of a
// row carries the row's version or one of a few older ones:
//
//	uvarint column count, then runs until the count is covered:
//	uvarint run length (≥ 1), varint (version − column version)
//
// A row whose columns all sit at its version (every insert, every
// full-row upsert) costs 3 bytes for up to 127 columns. A non-nil empty
// list encodes as the single byte 0; nil is not encoded at all.
func encodeCV(dst []byte, cv []int64, version int64) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(cv)))
	for i := 0; i < len(cv); {
		j := i + 1
		for j < len(cv) && cv[j] == cv[i] {
			j++
		}
		dst = binary.AppendUvarint(dst, uint64(j-i))
		dst = binary.AppendVarint(dst, version-cv[i])
		i = j
	}
	return dst
}

// decodeCV inverts encodeCV; empty input is nil (no column versions).
func decodeCV(b []byte, version int64) ([]int64, error) {
	if len(b) == 0 {
		return nil, nil
	}
	d := &dec{b: b}
	n := d.uvarint()
	// Each run takes at least 2 bytes and covers at most n columns, so n
	// is bounded only by the 400 KB item: refuse what no row could have.
	if d.err != nil || n > MaxItemBytes {
		return nil, errCorrupt
	}
	cv := make([]int64, 0, n)
	for uint64(len(cv)) < n && d.err == nil {
		run := d.uvarint()
		v := version - d.varint()
		if d.err != nil || run == 0 || run > n-uint64(len(cv)) {
			return nil, errCorrupt
		}
		for range run {
			cv = append(cv, v)
		}
	}
	if d.err != nil || len(d.b) != 0 {
		return nil, errCorrupt
	}
	return cv, nil
}

// rowsFromChanges derives the row writes a commit's changes imply (the
// engine builds them 1:1), so the log need not store rows twice. cvs[i]
// is change i's encoded column versions (may be shorter than changes).
func rowsFromChanges(seq int64, changes []store.Change, cvs [][]byte) ([]store.RowWrite, error) {
	out := make([]store.RowWrite, len(changes))
	for i := range changes {
		c := &changes[i]
		w := store.RowWrite{Table: c.Table, Delete: c.Op == wire.OpDelete, Row: store.Row{RowID: c.RowID, Scopes: c.Scopes, CommitSeq: seq}}
		if !w.Delete {
			w.Row = store.Row{RowID: c.RowID, Version: c.RowVersion, Scopes: c.Scopes, Payload: c.Row, CommitSeq: seq}
			if i < len(cvs) {
				cv, err := decodeCV(cvs[i], c.RowVersion)
				if err != nil {
					return nil, err
				}
				w.Row.ColumnVersions = cv
			}
		}
		out[i] = w
	}
	return out, nil
}

// changeCVs pairs each change with the column versions of the row write
// at the same index, when the request's rows mirror its changes (the
// engine's shape); otherwise the comparison in Commit fails and the rows
// are logged explicitly.
func changeCVs(changes []store.Change, rows []store.RowWrite) [][]byte {
	if len(rows) != len(changes) {
		return nil
	}
	var out [][]byte
	for i := range changes {
		w := &rows[i]
		if w.Delete || w.Row.ColumnVersions == nil || w.Table != changes[i].Table || w.Row.RowID != changes[i].RowID {
			continue
		}
		if out == nil {
			out = make([][]byte, len(changes))
		}
		out[i] = encodeCV(nil, w.Row.ColumnVersions, changes[i].RowVersion)
	}
	return out
}

// Flag bits of the byte after the changes (formats 1 and 2; a body
// written before references existed carries 0 or logHasRows).
const (
	logHasRows = 1 // explicit row writes follow
	logHasRefs = 2 // reference-index writes follow (§6.11)
	// logHasReactions: §6.9 planned reactions follow, logged with the
	// commit so they are exactly as atomic as it.
	logHasReactions = 4
)

// encodeLogBody encodes the commit's changes with their encoded column
// versions cvs (nil or one per change) and, when rows is non-nil,
// explicit row writes.
//
// refs are the commit's reference-index writes (§6.11), which a
// roll-forward replays with the rows: they cannot be derived from the
// changes (a removal names the old parent).
func encodeLogBody(changes []store.Change, cvs [][]byte, rows []store.RowWrite, refs []store.RefWrite, rxs []store.PlannedReaction) []byte {
	size := 16
	tables := map[string]uint64{}
	var names []string
	intern := func(t string) {
		if _, ok := tables[t]; !ok {
			tables[t] = uint64(len(names))
			names = append(names, t)
		}
	}
	for i := range changes {
		intern(changes[i].Table)
		size += 24 + len(changes[i].RowID) + len(changes[i].Row)
	}
	for i := range rows {
		intern(rows[i].Table)
		size += 24 + len(rows[i].Row.RowID) + len(rows[i].Row.Payload)
	}
	e := &enc{b: make([]byte, 0, size)}
	e.u8(logFormat)
	e.uvarint(uint64(len(names)))
	for _, n := range names {
		e.str(n)
	}
	e.uvarint(uint64(len(changes)))
	for i := range changes {
		c := &changes[i]
		e.uvarint(tables[c.Table])
		e.str(c.RowID)
		e.u8(byte(c.Op))
		e.varint(c.RowVersion)
		e.scopes(c.Scopes)
		e.bytes(c.Row)
		if i < len(cvs) {
			e.bytes(cvs[i])
		} else {
			e.bytes(nil)
		}
	}
	var flags byte
	if rows != nil {
		flags |= logHasRows
	}
	if len(refs) > 0 {
		flags |= logHasRefs
	}
	if len(rxs) > 0 {
		flags |= logHasReactions
	}
	e.u8(flags)
	if rows != nil {
		e.rows(tables, rows)
	}
	if len(refs) > 0 {
		e.uvarint(uint64(len(refs)))
		for i := range refs {
			r := &refs[i]
			e.str(r.ChildTable)
			e.str(r.Column)
			e.str(r.ParentID)
			e.str(r.ChildID)
			if r.Remove {
				e.u8(1)
			} else {
				e.u8(0)
			}
		}
	}
	if len(rxs) > 0 {
		e.uvarint(uint64(len(rxs)))
		for i := range rxs {
			r := &rxs[i]
			e.str(r.Key)
			e.str(r.Type)
			e.varint(int64(r.Version))
			e.varint(int64(r.MaxAttempts))
			e.bytes(r.Payload)
		}
	}
	return e.b
}

func (e *enc) rows(tables map[string]uint64, rows []store.RowWrite) {
	e.uvarint(uint64(len(rows)))
	for i := range rows {
		w := &rows[i]
		e.uvarint(tables[w.Table])
		e.str(w.Row.RowID)
		if w.Delete {
			e.u8(1)
		} else {
			e.u8(0)
		}
		e.varint(w.Row.Version)
		e.scopes(w.Row.Scopes)
		e.bytes(w.Row.Payload)
		if w.Delete || w.Row.ColumnVersions == nil {
			e.bytes(nil)
		} else {
			e.bytes(encodeCV(nil, w.Row.ColumnVersions, w.Row.Version))
		}
	}
}

// logBody is a decoded commit log body.
type logBody struct {
	changes []store.Change
	cvs     [][]byte         // per change, encoded column versions (nil for format 1)
	rows    []store.RowWrite // explicit row writes, nil when derived
	refs    []store.RefWrite // reference-index writes (§6.11), nil when none
	// reactions are the §6.9 records planned with the commit.
	reactions []store.PlannedReaction
}

// materialization returns the row writes of commit seq: the explicit
// ones, or those its changes imply.
func (lb *logBody) materialization(seq int64) ([]store.RowWrite, error) {
	if lb.rows != nil {
		return lb.rows, nil
	}
	return rowsFromChanges(seq, lb.changes, lb.cvs)
}

// decodeLogBody is the inverse of encodeLogBody (formats 1 and 2) and of
// packLogBody (format 3, logzstd.go).
func decodeLogBody(b []byte, seq int64) (*logBody, error) {
	if len(b) > 0 && b[0] == logFormatZstd {
		inner, err := unpackLogBody(b)
		if err != nil {
			return nil, err
		}
		b = inner
	}
	d := &dec{b: b}
	format := d.u8()
	if format != 1 && format != 2 {
		return nil, errCorrupt
	}
	nt := d.count(1)
	names := make([]string, 0, nt)
	for range nt {
		names = append(names, d.str())
	}
	table := func() string {
		i := d.uvarint()
		if d.err != nil || i >= uint64(len(names)) {
			d.fail()
			return ""
		}
		return names[i]
	}
	lb := &logBody{}
	nc := d.count(5)
	lb.changes = make([]store.Change, 0, nc)
	if format == 2 {
		lb.cvs = make([][]byte, 0, nc)
	}
	for range nc {
		c := store.Change{Table: table(), RowID: d.str(), Op: wire.Op(d.u8()), RowVersion: d.varint()}
		c.Scopes = d.scopes()
		c.Row = d.bytes()
		lb.changes = append(lb.changes, c)
		if format == 2 {
			lb.cvs = append(lb.cvs, d.raw()) // decoded only when rows are materialized
		}
	}
	flags := d.u8()
	if flags&^(logHasRows|logHasRefs|logHasReactions) != 0 {
		d.fail()
	}
	if flags&logHasRows != 0 {
		nr := d.count(5)
		lb.rows = make([]store.RowWrite, 0, nr)
		for range nr {
			w := store.RowWrite{Table: table()}
			w.Row.RowID = d.str()
			w.Delete = d.u8() == 1
			w.Row.Version = d.varint()
			w.Row.Scopes = d.scopes()
			w.Row.Payload = d.bytes()
			w.Row.CommitSeq = seq
			if format == 2 {
				cv, err := decodeCV(d.raw(), w.Row.Version)
				if err != nil {
					d.fail()
				}
				w.Row.ColumnVersions = cv
			}
			if w.Delete {
				w.Row = store.Row{RowID: w.Row.RowID, Scopes: w.Row.Scopes, CommitSeq: seq}
			}
			lb.rows = append(lb.rows, w)
		}
	}
	if flags&logHasRefs != 0 {
		nr := d.count(5)
		lb.refs = make([]store.RefWrite, 0, nr)
		for range nr {
			var r store.RefWrite
			r.ChildTable, r.Column, r.ParentID, r.ChildID = d.str(), d.str(), d.str(), d.str()
			r.Remove = d.u8() == 1
			lb.refs = append(lb.refs, r)
		}
		if d.err == nil && len(lb.refs) == 0 {
			d.fail()
		}
	}
	if flags&logHasReactions != 0 {
		nr := d.count(5)
		lb.reactions = make([]store.PlannedReaction, 0, nr)
		for range nr {
			r := store.PlannedReaction{Key: d.str(), Type: d.str(), Version: int32(d.varint()), MaxAttempts: int32(d.varint())}
			r.Payload = d.bytes()
			lb.reactions = append(lb.reactions, r)
		}
		if d.err == nil && len(lb.reactions) == 0 {
			d.fail()
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail()
	}
	if d.err != nil {
		return nil, d.err
	}
	return lb, nil
}

// Attribute readers: ok is false when the attribute is absent or of
// another type.

func getS(item map[string]types.AttributeValue, name string) (string, bool) {
	v, ok := item[name].(*types.AttributeValueMemberS)
	if !ok {
		return "", false
	}
	return v.Value, true
}

func getN(item map[string]types.AttributeValue, name string) (int64, bool) {
	v, ok := item[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	return n, err == nil
}

// getB returns the binary attribute; absent means empty.
func getB(item map[string]types.AttributeValue, name string) ([]byte, bool) {
	switch v := item[name].(type) {
	case nil:
		return nil, true
	case *types.AttributeValueMemberB:
		return v.Value, true
	}
	return nil, false
}

func getBool(item map[string]types.AttributeValue, name string) (bool, bool) {
	v, ok := item[name].(*types.AttributeValueMemberBOOL)
	if !ok {
		return false, false
	}
	return v.Value, true
}

// Item size per the DynamoDB rules (attribute name bytes + value bytes;
// a number is about one byte per two significant digits plus one).
// Used to refuse oversize items before DynamoDB does and to estimate
// capacity.

// MaxItemBytes is DynamoDB's item size limit (400 KB).
const MaxItemBytes = 400 * 1024

// ItemSize returns the DynamoDB size of an item in bytes.
func ItemSize(item map[string]types.AttributeValue) int {
	n := 0
	for k, v := range item {
		n += len(k) + valueSize(v)
	}
	return n
}

func valueSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		return numberSize(v.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberSS:
		n := 0
		for _, s := range v.Value {
			n += len(s)
		}
		return n
	case *types.AttributeValueMemberBS:
		n := 0
		for _, s := range v.Value {
			n += len(s)
		}
		return n
	case *types.AttributeValueMemberNS:
		n := 0
		for _, s := range v.Value {
			n += numberSize(s)
		}
		return n
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += 1 + valueSize(e)
		}
		return n
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range v.Value {
			n += 1 + len(k) + valueSize(e)
		}
		return n
	}
	return 0
}

func numberSize(s string) int {
	digits := 0
	for i := 0; i < len(s); i++ {
		if s[i] >= '0' && s[i] <= '9' {
			digits++
		}
	}
	return (digits+1)/2 + 1
}

// validKeyPart reports whether s can be part of a key: DynamoDB requires
// valid UTF-8 in S attributes.
func validKeyPart(s string) bool { return utf8.ValidString(s) }
