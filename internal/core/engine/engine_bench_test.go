package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/validate"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// In-process benchmarks of HandleSync over memstore: request bytes are
// encoded before the timer starts, responses go to a reused buffer, so
// ns/op is engine time (decode, storage calls, encode).

func encodeReq(b testing.TB, c *enginetest.Client, commits []wire.PushCommit, pull *wire.PullHeader, subs []wire.Subscription) []byte {
	b.Helper()
	body, err := wire.Encode(c.Request(commits, pull, subs))
	if err != nil {
		b.Fatal(err)
	}
	return body
}

func handle(b testing.TB, h *enginetest.Harness, c *enginetest.Client, body []byte, out *bytes.Buffer) *engine.Report {
	out.Reset()
	rep, err := h.Engine.HandleSync(context.Background(), engine.Auth{Partition: c.Partition, ActorID: c.Actor}, body, engine.SyncOptions{}, out)
	if err != nil {
		b.Fatal(err)
	}
	if rep.ErrorCode != "" {
		b.Fatalf("in-band error %s", rep.ErrorCode)
	}
	return rep
}

// onePushFixture is a client and n one-upsert push requests over rows
// distinct rows (a row's later pushes update it).
func onePushFixture(tb testing.TB, n, rows int) (*enginetest.Harness, *enginetest.Client, [][]byte) {
	h := enginetest.New(tb, memstore.New(), memstore.NewSegments(), enginetest.Options{})
	h.Grants.Set("alice", projects("p1"))
	c := h.Client("tenant", "alice", "a")
	bodies := make([][]byte, n)
	for i := range bodies {
		id := fmt.Sprintf("t%d", i%rows)
		bodies[i] = encodeReq(tb, c, []wire.PushCommit{cmt(fmt.Sprint("c", i), up("tasks", id, c.Task(id, "p1", "benchmark row", i%2 == 0), -1))}, nil, nil)
	}
	return h, c, bodies
}

func BenchmarkPushSingleOp(b *testing.B) {
	h, c, bodies := onePushFixture(b, b.N, 1000)
	var out bytes.Buffer
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if rep := handle(b, h, c, bodies[i], &out); rep.Applied != 1 {
			b.Fatalf("commit %d not applied", i)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
}

// BenchmarkPushSingleOpValidated is BenchmarkPushSingleOp with the
// catalog's declarative rules installed (a maxLength row rule and a
// requireSiblingWhen commit rule, both passing): the cost of §6.7/§6.8
// per commit, including the idempotency read done before evaluating.
func BenchmarkPushSingleOpValidated(b *testing.B) {
	h, c, bodies := onePushFixture(b, b.N, 1000)
	hooks, err := validate.ParseRules([]byte(`{
	  "validators": [{"table": "tasks", "rule": {"kind": "maxLength", "column": "title", "max": 200, "code": "app.long"}}],
	  "commitValidators": [{"kind": "requireSiblingWhen", "table": "tasks", "column": "priority", "equals": 99,
	    "siblingRowIdSuffix": "-audit", "code": "app.audit"}]}`), engine.TableColumns(h.Schema))
	if err != nil {
		b.Fatal(err)
	}
	if err := h.Engine.SetValidators(hooks); err != nil {
		b.Fatal(err)
	}
	var out bytes.Buffer
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if rep := handle(b, h, c, bodies[i], &out); rep.Applied != 1 {
			b.Fatalf("commit %d not applied", i)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
}

// BenchmarkPushSparsePatchV3 is a wire-3 client's one-column patch of an
// existing row: sparse decode, column-granular conflict check against the
// stored column versions, merge into the stored full row, re-encode.
func BenchmarkPushSparsePatchV3(b *testing.B) {
	h := enginetest.New(b, memstore.New(), memstore.NewSegments(), enginetest.Options{})
	h.Grants.Set("alice", projects("p1"))
	c := h.ClientV3("tenant", "alice", "a")
	const rows = 1000
	for i := 0; i < rows; i++ {
		id := fmt.Sprintf("t%d", i)
		if r := c.Push(fmt.Sprint("seed", i), up("tasks", id, c.Task(id, "p1", "seed row", false), 0)); r.Status != wire.PushApplied {
			b.Fatalf("seed: %+v", r)
		}
	}
	bodies := make([][]byte, b.N)
	for i := range bodies {
		id := fmt.Sprintf("t%d", i%rows)
		patch := c.Patch("tasks", enginetest.Cols{"id": enginetest.S(id), "title": enginetest.S(fmt.Sprint("patched ", i))})
		bodies[i] = encodeReq(b, c, []wire.PushCommit{cmt(fmt.Sprint("p", i), up("tasks", id, patch, -1))}, nil, nil)
	}
	var out bytes.Buffer
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if rep := handle(b, h, c, bodies[i], &out); rep.Applied != 1 {
			b.Fatalf("patch %d not applied", i)
		}
	}
}

// quietPullFixture is a client whose pull request is at the head of a
// one-commit partition, already served once (client record and caches
// warm).
func quietPullFixture(tb testing.TB) (*enginetest.Harness, *enginetest.Client, []byte) {
	h := enginetest.New(tb, memstore.New(), memstore.NewSegments(), enginetest.Options{})
	grantAll(h, projects("p1"), "alice", "bob")
	a := h.Client("tenant", "alice", "a")
	wantApplied(tb, a.Push("seed", up("tasks", "t1", a.Task("t1", "p1", "x", false), 0)))
	c := h.Client("tenant", "bob", "b")
	body := encodeReq(tb, c, nil, &wire.PullHeader{Accept: acceptRows}, []wire.Subscription{sub("s", "tasks", "p1", 1)})
	var out bytes.Buffer
	handle(tb, h, c, body, &out)
	return h, c, body
}

func BenchmarkPullQuiet(b *testing.B) {
	h, c, body := quietPullFixture(b)
	var out bytes.Buffer
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if rep := handle(b, h, c, body, &out); rep.CommitsSent != 0 {
			b.Fatal("quiet pull sent commits")
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "µs/pull")
}

func BenchmarkPullIncremental1000(b *testing.B) {
	h := enginetest.New(b, memstore.New(), memstore.NewSegments(), enginetest.Options{})
	grantAll(h, projects("p1"), "alice", "bob")
	a := h.Client("tenant", "alice", "a")
	var commits []wire.PushCommit
	for i := 0; i < 1000; i++ {
		id := fmt.Sprintf("t%04d", i)
		commits = append(commits, cmt(id, up("tasks", id, a.Task(id, "p1", "an incremental change", false), 0)))
		if len(commits) == 250 {
			mustPushAll(b, a, commits...)
			commits = nil
		}
	}
	c := h.Client("tenant", "bob", "b")
	body := encodeReq(b, c, nil, &wire.PullHeader{Accept: acceptRows}, []wire.Subscription{sub("s", "tasks", "p1", 0)})
	var out bytes.Buffer
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if rep := handle(b, h, c, body, &out); rep.CommitsSent != 1000 {
			b.Fatalf("%d commits sent", rep.CommitsSent)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(1000*b.N)/b.Elapsed().Seconds(), "changes/s")
	b.ReportMetric(float64(out.Len()), "resp-bytes")
}

// bootstrapFixture is a 100k-row partition shared by benchmark runs (the
// benchmark function is called several times while b.N ramps up).
var bootstrapFixture struct {
	once sync.Once
	st   *memstore.Store
	seq  atomic.Int64
}

const bootstrapRows = 100_000

func BenchmarkBootstrap100k(b *testing.B) {
	f := &bootstrapFixture
	f.once.Do(func() {
		f.st = memstore.New()
		h := enginetest.New(b, f.st, memstore.NewSegments(), enginetest.Options{})
		h.Grants.Set("alice", projects("p1"))
		a := h.Client("tenant", "alice", "seed")
		var ops []wire.Operation
		for i := 0; i < bootstrapRows; i++ {
			id := fmt.Sprintf("row-%06d", i)
			ops = append(ops, up("tasks", id, taskWith(b, a, id, "p1", "bootstrap benchmark row", i%3 == 0, int64(i)), 0))
			if len(ops) == 500 {
				wantApplied(b, a.Push(fmt.Sprint("seed", i), ops...))
				ops = nil
			}
		}
	})
	// A fresh segment store per run, so every iteration builds its pages
	// (a moved pin also defeats reuse within the run).
	h := enginetest.New(b, f.st, memstore.NewSegments(), enginetest.Options{})
	grantAll(h, projects("p1", "px"), "alice", "bob")
	a := h.Client("tenant", "alice", "mover")
	c := h.Client("tenant", "bob", "b")
	// The client asks for pages of 50,000 rows; a page reads at most
	// DefaultMaxRowsScanned stored rows (the work budget), so the
	// server's pages are the smaller of the two.
	const askedRows = 50000
	pageRows := min(askedRows, engine.DefaultMaxRowsScanned)
	wantPages := (bootstrapRows + pageRows - 1) / pageRows
	body := encodeReq(b, c, nil, &wire.PullHeader{Accept: acceptExternal, LimitSnapshotRows: askedRows, MaxSnapshotPages: 50}, []wire.Subscription{sub("s", "tasks", "p1", -1)})
	var out bytes.Buffer
	var peak int64
	var engineTime time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		// Move the pin with a commit outside the subscription's scope.
		n := f.seq.Add(1)
		wantApplied(b, a.Push(fmt.Sprint("move", n), up("tasks", "other", a.Task("other", "px", fmt.Sprint(n), false), -1)))
		runtime.GC()
		base := heapObjects()
		stop := sampleHeap(&peak, base)
		b.StartTimer()
		start := time.Now()
		rep := handle(b, h, c, body, &out)
		engineTime += time.Since(start)
		b.StopTimer()
		stop()
		if rep.SegmentsSent != wantPages {
			b.Fatalf("%d segments sent, want %d pages of at most %d rows", rep.SegmentsSent, wantPages, pageRows)
		}
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(bootstrapRows*b.N)/engineTime.Seconds(), "rows/s")
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-growth-MB")
}

// heapObjects reads live+unswept heap object bytes (runtime/metrics, no
// stop-the-world).
func heapObjects() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// sampleHeap polls heap object bytes every 100 µs until stopped and keeps
// the largest growth over base in *peak. It approximates peak heap growth
// of the measured call: the heap-objects class counts allocated objects
// not yet swept, so it includes garbage the GC has not reclaimed yet.
func sampleHeap(peak *int64, base int64) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(100 * time.Microsecond)
		defer t.Stop()
		for {
			if g := heapObjects() - base; g > *peak {
				*peak = g
			}
			select {
			case <-done:
				if g := heapObjects() - base; g > *peak {
					*peak = g
				}
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); <-finished }
}
