package dynamostore

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// TestStaleRollerFenced: a roller that is still replaying commit 1 after
// another instance finished it and commit 2 deleted a row must not
// resurrect the row (the appliedSeq fence in materialize).
func TestStaleRollerFenced(t *testing.T) {
	c := testenv.DynamoDB(t).Client(t)
	table := testenv.UniqueName(t, "fence")
	ctx := context.Background()
	if err := CreateTable(ctx, c, table); err != nil {
		t.Fatal(err)
	}
	s := New(c, table, Options{})
	p := "fence"
	if _, err := s.TouchPartition(ctx, p, 1, "e"); err != nil {
		t.Fatal(err)
	}
	row := store.RowWrite{Table: "tasks", Row: store.Row{RowID: "x", Version: 1, Payload: []byte("v1"), CommitSeq: 1}}
	c1 := &store.CommitRequest{ExpectedMaxSeq: 0,
		Commit:  store.Commit{Seq: 1, ClientID: "c", ClientCommitID: "1", Changes: []store.Change{{Table: "tasks", RowID: "x", Op: wire.OpUpsert, RowVersion: 1, Row: []byte("v1")}}},
		Rows:    []store.RowWrite{row},
		Outcome: store.Outcome{Applied: true, CommitSeq: 1}}
	if err := s.Commit(ctx, p, c1); err != nil {
		t.Fatal(err)
	}
	c2 := &store.CommitRequest{ExpectedMaxSeq: 1,
		Commit:  store.Commit{Seq: 2, ClientID: "c", ClientCommitID: "2", Changes: []store.Change{{Table: "tasks", RowID: "x", Op: wire.OpDelete}}},
		Rows:    []store.RowWrite{{Table: "tasks", Delete: true, Row: store.Row{RowID: "x"}}},
		Outcome: store.Outcome{Applied: true, CommitSeq: 2}}
	if err := s.Commit(ctx, p, c2); err != nil {
		t.Fatal(err)
	}
	// The stale roller replays commit 1.
	if err := s.materialize(ctx, p, 1, []store.RowWrite{row}, nil); !errors.Is(err, errApplied) {
		t.Fatalf("stale materialize: %v, want errApplied", err)
	}
	if m, err := s.GetRows(ctx, p, "tasks", []string{"x"}); err != nil || len(m) != 0 {
		t.Fatalf("row x resurrected by a stale replay: %v %v", m, err)
	}
	h, _, _ := s.readHead(ctx, p)
	if err := s.rollForward(ctx, p, head{Head: h.Head, applied: 0}); err != nil {
		t.Fatalf("stale rollForward: %v", err)
	}
	if m, err := s.GetRows(ctx, p, "tasks", []string{"x"}); err != nil || len(m) != 0 {
		t.Fatalf("row x resurrected by a stale roll-forward: %v %v", m, err)
	}
}

func TestLogCodecRoundTrip(t *testing.T) {
	changes := []store.Change{
		{Table: "a", RowID: "1", Op: wire.OpUpsert, RowVersion: 3, Scopes: wire.StoredScopes{{Key: "k", Value: "v"}}, Row: []byte{0, 1, 2}},
		{Table: "b", RowID: "", Op: wire.OpDelete, Scopes: nil},
		{Table: "a", RowID: "日本", Op: wire.OpUpsert, RowVersion: 1},
	}
	rows := []store.RowWrite{{Table: "c", Row: store.Row{RowID: "z", Version: 9, Payload: []byte("p")}}, {Table: "a", Delete: true, Row: store.Row{RowID: "1"}}}
	for _, explicit := range [][]store.RowWrite{nil, rows} {
		b := encodeLogBody(changes, explicit)
		gc, gr, err := decodeLogBody(b, 7)
		if err != nil {
			t.Fatal(err)
		}
		if len(gc) != 3 || gc[0].Row[2] != 2 || gc[0].Scopes[0].Value != "v" || gc[2].RowID != "日本" || gc[1].Op != wire.OpDelete {
			t.Errorf("changes: %+v", gc)
		}
		if (explicit == nil) != (gr == nil) || (gr != nil && (gr[0].Row.Version != 9 || gr[0].Row.CommitSeq != 7 || !gr[1].Delete)) {
			t.Errorf("rows: %+v", gr)
		}
		for cut := range b {
			if _, _, err := decodeLogBody(b[:cut], 7); err == nil {
				t.Fatalf("truncated body (%d of %d bytes) decoded", cut, len(b))
			}
		}
	}
}

func TestEscInjective(t *testing.T) {
	seen := map[string]string{}
	for _, s := range []string{"", "#", "%", "%23", "%25", "a#b", "a%23b", "##", "%#"} {
		e := esc(s)
		if prev, dup := seen[e]; dup {
			t.Errorf("esc(%q) = esc(%q) = %q", s, prev, e)
		}
		seen[e] = s
		for i := 0; i < len(e); i++ {
			if e[i] == '#' {
				t.Errorf("esc(%q) = %q contains '#'", s, e)
			}
		}
	}
}

func TestLogCodecRefs(t *testing.T) {
	changes := []store.Change{{Table: "items", RowID: "i1", Op: wire.OpDelete}}
	refs := []store.RefWrite{
		{RefEntry: store.RefEntry{ChildTable: "items", Column: "project", ParentID: "p1", ChildID: "i1"}, Remove: true},
		{RefEntry: store.RefEntry{ChildTable: "items", Column: "owner", ParentID: "", ChildID: "日本"}},
	}
	for _, explicit := range [][]store.RowWrite{nil, {{Table: "items", Delete: true, Row: store.Row{RowID: "i1"}}}} {
		b := encodeLogBodyRefs(changes, explicit, refs)
		gc, gr, gf, err := decodeLogBodyRefs(b, 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(gc) != 1 || (explicit == nil) != (gr == nil) || !slices.Equal(gf, refs) {
			t.Errorf("decoded %+v %+v %+v", gc, gr, gf)
		}
		// Every truncation fails, including the one that drops exactly
		// the reference section (the flag byte announces it).
		for cut := range b {
			if _, _, _, err := decodeLogBodyRefs(b[:cut], 3); err == nil {
				t.Fatalf("truncated body (%d of %d bytes) decoded", cut, len(b))
			}
		}
	}
	// A body written before the index existed decodes with no refs.
	if _, _, gf, err := decodeLogBodyRefs(encodeLogBody(changes, nil), 3); err != nil || gf != nil {
		t.Errorf("legacy body: refs %v err %v", gf, err)
	}
}
