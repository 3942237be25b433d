package memstore

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// A decoded commit equals the encoded one (nil and empty kept apart,
// negative and large numbers intact) and shares no mutable memory with
// the original or between its own changes; two decodes of one entry are
// disjoint too.
func TestCommitEncodingIsDeepAndDisjoint(t *testing.T) {
	in := &store.Commit{Seq: 7, CreatedAtMs: 1_700_000_000_123, ActorID: "a", ClientID: "c", ClientCommitID: "x", WriterVersion: 3, Changes: []store.Change{
		{Table: "t", RowID: "1", Op: wire.OpUpsert, RowVersion: 2, Scopes: wire.StoredScopes{{Key: "p", Value: "1"}}, Row: []byte{1, 2, 3}},
		{Table: "t", RowID: "2", Op: wire.OpDelete, Scopes: wire.StoredScopes{}},
		{Table: "t", RowID: "3", Op: wire.OpUpsert, RowVersion: 1 << 40, Scopes: wire.StoredScopes{{Key: "p", Value: "2"}, {Key: "q", Value: "3"}}, Row: []byte{}},
		{Table: "t", RowID: "4", Op: wire.OpUpsert, RowVersion: -1, Row: []byte{4}},
	}}
	o := &store.Outcome{Applied: true, CommitSeq: 7, Result: []byte{9, 9}, RecordedAtMs: 5, ActorID: "a"}
	l := encodeCommit(in, in.WriterVersion, o)
	e := l.entry
	out := decodeCommit(e)
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("decoded commit differs:\n%+v\n%+v", in, out)
	}
	if entrySeq(e) != 7 || entryTime(e) != in.CreatedAtMs {
		t.Fatalf("header: seq %d, time %d", entrySeq(e), entryTime(e))
	}
	// The entry carries the outcome map's key and value.
	if k := string(appendOutcomeKey(nil, "c", "x")); l.key() != k || entryKey(e) != k {
		t.Fatalf("entry key %q / %q, want %q", l.key(), entryKey(e), k)
	}
	if got := decodeOutcome(l.outcome()); !reflect.DeepEqual(got, o) {
		t.Fatalf("entry outcome %+v, want %+v", got, o)
	}
	for i := range in.Changes {
		if (in.Changes[i].Row == nil) != (out.Changes[i].Row == nil) || (in.Changes[i].Scopes == nil) != (out.Changes[i].Scopes == nil) {
			t.Fatalf("change %d: nil and empty not kept apart", i)
		}
	}
	// Appending to one change's row or scopes must not reach the next.
	out.Changes[0].Row = append(out.Changes[0].Row, 9)
	out.Changes[0].Scopes = append(out.Changes[0].Scopes, wire.StoredScope{Key: "z", Value: "z"})
	if !bytes.Equal(out.Changes[3].Row, []byte{4}) || out.Changes[2].Scopes[0].Key != "p" {
		t.Fatal("append into a neighbour's arena")
	}
	out.Changes[2].Scopes[0].Value = "changed"
	out.Changes[3].Row[0] = 0
	if in.Changes[2].Scopes[0].Value != "2" || in.Changes[3].Row[0] != 4 || len(in.Changes[0].Row) != 3 {
		t.Fatal("the decoded commit shares memory with the original")
	}
	if again := decodeCommit(e); again.Changes[3].Row[0] != 4 || again.Changes[2].Scopes[0].Value != "2" {
		t.Fatal("a caller's change reached the stored entry")
	}
	// A one-change commit (decoded with its change in one allocation).
	single := &store.Commit{Seq: 9, ActorID: "a", ClientID: "c", ClientCommitID: "y", Changes: []store.Change{
		{Table: "t", RowID: "1", Op: wire.OpUpsert, RowVersion: 3, Scopes: wire.StoredScopes{{Key: "p", Value: "1"}}, Row: []byte{5}},
	}}
	if got := decodeCommit(encodeCommit(single, 0, nil).entry); !reflect.DeepEqual(single, got) {
		t.Fatalf("one-change commit:\n%+v\n%+v", single, got)
	} else if got.Changes = append(got.Changes, store.Change{}); len(single.Changes) != 1 {
		t.Fatal("append reached the original")
	}
	if c := decodeCommit(encodeCommit(&store.Commit{Seq: 1}, 0, nil).entry); c.Changes != nil {
		t.Fatal("nil changes became non-nil")
	}
	if c := decodeCommit(encodeCommit(&store.Commit{Seq: 1, Changes: []store.Change{}}, 0, nil).entry); c.Changes == nil || len(c.Changes) != 0 {
		t.Fatal("empty changes not kept")
	}
}

func TestOutcomeEncoding(t *testing.T) {
	for _, in := range []store.Outcome{
		{Applied: true, CommitSeq: 12, Result: []byte{1, 2}, RecordedAtMs: 99, ActorID: "alice"},
		{Result: []byte{}, RecordedAtMs: -5},
		{},
	} {
		out := decodeOutcome(encodeOutcome(&in))
		if !reflect.DeepEqual(&in, out) {
			t.Errorf("outcome round trip:\n%+v\n%+v", in, *out)
		}
	}
	// Keys are unambiguous where a plain concatenation is not.
	if string(appendOutcomeKey(nil, "ab", "c")) == string(appendOutcomeKey(nil, "a", "bc")) ||
		string(appendOutcomeKey(nil, "a", "b\x01c")) == string(appendOutcomeKey(nil, "a\x01b", "c")) {
		t.Error("outcome keys collide")
	}
}

func BenchmarkDecodeCommit(b *testing.B) {
	in := &store.Commit{Seq: 7, ActorID: "a", ClientID: "c", ClientCommitID: "x"}
	for i := 0; i < 4; i++ {
		in.Changes = append(in.Changes, store.Change{Table: "tasks", RowID: "r", Op: wire.OpUpsert, RowVersion: 2, Scopes: wire.StoredScopes{{Key: "project_id", Value: "p1"}}, Row: make([]byte, 120)})
	}
	e := encodeCommit(in, 0, nil).entry
	b.ReportAllocs()
	for b.Loop() {
		decodeCommit(e)
	}
}
