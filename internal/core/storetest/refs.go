package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// The reference-index contract (§6.11): entries written with a commit are
// visible to ListChildren exactly when the commit is, in byte order, bounded
// by the limit, and a failed commit writes none.

func ref(child, column, parent, childID string) store.RefWrite {
	return store.RefWrite{RefEntry: store.RefEntry{ChildTable: child, Column: column, ParentID: parent, ChildID: childID}}
}

func unref(child, column, parent, childID string) store.RefWrite {
	w := ref(child, column, parent, childID)
	w.Remove = true
	return w
}

func (e *partitionT) children(child, column, parent string, limit int) []string {
	e.t.Helper()
	out, err := e.s.ListChildren(e.ctx, e.p, []store.ChildQuery{{ChildTable: child, Column: column, ParentID: parent}}, limit)
	if err != nil || len(out) != 1 {
		e.t.Fatalf("ListChildren(%s.%s = %q): %d answers, %v", child, column, parent, len(out), err)
	}
	return out[0]
}

// testRefsManyQueries asks several parents in one call, as the §6.11
// pass does per cascade level: each answer belongs to its query, in
// query order, each bounded by the limit.
func testRefsManyQueries(t *testing.T, e *partitionT) {
	e.touch()
	req := commitReq(0, "client-a", "c1", upsert("items", "i1", 1, "x"), upsert("items", "i2", 1, "x"), upsert("items", "i3", 1, "x"))
	req.RefWrites = []store.RefWrite{
		ref("items", "project", "p1", "i2"), ref("items", "project", "p1", "i1"),
		ref("items", "project", "p2", "i3"), ref("items", "owner", "p1", "i3"),
	}
	e.commit(req)
	qs := []store.ChildQuery{
		{ChildTable: "items", Column: "project", ParentID: "p2"},
		{ChildTable: "items", Column: "project", ParentID: "none"},
		{ChildTable: "items", Column: "project", ParentID: "p1"},
		{ChildTable: "items", Column: "owner", ParentID: "p1"},
		{ChildTable: "items", Column: "project", ParentID: "p1"},
	}
	want := [][]string{{"i3"}, nil, {"i1", "i2"}, {"i3"}, {"i1", "i2"}}
	got, err := e.s.ListChildren(e.ctx, e.p, qs, 10)
	if err != nil || len(got) != len(qs) {
		t.Fatalf("ListChildren of %d queries: %d answers, %v", len(qs), len(got), err)
	}
	for i := range qs {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("query %d %+v: %q, want %q", i, qs[i], got[i], want[i])
		}
	}
	if got, err := e.s.ListChildren(e.ctx, e.p, qs, 1); err != nil || len(got) != len(qs) || !slices.Equal(got[2], []string{"i1"}) {
		t.Errorf("limit 1: %q, %v", got, err)
	}
	if got, err := e.s.ListChildren(e.ctx, e.p, nil, 10); err != nil || len(got) != 0 {
		t.Errorf("no queries: %q, %v", got, err)
	}
}

func testRefsAddListRemove(t *testing.T, e *partitionT) {
	e.touch()
	req := commitReq(0, "client-a", "c1",
		upsert("items", "i3", 1, "x"), upsert("items", "i1", 1, "x"), upsert("items", "i2", 1, "x"), upsert("items", "j1", 1, "x"))
	req.RefWrites = []store.RefWrite{
		ref("items", "project", "p1", "i3"), ref("items", "project", "p1", "i1"),
		ref("items", "project", "p1", "i2"), ref("items", "project", "p2", "j1"),
		ref("items", "owner", "p1", "j1"),
	}
	e.commit(req)
	if got, want := e.children("items", "project", "p1", 10), []string{"i1", "i2", "i3"}; !slices.Equal(got, want) {
		t.Errorf("children of p1: %q, want %q", got, want)
	}
	if got, want := e.children("items", "project", "p1", 2), []string{"i1", "i2"}; !slices.Equal(got, want) {
		t.Errorf("children of p1, limit 2: %q, want %q", got, want)
	}
	if got, want := e.children("items", "project", "p2", 10), []string{"j1"}; !slices.Equal(got, want) {
		t.Errorf("children of p2: %q, want %q", got, want)
	}
	if got, want := e.children("items", "owner", "p1", 10), []string{"j1"}; !slices.Equal(got, want) {
		t.Errorf("children of p1 through another column: %q, want %q", got, want)
	}
	if got := e.children("other", "project", "p1", 10); len(got) != 0 {
		t.Errorf("children in another table: %q, want none", got)
	}

	// Move i2 to p2 and drop i3: removes and adds in one commit; a remove
	// of an entry that does not exist is a no-op.
	req = commitReq(1, "client-a", "c2", upsert("items", "i2", 2, "y"), del("items", "i3"))
	req.RefWrites = []store.RefWrite{
		unref("items", "project", "p1", "i2"), ref("items", "project", "p2", "i2"),
		unref("items", "project", "p1", "i3"), unref("items", "project", "p9", "nobody"),
	}
	e.commit(req)
	if got, want := e.children("items", "project", "p1", 10), []string{"i1"}; !slices.Equal(got, want) {
		t.Errorf("children of p1 after the move: %q, want %q", got, want)
	}
	if got, want := e.children("items", "project", "p2", 10), []string{"i2", "j1"}; !slices.Equal(got, want) {
		t.Errorf("children of p2 after the move: %q, want %q", got, want)
	}
}

func testRefsFailedCommitWritesNone(t *testing.T, e *partitionT) {
	e.touch()
	e.commitNext(upsert("projects", "p1", 1, "x"))
	stale := commitReq(0, "client-b", "stale", upsert("items", "i1", 1, "x"))
	stale.RefWrites = []store.RefWrite{ref("items", "project", "p1", "i1")}
	if err := e.s.Commit(e.ctx, e.p, stale); !errors.Is(err, store.ErrHeadMoved) {
		t.Fatalf("Commit on a moved head: %v, want ErrHeadMoved", err)
	}
	dup := commitReq(1, "client-a", "cc-1", upsert("items", "i1", 1, "x")) // the key commitNext used
	dup.RefWrites = stale.RefWrites
	if err := e.s.Commit(e.ctx, e.p, dup); !errors.Is(err, store.ErrOutcomeExists) {
		t.Fatalf("Commit under a recorded key: %v, want ErrOutcomeExists", err)
	}
	if got := e.children("items", "project", "p1", 10); len(got) != 0 {
		t.Errorf("a failed commit left index entries %q", got)
	}
}

// testRefsManyInOneCommit writes more entries than one DynamoDB
// transaction holds, so a backend that materializes in several steps must
// still show all of them after the commit returns.
func testRefsManyInOneCommit(t *testing.T, e *partitionT) {
	e.touch()
	const n = 240
	var writes []store.RowWrite
	var refs []store.RefWrite
	want := make([]string, 0, n)
	for i := range n {
		id := fmt.Sprintf("c%04d", i)
		writes = append(writes, upsert("items", id, 1, "x"))
		refs = append(refs, ref("items", "project", "p1", id))
		want = append(want, id)
	}
	req := commitReq(0, "client-a", "c1", writes...)
	req.RefWrites = refs
	e.commit(req)
	if got := e.children("items", "project", "p1", n+1); !slices.Equal(got, want) {
		t.Fatalf("children: %d ids, want %d", len(got), n)
	}
	if got := e.children("items", "project", "p1", 101); !slices.Equal(got, want[:101]) {
		t.Errorf("children with limit 101: %d ids (first %q), want the first 101", len(got), got[:min(1, len(got))])
	}
	// A following commit removes them all, again past one transaction.
	var dels []store.RowWrite
	for i := range refs {
		refs[i].Remove = true
		dels = append(dels, del("items", refs[i].ChildID))
	}
	req = commitReq(1, "client-a", "c2", dels...)
	req.RefWrites = refs
	e.commit(req)
	if got := e.children("items", "project", "p1", n+1); len(got) != 0 {
		t.Errorf("children after removing all: %d left", len(got))
	}
}

func testRefsUnknownPartition(t *testing.T, e *partitionT) {
	if got := e.children("items", "project", "p1", 10); len(got) != 0 {
		t.Errorf("children in an unknown partition: %q", got)
	}
}

// testRefsBlobEntries: the blob reference index (§5.9.4) rides the same
// entries, keyed by a blob id ("sha256:<hex>") under a reserved
// "_sync_blob:<column>" name, so a blob-ref column and a declared
// reference column of the same name never share entries, and one blob
// referenced from two tables is listed per table.
func testRefsBlobEntries(t *testing.T, e *partitionT) {
	e.touch()
	blob := "sha256:" + fmt.Sprintf("%064x", 7)
	req := commitReq(0, "client-a", "c1", upsert("docs", "d1", 1, "x"), upsert("docs", "d2", 1, "x"), upsert("notes", "n1", 1, "x"))
	req.RefWrites = []store.RefWrite{
		ref("docs", "_sync_blob:file", blob, "d2"), ref("docs", "_sync_blob:file", blob, "d1"),
		ref("notes", "_sync_blob:file", blob, "n1"), ref("docs", "file", blob, "d9"),
	}
	e.commit(req)
	if got, want := e.children("docs", "_sync_blob:file", blob, 10), []string{"d1", "d2"}; !slices.Equal(got, want) {
		t.Errorf("docs referencing the blob: %q, want %q", got, want)
	}
	if got, want := e.children("notes", "_sync_blob:file", blob, 10), []string{"n1"}; !slices.Equal(got, want) {
		t.Errorf("notes referencing the blob: %q, want %q", got, want)
	}
	// The row changes to another blob and another row is deleted.
	other := "sha256:" + fmt.Sprintf("%064x", 8)
	req = commitReq(1, "client-a", "c2", upsert("docs", "d1", 2, "y"), del("notes", "n1"))
	req.RefWrites = []store.RefWrite{
		unref("docs", "_sync_blob:file", blob, "d1"), ref("docs", "_sync_blob:file", other, "d1"),
		unref("notes", "_sync_blob:file", blob, "n1"),
	}
	e.commit(req)
	if got, want := e.children("docs", "_sync_blob:file", blob, 10), []string{"d2"}; !slices.Equal(got, want) {
		t.Errorf("after the change: %q, want %q", got, want)
	}
	if got := e.children("notes", "_sync_blob:file", blob, 10); len(got) != 0 {
		t.Errorf("after the delete: %q, want none", got)
	}
	if got, want := e.children("docs", "file", blob, 10), []string{"d9"}; !slices.Equal(got, want) {
		t.Errorf("declared-reference entry of the same name: %q, want %q", got, want)
	}
}
