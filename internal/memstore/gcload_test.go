package memstore_test

import (
	"runtime"
	"runtime/metrics"
	"slices"
	"testing"
	"time"
)

// heapAfterGC returns, after a full collection, the number of live heap
// objects and the bytes of heap the collector has to scan (pointer-free
// objects are not scanned): what the next mark phase has to visit.
func heapAfterGC() (objects, scannable uint64) {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/objects:objects"}, {Name: "/gc/scan/heap:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64()
}

// gcTime is the median wall time of a few forced collections.
func gcTime() time.Duration {
	var d []time.Duration
	for range 7 {
		t := time.Now()
		runtime.GC()
		d = append(d, time.Since(t))
	}
	slices.Sort(d)
	return d[len(d)/2]
}

// A long log must not cost the collector one object (and the pointers in
// it) per commit: the log and the outcome index keep their entries in
// large pointer-free chunks, so the heap objects of a partition grow with
// its rows and scope keys, not with its commits. 200,000 commits on 2,000
// rows leave a few thousand objects at most.
func TestLogHeapObjectsDoNotGrowPerCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("loads 200,000 commits")
	}
	const commits = 200_000
	before, scanBefore := heapAfterGC()
	gcBefore := gcTime()
	s := touched(t)
	loadLog(t, s, commits, 100)
	after, scanAfter := heapAfterGC()
	gcAfter := gcTime()
	grown := int64(after) - int64(before)
	t.Logf("%d commits: live heap objects %d -> %d (+%d); scannable heap %d KiB -> %d KiB; runtime.GC %v -> %v",
		commits, before, after, grown, scanBefore>>10, scanAfter>>10, gcBefore, gcAfter)
	if grown > commits/20 {
		t.Errorf("the store holds %d heap objects for %d commits, want at most %d", grown, commits, commits/20)
	}
	runtime.KeepAlive(s)
}
