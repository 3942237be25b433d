package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// The per-instance memory of queue turns is bounded: past queueMemoSize
// partitions the one whose turn this instance saw move longest ago goes.
// A turn counts as active for queueActiveWindow, and an older head never
// replaces a newer turn.
func TestQueueMemoBoundedAndMonotonic(t *testing.T) {
	var m queueMemo
	now := time.Now()
	at := func(i int) int64 { return now.Add(-time.Duration(queueMemoSize+1-i) * time.Microsecond).UnixMicro() }
	for i := range queueMemoSize + 1 {
		m.note(fmt.Sprintf("p%d", i), store.Head{Turn: 1, TurnAtUs: at(i), TurnGapUs: 100})
	}
	if len(m.m) != queueMemoSize {
		t.Fatalf("memory holds %d partitions, want %d", len(m.m), queueMemoSize)
	}
	if _, ok := m.active("p0", now); ok {
		t.Fatal("the partition seen longest ago was kept")
	}
	if got, ok := m.active(fmt.Sprint("p", queueMemoSize), now); !ok || got.turn != 1 {
		t.Fatalf("newest partition: %+v %v", got, ok)
	}
	// An older head (lower turn) does not replace the newer turn.
	m.note("p5", store.Head{Turn: 7, TurnAtUs: now.UnixMicro()})
	m.note("p5", store.Head{Turn: 6, TurnAtUs: now.UnixMicro() + 1})
	if got, _ := m.active("p5", now); got.turn != 7 {
		t.Fatalf("turn %d after an older head, want 7", got.turn)
	}
	// Outside the active window: not active; a head that never queued
	// (no turn time) is not remembered.
	if _, ok := m.active("p5", now.Add(queueActiveWindow)); ok {
		t.Fatal("a turn seen a whole active window ago still counts as active")
	}
	m.note("lone", store.Head{MaxCommitSeq: 9})
	if _, ok := m.active("lone", now); ok {
		t.Fatal("a partition whose queue never moved counts as active")
	}
}

// A queue in use only by this instance (two of its own turns in a row)
// is not a reason to line up; another writer's turn in between, or after,
// makes it one again.
func TestQueueMemoAlone(t *testing.T) {
	var m queueMemo
	now := time.Now()
	us := now.UnixMicro()
	m.note("p", store.Head{Turn: 4, TurnAtUs: us, TurnGapUs: 100}) // another writer's turn
	m.noteOwn("p", 5, us+1, 100)
	if _, ok := m.active("p", now); !ok || m.aloneAt("p", 5) {
		t.Fatal("an own turn right after another writer's: the queue is in use")
	}
	m.noteOwn("p", 6, us+2, 100)
	if _, ok := m.active("p", now); ok || !m.aloneAt("p", 6) {
		t.Fatal("two own turns in a row: the queue is this instance's alone")
	}
	if m.aloneAt("p", 7) {
		t.Fatal("alone names only the turn it was recorded for")
	}
	m.note("p", store.Head{Turn: 7, TurnAtUs: us + 3, TurnGapUs: 100}) // someone else lined up
	if _, ok := m.active("p", now); !ok || m.aloneAt("p", 7) {
		t.Fatal("another writer's turn after them: the queue is in use again")
	}
	m.noteOwn("p", 9, us+4, 100) // turn 8 was someone else's
	if _, ok := m.active("p", now); !ok {
		t.Fatal("an own turn after a gap is not alone")
	}
}
