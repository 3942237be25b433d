package engine

import (
	"fmt"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// rowSet answers like a map on both sides of its slice-to-map switch:
// later writes replace earlier ones, absent keys are nil, and a copy
// (copyTo) is one later writes do not reach.
func TestRowSetIsAMap(t *testing.T) {
	for _, n := range []int{0, 1, 2, rowSetSmall, rowSetSmall + 1, 3 * rowSetSmall} {
		var s rowSet
		s.small = s.buf[:0]
		want := map[rowKey]*store.Row{}
		for i := range n {
			k := rowKey{fmt.Sprint("t", i%3), fmt.Sprint("r", i)}
			r := &store.Row{RowID: k.rowID}
			s.set(k, r)
			want[k] = r
		}
		var snapSet rowSet
		s.copyTo(&snapSet)
		snap := map[rowKey]*store.Row{}
		snapSet.each(func(k rowKey, r *store.Row) { snap[k] = r })
		if snapSet.size() != n {
			t.Fatalf("n=%d: copy has %d entries", n, snapSet.size())
		}
		for i := range n {
			k := rowKey{fmt.Sprint("t", i%3), fmt.Sprint("r", i)}
			if got, ok := s.lookup(k); !ok || got != want[k] {
				t.Fatalf("n=%d: get(%v) = %v, want %v", n, k, got, want[k])
			}
			if snap[k] != want[k] {
				t.Fatalf("n=%d: copy[%v] = %v, want %v", n, k, snap[k], want[k])
			}
			s.set(k, nil) // a replaced entry
			if s.get(k) != nil || snapSet.get(k) != want[k] {
				t.Fatalf("n=%d: replacing %v: set %v, copy %v", n, k, s.get(k), snapSet.get(k))
			}
		}
		if len(snap) != n {
			t.Fatalf("n=%d: clone has %d entries", n, len(snap))
		}
		if r, ok := s.lookup(rowKey{"t0", "absent"}); ok || r != nil || s.get(rowKey{"t0", "absent"}) != nil {
			t.Fatalf("n=%d: an absent key is not nil", n)
		}
	}
}
