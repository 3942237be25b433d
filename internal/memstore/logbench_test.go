package memstore_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// loadLog commits n one-change commits of a push-pull load: projects
// writers each own a project and write in turn.
func loadLog(tb testing.TB, s store.Store, n, projects int) {
	tb.Helper()
	payload := make([]byte, 90)
	for i := range int64(n) {
		proj := fmt.Sprintf("p-%03d", i%int64(projects))
		id := fmt.Sprintf("%s-r%d", proj, i%20)
		sc := wire.StoredScopes{{Key: "project_id", Value: proj}}
		req := &store.CommitRequest{
			ExpectedMaxSeq: i,
			Commit: store.Commit{Seq: i + 1, CreatedAtMs: 1_700_000_000_000 + i, ActorID: "load-actor", ClientID: "pp-" + proj,
				ClientCommitID: fmt.Sprintf("0192c7a4-7f00-7000-8000-%012d", i),
				Changes:        []store.Change{{Table: "tasks", RowID: id, Op: wire.OpUpsert, RowVersion: i + 1, Scopes: sc, Row: payload}}},
			Rows:    []store.RowWrite{{Table: "tasks", Row: store.Row{RowID: id, Version: i + 1, Scopes: sc, Payload: payload}}},
			Outcome: store.Outcome{Applied: true, CommitSeq: i + 1, Result: payload[:48], RecordedAtMs: 1, ActorID: "load-actor"},
		}
		if err := s.Commit(ctx, "p", req); err != nil {
			tb.Fatal(err)
		}
	}
}

// An incremental pull at 100 writers: the last 100 commits of the log,
// one of them in the reader's project.
func BenchmarkReadLogScopedWindow100(b *testing.B) {
	s := touched(b)
	loadLog(b, s, 10_000, 100)
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		if _, err := s.ReadLogScoped(ctx, "p", "tasks", "project_id", []string{"p-007"}, 9_900, 10_000, func(*store.Commit) bool { n++; return true }); err != nil || n != 1 {
			b.Fatal(n, err)
		}
	}
}

// The same window read whole.
func BenchmarkReadLogWindow100(b *testing.B) {
	s := touched(b)
	loadLog(b, s, 10_000, 100)
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		if err := s.ReadLog(ctx, "p", 9_900, 10_000, func(*store.Commit) bool { n++; return true }); err != nil || n != 100 {
			b.Fatal(n, err)
		}
	}
}

// The heap a logged commit keeps (log entry, outcome, index), measured
// after a collection: what the runner's resident memory grows by per
// commit under push-pull load.
func BenchmarkCommitRetained(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		s := touched(b)
		b.StartTimer()
		loadLog(b, s, 20_000, 100)
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&m1)
		b.ReportMetric(float64(m1.HeapAlloc-m0.HeapAlloc)/20_000, "retained-B/commit")
		runtime.KeepAlive(s)
		b.StartTimer()
	}
}
