package dynamostore

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// copiesRig is one table at this build's store-format level and a
// partition in it, committed to through any of several Stores (the
// Lambda instances of a deployment).
type copiesRig struct {
	t     *testing.T
	ctx   context.Context
	c     *dynamodb.Client
	table string
	p     string
	seq   int64
}

func newCopiesRig(t *testing.T, name string) *copiesRig {
	r := &copiesRig{t: t, ctx: context.Background(), c: testenv.DynamoDB(t).Client(t), table: testenv.UniqueName(t, name), p: name}
	if err := CreateTable(r.ctx, r.c, r.table); err != nil {
		t.Fatal(err)
	}
	if _, err := r.store(Options{}).RaiseFormatLevel(r.ctx); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *copiesRig) store(opts Options) *Store { return New(r.c, r.table, opts) }

// write is one row write of table "tasks" under org = org.
func write(id, org string, del bool) store.RowWrite {
	w := store.RowWrite{Table: "tasks", Delete: del, Row: store.Row{RowID: id, Scopes: wire.StoredScopes{{Key: "org", Value: org}}}}
	if !del {
		w.Row.Version, w.Row.Payload = 1, []byte("payload of "+id)
	}
	return w
}

// request is the next commit of the rig's partition (not yet counted).
func (r *copiesRig) request(id string, ws ...store.RowWrite) *store.CommitRequest {
	seq := r.seq + 1
	req := &store.CommitRequest{ExpectedMaxSeq: r.seq,
		Commit:  store.Commit{Seq: seq, CreatedAtMs: seq, ClientID: "c", ClientCommitID: id},
		Outcome: store.Outcome{Applied: true, CommitSeq: seq, RecordedAtMs: seq}}
	for _, w := range ws {
		w.Row.CommitSeq = seq
		req.Rows = append(req.Rows, w)
		req.Commit.Changes = append(req.Commit.Changes, w.Change())
	}
	return req
}

// commit lands the next commit through s and returns its cost.
func (r *copiesRig) commit(s *Store, id string, ws ...store.RowWrite) Usage {
	r.t.Helper()
	mctx, capacity := WithCapacity(r.ctx)
	if err := s.Commit(mctx, r.p, r.request(id, ws...)); err != nil {
		r.t.Fatalf("commit %s: %v", id, err)
	}
	r.seq++
	return capacity.Snapshot()
}

// copyOf reads the scope copy of row id under org (nil: none).
func (r *copiesRig) copyOf(id, org string) *store.Row {
	r.t.Helper()
	it, err := r.store(Options{}).getItem(r.ctx, "test read", scopePK(r.p, "tasks", "org", org), rowSK(id), nil)
	if err != nil {
		r.t.Fatal(err)
	}
	if it == nil {
		return nil
	}
	row, err := parseRow(it)
	if err != nil {
		r.t.Fatal(err)
	}
	return row
}

// scoped bootstraps org through s and returns the rows and the cost.
func (r *copiesRig) scoped(s *Store, org string) ([]string, Usage) {
	r.t.Helper()
	mctx, capacity := WithCapacity(r.ctx)
	var got []string
	if err := s.ScanScopedRows(mctx, r.p, "tasks", "org", []string{org}, nil, 0, func(_ string, row *store.Row) bool {
		got = append(got, row.RowID)
		return true
	}); err != nil {
		r.t.Fatal(err)
	}
	return got, capacity.Snapshot()
}

func (r *copiesRig) head() head {
	r.t.Helper()
	h, ok, err := r.store(Options{}).readHead(r.ctx, r.p)
	if err != nil || !ok {
		r.t.Fatalf("head: %v %v", ok, err)
	}
	return h
}

// TestScopeCopiesAdaptive (issue 23, scopeindex.go): a new partition
// writes no scope copies, so a one-op insert is 4 write units (head,
// outcome, row, log). Its rows spread over 64 orgs; the first bootstrap
// of one org reads every row item, sees that fewer than 1 in 8 matched,
// and turns copies on; the commits after it write their copies; the
// prune run's backfill copies the rows before and marks the head; and
// the next bootstrap of the org reads only that org's copies.
func TestScopeCopiesAdaptive(t *testing.T) {
	r := newCopiesRig(t, "wide")
	s := r.store(Options{})
	if _, err := s.TouchPartition(r.ctx, r.p, 1, "e"); err != nil {
		t.Fatal(err)
	}
	org := func(i int) string { return fmt.Sprintf("o%02d", i%64) }

	u := r.commit(s, "first", write("first", org(0), false))
	if u.EstWCU != 4 {
		t.Errorf("1-op insert on a new partition: %.1f WCU, want 4 (head, outcome, row, log: no scope copy)", u.EstWCU)
	}
	if cp := r.copyOf("first", org(0)); cp != nil {
		t.Fatalf("a new partition wrote a scope copy: %+v", cp)
	}
	// 320 rows, 5 per org, in commits of 40 rows (transactions).
	for b := range 8 {
		var ws []store.RowWrite
		for i := range 40 {
			n := b*40 + i
			ws = append(ws, write(fmt.Sprintf("r%03d", n), org(n), false))
		}
		r.commit(s, fmt.Sprint("seed", b), ws...)
	}
	if h := r.head(); h.copiesOn() {
		t.Fatalf("copies on before any bootstrap: requested %v, scoped %v", h.copiesRequested, h.scoped)
	}
	var want []string
	for n := 7; n < 320; n += 64 {
		want = append(want, fmt.Sprintf("r%03d", n))
	}
	got, wide := r.scoped(s, org(7))
	if !slices.Equal(got, want) {
		t.Fatalf("bootstrap of %s from the row items: %v, want %v", org(7), got, want)
	}
	h := r.head()
	if !h.copiesRequested || h.scoped {
		t.Fatalf("after a bootstrap that matched %d of 321 rows: requested %v, scoped %v; want requested, not scoped", len(want), h.copiesRequested, h.scoped)
	}

	// A commit after it, through an instance that still remembers the
	// copies off (s read the head before turning them on), writes its copy.
	r.commit(s, "after", write("after", org(7), false))
	if cp := r.copyOf("after", org(7)); cp == nil || cp.CommitSeq != r.seq {
		t.Fatalf("commit %d after copies were turned on: copy %+v", r.seq, cp)
	}
	want = append(want, "after")
	slices.Sort(want)

	// The prune run: Prune reads the head, which shows the backfill due;
	// the backfill copies every live row and marks the head.
	pr := r.store(Options{})
	if _, err := pr.Prune(r.ctx, r.p, 0); err != nil {
		t.Fatal(err)
	}
	if !pr.ScopeBackfillDue(r.p) {
		t.Fatal("the prune run's head read does not show the backfill due")
	}
	bctx, bcap := WithCapacity(r.ctx)
	rep, err := pr.BackfillScopeIndex(bctx, r.p, []string{"tasks"})
	if err != nil || !rep.Marked || rep.Rows != 322 {
		t.Fatalf("backfill: %+v %v; want 322 live rows and the head marked", rep, err)
	}
	bu := bcap.Snapshot()
	t.Logf("backfill of %d rows: %d round trips, %.1f RCU, %.1f WCU", rep.Rows, bu.RoundTrips, bu.EstRCU, bu.EstWCU)
	if h := r.head(); !h.scoped {
		t.Fatal("head not marked after the backfill")
	}
	if _, err := pr.Prune(r.ctx, r.p, 0); err != nil || pr.ScopeBackfillDue(r.p) {
		t.Fatalf("after the backfill the prune run still sees it due (%v)", err)
	}

	got, narrow := r.scoped(s, org(7))
	if !slices.Equal(got, want) {
		t.Fatalf("bootstrap of %s from the copies: %v, want %v", org(7), got, want)
	}
	// Its units follow the org's rows: the head and its copies' bytes.
	bytes := 0
	for _, id := range want {
		cp := r.copyOf(id, org(7))
		bytes += ItemSize(rowItemAt(r.p, cp, org(7)))
	}
	limit := 1 + math.Ceil(float64(bytes)/4096)
	t.Logf("bootstrap of %d of %d rows: %.1f RCU from the row items, %.1f RCU from the copies (%d B)", len(want), 322, wide.EstRCU, narrow.EstRCU, bytes)
	if narrow.EstRCU > limit {
		t.Errorf("bootstrap after the backfill: %.1f RCU, want ≤ %.0f (head + the org's copies)", narrow.EstRCU, limit)
	}
	if narrow.EstRCU >= wide.EstRCU {
		t.Errorf("the copies do not make the bootstrap cheaper: %.1f RCU vs %.1f", narrow.EstRCU, wide.EstRCU)
	}
	// And every commit from now on writes its copies (the head says so).
	u = r.commit(s, "last", write("last", org(9), false))
	if cp := r.copyOf("last", org(9)); cp == nil || u.EstWCU != 5 {
		t.Fatalf("1-op insert on a partition with copies: copy %+v, %.1f WCU (want 5)", cp, u.EstWCU)
	}
}

// rowItemAt is row's scope-copy item under org.
func rowItemAt(p string, row *store.Row, org string) map[string]types.AttributeValue {
	item := rowItem(p, row.CommitSeq, &store.RowWrite{Table: "tasks", Row: *row, Delete: row.Deleted})
	item[AttrPK] = S(scopePK(p, "tasks", "org", org))
	return item
}

// TestStaleLayoutMeetsScopeOn: instances that read the head before
// another turned scope copies on commit without copies, conditioned on
// the head having them off; the head refuses them and each commit is
// written again with its copy (the transaction, a group, a small
// commit). None lands without its copy.
func TestStaleLayoutMeetsScopeOn(t *testing.T) {
	r := newCopiesRig(t, "stale")
	tx := r.store(Options{TransactionalCommits: true})
	grp := r.store(Options{TransactionalCommits: true})
	small := r.store(Options{})
	if _, err := tx.TouchPartition(r.ctx, r.p, 1, "e"); err != nil {
		t.Fatal(err)
	}
	r.commit(tx, "off", write("off", "o1", false))
	for _, s := range []*Store{grp, small} {
		if _, err := s.TouchPartition(r.ctx, r.p, 1, "e"); err != nil {
			t.Fatal(err)
		}
	}
	if cp := r.copyOf("off", "o1"); cp != nil {
		t.Fatalf("copy written before copies were on: %+v", cp)
	}
	for _, s := range []*Store{tx, grp, small} {
		if s.layout(r.p).copies {
			t.Fatal("an instance remembers copies on before they were")
		}
	}
	if err := r.store(Options{}).turnCopiesOn(r.ctx, r.p); err != nil {
		t.Fatal(err)
	}

	r.commit(tx, "tx", write("tx", "o1", false))
	if cp := r.copyOf("tx", "o1"); cp == nil || cp.CommitSeq != r.seq {
		t.Fatalf("transactional commit with a stale memory landed without its copy: %+v", cp)
	}
	group := []*store.CommitRequest{r.request("g1", write("g1", "o2", false))}
	r.seq++
	group = append(group, r.request("g2", write("g2", "o3", false)))
	r.seq++
	if n, err := grp.CommitGroup(r.ctx, r.p, group); err != nil || n != 2 {
		t.Fatalf("group: %d landed, %v", n, err)
	}
	if c1, c2 := r.copyOf("g1", "o2"), r.copyOf("g2", "o3"); c1 == nil || c2 == nil {
		t.Fatalf("group with a stale memory landed without its copies: %+v %+v", c1, c2)
	}
	r.commit(small, "small", write("small", "o4", false))
	if cp := r.copyOf("small", "o4"); cp == nil || cp.CommitSeq != r.seq {
		t.Fatalf("small commit with a stale memory landed without its copy: %+v", cp)
	}
}

// TestCopylessDeleteTombstonesCopies: a copy can exist in a partition
// whose copies are off (an older build, which always writes them, served
// a commit during a rolling deploy; here an instance that had not read
// the head yet). Deleting the row there, and recreating it under another
// org, must not leave that copy live: once copies are on and backfilled,
// the bootstrap of the first org would return the deleted row.
func TestCopylessDeleteTombstonesCopies(t *testing.T) {
	r := newCopiesRig(t, "roll")
	s := r.store(Options{})
	if _, err := s.TouchPartition(r.ctx, r.p, 1, "e"); err != nil {
		t.Fatal(err)
	}
	older := r.store(Options{TransactionalCommits: true}) // no head read: writes copies
	r.commit(older, "ins", write("x", "o1", false), write("y", "o1", false))
	if r.copyOf("x", "o1") == nil {
		t.Fatal("the copy-writing instance wrote no copy")
	}
	r.commit(s, "del", write("x", "o1", true))
	r.commit(s, "re", write("y", "o1", true), write("y", "o2", false))
	for _, id := range []string{"x", "y"} {
		if cp := r.copyOf(id, "o1"); cp == nil || !cp.Deleted {
			t.Fatalf("copy of %s under o1 after its delete on a copy-less partition: %+v, want a tombstone", id, cp)
		}
	}
	if _, err := s.BackfillScopeIndex(r.ctx, r.p, []string{"tasks"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.scoped(s, "o1"); len(got) != 0 {
		t.Fatalf("bootstrap of o1 after the backfill: %v, want none (deleted)", got)
	}
	if got, _ := r.scoped(s, "o2"); !slices.Equal(got, []string{"y"}) {
		t.Fatalf("bootstrap of o2 after the backfill: %v, want [y]", got)
	}
	// Prune removes the tombstones, copies included: one DeleteItem each.
	mctx, capacity := WithCapacity(r.ctx)
	if n, err := s.Prune(mctx, r.p, r.seq); err != nil || n != int(r.seq) {
		t.Fatalf("prune: %d, %v", n, err)
	}
	t.Logf("prune of %d commits: %d round trips, %.1f WCU", r.seq, capacity.Snapshot().RoundTrips, capacity.Snapshot().EstWCU)
	for _, id := range []string{"x", "y"} {
		if cp := r.copyOf(id, "o1"); cp != nil {
			t.Fatalf("copy tombstone of %s left after prune: %+v", id, cp)
		}
	}
}
