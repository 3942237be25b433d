package storetest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// Column versions and delete tombstones (§2.2 and §4.6 of the wire-3
// spec): the store keeps what the engine writes, per column, and leaves a
// tombstone for every delete until pruning passes it.

// withCV returns w carrying column versions cv.
func withCV(w store.RowWrite, cv ...int64) store.RowWrite {
	w.Row.ColumnVersions = cv
	return w
}

func testColumnVersions(t *testing.T, e *partitionT) {
	e.touch()
	c1 := e.commitNext(
		withCV(upsert("tasks", "a", 1, "a1", "org=o1"), 1, 1, 1, 1),
		upsert("tasks", "legacy", 1, "l1"), // nil: every column at Version
		withCV(upsert("tasks", "wide", 1, "w1"), make([]int64, 0, 4)...),
	)
	// A sparse update restamps some columns only; versions far apart and
	// large ones must survive any compact encoding.
	c2 := e.commitNext(
		withCV(upsert("tasks", "a", 2, "a2", "org=o1"), 1, 2, 1, 2),
		withCV(upsert("tasks", "big", 1<<40, "b", "org=o1"), 1, 1<<40, 7, 1<<40-1, 1<<40, 1<<40),
	)
	want := map[string]store.Row{
		"a":      c2.Rows[0].Row,
		"legacy": c1.Rows[1].Row,
		"wide":   c1.Rows[2].Row,
		"big":    c2.Rows[1].Row,
	}
	got := e.rows("tasks", "a", "legacy", "wide", "big")
	for id, w := range want {
		checkRow(t, got[id], w)
	}
	if r := got["legacy"]; r != nil && r.ColumnVersions != nil {
		t.Errorf("row stored without column versions reads back %v, want nil", r.ColumnVersions)
	}
	if r := got["wide"]; r != nil && (r.ColumnVersions == nil || len(r.ColumnVersions) != 0) {
		t.Errorf("row stored with zero column versions reads back %#v, want empty non-nil", r.ColumnVersions)
	}
	scanned := e.scan("tasks", "", false)
	if ids := rowIDs(scanned); !slices.Equal(ids, []string{"a", "big", "legacy", "wide"}) {
		t.Fatalf("ScanRows ids %v", ids)
	}
	for _, r := range scanned {
		checkRow(t, r, want[r.RowID])
	}
	// An update without column versions clears them (the engine always
	// writes the row's full state).
	c3 := e.commitNext(upsert("tasks", "a", 3, "a3", "org=o1"))
	checkRow(t, e.rows("tasks", "a")["a"], c3.Rows[0].Row)
}

func testColumnVersionsMany(t *testing.T, e *partitionT) {
	e.touch()
	// Enough writes to take a backend's large-commit path.
	var ws []store.RowWrite
	for i := range 250 {
		cv := []int64{1, int64(i%5 + 1), 1, int64(i)}
		if i%7 == 0 {
			cv = nil
		}
		ws = append(ws, withCV(upsert("tasks", fmt.Sprintf("r%03d", i), int64(i+1), fmt.Sprintf("p%d", i), "org=o1"), cv...))
	}
	req := e.commitNext(ws...)
	ids := make([]string, len(ws))
	for i := range ws {
		ids[i] = ws[i].Row.RowID
	}
	got := e.rows("tasks", ids...)
	for _, w := range req.Rows {
		checkRow(t, got[w.Row.RowID], w.Row)
	}
	for _, r := range e.scan("tasks", "", false) {
		checkRow(t, r, req.Rows[slices.Index(ids, r.RowID)].Row)
	}
}

func testColumnVersionsNoAliasing(t *testing.T, e *partitionT) {
	e.touch()
	cv := []int64{1, 2, 3}
	w := withCV(upsert("tasks", "r", 3, "p"), cv...)
	e.commitNext(w)
	cv[0], cv[1], cv[2] = 9, 9, 9
	want := []int64{1, 2, 3}
	r := e.rows("tasks", "r")["r"]
	if r == nil || !slices.Equal(r.ColumnVersions, want) {
		t.Fatalf("after mutating the input: %+v, want column versions %v", r, want)
	}
	r.ColumnVersions[0] = 9
	s := e.scan("tasks", "", false)
	if len(s) != 1 || !slices.Equal(s[0].ColumnVersions, want) {
		t.Fatalf("after mutating a GetRows result: scan %+v", s)
	}
	s[0].ColumnVersions[1] = 9
	if r := e.rows("tasks", "r")["r"]; r == nil || !slices.Equal(r.ColumnVersions, want) {
		t.Errorf("after mutating a ScanRows result: %+v", r)
	}
}

func testTombstoneGetRowsOnly(t *testing.T, e *partitionT) {
	e.touch()
	e.commitNext(
		withCV(upsert("tasks", "a", 1, "a1", "org=o1"), 1, 1),
		withCV(upsert("tasks", "b", 1, "b1", "org=o1"), 1, 1),
		upsert("tasks", "c", 1, "c1", "org=o1"),
	)
	e.commitNext(del("tasks", "b", "org=o1"))
	// A delete of a row the store never held still leaves a tombstone:
	// whether to issue the write is the engine's decision.
	e.commitNext(del("tasks", "never"))
	got := e.rows("tasks", "a", "b", "c", "never", "absent")
	if len(got) != 4 {
		t.Errorf("GetRows returned %d entries, want 4 (a, c and two tombstones)", len(got))
	}
	checkTombstone(t, got["b"], "b", 2, "org=o1")
	checkTombstone(t, got["never"], "never", 3)
	if r := got["a"]; r == nil || r.Deleted {
		t.Errorf("live row a: %+v", r)
	}
	if ids := rowIDs(e.scan("tasks", "", false)); !slices.Equal(ids, []string{"a", "c"}) {
		t.Errorf("ScanRows ids %v, want [a c]", ids)
	}
	// Resuming at or around a tombstone never yields it either.
	if ids := rowIDs(e.scan("tasks", "a", true)); !slices.Equal(ids, []string{"c"}) {
		t.Errorf("ScanRows after a: %v, want [c]", ids)
	}
	if ids := rowIDs(e.scan("tasks", "b", true)); !slices.Equal(ids, []string{"c"}) {
		t.Errorf("ScanRows after b: %v, want [c]", ids)
	}
	var seen []string
	if err := e.s.ScanRows(e.ctx, e.p, "tasks", "", false, func(r *store.Row) bool {
		seen = append(seen, r.RowID)
		return len(seen) < 2
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(seen, []string{"a", "c"}) {
		t.Errorf("ScanRows stopping after two rows saw %v, want [a c]", seen)
	}
	// The log keeps the delete as a change.
	log := e.log(1, 2)
	if len(log) != 1 || len(log[0].Changes) != 1 || log[0].Changes[0].RowID != "b" {
		t.Errorf("ReadLog of the delete commit: %+v", log)
	}
}

func testTombstoneUpsertReplaces(t *testing.T, e *partitionT) {
	e.touch()
	e.commitNext(upsert("tasks", "r", 1, "r1", "org=o1"))
	e.commitNext(del("tasks", "r", "org=o1"))
	checkTombstone(t, e.rows("tasks", "r")["r"], "r", 2, "org=o1")
	c := e.commitNext(withCV(upsert("tasks", "r", 1, "again", "org=o2"), 1, 1, 1))
	got := e.rows("tasks", "r")["r"]
	checkRow(t, got, c.Rows[0].Row)
	if ids := rowIDs(e.scan("tasks", "", false)); !slices.Equal(ids, []string{"r"}) {
		t.Errorf("ScanRows ids %v after re-insert, want [r]", ids)
	}
	// A scope migration (delete then upsert in one commit) ends live.
	c = e.commitNext(del("tasks", "r", "org=o2"), upsert("tasks", "r", 2, "moved", "org=o3"))
	checkRow(t, e.rows("tasks", "r")["r"], c.Rows[1].Row)
}

func testTombstoneDeleteAgain(t *testing.T, e *partitionT) {
	e.touch()
	e.commitNext(upsert("tasks", "r", 1, "r1"))
	e.commitNext(del("tasks", "r"))
	e.commitNext(del("tasks", "r"))
	checkTombstone(t, e.rows("tasks", "r")["r"], "r", 3)
}

func testTombstonesMany(t *testing.T, e *partitionT) {
	e.touch()
	var ins, dels []store.RowWrite
	var ids []string
	for i := range 250 {
		id := fmt.Sprintf("r%03d", i)
		ids = append(ids, id)
		ins = append(ins, upsert("tasks", id, 1, "p"+id, "org=o1"))
		if i%2 == 0 {
			dels = append(dels, del("tasks", id, "org=o1"))
		}
	}
	e.commitNext(ins...)
	e.commitNext(dels...)
	got := e.rows("tasks", ids...)
	var live []string
	for i, id := range ids {
		if i%2 == 0 {
			checkTombstone(t, got[id], id, 2, "org=o1")
			continue
		}
		live = append(live, id)
		if r := got[id]; r == nil || r.Deleted {
			t.Errorf("row %s: %+v, want live", id, r)
		}
	}
	if s := rowIDs(e.scan("tasks", "", false)); !slices.Equal(s, live) {
		t.Errorf("ScanRows returned %d ids, want the %d live ones", len(s), len(live))
	}
}

func testPruneTombstones(t *testing.T, e *partitionT) {
	e.touch()
	e.commitNext( // 1
		upsert("tasks", "gone", 1, "g"),
		upsert("tasks", "back", 1, "b"),
		upsert("tasks", "twice", 1, "t"),
		upsert("tasks", "late", 1, "l"),
		upsert("tasks", "moved", 1, "m", "org=o1"),
	)
	e.commitNext(del("tasks", "gone"), del("tasks", "back"), del("tasks", "twice")) // 2
	back := e.commitNext(upsert("tasks", "back", 1, "b-again"))                     // 3
	e.commitNext(del("tasks", "twice"))                                             // 4
	e.commitNext(del("tasks", "late"))                                              // 5
	moved := e.commitNext(del("tasks", "moved", "org=o1"), upsert("tasks", "moved", 2, "m2", "org=o2"))
	e.commitNext(upsert("tasks", "brief", 1, "x"), del("tasks", "brief")) // 7

	prune := func(h int64) {
		t.Helper()
		if _, err := e.s.Prune(e.ctx, e.p, h); err != nil {
			t.Fatalf("Prune(%d): %v", h, err)
		}
	}
	all := []string{"gone", "back", "twice", "late", "moved", "brief"}
	prune(3)
	got := e.rows("tasks", all...)
	if _, ok := got["gone"]; ok {
		t.Errorf("tombstone of commit 2 survived Prune(3): %+v", got["gone"])
	}
	checkRow(t, got["back"], back.Rows[0].Row)
	checkTombstone(t, got["twice"], "twice", 4)
	checkTombstone(t, got["late"], "late", 5)
	checkRow(t, got["moved"], moved.Rows[1].Row)
	checkTombstone(t, got["brief"], "brief", 7)

	prune(3) // idempotent
	if g := e.rows("tasks", all...); len(g) != 5 {
		t.Errorf("second Prune(3) changed the rows: %d left, want 5", len(g))
	}
	prune(5) // exactly at the horizon goes
	got = e.rows("tasks", all...)
	for _, id := range []string{"twice", "late"} {
		if _, ok := got[id]; ok {
			t.Errorf("tombstone %s at or below the horizon 5 survived", id)
		}
	}
	checkTombstone(t, got["brief"], "brief", 7)
	prune(7)
	got = e.rows("tasks", all...)
	if ids := keys(got); !slices.Equal(ids, []string{"back", "moved"}) {
		t.Errorf("after Prune(7) rows %v, want [back moved]", ids)
	}
	if ids := rowIDs(e.scan("tasks", "", false)); !slices.Equal(ids, []string{"back", "moved"}) {
		t.Errorf("ScanRows after pruning: %v", ids)
	}
	// A row deleted after the horizon keeps its tombstone through a
	// later no-op prune.
	e.commitNext(del("tasks", "back")) // 8
	prune(7)
	checkTombstone(t, e.rows("tasks", "back")["back"], "back", 8)
}

func testPruneTombstonesLarge(t *testing.T, e *partitionT) {
	e.touch()
	var ins, dels []store.RowWrite
	var ids []string
	for i := range 220 {
		id := fmt.Sprintf("r%03d", i)
		ids = append(ids, id)
		ins = append(ins, upsert("tasks", id, 1, "p"+id, "org=o1"))
		dels = append(dels, del("tasks", id, "org=o1"))
	}
	e.commitNext(ins...)
	e.commitNext(dels[:150]...)
	e.commitNext(dels[150:]...)
	if n, err := e.s.Prune(e.ctx, e.p, 2); err != nil || n != 2 {
		t.Fatalf("Prune(2) = %d, %v; want 2 commits", n, err)
	}
	got := e.rows("tasks", ids...)
	if len(got) != 70 {
		t.Errorf("after Prune(2) %d entries left, want the 70 tombstones of commit 3", len(got))
	}
	for _, id := range ids[150:] {
		checkTombstone(t, got[id], id, 3, "org=o1")
	}
	if _, err := e.s.Prune(e.ctx, e.p, 3); err != nil {
		t.Fatal(err)
	}
	if got := e.rows("tasks", ids...); len(got) != 0 {
		t.Errorf("after Prune(3) %d entries left, want none", len(got))
	}
}

func keys(m map[string]*store.Row) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// testTombstoneKeepsScopes: a tombstone keeps the deleted row's stored
// scopes (every variable, canonical order), through a commit whose rows
// derive from its changes, one whose rows are explicit (they differ from
// the changes), and the large-commit path, so the engine can authorize a
// later upsert against them (§3.4) before it answers sync.row_deleted.
func testTombstoneKeepsScopes(t *testing.T, e *partitionT) {
	e.touch()
	var ins, dels []store.RowWrite
	for i := range 150 {
		id := fmt.Sprintf("m%03d", i)
		ins = append(ins, upsert("tasks", id, 1, "p", "org=o1", "proj=p"+id))
		dels = append(dels, del("tasks", id, "org=o1", "proj=p"+id))
	}
	e.commitNext(append(ins, upsert("tasks", "a", 1, "a1", "org=o1", "proj=x"), upsert("tasks", "b", 1, "b1", "org=o2"))...)
	e.commitNext(del("tasks", "a", "org=o1", "proj=x"))
	checkTombstone(t, e.rows("tasks", "a")["a"], "a", 2, "org=o1", "proj=x")

	// Explicit rows: the change of b logs an upsert-then-delete pair the
	// rows collapse into one tombstone.
	req := commitReq(2, "c1", "explicit", upsert("tasks", "b", 2, "b2", "org=o2"), del("tasks", "b", "org=o2"))
	req.Rows = req.Rows[1:]
	e.commit(req)
	checkTombstone(t, e.rows("tasks", "b")["b"], "b", 3, "org=o2")

	e.commitNext(dels...) // large commit: materialized after the log
	got := e.rows("tasks", func() []string {
		var ids []string
		for _, w := range dels {
			ids = append(ids, w.Row.RowID)
		}
		return ids
	}()...)
	for _, w := range dels {
		checkTombstone(t, got[w.Row.RowID], w.Row.RowID, 4, "org=o1", "proj=p"+w.Row.RowID)
	}
}
