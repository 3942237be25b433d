package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// TestSmallCommitStaleWriter (issue 23, fast.go): the writer of small
// commit 1 stops after its head update and resumes its puts and log
// write (waves 3 and 4) only after another instance settled commit 1 and
// two later commits rewrote its row and deleted it. The late writes
// change nothing: the row stays the tombstone of commit 3, its scope
// copy too, the head is untouched, and the log and outcome of commit 1
// are as the settling instance wrote them.
func TestSmallCommitStaleWriter(t *testing.T) {
	c := testenv.DynamoDB(t).Client(t)
	table := testenv.UniqueName(t, "stale")
	ctx := context.Background()
	if err := CreateTable(ctx, c, table); err != nil {
		t.Fatal(err)
	}
	if _, err := New(c, table, Options{}).RaiseFormatLevel(ctx); err != nil {
		t.Fatal(err)
	}
	crash := errors.New("paused")
	w := New(c, table, Options{AfterLogWrite: func() error { return crash }})
	p := "stale"
	if _, err := w.TouchPartition(ctx, p, 1, "e"); err != nil {
		t.Fatal(err)
	}
	scopes := wire.StoredScopes{{Key: "org", Value: "o1"}}
	commit := func(seq int64, id string, del bool, version int64, payload string) *store.CommitRequest {
		ch := store.Change{Table: "tasks", RowID: "r1", Op: wire.OpUpsert, RowVersion: version, Row: []byte(payload), Scopes: scopes}
		rw := store.RowWrite{Table: "tasks", Row: store.Row{RowID: "r1", Version: version, Payload: []byte(payload), Scopes: scopes, CommitSeq: seq}}
		if del {
			ch = store.Change{Table: "tasks", RowID: "r1", Op: wire.OpDelete, Scopes: scopes}
			rw = store.RowWrite{Table: "tasks", Delete: true, Row: store.Row{RowID: "r1", Scopes: scopes, CommitSeq: seq}}
		}
		return &store.CommitRequest{ExpectedMaxSeq: seq - 1,
			Commit:  store.Commit{Seq: seq, CreatedAtMs: seq, ClientID: "c", ClientCommitID: id, Changes: []store.Change{ch}},
			Rows:    []store.RowWrite{rw},
			Outcome: store.Outcome{Applied: true, CommitSeq: seq, Result: []byte(id), RecordedAtMs: seq}}
	}
	if err := w.Commit(ctx, p, commit(1, "one", false, 1, "v1")); !errors.Is(err, crash) {
		t.Fatalf("Commit: %v, want the pause", err)
	}
	h, _, err := w.readHead(ctx, p)
	if err != nil || !h.pendingSmall() {
		t.Fatalf("commit 1 is not pending on the head: %+v %v", h, err)
	}
	logItem, outItem := pendingItems(p, &h)
	body, _ := getB(h.pendLog, lData)

	s := New(c, table, Options{})
	if err := s.Commit(ctx, p, commit(2, "two", false, 2, "v2")); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, p, commit(3, "three", true, 0, "")); err != nil {
		t.Fatal(err)
	}
	before, _, err := s.readHead(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	read := func(pk, sk string) map[string]any {
		it, err := s.getItem(ctx, "test read", pk, sk, nil)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]any{}
		for k, v := range it {
			out[k] = fmt.Sprintf("%#v", v)
		}
		return out
	}
	row0, copy0 := read(rowPK(p, "tasks"), rowSK("r1")), read(scopePK(p, "tasks", "org", "o1"), rowSK("r1"))
	log0, out0 := read(logPK(p), chunkSK(1, 0)), read(outcomePK(p, "c"), outcomeSK("one"))
	if len(log0) == 0 || len(out0) == 0 {
		t.Fatal("commit 1 was not settled by the later commits")
	}

	// The writer of commit 1 resumes.
	if err := w.finishSmall(ctx, p, 1, logItem, outItem, body, true); err != nil { // with its live copy: the strongest late write
		t.Fatalf("late writes: %v", err)
	}
	got, err := s.GetRows(ctx, p, "tasks", []string{"r1"})
	if err != nil || got["r1"] == nil || !got["r1"].Deleted || got["r1"].CommitSeq != 3 {
		t.Fatalf("row after the late writes: %+v %v", got["r1"], err)
	}
	for _, x := range []struct {
		what       string
		was, isNow map[string]any
	}{
		{"row", row0, read(rowPK(p, "tasks"), rowSK("r1"))},
		{"scope copy", copy0, read(scopePK(p, "tasks", "org", "o1"), rowSK("r1"))},
		{"log item", log0, read(logPK(p), chunkSK(1, 0))},
		{"outcome", out0, read(outcomePK(p, "c"), outcomeSK("one"))},
	} {
		if !maps.EqualFunc(x.was, x.isNow, func(a, b any) bool { return a == b }) {
			t.Errorf("%s changed under the late writes:\n%v\n%v", x.what, x.was, x.isNow)
		}
	}
	after, _, err := s.readHead(ctx, p)
	if err != nil || after.MaxCommitSeq != before.MaxCommitSeq || after.applied != before.applied || after.pendSeq != before.pendSeq {
		t.Fatalf("head moved under the late writes: %+v → %+v %v", before, after, err)
	}
}
