package dynamostore

import (
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Key layout (single table, every key attribute of type S):
//
//	item            pk                                  sk
//	partition head  P#<p>                               HEAD
//	commit tickets  P#<p>                               QUEUE      (queue.go)
//	epoch event     P#<p>                               EPOCH      (RotateEpoch; for the stream)
//	realtime tier   RTI                                 <instanceId> (rtfanout registry)
//	build registry  BLD#<function>                      S<schema:020d> (builds.go)
//	commit log      P#<p>#L                             <seq:020d>[#<chunk:04d>]
//	push outcome    P#<p>#O#<clientId>                  O<clientCommitId>
//	row/tombstone   P#<p>#T#<table>                     R<rowId>
//	scope copy      P#<p>#V#<table>#<variable>#<value>  R<rowId>   (scopeindex.go)
//	log index       P#<p>#I#<table>#<variable>#<value>  <seq:020d> (logindex.go)
//	client record   P#<p>#C                             C<clientId>
//	auth lease      P#<p>#LS                            L<clientId> (leases.go, §7.3)
//	reference index P#<p>#X#<table>#<column>#<parentId> R<childRowId>
//	reaction        P#<p>#RX                            L|T<seq:020d>#<index:03d> (reactions.go)
//	reaction cursor P#<p>                               RXC
//	reactions due   RXQ#<0..15>                         M<p>
//	segment         SEG#<sha256 hex>                    OBJ | PUB#<part>#<epoch>#<digest>#<context> (hashes)
//	segment lookup  P#<p>#SF                            <key hash>#<sha256 hex>#<context hash>
//
// Injectivity: a name embedded in a pk is escaped with esc, which leaves
// no '#' in it, so the first '#' after a name always ends it and two
// different (partition, table, clientId) tuples never share a pk. A sort
// key holds at most one free-form part, behind a one-letter prefix (an
// S key may not be empty, and an id may be ""), so it needs no escaping;
// the prefix keeps the byte order of the ids (DynamoDB sorts S keys by
// UTF-8 bytes, which is the order ScanRows promises).

// esc percent-encodes '%' and '#' so the result contains no '#'. It is
// injective because percent-decoding inverts it.
func esc(s string) string {
	if !strings.ContainsAny(s, "%#") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%':
			b.WriteString("%25")
		case '#':
			b.WriteString("%23")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// PartitionPK is the pk prefix of everything a partition owns; exported
// for the segment store, which keeps its lookup items beside it.
func PartitionPK(partition string) string { return "P#" + esc(partition) }

func headPK(p string) string              { return PartitionPK(p) }
func logPK(p string) string               { return PartitionPK(p) + "#L" }
func outcomePK(p, clientID string) string { return PartitionPK(p) + "#O#" + esc(clientID) }
func rowPK(p, table string) string        { return PartitionPK(p) + "#T#" + esc(table) }
func clientPK(p string) string            { return PartitionPK(p) + "#C" }
func leasePK(p string) string             { return PartitionPK(p) + "#LS" }

// refPK is the reference-index partition of one parent (§6.11): a
// parent's children are one Query, with no scan of the child table.
func refPK(p, table, column, parentID string) string {
	return PartitionPK(p) + "#X#" + esc(table) + "#" + esc(column) + "#" + esc(parentID)
}

const headSK = "HEAD"

// EpochSK is the sort key of a partition's epoch-event item (pk the
// head's), which RotateEpoch writes so the table's stream sees every
// rotation.
const EpochSK = "EPOCH"

// seqSK is a commit's first log item; further chunks sort right after it
// and before the next seq ("#" sorts below every digit).
func seqSK(seq int64) string { return fmt.Sprintf("%020d", seq) }

func chunkSK(seq int64, chunk int) string {
	if chunk == 0 {
		return seqSK(seq)
	}
	return fmt.Sprintf("%020d#%04d", seq, chunk)
}

// seqRangeHi is the upper bound (inclusive) of all log items of seq.
func seqRangeHi(seq int64) string { return seqSK(seq) + "#~" }

func outcomeSK(clientCommitID string) string { return "O" + clientCommitID }
func rowSK(rowID string) string              { return "R" + rowID }
func clientSK(clientID string) string        { return "C" + clientID }
func leaseSK(clientID string) string         { return "L" + clientID }

// DynamoDB key size limits (bytes of UTF-8).
const (
	maxPKBytes = 2048
	maxSKBytes = 1024
)

// Key builds a primary key attribute map.
func Key(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrPK: S(pk), AttrSK: S(sk)}
}

// S, N and B build attribute values.
func S(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

// N builds a number attribute from an int64.
func N(n int64) types.AttributeValue { return &types.AttributeValueMemberN{Value: fmt.Sprint(n)} }

// B builds a binary attribute.
func B(b []byte) types.AttributeValue { return &types.AttributeValueMemberB{Value: b} }

// BOOL builds a boolean attribute.
func BOOL(v bool) types.AttributeValue { return &types.AttributeValueMemberBOOL{Value: v} }

// unesc inverts esc; ok is false when s is not an output of esc.
func unesc(s string) (string, bool) {
	if !strings.Contains(s, "%") {
		return s, !strings.Contains(s, "#")
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '#':
			return "", false
		case s[i] != '%':
			b.WriteByte(s[i])
		case strings.HasPrefix(s[i:], "%25"):
			b.WriteByte('%')
			i += 2
		case strings.HasPrefix(s[i:], "%23"):
			b.WriteByte('#')
			i += 2
		default:
			return "", false
		}
	}
	return b.String(), true
}

// ParseEpochKey reports whether (pk, sk) is a partition's epoch-event
// item and returns the partition.
func ParseEpochKey(pk, sk string) (partition string, ok bool) {
	if sk != EpochSK {
		return "", false
	}
	return partitionOfHeadPK(pk)
}

// ParseCommitKey reports whether (pk, sk) is the first log item of a
// commit and returns its partition and seq. Later chunks of the same
// commit are not first items, so a stream consumer sees each commit once.
func ParseCommitKey(pk, sk string) (partition string, seq int64, ok bool) {
	rest, found := strings.CutPrefix(pk, "P#")
	if !found {
		return "", 0, false
	}
	name, found := strings.CutSuffix(rest, "#L")
	if !found || len(sk) != 20 {
		return "", 0, false
	}
	if partition, ok = unesc(name); !ok {
		return "", 0, false
	}
	for i := 0; i < len(sk); i++ {
		if sk[i] < '0' || sk[i] > '9' {
			return "", 0, false
		}
		seq = seq*10 + int64(sk[i]-'0')
	}
	return partition, seq, true
}

// Esc escapes a name for embedding in a key (see the layout above).
func Esc(s string) string { return esc(s) }
