package storetest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// ScanScopedRows: rows read by one scope variable's values, in (value,
// rowId) byte order, exactly the live rows a filter over ScanRows keeps
// (§3.2 read rule on one variable), whatever path a commit took.

// scoped returns "value/rowId/payload" for every row ScanScopedRows
// yields, at most limit (0: all). A limited scan tells the store it
// wants limit rows (and the lookahead row a page takes); a full scan is
// also run with a want far below what it takes, and must yield the same
// rows: want only sizes the store's reads, it never ends a scan.
func (e *partitionT) scoped(table, variable string, values []string, after *store.ScopeCursor, limit int) []string {
	e.t.Helper()
	if limit > 0 {
		return e.scopedWant(table, variable, values, after, limit, limit+1)
	}
	all := e.scopedWant(table, variable, values, after, 0, 0)
	if small := e.scopedWant(table, variable, values, after, 0, 1); !slices.Equal(small, all) {
		e.t.Errorf("ScanScopedRows with want 1 yielded %q, with want 0 %q", small, all)
	}
	return all
}

func (e *partitionT) scopedWant(table, variable string, values []string, after *store.ScopeCursor, limit, want int) []string {
	e.t.Helper()
	var out []string
	if err := e.s.ScanScopedRows(e.ctx, e.p, table, variable, values, after, want, func(v string, r *store.Row) bool {
		if r.Deleted {
			e.t.Errorf("ScanScopedRows yielded tombstone %q", r.RowID)
		}
		got := ""
		for _, sc := range r.Scopes {
			if sc.Key == variable {
				got = sc.Value
			}
		}
		if got != v {
			e.t.Errorf("row %q yielded under %s=%q but stores %q", r.RowID, variable, v, got)
		}
		out = append(out, v+"/"+r.RowID+"/"+string(r.Payload))
		return limit == 0 || len(out) < limit
	}); err != nil {
		e.t.Fatalf("ScanScopedRows: %v", err)
	}
	return out
}

// filtered is the reference answer: ScanRows filtered on the variable,
// sorted by (value, rowId).
func (e *partitionT) filtered(table, variable string, values []string) []string {
	e.t.Helper()
	var out []string
	for _, r := range e.scan(table, "", false) {
		for _, sc := range r.Scopes {
			if sc.Key == variable && slices.Contains(values, sc.Value) {
				out = append(out, sc.Value+"/"+r.RowID+"/"+string(r.Payload))
			}
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		av, ar, _ := strings.Cut(a, "/")
		bv, br, _ := strings.Cut(b, "/")
		if c := strings.Compare(av, bv); c != 0 {
			return c
		}
		return strings.Compare(ar, br)
	})
	return out
}

func testScopedOrderAndFilter(t *testing.T, e *partitionT) {
	e.touch()
	e.commitNext(
		upsert("tasks", "b", 1, "b1", "org=o1", "proj=x"),
		upsert("tasks", "a", 1, "a1", "org=o1", "proj=y"),
		upsert("tasks", "c", 1, "c1", "org=o3", "proj=x"),
		upsert("tasks", "d", 1, "d1", "org=o2", "proj=x"),
		upsert("tasks", "é", 1, "e1", "org=o1", "proj=x"),
		upsert("notes", "n", 1, "n1", "org=o1"),
		upsert("tasks", "plain", 1, "p1"), // no scopes: never yielded
	)
	want := []string{"o1/a/a1", "o1/b/b1", "o1/é/e1", "o3/c/c1"}
	// Values in any order, duplicated, or absent from every row.
	if got := e.scoped("tasks", "org", []string{"o3", "o1", "zz", "o1"}, nil, 0); !slices.Equal(got, want) {
		t.Fatalf("org in {o1,o3}: %v, want %v", got, want)
	}
	if got := e.scoped("tasks", "proj", []string{"x"}, nil, 0); !slices.Equal(got, []string{"x/b/b1", "x/c/c1", "x/d/d1", "x/é/e1"}) {
		t.Fatalf("proj = x (second variable): %v", got)
	}
	if got := e.scoped("tasks", "team", []string{"o1"}, nil, 0); len(got) != 0 {
		t.Fatalf("a variable no row stores: %v", got)
	}
	if got := e.scoped("notes", "org", []string{"o1"}, nil, 0); !slices.Equal(got, []string{"o1/n/n1"}) {
		t.Fatalf("tables separate: %v", got)
	}
	if got := e.scoped("tasks", "org", nil, nil, 0); len(got) != 0 {
		t.Fatalf("no values: %v", got)
	}
	// Resume strictly after a (value, rowId); a cursor value that is not
	// requested resumes at the next requested one.
	for _, c := range []struct {
		after store.ScopeCursor
		want  []string
	}{
		{store.ScopeCursor{Value: "o1", RowID: "a"}, want[1:]},
		{store.ScopeCursor{Value: "o1", RowID: "aa"}, want[1:]},
		{store.ScopeCursor{Value: "o1", RowID: "é"}, want[3:]},
		{store.ScopeCursor{Value: "o2", RowID: "zzz"}, want[3:]},
		{store.ScopeCursor{Value: "o3", RowID: "c"}, nil},
		{store.ScopeCursor{Value: "", RowID: ""}, want},
	} {
		if got := e.scoped("tasks", "org", []string{"o1", "o3"}, &c.after, 0); !slices.Equal(got, c.want) {
			t.Errorf("after %+v: %v, want %v", c.after, got, c.want)
		}
	}
	if got := e.scoped("tasks", "org", []string{"o1", "o3"}, nil, 2); !slices.Equal(got, want[:2]) {
		t.Errorf("stopping after two rows: %v", got)
	}
}

// testScopedFollowsWrites: updates, deletes, recreation under other
// scopes (within one commit and across commits), and a commit too large
// for one transaction, each leave the scoped read equal to the filtered
// table.
func testScopedFollowsWrites(t *testing.T, e *partitionT) {
	e.touch()
	check := func(step string) {
		t.Helper()
		for _, v := range [][]string{{"o1"}, {"o2"}, {"o3"}, {"o1", "o2", "o3"}} {
			got, want := e.scoped("tasks", "org", v, nil, 0), e.filtered("tasks", "org", v)
			if !slices.Equal(got, want) {
				t.Fatalf("%s, org in %v:\n got %v\nwant %v", step, v, got, want)
			}
		}
	}
	e.commitNext(upsert("tasks", "r1", 1, "v1", "org=o1"), upsert("tasks", "r2", 1, "v1", "org=o1"), upsert("tasks", "r3", 1, "v1", "org=o2"))
	check("insert")
	e.commitNext(upsert("tasks", "r1", 2, "v2", "org=o1"))
	check("update")
	e.commitNext(del("tasks", "r2", "org=o1"))
	check("delete")
	if got := e.scoped("tasks", "org", []string{"o1"}, nil, 0); !slices.Equal(got, []string{"o1/r1/v2"}) {
		t.Fatalf("after update and delete: %v", got)
	}
	e.commitNext(upsert("tasks", "r2", 1, "back", "org=o3"))
	check("recreate under another scope")
	e.commitNext(del("tasks", "r3", "org=o2"), upsert("tasks", "r3", 1, "moved", "org=o1"))
	check("delete and recreate elsewhere in one commit")
	e.commitNext(upsert("tasks", "r4", 1, "brief", "org=o2"), del("tasks", "r4", "org=o2"))
	check("insert and delete in one commit")
	var big []store.RowWrite
	for i := range 160 {
		big = append(big, upsert("tasks", fmt.Sprintf("m%03d", i), 1, "m", fmt.Sprintf("org=o%d", i%3+1)))
	}
	e.commitNext(big...)
	check("large commit")
	var dels []store.RowWrite
	for i := 0; i < 160; i += 2 {
		dels = append(dels, del("tasks", fmt.Sprintf("m%03d", i), fmt.Sprintf("org=o%d", i%3+1)))
	}
	dels = append(dels, del("tasks", "r1", "org=o1"), upsert("tasks", "r1", 1, "again", "org=o2"))
	e.commitNext(dels...)
	check("large delete commit")
	if n := len(e.scoped("tasks", "org", []string{"o1", "o2", "o3"}, nil, 0)); n != 83 {
		t.Fatalf("%d rows left, want 83", n)
	}
}

// logScoped returns the seqs ReadLogScoped passes and its horizon,
// checking each commit equals ReadLog's copy of it.
func (e *partitionT) logScoped(table, variable string, values []string, after, through int64, limit int) ([]int64, int64) {
	e.t.Helper()
	full := map[int64]*store.Commit{}
	for _, c := range e.log(after, through) {
		full[c.Seq] = c
	}
	var seqs []int64
	hz, err := e.s.ReadLogScoped(e.ctx, e.p, table, variable, values, after, through, func(c *store.Commit) bool {
		if w := full[c.Seq]; w != nil {
			checkCommit(e.t, c, *w)
		}
		seqs = append(seqs, c.Seq)
		return limit == 0 || len(seqs) < limit
	})
	if err != nil {
		e.t.Fatalf("ReadLogScoped: %v", err)
	}
	return seqs, hz
}

// touching is the reference: seqs of ReadLog with a change of table whose
// variable holds one of values.
func (e *partitionT) touching(table, variable string, values []string, after, through int64) []int64 {
	var out []int64
	for _, c := range e.log(after, through) {
	changes:
		for _, ch := range c.Changes {
			for _, sc := range ch.Scopes {
				if ch.Table == table && sc.Key == variable && slices.Contains(values, sc.Value) {
					out = append(out, c.Seq)
					break changes
				}
			}
		}
	}
	return out
}

// testLogScoped: the §3.1 inverted-index read passes, in order, every
// commit of the window touching the values (upserts and deletes, any
// scope variable, a commit touching many values, a chunked commit),
// possibly more, and its horizon reports pruning.
func testLogScoped(t *testing.T, e *partitionT) {
	e.touch()
	e.commitNext(upsert("tasks", "a", 1, "a", "org=o1", "proj=x"))                               // 1
	e.commitNext(upsert("tasks", "b", 1, "b", "org=o2"))                                         // 2
	e.commitNext(upsert("notes", "n", 1, "n", "org=o1"))                                         // 3: other table
	e.commitNext(del("tasks", "a", "org=o1", "proj=x"))                                          // 4
	e.commitNext(upsert("tasks", "c", 1, "c", "org=o3"), upsert("tasks", "d", 1, "d", "org=o1")) // 5
	var wide []store.RowWrite
	for i := range 40 {
		wide = append(wide, upsert("tasks", fmt.Sprintf("w%02d", i), 1, "w", fmt.Sprintf("org=v%02d", i)))
	}
	e.commitNext(wide...)                                                                                                                               // 6: many values
	e.commitNext(upsert("tasks", "big", 1, strings.Repeat("x", 300<<10), "org=o1"), upsert("tasks", "big2", 1, strings.Repeat("y", 300<<10), "org=o9")) // 7: chunked
	e.commitNext(upsert("tasks", "e", 1, "e", "org=o2"))                                                                                                // 8
	for _, c := range []struct {
		variable string
		values   []string
		after    int64
		through  int64
	}{
		{"org", []string{"o1"}, 0, 8},
		{"org", []string{"o2", "o3"}, 0, 8},
		{"org", []string{"v07"}, 0, 8},
		{"proj", []string{"x"}, 0, 8},
		{"org", []string{"o1"}, 4, 7},
		{"org", []string{"none"}, 0, 8},
	} {
		want := c.values
		got, _ := e.logScoped("tasks", c.variable, want, c.after, c.through, 0)
		ref := e.touching("tasks", c.variable, want, c.after, c.through)
		for i := 1; i < len(got); i++ {
			if got[i] <= got[i-1] {
				t.Errorf("%s in %v: seqs %v not strictly ascending", c.variable, want, got)
				break
			}
		}
		for _, s := range ref {
			if !slices.Contains(got, s) {
				t.Errorf("%s in %v, window (%d, %d]: got %v, missing %d (want at least %v)", c.variable, want, c.after, c.through, got, s, ref)
			}
		}
		for _, s := range got {
			if s <= c.after || s > c.through {
				t.Errorf("%s in %v: seq %d outside the window (%d, %d]", c.variable, want, s, c.after, c.through)
			}
		}
	}
	if got, _ := e.logScoped("tasks", "org", []string{"o1"}, 0, 8, 2); len(got) != 2 {
		t.Errorf("stopping after two commits: %v", got)
	}
	if _, err := e.s.Prune(e.ctx, e.p, 4); err != nil {
		t.Fatal(err)
	}
	got, hz := e.logScoped("tasks", "org", []string{"o1"}, 0, 8, 0)
	if hz != 4 {
		t.Errorf("horizon %d after Prune(4), want 4", hz)
	}
	for _, s := range e.touching("tasks", "org", []string{"o1"}, 4, 8) {
		if !slices.Contains(got, s) {
			t.Errorf("after pruning: %v misses %d", got, s)
		}
	}
}

// testLogScopedMany: a window listing more commits than one batch read
// of a backend passes each of them once, in order, and a caller that
// stops early gets exactly the commits it took.
func testLogScopedMany(t *testing.T, e *partitionT) {
	e.touch()
	const n = 130
	var want []int64
	for i := range n {
		scope := "org=o1"
		if i%10 == 9 {
			scope = "org=o2" // not listed
		}
		req := e.commitNext(upsert("tasks", fmt.Sprintf("r%03d", i), 1, "x", scope))
		if i%10 != 9 {
			want = append(want, req.ExpectedMaxSeq+1)
		}
	}
	got, hz := e.logScoped("tasks", "org", []string{"o1"}, 0, n, 0)
	if !slices.Equal(got, want) || hz != 0 {
		t.Errorf("all of %d listed commits: got %d seqs %v (horizon %d)", len(want), len(got), got, hz)
	}
	for _, limit := range []int{1, 20, len(want) - 1} {
		got, _ := e.logScoped("tasks", "org", []string{"o1"}, 0, n, limit)
		if !slices.Equal(got, want[:limit]) {
			t.Errorf("stopping after %d: got %v", limit, got)
		}
	}
}
