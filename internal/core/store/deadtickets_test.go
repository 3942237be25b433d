package store

import (
	"fmt"
	"testing"
)

func TestDeadTicketsSet(t *testing.T) {
	if d := NewDeadTickets(nil); d.Mask != 0 || d.Has(0) || d.List() != nil {
		t.Fatalf("empty set %+v", d)
	}
	d := NewDeadTickets([]int64{10, 11, 40, 72, 73})
	// 73 is the 64th ticket from 10: beyond the set's reach.
	if got := fmt.Sprint(d.List()); got != "[10 11 40 72]" {
		t.Fatalf("list %s, want [10 11 40 72]", got)
	}
	for tk, want := range map[int64]bool{9: false, 10: true, 12: false, 40: true, 72: true, 73: false, 200: false} {
		if d.Has(tk) != want {
			t.Errorf("Has(%d) = %v, want %v", tk, !want, want)
		}
	}
}
