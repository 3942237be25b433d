package memstore

import (
	"encoding/binary"
	"math"
	"math/bits"
	"slices"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// The log keeps each commit in a compact binary layout instead of a Go
// object graph (a Commit, its Changes, a string header per field, a byte
// slice per row): a run of bytes in the partition's log arena (arena.go),
// with no pointers for the collector to trace. A reader decodes it into
// fresh memory: the strings of the result are substrings of the entry
// (arena bytes are never modified once written, so sharing them is safe),
// the row bytes and the scope slices are copied into two arenas, so a
// caller may modify what it gets without reaching the store.
//
//	entry  := seq(8, LE) createdAtMs(8, LE) varint(writerVersion)
//	          str(actorId) key count(changes) uvarint(Σ scopes)
//	          uvarint(Σ row bytes) change* [outcome]
//	key    := str(clientId) str(clientCommitId)
//	change := str(table) str(rowId) op(1) varint(rowVersion)
//	          count(scopes) (str(key) str(value))* count(row) rowbytes
//	str    := uvarint(len) bytes
//	count  := uvarint(0 for nil, n+1 for n elements)
//
// nil and empty slices stay distinct through the count's +1. The commit's
// outcome (below) ends the entry, and the outcome index points at the
// entry's own key and outcome bytes, so an applied commit is stored once
// (Prune copies the outcome out to the outcome arena when it drops the
// entry's chunk).

// countOf encodes a slice length with nil kept apart from empty.
func countOf(n int, isNil bool) uint64 {
	if isNil {
		return 0
	}
	return uint64(n) + 1
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// entryLayout gives the positions, relative to an entry's start, of its
// key and of its outcome (the entry's length when it carries none).
type entryLayout struct{ keyOff, keyEnd, outcomeOff int }

// loggedCommit is a standalone entry with its layout (tests and
// benchmarks; the store appends entries into its arena).
type loggedCommit struct {
	entry string
	entryLayout
}

func (l *loggedCommit) key() string     { return l.entry[l.keyOff:l.keyEnd] }
func (l *loggedCommit) outcome() string { return l.entry[l.outcomeOff:] }

// encodeCommit returns c as a standalone entry, ending with o unless nil.
func encodeCommit(c *store.Commit, writerVersion int64, o *store.Outcome) loggedCommit {
	b, l := appendCommit(nil, c, writerVersion, o)
	return loggedCommit{entry: string(b), entryLayout: l}
}

// appendCommit appends c in the entry layout, ending with o unless nil,
// to b.
func appendCommit(b []byte, c *store.Commit, writerVersion int64, o *store.Outcome) ([]byte, entryLayout) {
	// The exact length first: b then grows at most once.
	scopes, rowBytes := 0, 0
	n := 16 + varintLen(writerVersion) + strLen(c.ActorID) + strLen(c.ClientID) + strLen(c.ClientCommitID) +
		uvarintLen(countOf(len(c.Changes), c.Changes == nil))
	for i := range c.Changes {
		ch := &c.Changes[i]
		n += strLen(ch.Table) + strLen(ch.RowID) + 1 + varintLen(ch.RowVersion) +
			uvarintLen(countOf(len(ch.Scopes), ch.Scopes == nil)) + uvarintLen(countOf(len(ch.Row), ch.Row == nil)) + len(ch.Row)
		for _, sc := range ch.Scopes {
			n += strLen(sc.Key) + strLen(sc.Value)
		}
		scopes += len(ch.Scopes)
		rowBytes += len(ch.Row)
	}
	n += uvarintLen(uint64(scopes)) + uvarintLen(uint64(rowBytes))
	if o != nil {
		n += 1 + varintLen(o.CommitSeq) + varintLen(o.RecordedAtMs) + strLen(o.ActorID) + len(o.Result)
	}
	b = slices.Grow(b, n)
	start := len(b)
	b = binary.LittleEndian.AppendUint64(b, uint64(c.Seq))
	b = binary.LittleEndian.AppendUint64(b, uint64(c.CreatedAtMs))
	b = binary.AppendVarint(b, writerVersion)
	b = appendStr(b, c.ActorID)
	var l entryLayout
	l.keyOff = len(b) - start
	b = appendOutcomeKey(b, c.ClientID, c.ClientCommitID)
	l.keyEnd = len(b) - start
	b = binary.AppendUvarint(b, countOf(len(c.Changes), c.Changes == nil))
	b = binary.AppendUvarint(b, uint64(scopes))
	b = binary.AppendUvarint(b, uint64(rowBytes))
	for i := range c.Changes {
		ch := &c.Changes[i]
		b = appendStr(b, ch.Table)
		b = appendStr(b, ch.RowID)
		b = append(b, byte(ch.Op))
		b = binary.AppendVarint(b, ch.RowVersion)
		b = binary.AppendUvarint(b, countOf(len(ch.Scopes), ch.Scopes == nil))
		for _, sc := range ch.Scopes {
			b = appendStr(b, sc.Key)
			b = appendStr(b, sc.Value)
		}
		b = binary.AppendUvarint(b, countOf(len(ch.Row), ch.Row == nil))
		b = append(b, ch.Row...)
	}
	l.outcomeOff = len(b) - start
	if o != nil {
		b = appendOutcome(b, o)
	}
	if len(b)-start != n {
		panic("memstore: commit entry length miscounted")
	}
	return b, l
}

func uvarintLen(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

func varintLen(x int64) int { return uvarintLen(uint64(x<<1) ^ uint64(x>>63)) }

func strLen(s string) int { return uvarintLen(uint64(len(s))) + len(s) }

// entrySeq and entryTime read the fixed header of an entry.
func entrySeq(e string) int64 {
	return int64(le64(e))
}

func entryTime(e string) int64 {
	return int64(le64(e[8:]))
}

func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// entryReader walks an entry. The store wrote every entry itself, so a
// malformed one is a bug: reads past the end panic.
type entryReader struct {
	s   string
	off int
}

func (r *entryReader) uvarint() uint64 {
	var x uint64
	for shift := uint(0); ; shift += 7 {
		c := r.s[r.off]
		r.off++
		if c < 0x80 {
			return x | uint64(c)<<shift
		}
		x |= uint64(c&0x7f) << shift
	}
}

func (r *entryReader) varint() int64 {
	u := r.uvarint()
	x := int64(u >> 1)
	if u&1 != 0 {
		x = ^x
	}
	return x
}

// str returns a substring of the entry: no copy.
func (r *entryReader) str() string {
	n := int(r.uvarint())
	s := r.s[r.off : r.off+n]
	r.off += n
	return s
}

// decodeCommit returns a caller-owned commit in four allocations at most
// (the commit, its changes, one arena each for scopes and row bytes); a
// trailing outcome is not read.
// Every row and scope slice is capped at its length, so an append by the
// caller reallocates instead of writing into a neighbour.
func decodeCommit(e string) *store.Commit {
	r := entryReader{s: e, off: 16}
	wv := r.varint()
	actor, client, commitID := r.str(), r.str(), r.str()
	nc := r.uvarint()
	nScopes := r.uvarint()
	nRow := r.uvarint()
	var c *store.Commit
	if nc == 2 {
		// A one-change commit (the common push) comes in one allocation
		// with its change.
		one := &struct {
			c  store.Commit
			ch [1]store.Change
		}{}
		c = &one.c
		c.Changes = one.ch[:1:1]
	} else {
		c = &store.Commit{}
		if nc > 0 {
			c.Changes = make([]store.Change, nc-1)
		}
	}
	c.Seq, c.CreatedAtMs, c.WriterVersion = entrySeq(e), entryTime(e), wv
	c.ActorID, c.ClientID, c.ClientCommitID = actor, client, commitID
	if nc == 0 {
		return c
	}
	var scopeArena wire.StoredScopes
	if nScopes > 0 {
		scopeArena = make(wire.StoredScopes, 0, nScopes)
	}
	var rowArena []byte
	if nRow > 0 {
		rowArena = make([]byte, 0, nRow)
	}
	for i := range c.Changes {
		ch := &c.Changes[i]
		ch.Table = r.str()
		ch.RowID = r.str()
		ch.Op = wire.Op(r.s[r.off])
		r.off++
		ch.RowVersion = r.varint()
		if ns := r.uvarint(); ns == 1 {
			ch.Scopes = wire.StoredScopes{}
		} else if ns > 1 {
			off := len(scopeArena)
			for range ns - 1 {
				scopeArena = append(scopeArena, wire.StoredScope{Key: r.str(), Value: r.str()})
			}
			ch.Scopes = scopeArena[off:len(scopeArena):len(scopeArena)]
		}
		if nr := r.uvarint(); nr == 1 {
			ch.Row = []byte{}
		} else if nr > 1 {
			n := int(nr - 1)
			off := len(rowArena)
			rowArena = append(rowArena, r.s[r.off:r.off+n]...)
			r.off += n
			ch.Row = rowArena[off:len(rowArena):len(rowArena)]
		}
	}
	return c
}

// Outcomes are kept the same way: as bytes in an arena, found through
// the maphash of their key (arena.go).
//
//	outcome := flags(1: 1 applied, 2 result non-nil) varint(commitSeq)
//	           varint(recordedAtMs) str(actorId) result
//
// and keyed by the key of the entry layout. In the outcome arena a
// record is the key followed by the outcome.

func encodeOutcome(o *store.Outcome) string {
	return string(appendOutcome(make([]byte, 0, 24+len(o.ActorID)+len(o.Result)), o))
}

func appendOutcome(b []byte, o *store.Outcome) []byte {
	var flags byte
	if o.Applied {
		flags |= 1
	}
	if o.Result != nil {
		flags |= 2
	}
	b = append(b, flags)
	b = binary.AppendVarint(b, o.CommitSeq)
	b = binary.AppendVarint(b, o.RecordedAtMs)
	b = appendStr(b, o.ActorID)
	return append(b, o.Result...)
}

// decodeOutcome returns a caller-owned outcome (Result copied).
func decodeOutcome(e string) *store.Outcome {
	r := entryReader{s: e, off: 1}
	o := &store.Outcome{Applied: e[0]&1 != 0}
	o.CommitSeq = r.varint()
	o.RecordedAtMs = r.varint()
	o.ActorID = r.str()
	if e[0]&2 != 0 {
		o.Result = []byte(e[r.off:])
	}
	return o
}

// appendOutcomeKey appends the map key of (clientID, clientCommitID).
func appendOutcomeKey(b []byte, clientID, clientCommitID string) []byte {
	b = appendStr(b, clientID)
	return appendStr(b, clientCommitID)
}

// maxInt64 bounds an open-ended log walk.
const maxInt64 = math.MaxInt64

// entryKey returns the outcome key inside an entry.
func entryKey(e string) string {
	r := entryReader{s: e, off: 16}
	r.varint()
	r.str()
	off := r.off
	r.str()
	r.str()
	return e[off:r.off]
}
