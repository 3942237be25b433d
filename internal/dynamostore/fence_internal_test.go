package dynamostore

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// TestStaleRollerFenced: a roller that is still replaying commit 1 after
// another instance finished it and commit 2 deleted a row must not
// resurrect the row nor its scope copy (the appliedSeq fence on the
// head; the cs condition of each plain write, and the copy's tombstone).
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
	sc := wire.StoredScopes{{Key: "org", Value: "a"}}
	row := store.RowWrite{Table: "tasks", Row: store.Row{RowID: "x", Version: 1, Payload: []byte("v1"), CommitSeq: 1}}
	scoped := store.RowWrite{Table: "tasks", Row: store.Row{RowID: "y", Version: 1, Payload: []byte("v1"), Scopes: sc, CommitSeq: 1}}
	c1 := &store.CommitRequest{ExpectedMaxSeq: 0,
		Commit: store.Commit{Seq: 1, ClientID: "c", ClientCommitID: "1", Changes: []store.Change{
			{Table: "tasks", RowID: "x", Op: wire.OpUpsert, RowVersion: 1, Row: []byte("v1")},
			{Table: "tasks", RowID: "y", Op: wire.OpUpsert, RowVersion: 1, Row: []byte("v1"), Scopes: sc}}},
		Rows:    []store.RowWrite{row, scoped},
		Outcome: store.Outcome{Applied: true, CommitSeq: 1}}
	if err := s.Commit(ctx, p, c1); err != nil {
		t.Fatal(err)
	}
	c2 := &store.CommitRequest{ExpectedMaxSeq: 1,
		Commit: store.Commit{Seq: 2, ClientID: "c", ClientCommitID: "2", Changes: []store.Change{
			{Table: "tasks", RowID: "x", Op: wire.OpDelete}, {Table: "tasks", RowID: "y", Op: wire.OpDelete, Scopes: sc}}},
		Rows: []store.RowWrite{{Table: "tasks", Delete: true, Row: store.Row{RowID: "x"}},
			{Table: "tasks", Delete: true, Row: store.Row{RowID: "y", Scopes: sc}}},
		Outcome: store.Outcome{Applied: true, CommitSeq: 2}}
	if err := s.Commit(ctx, p, c2); err != nil {
		t.Fatal(err)
	}
	// The stale roller replays commit 1.
	writes := []store.RowWrite{row, scoped}
	acts := append([]txItem{rowAction(s.table, p, 1, &row), rowAction(s.table, p, 1, &scoped)}, scopeIndexActions(s.table, p, 1, writes)...)
	if err := s.materialize(ctx, p, 1, acts, nil); !errors.Is(err, errApplied) {
		t.Fatalf("stale materialize: %v, want errApplied", err)
	}
	if m, err := s.GetRows(ctx, p, "tasks", []string{"x", "y"}); err != nil || len(m) != 2 || !m["x"].Deleted || m["x"].CommitSeq != 2 || !m["y"].Deleted {
		t.Fatalf("row x or y resurrected by a stale replay: %v %v %v", m["x"], m["y"], err)
	}
	var copies []string
	if err := s.ScanScopedRows(ctx, p, "tasks", "org", []string{"a"}, nil, 0, func(_ string, r *store.Row) bool {
		copies = append(copies, r.RowID)
		return true
	}); err != nil || len(copies) != 0 {
		t.Fatalf("scope copies of org a after a stale replay: %v (%v), want none", copies, err)
	}
	h, _, _ := s.readHead(ctx, p)
	if err := s.rollForward(ctx, p, head{Head: h.Head, applied: 0}); err != nil {
		t.Fatalf("stale rollForward: %v", err)
	}
	if m, err := s.GetRows(ctx, p, "tasks", []string{"x"}); err != nil || len(m) != 1 || !m["x"].Deleted || m["x"].CommitSeq != 2 {
		t.Fatalf("row x resurrected by a stale roll-forward: %v %v", m["x"], err)
	}
	// Prune takes the copy's tombstone with the row's.
	copyKey := Key(scopePK(p, "tasks", "org", "a"), rowSK("y"))
	if it, err := s.getItem(ctx, "test", copyKey[AttrPK].(*types.AttributeValueMemberS).Value, rowSK("y"), nil); err != nil || it == nil {
		t.Fatalf("copy tombstone of y before the prune: %v %v", it, err)
	}
	if _, err := s.Prune(ctx, p, 2); err != nil {
		t.Fatal(err)
	}
	for _, k := range []map[string]types.AttributeValue{copyKey, Key(rowPK(p, "tasks"), rowSK("y"))} {
		if it, err := s.getItem(ctx, "test", k[AttrPK].(*types.AttributeValueMemberS).Value, rowSK("y"), nil); err != nil || it != nil {
			t.Fatalf("tombstone %v after the prune: %v %v", k[AttrPK], it, err)
		}
	}
}

func TestLogCodecRoundTrip(t *testing.T) {
	changes := []store.Change{
		{Table: "a", RowID: "1", Op: wire.OpUpsert, RowVersion: 3, Scopes: wire.StoredScopes{{Key: "k", Value: "v"}}, Row: []byte{0, 1, 2}},
		{Table: "b", RowID: "", Op: wire.OpDelete, Scopes: nil},
		{Table: "a", RowID: "日本", Op: wire.OpUpsert, RowVersion: 1},
	}
	rows := []store.RowWrite{{Table: "c", Row: store.Row{RowID: "z", Version: 9, Payload: []byte("p"), ColumnVersions: []int64{9, 2, 9}}}, {Table: "a", Delete: true, Row: store.Row{RowID: "1"}}}
	cvs := [][]byte{encodeCV(nil, []int64{3, 1, 3}, 3), nil, nil}
	for _, explicit := range [][]store.RowWrite{nil, rows} {
		b := encodeLogBody(changes, cvs, explicit, nil, nil)
		lb, err := decodeLogBody(b, 7)
		if err != nil {
			t.Fatal(err)
		}
		gc, gr := lb.changes, lb.rows
		if len(gc) != 3 || gc[0].Row[2] != 2 || gc[0].Scopes[0].Value != "v" || gc[2].RowID != "日本" || gc[1].Op != wire.OpDelete {
			t.Errorf("changes: %+v", gc)
		}
		if (explicit == nil) != (gr == nil) || (gr != nil && (gr[0].Row.Version != 9 || gr[0].Row.CommitSeq != 7 || !gr[1].Delete ||
			!slices.Equal(gr[0].Row.ColumnVersions, []int64{9, 2, 9}))) {
			t.Errorf("rows: %+v", gr)
		}
		m, err := lb.materialization(7)
		if err != nil {
			t.Fatal(err)
		}
		if explicit == nil && (!slices.Equal(m[0].Row.ColumnVersions, []int64{3, 1, 3}) || m[2].Row.ColumnVersions != nil || !m[1].Delete || m[1].Row.CommitSeq != 7) {
			t.Errorf("derived rows: %+v", m)
		}
		for cut := range b {
			if _, err := decodeLogBody(b[:cut], 7); err == nil {
				t.Fatalf("truncated body (%d of %d bytes) decoded", cut, len(b))
			}
		}
	}
}

// TestLogCodecFormat1 decodes a log body in the format written before
// column versions existed (bytes spelled out by hand): its rows come
// back with nil column versions.
func TestLogCodecFormat1(t *testing.T) {
	b := []byte{
		1,         // format 1
		1, 1, 't', // one table "t"
		2,                               // two changes
		0, 1, 'r', 1, 2, 0, 2, 'p', 'q', // t/r upsert v1 (zigzag 2), no scopes, row "pq"
		0, 1, 's', 2, 0, 0, 0, // t/s delete
		0, // rows derived
	}
	lb, err := decodeLogBody(b, 5)
	if err != nil {
		t.Fatal(err)
	}
	m, err := lb.materialization(5)
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 2 || m[0].Delete || m[0].Row.RowID != "r" || m[0].Row.Version != 1 || string(m[0].Row.Payload) != "pq" ||
		m[0].Row.ColumnVersions != nil || m[0].Row.CommitSeq != 5 || !m[1].Delete || m[1].Row.RowID != "s" {
		t.Errorf("format-1 rows: %+v", m)
	}
}

func TestColumnVersionCodec(t *testing.T) {
	for _, tc := range []struct {
		cv      []int64
		version int64
		max     int // encoded size bound
	}{
		{[]int64{}, 4, 1},
		{[]int64{1}, 1, 3},
		{[]int64{7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7}, 7, 3}, // a full-row write
		{[]int64{1, 5, 5, 2, 5, 5, 5, 1}, 5, 11},
		{[]int64{1 << 50, 1, -3, 1<<50 + 1}, 1 << 50, 40},
	} {
		b := encodeCV(nil, tc.cv, tc.version)
		if len(b) > tc.max {
			t.Errorf("%v at %d encodes in %d bytes, want ≤ %d", tc.cv, tc.version, len(b), tc.max)
		}
		got, err := decodeCV(b, tc.version)
		if err != nil || got == nil || !slices.Equal(got, tc.cv) {
			t.Errorf("%v at %d: round trip %v, %v", tc.cv, tc.version, got, err)
		}
		for cut := 1; cut < len(b); cut++ {
			if _, err := decodeCV(b[:cut], tc.version); err == nil {
				t.Errorf("%v: truncated encoding (%d of %d bytes) decoded", tc.cv, cut, len(b))
			}
		}
	}
	if got, err := decodeCV(nil, 3); got != nil || err != nil {
		t.Errorf("empty encoding: %v, %v; want nil", got, err)
	}
	for _, bad := range [][]byte{{2, 0, 0}, {2, 3, 0}, {1, 1, 0, 9}, {0xff, 0xff, 0xff, 0xff, 0x0f}} {
		if _, err := decodeCV(bad, 3); err == nil {
			t.Errorf("decodeCV(%v) accepted corrupt input", bad)
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
	changes := []store.Change{
		{Table: "items", RowID: "i1", Op: wire.OpDelete},
		{Table: "items", RowID: "i2", Op: wire.OpUpsert, RowVersion: 4, Row: []byte("x")},
	}
	cvs := [][]byte{nil, encodeCV(nil, []int64{1, 4, 2}, 4)}
	refs := []store.RefWrite{
		{RefEntry: store.RefEntry{ChildTable: "items", Column: "project", ParentID: "p1", ChildID: "i1"}, Remove: true},
		{RefEntry: store.RefEntry{ChildTable: "items", Column: "owner", ParentID: "", ChildID: "日本"}},
	}
	explicitRows := []store.RowWrite{{Table: "items", Delete: true, Row: store.Row{RowID: "i1"}},
		{Table: "items", Row: store.Row{RowID: "i2", Version: 4, Payload: []byte("x"), ColumnVersions: []int64{1, 4, 2}}}}
	for _, explicit := range [][]store.RowWrite{nil, explicitRows} {
		ecvs := cvs
		if explicit != nil {
			ecvs = nil
		}
		b := encodeLogBody(changes, ecvs, explicit, refs, nil)
		if b[0] != logFormat {
			t.Fatalf("format %d, want %d", b[0], logFormat)
		}
		lb, err := decodeLogBody(b, 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(lb.changes) != 2 || (explicit == nil) != (lb.rows == nil) || !slices.Equal(lb.refs, refs) {
			t.Errorf("decoded %+v %+v %+v", lb.changes, lb.rows, lb.refs)
		}
		// The column versions survive beside the reference section.
		m, err := lb.materialization(3)
		if err != nil {
			t.Fatal(err)
		}
		if len(m) != 2 || !m[0].Delete || !slices.Equal(m[1].Row.ColumnVersions, []int64{1, 4, 2}) || m[1].Row.CommitSeq != 3 {
			t.Errorf("materialized %+v", m)
		}
		// Every truncation fails, including the one that drops exactly
		// the reference section (the flag byte announces it).
		for cut := range b {
			if _, err := decodeLogBody(b[:cut], 3); err == nil {
				t.Fatalf("truncated body (%d of %d bytes) decoded", cut, len(b))
			}
		}
	}
	// A format-2 body without references decodes with no refs.
	if lb, err := decodeLogBody(encodeLogBody(changes, cvs, nil, nil, nil), 3); err != nil || lb.refs != nil {
		t.Errorf("body without refs: refs %v err %v", lb, err)
	}
	// An unknown flag bit is corruption, not something to skip.
	b := encodeLogBody(changes[:1], nil, nil, nil, nil)
	b[len(b)-1] = 4
	if _, err := decodeLogBody(b, 3); err == nil {
		t.Error("unknown flag bit decoded")
	}
}

// TestLogCodecFormat1Refs decodes a format-1 body (no column versions)
// whose flag byte announces a reference section, spelled out by hand.
func TestLogCodecFormat1Refs(t *testing.T) {
	b := []byte{
		1,         // format 1
		1, 1, 'i', // one table "i"
		1,                     // one change
		0, 1, 'c', 2, 0, 0, 0, // i/c delete, no scopes, no row
		logHasRefs,                             // rows derived, refs follow
		1,                                      // one ref write
		1, 'i', 1, 'p', 2, 'p', '1', 1, 'c', 1, // i.p: p1 → c, removed
	}
	lb, err := decodeLogBody(b, 9)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.RefWrite{{RefEntry: store.RefEntry{ChildTable: "i", Column: "p", ParentID: "p1", ChildID: "c"}, Remove: true}}
	if !slices.Equal(lb.refs, want) || lb.rows != nil || lb.cvs != nil {
		t.Errorf("format-1 body with refs: %+v", lb)
	}
	m, err := lb.materialization(9)
	if err != nil || len(m) != 1 || !m[0].Delete || m[0].Row.RowID != "c" {
		t.Errorf("format-1 rows: %+v %v", m, err)
	}
}

// FuzzColumnVersionCodec: decodeCV never panics or over-allocates on
// arbitrary bytes, and whatever it accepts re-encodes to a list that
// decodes to the same versions.
func FuzzColumnVersionCodec(f *testing.F) {
	f.Add(encodeCV(nil, []int64{1, 5, 5, 2}, 5), int64(5))
	f.Add([]byte{0}, int64(1))
	f.Add([]byte{3, 3, 0}, int64(9))
	f.Fuzz(func(t *testing.T, b []byte, version int64) {
		cv, err := decodeCV(b, version)
		if err != nil || cv == nil { // nil (empty input) is never encoded
			return
		}
		again, err := decodeCV(encodeCV(nil, cv, version), version)
		if err != nil || again == nil || !slices.Equal(again, cv) {
			t.Fatalf("%v: re-encoded to %v, %v", cv, again, err)
		}
	})
}
