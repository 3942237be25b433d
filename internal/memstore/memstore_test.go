package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/storetest"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

func TestStoreContract(t *testing.T) {
	storetest.RunStore(t, func(*testing.T) store.Store { return memstore.New() })
}

// TestStoreContractShared runs the suite against one instance, as a shared
// backend would, which checks that subtests really keep to their own
// partitions.
func TestStoreContractShared(t *testing.T) {
	s := memstore.New()
	storetest.RunStore(t, func(*testing.T) store.Store { return s })
}

func TestSegmentStoreContract(t *testing.T) {
	storetest.RunSegmentStore(t, func(*testing.T) store.SegmentStore { return memstore.NewSegments() })
}

func TestSegmentStoreContractShared(t *testing.T) {
	s := memstore.NewSegments()
	storetest.RunSegmentStore(t, func(*testing.T) store.SegmentStore { return s })
}

var ctx = context.Background()

const t0 int64 = 1_700_000_000_000

func touched(t testing.TB, opts ...memstore.Option) *memstore.Store {
	t.Helper()
	s := memstore.New(opts...)
	if _, err := s.TouchPartition(ctx, "p", t0, "e1"); err != nil {
		t.Fatal(err)
	}
	return s
}

func commitReq(expected int64, id string, writes ...store.RowWrite) *store.CommitRequest {
	return &store.CommitRequest{
		ExpectedMaxSeq: expected,
		Commit:         store.Commit{Seq: expected + 1, ClientID: "c", ClientCommitID: id},
		Rows:           writes,
		Outcome:        store.Outcome{Applied: true, CommitSeq: expected + 1},
	}
}

func TestRefreshIntervalBoundary(t *testing.T) {
	s := touched(t, memstore.WithRefreshInterval(10*time.Second))
	for _, c := range []struct{ now, want int64 }{
		{t0 + 10_000, t0},          // exactly the interval old: not older than it
		{t0 + 10_001, t0 + 10_001}, // older: rewritten
		{t0 + 5_000, t0 + 10_001},  // a clock behind never moves it back
	} {
		h, err := s.TouchPartition(ctx, "p", c.now, "ignored")
		if err != nil || h.LastSeenAtMs != c.want {
			t.Errorf("touch at +%d: LastSeenAtMs +%d (%v), want +%d", c.now-t0, h.LastSeenAtMs-t0, err, c.want-t0)
		}
	}
}

func TestTouchNeedsEpochToCreate(t *testing.T) {
	if _, err := memstore.New().TouchPartition(ctx, "p", t0, ""); err == nil {
		t.Error("created a partition with an empty epoch")
	}
}

func TestPruneClampsToHead(t *testing.T) {
	s := touched(t)
	for i := range int64(3) {
		if err := s.Commit(ctx, "p", commitReq(i, fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.Prune(ctx, "p", 100)
	if err != nil || n != 3 {
		t.Fatalf("Prune(100) = %d, %v; want 3", n, err)
	}
	if h, _, _ := s.Head(ctx, "p"); h.HorizonSeq != 3 {
		t.Errorf("HorizonSeq %d, want clamped to MaxCommitSeq 3", h.HorizonSeq)
	}
}

func TestCommitSeqMustFollowHead(t *testing.T) {
	s := touched(t)
	req := commitReq(0, "x")
	req.Commit.Seq = 5
	if err := s.Commit(ctx, "p", req); err == nil || errors.Is(err, store.ErrHeadMoved) {
		t.Fatalf("Commit with Seq != ExpectedMaxSeq+1: %v, want a non-protocol error", err)
	}
	if o, _ := s.GetOutcome(ctx, "p", "c", "x", 0); o != nil {
		t.Error("rejected request recorded an outcome")
	}
}

func TestWritesToUnknownPartition(t *testing.T) {
	s := memstore.New()
	errs := map[string]error{
		"Commit":       s.Commit(ctx, "nope", commitReq(0, "x")),
		"PutRejection": s.PutRejection(ctx, "nope", "c", "x", store.Outcome{}, store.WriterCheck{}),
		"PutClient":    s.PutClient(ctx, "nope", &store.Client{ClientID: "c"}),
		"RotateEpoch":  s.RotateEpoch(ctx, "nope", "e2", t0),
	}
	for name, err := range errs {
		if !errors.Is(err, memstore.ErrUnknownPartition) || !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s on an unknown partition: %v", name, err)
		}
	}
	if _, ok, _ := s.Head(ctx, "nope"); ok {
		t.Error("a failed write created the partition")
	}
}

func TestCanceledContext(t *testing.T) {
	s := touched(t)
	c, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Commit(c, "p", commitReq(0, "x")); !errors.Is(err, context.Canceled) {
		t.Errorf("Commit: %v", err)
	}
	if h, _, _ := s.Head(ctx, "p"); h.MaxCommitSeq != 0 {
		t.Error("canceled Commit wrote")
	}
	if err := s.ScanRows(c, "p", "t", "", false, func(*store.Row) bool { return true }); !errors.Is(err, context.Canceled) {
		t.Errorf("ScanRows: %v", err)
	}
}

// TestCallbacksMayReenter guards the unlocked-callback design: fn calling
// back into the store (even a write) must not deadlock.
func TestCallbacksMayReenter(t *testing.T) {
	s := touched(t)
	var ws []store.RowWrite
	for i := range 600 {
		ws = append(ws, store.RowWrite{Table: "t", Row: store.Row{RowID: fmt.Sprintf("r%03d", i), Version: 1}})
	}
	if err := s.Commit(ctx, "p", commitReq(0, "x", ws...)); err != nil {
		t.Fatal(err)
	}
	n := 0
	err := s.ScanRows(ctx, "p", "t", "", false, func(r *store.Row) bool {
		n++
		h, _, _ := s.Head(ctx, "p")
		return s.Commit(ctx, "p", commitReq(h.MaxCommitSeq, r.RowID)) == nil
	})
	if err != nil || n != 600 {
		t.Fatalf("scan with re-entrant commits: %d rows, %v", n, err)
	}
	seen := 0
	if err := s.ReadLog(ctx, "p", 0, 1000, func(c *store.Commit) bool {
		seen++
		_, err := s.Prune(ctx, "p", c.Seq-1)
		return err == nil
	}); err != nil || seen != 601 {
		t.Fatalf("ReadLog with re-entrant prune: %d commits, %v", seen, err)
	}
}

// TestRowIndexRandomized drives one table through random inserts, updates
// and deletes (enough to split and merge index blocks) and checks scans
// and seeks against a sorted reference.
func TestRowIndexRandomized(t *testing.T) {
	s := touched(t)
	rng := rand.New(rand.NewPCG(1, 2))
	ref := map[string]int64{}
	seq := int64(0)
	for round := range 60 {
		var ws []store.RowWrite
		for range 200 {
			id := fmt.Sprintf("%x", rng.IntN(3000))
			// Delete-heavy in later rounds so blocks shrink and merge.
			if rng.IntN(60) < round {
				ws = append(ws, store.RowWrite{Table: "t", Delete: true, Row: store.Row{RowID: id}})
				delete(ref, id)
			} else {
				ws = append(ws, store.RowWrite{Table: "t", Row: store.Row{RowID: id, Version: seq + 1}})
				ref[id] = seq + 1
			}
		}
		if err := s.Commit(ctx, "p", commitReq(seq, fmt.Sprint(seq), ws...)); err != nil {
			t.Fatal(err)
		}
		seq++
		want := make([]string, 0, len(ref))
		for id := range ref {
			want = append(want, id)
		}
		slices.Sort(want)
		after := fmt.Sprintf("%x", rng.IntN(3000))
		var got []string
		if err := s.ScanRows(ctx, "p", "t", after, true, func(r *store.Row) bool {
			if r.Version != ref[r.RowID] {
				t.Fatalf("row %s version %d, want %d", r.RowID, r.Version, ref[r.RowID])
			}
			got = append(got, r.RowID)
			return true
		}); err != nil {
			t.Fatal(err)
		}
		i, _ := slices.BinarySearch(want, after)
		if i < len(want) && want[i] == after {
			i++
		}
		if !slices.Equal(got, want[i:]) {
			t.Fatalf("round %d: scan after %q returned %d ids, want %d", round, after, len(got), len(want)-i)
		}
	}
}

// TestScan100kRows checks order and a deep seek at bootstrap scale, with
// rows inserted in random order so the index splits blocks everywhere.
func TestScan100kRows(t *testing.T) {
	if testing.Short() {
		t.Skip("large")
	}
	s := touched(t)
	const n = 100_000
	perm := rand.New(rand.NewPCG(3, 4)).Perm(n)
	seq := int64(0)
	for start := 0; start < n; start += 1000 {
		ws := make([]store.RowWrite, 0, 1000)
		for _, k := range perm[start : start+1000] {
			ws = append(ws, store.RowWrite{Table: "t", Row: store.Row{RowID: fmt.Sprintf("%06d", k), Version: 1}})
		}
		if err := s.Commit(ctx, "p", commitReq(seq, fmt.Sprint(seq), ws...)); err != nil {
			t.Fatal(err)
		}
		seq++
	}
	count, prev := 0, ""
	if err := s.ScanRows(ctx, "p", "t", "", false, func(r *store.Row) bool {
		if count > 0 && r.RowID <= prev {
			t.Fatalf("order broken at %q after %q", r.RowID, prev)
		}
		prev = r.RowID
		count++
		return true
	}); err != nil || count != n {
		t.Fatalf("scanned %d rows, %v", count, err)
	}
	var got []string
	_ = s.ScanRows(ctx, "p", "t", "099997", true, func(r *store.Row) bool { got = append(got, r.RowID); return true })
	if !slices.Equal(got, []string{"099998", "099999"}) {
		t.Errorf("seek near the end: %v", got)
	}
}

func TestQuietTouchDoesNotAllocate(t *testing.T) {
	s := touched(t)
	allocs := testing.AllocsPerRun(1000, func() {
		_, _ = s.TouchPartition(ctx, "p", t0+1, "ignored")
	})
	if allocs != 0 {
		t.Errorf("quiet TouchPartition allocates %.1f times", allocs)
	}
}

func TestSegmentsFindPrefersLongestLease(t *testing.T) {
	s := memstore.NewSegments()
	k := store.SegmentKey{Partition: "p", LogEpoch: "e", Table: "t"}
	for i, exp := range []int64{t0 + 100, t0 + 300, t0 + 200} {
		id := fmt.Sprintf("seg-%d", i)
		if err := s.Put(ctx, id, []byte(id), store.Publication{SegmentKey: k, CreatedAtMs: t0, ExpiresAtMs: exp}, t0); err != nil {
			t.Fatal(err)
		}
	}
	id, pub, ok, err := s.Find(ctx, k, t0)
	if err != nil || !ok || id != "seg-1" || pub.ExpiresAtMs != t0+300 {
		t.Errorf("Find = %q %+v %v %v, want seg-1 expiring last", id, pub, ok, err)
	}
}

func BenchmarkTouchPartitionQuiet(b *testing.B) {
	s := touched(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.TouchPartition(ctx, "p", t0+1, "ignored"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkCommit(b *testing.B) {
	s := touched(b)
	payload := make([]byte, 200)
	ids := make([]string, 1024)
	for i := range ids {
		ids[i] = fmt.Sprintf("row-%04d", i)
	}
	req := &store.CommitRequest{
		Commit:  store.Commit{ClientID: "c"},
		Rows:    make([]store.RowWrite, 1),
		Outcome: store.Outcome{Applied: true, Result: payload[:32]},
	}
	req.Commit.Changes = make([]store.Change, 1)
	b.ReportAllocs()
	for i := range int64(b.N) {
		id := ids[i%int64(len(ids))]
		req.ExpectedMaxSeq, req.Commit.Seq, req.Outcome.CommitSeq = i, i+1, i+1
		req.Commit.ClientCommitID = fmt.Sprint(i)
		req.Rows[0] = store.RowWrite{Table: "t", Row: store.Row{RowID: id, Version: i + 1, Payload: payload}}
		req.Commit.Changes[0] = store.Change{Table: "t", RowID: id, RowVersion: i + 1, Row: payload}
		if err := s.Commit(ctx, "p", req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkScanRows(b *testing.B) {
	s := touched(b)
	ws := make([]store.RowWrite, 10_000)
	for i := range ws {
		ws[i] = store.RowWrite{Table: "t", Row: store.Row{RowID: fmt.Sprintf("%05d", i), Payload: make([]byte, 100)}}
	}
	if err := s.Commit(ctx, "p", commitReq(0, "x", ws...)); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		_ = s.ScanRows(ctx, "p", "t", "05000", true, func(*store.Row) bool { n++; return n < 500 })
	}
}

func TestSchemaContract(t *testing.T) {
	storetest.RunSchemaStore(t, func(*testing.T) storetest.SchemaBackend { return memstore.New() })
}

// Outcomes outlive the commits Prune drops (the store keeps an applied
// commit's outcome inside its log entry until then): a replay after
// pruning is still answered from the recorded outcome, and the commit is
// still refused as a duplicate.
func TestOutcomesSurvivePrune(t *testing.T) {
	s := touched(t)
	var reqs []*store.CommitRequest
	for i := range int64(3) {
		req := commitReq(i, fmt.Sprintf("c%d", i), store.RowWrite{Table: "t", Row: store.Row{RowID: fmt.Sprintf("r%d", i), Version: 1}})
		req.Outcome.Result = []byte{byte(i), 7}
		req.Outcome.ActorID = "alice"
		if err := s.Commit(ctx, "p", req); err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, req)
	}
	if n, err := s.Prune(ctx, "p", 2); err != nil || n != 2 {
		t.Fatalf("Prune(2) = %d, %v", n, err)
	}
	for _, req := range reqs {
		o, err := s.GetOutcome(ctx, "p", req.Commit.ClientID, req.Commit.ClientCommitID, 0)
		if err != nil || o == nil || !reflect.DeepEqual(*o, req.Outcome) {
			t.Errorf("outcome of %s after pruning: %+v, %v; want %+v", req.Commit.ClientCommitID, o, err, req.Outcome)
		}
	}
	again := commitReq(3, "c0")
	if err := s.Commit(ctx, "p", again); !errors.Is(err, store.ErrOutcomeExists) {
		t.Errorf("re-commit of a pruned commit's id: %v, want ErrOutcomeExists", err)
	}
}

func TestLeaseStoreContract(t *testing.T) {
	storetest.RunLeaseStore(t, func(*testing.T) store.LeaseStore { return memstore.New() })
}

// TestOutcomesExpire runs the idempotency-window contract with the
// default window and with a short one.
func TestOutcomesExpire(t *testing.T) {
	t.Run("default", func(t *testing.T) {
		storetest.RunOutcomeExpiry(t, store.DefaultOutcomeWindow, func(*testing.T) store.Store { return memstore.New(memstore.WithOutcomeTTL(store.DefaultOutcomeWindow)) })
	})
	t.Run("1h", func(t *testing.T) {
		storetest.RunOutcomeExpiry(t, time.Hour, func(*testing.T) store.Store { return memstore.New(memstore.WithOutcomeTTL(time.Hour)) })
	})
}
