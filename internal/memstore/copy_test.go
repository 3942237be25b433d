package memstore

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// A copied commit equals the original (nil and empty kept apart) and
// shares no memory with it or between its own changes.
func TestCopyCommitIsDeepAndDisjoint(t *testing.T) {
	in := &store.Commit{Seq: 7, ActorID: "a", ClientID: "c", ClientCommitID: "x", Changes: []store.Change{
		{Table: "t", RowID: "1", Op: wire.OpUpsert, RowVersion: 2, Scopes: wire.StoredScopes{{Key: "p", Value: "1"}}, Row: []byte{1, 2, 3}},
		{Table: "t", RowID: "2", Op: wire.OpDelete, Scopes: wire.StoredScopes{}},
		{Table: "t", RowID: "3", Op: wire.OpUpsert, Scopes: wire.StoredScopes{{Key: "p", Value: "2"}, {Key: "q", Value: "3"}}, Row: []byte{}},
		{Table: "t", RowID: "4", Op: wire.OpUpsert, Row: []byte{4}},
	}}
	out := copyCommit(in)
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("copy differs:\n%+v\n%+v", in, out)
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
		t.Fatal("the copy shares memory with the original")
	}
	if c := copyCommit(&store.Commit{Seq: 1}); c.Changes != nil {
		t.Fatal("nil changes became non-nil")
	}
}

func BenchmarkCopyCommit(b *testing.B) {
	in := &store.Commit{Seq: 7, ActorID: "a", ClientID: "c", ClientCommitID: "x"}
	for i := 0; i < 4; i++ {
		in.Changes = append(in.Changes, store.Change{Table: "tasks", RowID: "r", Op: wire.OpUpsert, RowVersion: 2, Scopes: wire.StoredScopes{{Key: "project_id", Value: "p1"}}, Row: make([]byte, 120)})
	}
	b.ReportAllocs()
	for b.Loop() {
		copyCommit(in)
	}
}
