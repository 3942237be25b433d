package dynamostore

import (
	"context"
	"errors"
	"testing"
)

// TestGetRowsCoversCommitSettledDuringRead (read.go, overlaySettled): a
// push's row read after its head read showed a small commit pending
// (E = 2) must see E's writes even when another instance settles E while
// the read runs and the read's own head already shows E applied: in one
// BatchGetItem the row can be read before the settler's put of it. The
// test stops E after its commit point (nothing of it written but the
// head), lets the reader look at the head, then marks E applied as a
// settler does, without the row: what the reader's row read would see
// had it gone first.
func TestGetRowsCoversCommitSettledDuringRead(t *testing.T) {
	ctx := context.Background()
	c, table := freshTable(t, "settled")
	w := New(c, table, Options{})
	if _, err := w.RaiseFormatLevel(ctx); err != nil {
		t.Fatal(err)
	}
	p := "settled"
	if _, err := w.TouchPartition(ctx, p, 1, "e"); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx, p, orgCommit(1, "r1", "o1")); err != nil {
		t.Fatal(err)
	}
	crash := errors.New("injected stop after the commit point")
	w.afterLog = func() error { return crash }
	if err := w.Commit(ctx, p, orgCommit(2, "r2", "o1")); !errors.Is(err, crash) {
		t.Fatalf("commit 2: %v, want the injected stop", err)
	}
	w.afterLog = nil

	rd := New(c, table, Options{})
	h, err := rd.TouchPartition(ctx, p, 1, "e")
	if err != nil || h.MaxCommitSeq != 2 {
		t.Fatalf("reader's head: %+v %v", h, err)
	}
	if err := w.advanceApplied(ctx, p, 2); err != nil {
		t.Fatal(err)
	}
	rows, err := rd.GetRows(ctx, p, "tasks", []string{"r1", "r2"})
	if err != nil {
		t.Fatal(err)
	}
	if r := rows["r2"]; r == nil || r.CommitSeq != 2 {
		t.Errorf("row r2 after the reader saw commit 2 pending: %+v, want commit 2's write", r)
	}
	if r := rows["r1"]; r == nil || r.CommitSeq != 1 {
		t.Errorf("row r1: %+v, want commit 1's write", r)
	}
}
