package storetest

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// RunSegmentStore runs the store.SegmentStore contract. newSegs is called
// once per subtest with that subtest's t; it may return the same shared
// backend every time (segment bytes and partitions are unique per subtest).
func RunSegmentStore(t *testing.T, newSegs func(t *testing.T) store.SegmentStore) {
	tests := []struct {
		name string
		fn   func(*testing.T, *segmentsT)
	}{
		{"Put/OpenReturnsBytes", testSegPutOpen},
		{"Put/EmptyBody", testSegEmptyBody},
		{"Put/LargeBody", testSegLargeBody},
		{"Put/CollisionKeepsOriginal", testSegCollision},
		{"Put/SameBytesSameContextIdempotent", testSegIdempotent},
		{"Put/NoAliasing", testSegNoAliasing},
		{"Publications/TwoPartitions", testSegTwoPartitions},
		{"Publications/MergeLifetime", testSegMerge},
		{"Publications/NewContextAppended", testSegNewContext},
		{"Publications/ExpiredPrunedOnPut", testSegPruneOnPut},
		{"Find/IgnoresExpired", testSegFindExpired},
		{"Find/ExactKey", testSegFindExactKey},
		{"Find/Sized", testSegFindSized},
		{"FindLatest/NewestPinInRange", testSegFindLatest},
		{"Publications/BoundedPerContext", testSegBoundedPerContext},
		{"Lookup/UnknownNotFound", testSegUnknown},
		{"Lookup/OnlyFilteredPublications", testSegLookupFiltered},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, &segmentsT{t: t, s: newSegs(t), ctx: context.Background(), p: unique(t, "p")})
		})
	}
}

// segmentsT is one subtest's segment store and partition name.
type segmentsT struct {
	t   *testing.T
	s   store.SegmentStore
	ctx context.Context
	p   string
}

// body returns segment bytes unique to this subtest and run.
func (e *segmentsT) body(n int) []byte {
	b := []byte(unique(e.t, "body") + "\n")
	for len(b) < n {
		b = append(b, byte(len(b)*31))
	}
	return b
}

func (e *segmentsT) key() store.SegmentKey {
	return store.SegmentKey{
		Partition:     e.p,
		LogEpoch:      "epoch-1",
		Table:         "tasks",
		SchemaVersion: 3,
		MediaType:     wire.MediaRows,
		ScopeDigest:   "digest-1",
		AsOfCommitSeq: 42,
		RowCursor:     wire.Opt[string]{},
	}
}

func publication(k store.SegmentKey, next wire.Opt[string], rows, created, expires int64) store.Publication {
	return store.Publication{SegmentKey: k, NextRowCursor: next, RowCount: rows, CreatedAtMs: created, ExpiresAtMs: expires}
}

func (e *segmentsT) put(id string, body []byte, pub store.Publication, now int64) {
	e.t.Helper()
	if err := e.s.Put(e.ctx, id, body, pub, now); err != nil {
		e.t.Fatalf("Put %s: %v", id, err)
	}
}

func (e *segmentsT) open(id string) []byte {
	e.t.Helper()
	rc, err := e.s.Open(e.ctx, id)
	if err != nil {
		e.t.Fatalf("Open %s: %v", id, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		e.t.Fatalf("reading %s: %v", id, err)
	}
	return b
}

// lookup returns the segment with the publications of k's partition,
// epoch and scope digest.
func (e *segmentsT) lookup(id string, k store.SegmentKey) *store.Segment {
	e.t.Helper()
	s, err := e.s.Lookup(e.ctx, id, store.FilterOf(k))
	if err != nil {
		e.t.Fatalf("Lookup %s: %v", id, err)
	}
	return s
}

func (e *segmentsT) find(k store.SegmentKey, now int64) (string, store.Publication, bool) {
	e.t.Helper()
	id, pub, ok, err := e.s.Find(e.ctx, k, now)
	if err != nil {
		e.t.Fatalf("Find: %v", err)
	}
	return id, pub, ok
}

// checkPubs compares publication sets; the interface fixes no order.
func checkPubs(t *testing.T, got, want []store.Publication) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%d publications %+v, want %d %+v", len(got), got, len(want), want)
		return
	}
	rest := slices.Clone(got)
	for _, w := range want {
		i := slices.Index(rest, w)
		if i < 0 {
			t.Errorf("publication %+v missing from %+v", w, got)
			return
		}
		rest = slices.Delete(rest, i, i+1)
	}
}

func testSegPutOpen(t *testing.T, e *segmentsT) {
	body := e.body(4096)
	id := segmentID(body)
	pub := publication(e.key(), wire.Some("row-0999"), 1000, baseMs, baseMs+dayMs)
	e.put(id, body, pub, baseMs)
	if got := e.open(id); string(got) != string(body) {
		t.Errorf("Open returned %d bytes, not the %d put", len(got), len(body))
	}
	seg := e.lookup(id, pub.SegmentKey)
	if seg.SegmentID != id || seg.ByteLength != int64(len(body)) {
		t.Errorf("Lookup: id %q length %d, want %q %d", seg.SegmentID, seg.ByteLength, id, len(body))
	}
	checkPubs(t, seg.Publications, []store.Publication{pub})
	gotID, gotPub, ok := e.find(pub.SegmentKey, baseMs)
	if !ok || gotID != id || gotPub != pub {
		t.Errorf("Find: %q %+v ok=%v, want %q %+v", gotID, gotPub, ok, id, pub)
	}
}

func testSegEmptyBody(t *testing.T, e *segmentsT) {
	id := segmentID(nil)
	// Every run shares the empty body's address, so give the
	// publication a unique partition and only check what this test adds.
	pub := publication(e.key(), wire.Opt[string]{}, 0, baseMs, baseMs+dayMs)
	e.put(id, []byte{}, pub, baseMs)
	if got := e.open(id); len(got) != 0 {
		t.Errorf("Open of the empty segment returned %d bytes", len(got))
	}
	if seg := e.lookup(id, pub.SegmentKey); seg.ByteLength != 0 || !slices.Contains(seg.Publications, pub) {
		t.Errorf("Lookup of the empty segment: %+v", seg)
	}
	if gotID, _, ok := e.find(pub.SegmentKey, baseMs); !ok || gotID != id {
		t.Errorf("Find: %q ok=%v, want %q", gotID, ok, id)
	}
}

func testSegLargeBody(t *testing.T, e *segmentsT) {
	body := e.body(4 << 20)
	_, _ = rand.Read(body[len(body)/2:])
	id := segmentID(body)
	e.put(id, body, publication(e.key(), wire.Opt[string]{}, 5000, baseMs, baseMs+dayMs), baseMs)
	if got := e.open(id); string(got) != string(body) {
		t.Errorf("4 MiB segment did not round-trip (%d bytes back)", len(got))
	}
	if seg := e.lookup(id, e.key()); seg.ByteLength != int64(len(body)) {
		t.Errorf("ByteLength %d, want %d", seg.ByteLength, len(body))
	}
}

func testSegCollision(t *testing.T, e *segmentsT) {
	body := e.body(1024)
	id := segmentID(body)
	pub := publication(e.key(), wire.Opt[string]{}, 10, baseMs, baseMs+dayMs)
	e.put(id, body, pub, baseMs)

	other := append(e.body(1024), 'x')
	k2 := e.key()
	k2.ScopeDigest = "digest-collision"
	pub2 := publication(k2, wire.Opt[string]{}, 10, baseMs, baseMs+dayMs)
	if err := e.s.Put(e.ctx, id, other, pub2, baseMs); !errors.Is(err, store.ErrCollision) {
		t.Fatalf("Put of different bytes under an existing id: %v, want ErrCollision", err)
	}
	if got := e.open(id); string(got) != string(body) {
		t.Errorf("original bytes were overwritten")
	}
	checkPubs(t, e.lookup(id, pub.SegmentKey).Publications, []store.Publication{pub})
	checkPubs(t, e.lookup(id, k2).Publications, nil)
	if gotID, _, ok := e.find(k2, baseMs); ok {
		t.Errorf("the rejected Put's publication is findable (segment %q)", gotID)
	}
}

func testSegIdempotent(t *testing.T, e *segmentsT) {
	body := e.body(512)
	id := segmentID(body)
	pub := publication(e.key(), wire.Opt[string]{}, 10, baseMs, baseMs+dayMs)
	e.put(id, body, pub, baseMs)
	e.put(id, append([]byte(nil), body...), pub, baseMs+1)
	checkPubs(t, e.lookup(id, pub.SegmentKey).Publications, []store.Publication{pub})
	if got := e.open(id); string(got) != string(body) {
		t.Errorf("bytes changed by an identical Put")
	}
}

func testSegNoAliasing(t *testing.T, e *segmentsT) {
	body := e.body(256)
	orig := append([]byte(nil), body...)
	id := segmentID(body)
	e.put(id, body, publication(e.key(), wire.Opt[string]{}, 1, baseMs, baseMs+dayMs), baseMs)
	for i := range body {
		body[i] = 'X'
	}
	got := e.open(id)
	if string(got) != string(orig) {
		t.Fatalf("Open sees the caller's later writes to the Put buffer")
	}
	for i := range got {
		got[i] = 'Y'
	}
	if again := e.open(id); string(again) != string(orig) {
		t.Errorf("Open sees writes to a previously read buffer")
	}
}

func testSegTwoPartitions(t *testing.T, e *segmentsT) {
	body := e.body(2048)
	id := segmentID(body)
	ka := e.key()
	kb := ka
	kb.Partition = unique(t, "other-partition")
	pa := publication(ka, wire.Opt[string]{}, 20, baseMs, baseMs+dayMs)
	pb := publication(kb, wire.Opt[string]{}, 20, baseMs+5, baseMs+2*dayMs)
	e.put(id, body, pa, baseMs)
	e.put(id, body, pb, baseMs+5)

	checkPubs(t, e.lookup(id, ka).Publications, []store.Publication{pa})
	checkPubs(t, e.lookup(id, kb).Publications, []store.Publication{pb})
	for _, c := range []struct {
		key  store.SegmentKey
		want store.Publication
	}{{ka, pa}, {kb, pb}} {
		gotID, got, ok := e.find(c.key, baseMs+10)
		if !ok || gotID != id || got != c.want {
			t.Errorf("Find(partition %q): %q %+v ok=%v, want %+v", c.key.Partition, gotID, got, ok, c.want)
		}
	}
	// A third partition that never published finds nothing.
	kc := ka
	kc.Partition = unique(t, "third-partition")
	if gotID, got, ok := e.find(kc, baseMs+10); ok {
		t.Errorf("Find for an unpublished partition returned %q %+v", gotID, got)
	}
}

func testSegMerge(t *testing.T, e *segmentsT) {
	body := e.body(300)
	id := segmentID(body)
	k := e.key()
	next := wire.Some("cursor-7")
	e.put(id, body, publication(k, next, 7, baseMs+100, baseMs+1000), baseMs)
	// Earlier creation, earlier expiry: keeps the later expiry.
	e.put(id, body, publication(k, next, 7, baseMs+50, baseMs+800), baseMs+60)
	want := publication(k, next, 7, baseMs+50, baseMs+1000)
	checkPubs(t, e.lookup(id, k).Publications, []store.Publication{want})
	// Later creation, later expiry: keeps the earlier creation.
	e.put(id, body, publication(k, next, 7, baseMs+200, baseMs+2000), baseMs+200)
	want = publication(k, next, 7, baseMs+50, baseMs+2000)
	checkPubs(t, e.lookup(id, k).Publications, []store.Publication{want})
	if _, got, ok := e.find(k, baseMs+1500); !ok || got != want {
		t.Errorf("Find after merge: %+v ok=%v, want %+v", got, ok, want)
	}
}

func testSegNewContext(t *testing.T, e *segmentsT) {
	body := e.body(300)
	id := segmentID(body)
	k := e.key()
	base := publication(k, wire.Opt[string]{}, 7, baseMs, baseMs+dayMs)
	otherNext := publication(k, wire.Some("next"), 7, baseMs, baseMs+dayMs)
	otherCount := publication(k, wire.Opt[string]{}, 8, baseMs, baseMs+dayMs)
	kEpoch := k
	kEpoch.LogEpoch = "epoch-2"
	otherEpoch := publication(kEpoch, wire.Opt[string]{}, 7, baseMs, baseMs+dayMs)
	kPin := k
	kPin.AsOfCommitSeq = 43
	otherPin := publication(kPin, wire.Opt[string]{}, 7, baseMs, baseMs+dayMs)
	for _, p := range []store.Publication{base, otherNext, otherCount, otherEpoch, otherPin} {
		e.put(id, body, p, baseMs)
	}
	checkPubs(t, e.lookup(id, k).Publications, []store.Publication{base, otherNext, otherCount, otherPin})
	checkPubs(t, e.lookup(id, kEpoch).Publications, []store.Publication{otherEpoch})
	if _, got, ok := e.find(kEpoch, baseMs); !ok || got != otherEpoch {
		t.Errorf("Find for epoch-2: %+v ok=%v, want %+v", got, ok, otherEpoch)
	}
}

func testSegPruneOnPut(t *testing.T, e *segmentsT) {
	body := e.body(300)
	id := segmentID(body)
	k1 := e.key()
	k2 := k1
	k2.AsOfCommitSeq = 99
	k3 := k1
	k3.AsOfCommitSeq = 100
	p1 := publication(k1, wire.Opt[string]{}, 1, baseMs, baseMs+1000)
	p2 := publication(k2, wire.Opt[string]{}, 1, baseMs+1000, baseMs+5000)
	e.put(id, body, p1, baseMs)
	// At baseMs+1000, p1 (ExpiresAtMs == now) is no longer live.
	e.put(id, body, p2, baseMs+1000)
	checkPubs(t, e.lookup(id, k1).Publications, []store.Publication{p2})
	// A publication already expired at its own Put is not recorded.
	p3 := publication(k3, wire.Opt[string]{}, 1, baseMs, baseMs+1500)
	e.put(id, body, p3, baseMs+2000)
	checkPubs(t, e.lookup(id, k1).Publications, []store.Publication{p2})
	if _, _, ok := e.find(k1, baseMs); ok {
		t.Errorf("Find returned a pruned publication")
	}
}

func testSegFindExpired(t *testing.T, e *segmentsT) {
	body := e.body(300)
	id := segmentID(body)
	k := e.key()
	pub := publication(k, wire.Opt[string]{}, 1, baseMs, baseMs+1000)
	e.put(id, body, pub, baseMs)
	if gotID, _, ok := e.find(k, baseMs+999); !ok || gotID != id {
		t.Errorf("Find 1 ms before expiry: %q ok=%v", gotID, ok)
	}
	for _, now := range []int64{baseMs + 1000, baseMs + 5000} {
		if gotID, got, ok := e.find(k, now); ok {
			t.Errorf("Find at %d returned expired %q %+v", now-baseMs, gotID, got)
		}
	}
	// Expired but not yet pruned: still listed by Lookup.
	checkPubs(t, e.lookup(id, k).Publications, []store.Publication{pub})
}

func testSegFindExactKey(t *testing.T, e *segmentsT) {
	body := e.body(300)
	id := segmentID(body)
	k := e.key()
	e.put(id, body, publication(k, wire.Opt[string]{}, 1, baseMs, baseMs+dayMs), baseMs)
	variants := map[string]func(*store.SegmentKey){
		"Partition":     func(k *store.SegmentKey) { k.Partition += "x" },
		"LogEpoch":      func(k *store.SegmentKey) { k.LogEpoch = "epoch-other" },
		"Table":         func(k *store.SegmentKey) { k.Table = "notes" },
		"SchemaVersion": func(k *store.SegmentKey) { k.SchemaVersion++ },
		"MediaType":     func(k *store.SegmentKey) { k.MediaType = wire.MediaSQLite },
		"ScopeDigest":   func(k *store.SegmentKey) { k.ScopeDigest = "digest-other" },
		"AsOfCommitSeq": func(k *store.SegmentKey) { k.AsOfCommitSeq++ },
		"RowCursor":     func(k *store.SegmentKey) { k.RowCursor = wire.Some("") },
	}
	for field, mutate := range variants {
		v := k
		mutate(&v)
		if gotID, got, ok := e.find(v, baseMs); ok {
			t.Errorf("Find with a different %s returned %q %+v", field, gotID, got)
		}
	}
	if gotID, _, ok := e.find(k, baseMs); !ok || gotID != id {
		t.Errorf("Find with the exact key: %q ok=%v", gotID, ok)
	}
}

func testSegUnknown(t *testing.T, e *segmentsT) {
	id := segmentID(e.body(64)) // never put
	if s, err := e.s.Lookup(e.ctx, id, store.FilterOf(e.key())); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Lookup unknown: %+v, %v; want ErrNotFound", s, err)
	}
	if rc, err := e.s.Open(e.ctx, id); !errors.Is(err, store.ErrNotFound) {
		if rc != nil {
			rc.Close()
		}
		t.Errorf("Open unknown: %v, want ErrNotFound", err)
	}
	if gotID, _, ok := e.find(e.key(), baseMs); ok {
		t.Errorf("Find with nothing published returned %q", gotID)
	}
}

// testSegFindSized: a store that implements store.SizedFinder answers as
// Find does, plus the segment's byte length, whatever other partitions
// published the same bytes.
func testSegFindSized(t *testing.T, e *segmentsT) {
	sf, ok := e.s.(store.SizedFinder)
	if !ok {
		t.Skip("not a store.SizedFinder")
	}
	body := e.body(1234)
	id := segmentID(body)
	k := e.key()
	pub := publication(k, wire.Some("next"), 10, baseMs, baseMs+10_000)
	e.put(id, body, pub, baseMs)
	other := k
	other.Partition = e.p + "-other"
	e.put(id, body, publication(other, wire.Some("next"), 10, baseMs, baseMs+20_000), baseMs)
	gotID, got, n, found, err := sf.FindSized(e.ctx, k, baseMs+1)
	if err != nil || !found || gotID != id || got != pub || n != int64(len(body)) {
		t.Fatalf("FindSized = %s %+v %d %v %v; want %s %+v %d", gotID, got, n, found, err, id, pub, len(body))
	}
	if _, _, _, found, err := sf.FindSized(e.ctx, k, baseMs+10_000); err != nil || found {
		t.Fatalf("FindSized of an expired publication: found=%v err=%v", found, err)
	}
}

// FindLatest (issue 11 item 5) ignores the key's pin: among live
// publications of the context with a pin in [min, max] it returns the
// highest pin; expired ones, other partitions, other row cursors and
// pins outside the range are never returned.
func testSegFindLatest(t *testing.T, e *segmentsT) {
	lf, ok := e.s.(store.LatestFinder)
	if !ok {
		t.Skip("not a store.LatestFinder")
	}
	k := e.key()
	at := func(pin int64) store.SegmentKey { c := k; c.AsOfCommitSeq = pin; return c }
	b10, b20 := e.body(100), e.body(200)
	p10 := publication(at(10), wire.Opt[string]{}, 3, baseMs, baseMs+50_000)
	p20 := publication(at(20), wire.Opt[string]{}, 3, baseMs, baseMs+10_000)
	e.put(segmentID(b10), b10, p10, baseMs)
	e.put(segmentID(b20), b20, p20, baseMs)
	other := at(30)
	other.Partition = e.p + "-other"
	e.put(segmentID(b20), b20, publication(other, wire.Opt[string]{}, 3, baseMs, baseMs+50_000), baseMs)
	paged := at(40)
	paged.RowCursor = wire.Some("c")
	e.put(segmentID(b20), b20, publication(paged, wire.Opt[string]{}, 3, baseMs, baseMs+50_000), baseMs)

	cases := []struct {
		name     string
		min, max int64
		now      int64
		want     *store.Publication
		wantBody []byte
	}{
		{"newest", 0, 100, baseMs + 1, &p20, b20},
		{"below max", 0, 19, baseMs + 1, &p10, b10},
		{"exact", 10, 10, baseMs + 1, &p10, b10},
		{"above min", 11, 100, baseMs + 1, &p20, b20},
		{"newest expired", 0, 100, baseMs + 10_000, &p10, b10},
		{"none in range", 21, 100, baseMs + 1, nil, nil},
		{"all expired", 0, 100, baseMs + 50_000, nil, nil},
	}
	for _, c := range cases {
		q := at(999) // the key's own pin is ignored
		id, pub, n, found, err := lf.FindLatest(e.ctx, q, c.min, c.max, c.now)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if c.want == nil {
			if found {
				t.Errorf("%s: found %s %+v, want nothing", c.name, id, pub)
			}
			continue
		}
		if !found || id != segmentID(c.wantBody) || pub != *c.want || n != int64(len(c.wantBody)) {
			t.Errorf("%s: got %s %+v %d %v, want %s %+v %d", c.name, id, pub, n, found, segmentID(c.wantBody), *c.want, len(c.wantBody))
		}
	}
	// Find still keys on the exact pin.
	if _, _, found := e.find(at(15), baseMs+1); found {
		t.Error("Find at a pin with no publication found one")
	}
}

// Re-publishing the same bytes for one context at ever later pins keeps
// at most store.MaxPubsPerContext of this partition's publications (the
// newest pins); another partition's publications are untouched, and
// Find still answers at a kept pin and not at a pruned one.
func testSegBoundedPerContext(t *testing.T, e *segmentsT) {
	body := e.body(300)
	id := segmentID(body)
	k := e.key()
	other := k
	other.Partition = e.p + "-other"
	op := publication(other, wire.Opt[string]{}, 1, baseMs, baseMs+100_000)
	e.put(id, body, op, baseMs)
	const n = store.MaxPubsPerContext + 6
	var want []store.Publication
	for pin := int64(1); pin <= n; pin++ {
		c := k
		c.AsOfCommitSeq = pin
		p := publication(c, wire.Opt[string]{}, 1, baseMs, baseMs+100_000)
		e.put(id, body, p, baseMs)
		if pin > n-store.MaxPubsPerContext {
			want = append(want, p)
		}
	}
	checkPubs(t, e.lookup(id, k).Publications, want)
	if !slices.ContainsFunc(e.lookup(id, other).Publications, func(p store.Publication) bool { return p == op }) {
		t.Error("another partition's publication was pruned")
	}
	kept, pruned := k, k
	kept.AsOfCommitSeq, pruned.AsOfCommitSeq = n, 1
	if _, _, found := e.find(kept, baseMs+1); !found {
		t.Error("Find misses the newest pin")
	}
	if _, _, found := e.find(pruned, baseMs+1); found {
		t.Error("Find still answers at a pruned pin")
	}
}

// testSegLookupFiltered: Lookup answers with the publications of exactly
// one partition, log epoch and scope digest (what a §5.4 token binds and
// a §5.5 direct download re-derives); a partition with publications of
// the segment in that epoch under other digests gets the segment with
// none, and one with none in that epoch gets ErrNotFound (§2.1: other
// partitions' and earlier epochs' publications are invisible).
func testSegLookupFiltered(t *testing.T, e *segmentsT) {
	body := e.body(700)
	id := segmentID(body)
	k := e.key()
	kDigest, kEpoch, kOther := k, k, k
	kDigest.ScopeDigest = "digest-2"
	kEpoch.LogEpoch = "epoch-2"
	kOther.Partition = unique(t, "tenant-b")
	kPin := k
	kPin.AsOfCommitSeq++
	pubs := map[string]store.Publication{
		"own":         publication(k, wire.Opt[string]{}, 3, baseMs, baseMs+dayMs),
		"own pin":     publication(kPin, wire.Opt[string]{}, 3, baseMs, baseMs+dayMs),
		"digest":      publication(kDigest, wire.Opt[string]{}, 3, baseMs, baseMs+dayMs),
		"epoch":       publication(kEpoch, wire.Opt[string]{}, 3, baseMs, baseMs+dayMs),
		"partition":   publication(kOther, wire.Opt[string]{}, 3, baseMs, baseMs+dayMs),
		"own expired": publication(func() store.SegmentKey { c := k; c.Table = "notes"; return c }(), wire.Opt[string]{}, 3, baseMs, baseMs+10),
	}
	for _, p := range pubs {
		e.put(id, body, p, baseMs)
	}
	for _, c := range []struct {
		name string
		key  store.SegmentKey
		want []store.Publication
	}{
		{"own group", k, []store.Publication{pubs["own"], pubs["own pin"], pubs["own expired"]}},
		{"other digest", kDigest, []store.Publication{pubs["digest"]}},
		{"other epoch", kEpoch, []store.Publication{pubs["epoch"]}},
		{"other partition", kOther, []store.Publication{pubs["partition"]}},
	} {
		seg := e.lookup(id, c.key)
		if seg.SegmentID != id || seg.ByteLength != int64(len(body)) {
			t.Errorf("%s: segment %q length %d, want %q %d", c.name, seg.SegmentID, seg.ByteLength, id, len(body))
		}
		checkPubs(t, seg.Publications, c.want)
	}
	none := k
	none.ScopeDigest = "digest-never"
	if seg := e.lookup(id, none); seg.ByteLength != int64(len(body)) || len(seg.Publications) != 0 {
		t.Errorf("a digest the partition never published under: %+v, want the segment with no publications", seg)
	}
	for name, f := range map[string]store.PublicationFilter{
		"unpublished partition": {Partition: unique(t, "tenant-c"), LogEpoch: k.LogEpoch, ScopeDigest: k.ScopeDigest},
		"unpublished epoch":     {Partition: k.Partition, LogEpoch: "epoch-3", ScopeDigest: k.ScopeDigest},
	} {
		if seg, err := e.s.Lookup(e.ctx, id, f); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: %+v, %v; want ErrNotFound", name, seg, err)
		}
	}
}
