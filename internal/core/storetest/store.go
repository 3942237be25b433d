// Package storetest is the contract suite every store.Store and
// store.SegmentStore implementation runs against itself, so the engine can
// rely on the documented promises whichever backend is deployed.
//
// Each subtest works in its own freshly named partition (and on freshly
// generated segment bytes), so one shared backend instance may serve all
// subtests and repeated runs.
package storetest

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// RunStore runs the store.Store contract. newStore is called once per
// subtest with that subtest's t; it may return the same shared backend
// every time.
//
// The LastSeenAtMs test assumes the store's refresh interval is longer
// than 1 ms and shorter than one day.
func RunStore(t *testing.T, newStore func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(*testing.T, *partitionT)
	}{
		{"Head/UnknownPartition", testHeadUnknown},
		{"Reads/UnknownPartitionEmpty", testUnknownPartitionReads},
		{"TouchPartition/CreatesWithEpoch", testTouchCreates},
		{"TouchPartition/KeepsEpoch", testTouchKeepsEpoch},
		{"TouchPartition/LastSeenRefresh", testTouchLastSeen},
		{"Partitions/Isolated", testPartitionsIsolated},
		{"Commit/GaplessSequence", testCommitGapless},
		{"Commit/HeadMovedWritesNothing", testCommitHeadMoved},
		{"Commit/OutcomeExistsWritesNothing", testCommitOutcomeExists},
		{"Commit/IdempotencyKeyIsPair", testCommitKeyIsPair},
		{"Commit/RowsMaterialized", testCommitRowsMaterialized},
		{"Commit/RowWrittenTwiceInOneCommit", testCommitRowTwice},
		{"Commit/OutcomeRecorded", testCommitOutcome},
		{"Commit/NoAliasing", testCommitNoAliasing},
		{"Commit/LargePayload", testCommitLargePayload},
		{"Commit/ManyRowWrites", testCommitManyRows},
		{"Commit/ConcurrentCommitters", testCommitConcurrent},
		{"PutRejection/PutIfAbsent", testRejectionPutIfAbsent},
		{"PutRejection/BlocksCommit", testRejectionBlocksCommit},
		{"PutRejection/AfterCommit", testRejectionAfterCommit},
		{"PutRejection/NoAliasing", testRejectionNoAliasing},
		{"GetRows/MissingAbsent", testGetRowsMissing},
		{"ScanRows/ByteOrder", testScanByteOrder},
		{"ScanRows/AfterExclusive", testScanAfter},
		{"ScanRows/EarlyStop", testScanEarlyStop},
		{"ScanRows/TablesSeparate", testScanTablesSeparate},
		{"ScanScopedRows/OrderAndFilter", testScopedOrderAndFilter},
		{"ScanScopedRows/FollowsWrites", testScopedFollowsWrites},
		{"ReadLogScoped/Index", testLogScoped},
		{"ReadLogScoped/ManyCommits", testLogScopedMany},
		{"ReadLog/Window", testReadLogWindow},
		{"ReadLog/EarlyStop", testReadLogEarlyStop},
		{"Clients/PutGetList", testClients},
		{"Clients/ListEarlyStop", testClientsEarlyStop},
		{"Clients/BindCreatesOnce", testBindClient},
		{"Clients/BindConcurrent", testBindClientConcurrent},
		{"Clients/Registration", testClientRegistration},
		{"Clients/AckCursor", testAckCursor},
		{"PutRejection/OwnerRecorded", testRejectionOwner},
		{"RotateEpoch/DeletesClients", testRotateEpoch},
		{"Prune/HorizonMonotonic", testPrune},
		{"Prune/KeepsRows", testPruneKeepsRows},
		{"ColumnVersions/RoundTrip", testColumnVersions},
		{"ColumnVersions/ManyRowWrites", testColumnVersionsMany},
		{"ColumnVersions/NoAliasing", testColumnVersionsNoAliasing},
		{"Tombstones/GetRowsOnly", testTombstoneGetRowsOnly},
		{"Tombstones/UpsertReplaces", testTombstoneUpsertReplaces},
		{"Tombstones/DeleteAgainMovesSeq", testTombstoneDeleteAgain},
		{"Tombstones/ManyInOneCommit", testTombstonesMany},
		{"Tombstones/KeepScopes", testTombstoneKeepsScopes},
		{"Prune/RemovesTombstones", testPruneTombstones},
		{"Prune/TombstonesOfLargeCommit", testPruneTombstonesLarge},
		{"CommitTimes/AfterSeq", testCommitTimes},
		{"RefIndex/AddListRemove", testRefsAddListRemove},
		{"RefIndex/FailedCommitWritesNone", testRefsFailedCommitWritesNone},
		{"RefIndex/ManyInOneCommit", testRefsManyInOneCommit},
		{"RefIndex/ManyQueries", testRefsManyQueries},
		{"RefIndex/BlobEntries", testRefsBlobEntries},
		{"RefIndex/UnknownPartition", testRefsUnknownPartition},
		{"GroupCommit/LandsInOrder", testGroupLandsInOrder},
		{"GroupCommit/MemberOutcomeExists", testGroupMemberOutcomeExists},
		{"GroupCommit/MemberRowChanged", testGroupMemberRowChanged},
		{"GroupCommit/LeadFails", testGroupLeadFails},
		{"GroupCommit/Publications", testGroupPublications},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newPartition(t, newStore)) })
	}
}

func testHeadUnknown(t *testing.T, e *partitionT) {
	h, ok, err := e.s.Head(e.ctx, e.p)
	if err != nil || ok {
		t.Fatalf("Head of unknown partition: %+v ok=%v err=%v, want ok=false", h, ok, err)
	}
}

func testUnknownPartitionReads(t *testing.T, e *partitionT) {
	if o := e.outcome("c", "cc"); o != nil {
		t.Errorf("GetOutcome: %+v, want nil", o)
	}
	if m := e.rows("tasks", "a", "b"); len(m) != 0 {
		t.Errorf("GetRows: %v, want empty", m)
	}
	if rs := e.scan("tasks", "", false); len(rs) != 0 {
		t.Errorf("ScanRows: %d rows, want none", len(rs))
	}
	if cs := e.log(0, 100); len(cs) != 0 {
		t.Errorf("ReadLog: %d commits, want none", len(cs))
	}
	c, err := e.s.GetClient(e.ctx, e.p, "c")
	if err != nil || c != nil {
		t.Errorf("GetClient: %+v, %v; want nil, nil", c, err)
	}
	if cs := e.clients(); len(cs) != 0 {
		t.Errorf("ListClients: %v, want none", cs)
	}
	if ts := e.commitTimes(0); len(ts) != 0 {
		t.Errorf("CommitTimes: %v, want none", ts)
	}
	// None of the reads may have created the partition.
	if _, ok, err := e.s.Head(e.ctx, e.p); ok || err != nil {
		t.Errorf("reads created the partition: ok=%v err=%v", ok, err)
	}
}

func testTouchCreates(t *testing.T, e *partitionT) {
	epoch := unique(t, "epoch")
	h, err := e.s.TouchPartition(e.ctx, e.p, baseMs, epoch)
	if err != nil {
		t.Fatal(err)
	}
	want := store.Head{LogEpoch: epoch, LastSeenAtMs: baseMs}
	if h != want {
		t.Errorf("TouchPartition created %+v, want %+v", h, want)
	}
	if got := e.head(); got != want {
		t.Errorf("Head after create %+v, want %+v", got, want)
	}
}

func testTouchKeepsEpoch(t *testing.T, e *partitionT) {
	first := e.touch()
	h, err := e.s.TouchPartition(e.ctx, e.p, baseMs+1, unique(t, "other-epoch"))
	if err != nil {
		t.Fatal(err)
	}
	if h.LogEpoch != first.LogEpoch {
		t.Errorf("second touch returned epoch %q, want the original %q", h.LogEpoch, first.LogEpoch)
	}
	if got := e.head().LogEpoch; got != first.LogEpoch {
		t.Errorf("Head epoch %q after second touch, want %q", got, first.LogEpoch)
	}
}

func testTouchLastSeen(t *testing.T, e *partitionT) {
	e.touch() // at baseMs
	touchAt := func(now int64) store.Head {
		t.Helper()
		h, err := e.s.TouchPartition(e.ctx, e.p, now, "unused")
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	if h := touchAt(baseMs + 1); h.LastSeenAtMs != baseMs {
		t.Errorf("touch 1 ms later rewrote LastSeenAtMs to %d, want %d kept", h.LastSeenAtMs, baseMs)
	}
	if h := e.head(); h.LastSeenAtMs != baseMs {
		t.Errorf("Head LastSeenAtMs %d after in-interval touch, want %d", h.LastSeenAtMs, baseMs)
	}
	later := baseMs + dayMs
	if h := touchAt(later); h.LastSeenAtMs != later {
		t.Errorf("touch a day later: LastSeenAtMs %d, want %d", h.LastSeenAtMs, later)
	}
	if h := e.head(); h.LastSeenAtMs != later {
		t.Errorf("Head LastSeenAtMs %d after refresh, want %d", h.LastSeenAtMs, later)
	}
	if h := touchAt(later + 1); h.LastSeenAtMs != later {
		t.Errorf("touch 1 ms after refresh: LastSeenAtMs %d, want %d kept", h.LastSeenAtMs, later)
	}
}

func testPartitionsIsolated(t *testing.T, a *partitionT) {
	b := &partitionT{t: t, s: a.s, ctx: a.ctx, p: unique(t, "p2")}
	a.touch()
	hb := b.touch()
	a.commitNext(upsert("tasks", "r1", 1, "from-a"))
	if err := a.s.PutClient(a.ctx, a.p, &store.Client{ClientID: "client-a", Cursor: 1}); err != nil {
		t.Fatal(err)
	}
	if got := b.head(); got != hb {
		t.Errorf("partition B head changed by A's commit: %+v, want %+v", got, hb)
	}
	if m := b.rows("tasks", "r1"); len(m) != 0 {
		t.Errorf("B sees A's row: %v", m)
	}
	if o := b.outcome("client-a", "cc-1"); o != nil {
		t.Errorf("B sees A's outcome: %+v", o)
	}
	if cs := b.clients(); len(cs) != 0 {
		t.Errorf("B sees A's clients: %v", cs)
	}
	// B can commit seq 1 too: sequences are per partition.
	b.commitNext(upsert("tasks", "r1", 1, "from-b"))
	if r := a.rows("tasks", "r1")["r1"]; r == nil || string(r.Payload) != "from-a" {
		t.Errorf("A's row after B's commit: %+v", r)
	}
}

func testCommitGapless(t *testing.T, e *partitionT) {
	e.touch()
	var want []store.Commit
	for i := int64(1); i <= 5; i++ {
		req := e.commitNext(upsert("tasks", fmt.Sprintf("r%d", i), 1, fmt.Sprintf("p%d", i), "org=o1"))
		if req.Commit.Seq != i {
			t.Fatalf("commit %d built with seq %d", i, req.Commit.Seq)
		}
		if h := e.head(); h.MaxCommitSeq != i {
			t.Fatalf("after commit %d MaxCommitSeq = %d", i, h.MaxCommitSeq)
		}
		want = append(want, req.Commit)
	}
	got := e.log(0, 5)
	if !slices.Equal(seqs(got), seqRange(1, 5)) {
		t.Fatalf("ReadLog seqs %v, want 1..5", seqs(got))
	}
	for i, c := range got {
		checkCommit(t, c, want[i])
	}
}

func testCommitHeadMoved(t *testing.T, e *partitionT) {
	e.touch()
	first := e.commitNext(upsert("tasks", "r1", 1, "v1"))
	for _, expected := range []int64{0, 2} {
		req := commitReq(expected, "client-b", "stale", upsert("tasks", "r2", 1, "never"), upsert("tasks", "r1", 2, "never"))
		err := e.s.Commit(e.ctx, e.p, req)
		if !errors.Is(err, store.ErrHeadMoved) {
			t.Fatalf("Commit with ExpectedMaxSeq %d on head 1: %v, want ErrHeadMoved", expected, err)
		}
		// A head returned with the lost race is the head as it is, so the
		// engine can retry from it without reading it again.
		var hm *store.HeadMovedError
		if errors.As(err, &hm) && (hm.Head.MaxCommitSeq != 1 || hm.Head.LogEpoch != e.head().LogEpoch) {
			t.Errorf("HeadMovedError carries head %+v, want maxCommitSeq 1 and the partition's epoch", hm.Head)
		}
	}
	if h := e.head(); h.MaxCommitSeq != 1 {
		t.Errorf("MaxCommitSeq %d after failed commits, want 1", h.MaxCommitSeq)
	}
	rows := e.rows("tasks", "r1", "r2")
	if _, ok := rows["r2"]; ok {
		t.Errorf("failed commit wrote row r2")
	}
	checkRow(t, rows["r1"], first.Rows[0].Row)
	log := e.log(0, 10)
	if len(log) != 1 {
		t.Fatalf("ReadLog has %d commits, want 1", len(log))
	}
	checkCommit(t, log[0], first.Commit)
	if o := e.outcome("client-b", "stale"); o != nil {
		t.Errorf("failed commit recorded an outcome: %+v", o)
	}
}

func testCommitOutcomeExists(t *testing.T, e *partitionT) {
	e.touch()
	first := e.commitNext(upsert("tasks", "r1", 1, "v1"))
	dup := commitReq(1, first.Commit.ClientID, first.Commit.ClientCommitID,
		upsert("tasks", "r1", 2, "dup"), upsert("tasks", "r2", 1, "dup"))
	dup.Outcome.Result = []byte("second outcome")
	if err := e.s.Commit(e.ctx, e.p, dup); !errors.Is(err, store.ErrOutcomeExists) {
		t.Fatalf("Commit with a recorded idempotency key: %v, want ErrOutcomeExists", err)
	}
	if h := e.head(); h.MaxCommitSeq != 1 {
		t.Errorf("MaxCommitSeq %d after duplicate, want 1", h.MaxCommitSeq)
	}
	rows := e.rows("tasks", "r1", "r2")
	checkRow(t, rows["r1"], first.Rows[0].Row)
	if _, ok := rows["r2"]; ok {
		t.Errorf("duplicate commit wrote row r2")
	}
	if log := e.log(0, 10); len(log) != 1 {
		t.Errorf("ReadLog has %d commits after duplicate, want 1", len(log))
	}
	checkOutcome(t, e.outcome(first.Commit.ClientID, first.Commit.ClientCommitID), first.Outcome)
}

func testCommitKeyIsPair(t *testing.T, e *partitionT) {
	e.touch()
	a := commitReq(0, "client-a", "same-id", upsert("tasks", "r1", 1, "a"))
	e.commit(a)
	b := commitReq(1, "client-b", "same-id", upsert("tasks", "r2", 1, "b"))
	e.commit(b)
	checkOutcome(t, e.outcome("client-a", "same-id"), a.Outcome)
	checkOutcome(t, e.outcome("client-b", "same-id"), b.Outcome)
	if o := e.outcome("client-c", "same-id"); o != nil {
		t.Errorf("outcome for an unused key: %+v", o)
	}
}

func testCommitRowsMaterialized(t *testing.T, e *partitionT) {
	e.touch()
	c1 := e.commitNext(
		upsert("tasks", "a", 1, "a1", "org=o1"),
		upsert("tasks", "b", 1, "b1", "org=o1"),
		upsert("tasks", "c", 1, "c1", "org=o1", "team=t1"),
	)
	c2 := e.commitNext(
		upsert("tasks", "b", 2, "b2", "org=o2"),
		del("tasks", "c", "org=o1", "team=t1"),
	)
	rows := e.rows("tasks", "a", "b", "c", "missing")
	if len(rows) != 3 {
		t.Errorf("GetRows returned %d rows, want 3 (a, b, tombstone c)", len(rows))
	}
	checkRow(t, rows["a"], c1.Rows[0].Row)
	checkRow(t, rows["b"], c2.Rows[0].Row)
	if rows["b"] != nil && rows["b"].CommitSeq != 2 {
		t.Errorf("row b CommitSeq %d, want 2", rows["b"].CommitSeq)
	}
	checkTombstone(t, rows["c"], "c", 2, "org=o1", "team=t1")
	scanned := e.scan("tasks", "", false)
	if got := rowIDs(scanned); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("ScanRows ids %v, want [a b]", got)
	}
	checkRow(t, scanned[0], c1.Rows[0].Row)
	checkRow(t, scanned[1], c2.Rows[0].Row)
	// Re-inserting a deleted row makes it visible again.
	c3 := e.commitNext(upsert("tasks", "c", 1, "c-again"))
	checkRow(t, e.rows("tasks", "c")["c"], c3.Rows[0].Row)
	if got := rowIDs(e.scan("tasks", "", false)); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("ScanRows ids %v after re-insert, want [a b c]", got)
	}
}

func testCommitRowTwice(t *testing.T, e *partitionT) {
	e.touch()
	e.commitNext(upsert("tasks", "x", 1, "x1", "org=o1"))
	// A scope migration: delete under the old scope, upsert under the new
	// one, in one commit; the row ends in its upserted state.
	c := e.commitNext(del("tasks", "x", "org=o1"), upsert("tasks", "x", 2, "x2", "org=o2"))
	checkRow(t, e.rows("tasks", "x")["x"], c.Rows[1].Row)
	log := e.log(1, 2)
	if len(log) != 1 {
		t.Fatalf("ReadLog: %d commits, want 1", len(log))
	}
	checkCommit(t, log[0], c.Commit)
	// Upsert then delete in one commit leaves a tombstone.
	e.commitNext(upsert("tasks", "y", 1, "y1"), del("tasks", "y"))
	checkTombstone(t, e.rows("tasks", "y")["y"], "y", 3)
	if got := rowIDs(e.scan("tasks", "", false)); !slices.Equal(got, []string{"x"}) {
		t.Errorf("ScanRows ids %v, want [x]", got)
	}
}

func testCommitOutcome(t *testing.T, e *partitionT) {
	e.touch()
	req := commitReq(0, "client-a", "cc-outcome", upsert("tasks", "r", 1, "p"))
	req.Outcome.Result = []byte{0x00, 0xff, 0x10, 0x80, 0x00}
	e.commit(req)
	checkOutcome(t, e.outcome("client-a", "cc-outcome"), req.Outcome)
}

func testCommitNoAliasing(t *testing.T, e *partitionT) {
	e.touch()
	payload := []byte("payload-original")
	changeRow := []byte("payload-original")
	result := []byte("result-original")
	scopes := scopeList("org=o1")
	changeScopes := scopeList("org=o1")
	req := &store.CommitRequest{
		Commit: store.Commit{
			Seq: 1, CreatedAtMs: baseMs, ActorID: "actor", ClientID: "client-a", ClientCommitID: "cc-1",
			Changes: []store.Change{{Table: "tasks", RowID: "r", Op: wire.OpUpsert, RowVersion: 1, Scopes: changeScopes, Row: changeRow}},
		},
		Rows:    []store.RowWrite{{Table: "tasks", Row: store.Row{RowID: "r", Version: 1, Scopes: scopes, Payload: payload, CommitSeq: 1}}},
		Outcome: store.Outcome{Applied: true, CommitSeq: 1, Result: result, RecordedAtMs: baseMs},
	}
	wantRow := store.Row{RowID: "r", Version: 1, Scopes: scopeList("org=o1"), Payload: []byte("payload-original"), CommitSeq: 1}
	wantCommit := store.Commit{
		Seq: 1, CreatedAtMs: baseMs, ActorID: "actor", ClientID: "client-a", ClientCommitID: "cc-1",
		Changes: []store.Change{{Table: "tasks", RowID: "r", Op: wire.OpUpsert, RowVersion: 1, Scopes: scopeList("org=o1"), Row: []byte("payload-original")}},
	}
	wantOutcome := store.Outcome{Applied: true, CommitSeq: 1, Result: []byte("result-original"), RecordedAtMs: baseMs}
	e.commit(req)

	// The caller reuses its buffers.
	copy(payload, "XXXXXXXXXXXXXXXX")
	copy(changeRow, "XXXXXXXXXXXXXXXX")
	copy(result, "XXXXXXXXXXXXXXX")
	scopes[0].Value = "mutated"
	changeScopes[0].Value = "mutated"

	check := func(when string) {
		t.Helper()
		r := e.rows("tasks", "r")["r"]
		checkRow(t, r, wantRow)
		s := e.scan("tasks", "", false)
		if len(s) != 1 {
			t.Fatalf("%s: ScanRows %d rows, want 1", when, len(s))
		}
		checkRow(t, s[0], wantRow)
		log := e.log(0, 1)
		if len(log) != 1 {
			t.Fatalf("%s: ReadLog %d commits, want 1", when, len(log))
		}
		checkCommit(t, log[0], wantCommit)
		o := e.outcome("client-a", "cc-1")
		checkOutcome(t, o, wantOutcome)

		// Mutate everything handed out; the next read must not see it.
		r.Payload[0] ^= 0xff
		r.Scopes[0].Value = "mutated"
		s[0].Payload[0] ^= 0xff
		s[0].Scopes[0].Value = "mutated"
		log[0].Changes[0].Row[0] ^= 0xff
		log[0].Changes[0].Scopes[0].Value = "mutated"
		o.Result[0] ^= 0xff
	}
	check("after mutating inputs")
	check("after mutating returned values")
}

func testCommitLargePayload(t *testing.T, e *partitionT) {
	e.touch()
	big := make([]byte, 300*1024)
	_, _ = rand.Read(big)
	req := e.commitNext(upsert("tasks", "big", 1, string(big)))
	checkRow(t, e.rows("tasks", "big")["big"], req.Rows[0].Row)
	s := e.scan("tasks", "", false)
	if len(s) != 1 || !bytes.Equal(s[0].Payload, big) {
		t.Errorf("ScanRows did not return the 300 KB payload intact")
	}
	log := e.log(0, 1)
	if len(log) != 1 || len(log[0].Changes) != 1 || !bytes.Equal(log[0].Changes[0].Row, big) {
		t.Errorf("ReadLog did not return the 300 KB change row intact")
	}
}

func testCommitManyRows(t *testing.T, e *partitionT) {
	e.touch()
	const n = 500
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("row-%04d", i)
	}
	shuffled := slices.Clone(ids)
	for i := range shuffled { // deterministic permutation: 7 is coprime to 500
		shuffled[i] = ids[(i*7)%n]
	}
	var writes []store.RowWrite
	for _, id := range shuffled {
		writes = append(writes, upsert("tasks", id, 1, "payload-"+id, "org=o1"))
	}
	req := e.commitNext(writes...)

	got := e.rows("tasks", ids...)
	if len(got) != n {
		t.Fatalf("GetRows returned %d of %d rows", len(got), n)
	}
	for _, w := range req.Rows {
		checkRow(t, got[w.Row.RowID], w.Row)
	}
	if s := rowIDs(e.scan("tasks", "", false)); !slices.Equal(s, ids) {
		t.Fatalf("ScanRows returned %d ids, not the %d sorted ids", len(s), n)
	}
	// Resume part-way through, as a paged bootstrap does.
	var first []string
	if err := e.s.ScanRows(e.ctx, e.p, "tasks", "", false, func(r *store.Row) bool {
		first = append(first, r.RowID)
		return len(first) < 300
	}); err != nil {
		t.Fatal(err)
	}
	rest := rowIDs(e.scan("tasks", first[len(first)-1], true))
	if !slices.Equal(append(first, rest...), ids) {
		t.Errorf("paged scan (300 + %d) does not reproduce the full order", len(rest))
	}
	log := e.log(0, 1)
	if len(log) != 1 {
		t.Fatalf("ReadLog: %d commits, want 1", len(log))
	}
	checkCommit(t, log[0], req.Commit) // change order preserved
}

func testCommitConcurrent(t *testing.T, e *partitionT) {
	e.touch()
	const workers, perWorker = 8, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			clientID := fmt.Sprintf("client-%d", w)
			for i := 0; i < perWorker; {
				h, _, err := e.s.Head(e.ctx, e.p)
				if err != nil {
					t.Errorf("Head: %v", err)
					return
				}
				seq := h.MaxCommitSeq + 1
				req := commitReq(h.MaxCommitSeq, clientID, fmt.Sprintf("cc-%d", i),
					upsert("tasks", "counter", seq, fmt.Sprint(seq)),
					upsert("tasks", clientID, int64(i+1), fmt.Sprint(i+1)))
				switch err := e.s.Commit(e.ctx, e.p, req); {
				case errors.Is(err, store.ErrHeadMoved):
					continue
				case err != nil:
					t.Errorf("Commit: %v", err)
					return
				}
				i++
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	const total = workers * perWorker
	if h := e.head(); h.MaxCommitSeq != total {
		t.Fatalf("MaxCommitSeq %d, want %d", h.MaxCommitSeq, total)
	}
	log := e.log(0, total)
	if !slices.Equal(seqs(log), seqRange(1, total)) {
		t.Fatalf("log is not gapless 1..%d: %d commits", total, len(log))
	}
	seen := map[[2]string]int64{}
	for _, c := range log {
		k := [2]string{c.ClientID, c.ClientCommitID}
		if prev, dup := seen[k]; dup {
			t.Errorf("key %v committed twice (seq %d and %d)", k, prev, c.Seq)
		}
		seen[k] = c.Seq
	}
	if len(seen) != total {
		t.Errorf("%d distinct commits, want %d", len(seen), total)
	}
	for k, seq := range seen {
		o := e.outcome(k[0], k[1])
		if o == nil || !o.Applied || o.CommitSeq != seq {
			t.Errorf("outcome of %v: %+v, want applied at seq %d", k, o, seq)
		}
	}
	// Rows were written with their commit: the last commit's counter wins.
	if r := e.rows("tasks", "counter")["counter"]; r == nil || r.Version != total || r.CommitSeq != total || string(r.Payload) != fmt.Sprint(total) {
		t.Errorf("counter row %+v, want version/commitSeq/payload %d", r, total)
	}
	for w := range workers {
		id := fmt.Sprintf("client-%d", w)
		if r := e.rows("tasks", id)[id]; r == nil || r.Version != perWorker {
			t.Errorf("row %s: %+v, want version %d", id, r, perWorker)
		}
	}
}

func testRejectionPutIfAbsent(t *testing.T, e *partitionT) {
	e.touch()
	r1 := store.Outcome{Result: []byte("rejected-1"), RecordedAtMs: baseMs}
	r2 := store.Outcome{Result: []byte("rejected-2"), RecordedAtMs: baseMs + 1}
	if err := e.s.PutRejection(e.ctx, e.p, "client-a", "cc-1", r1, store.WriterCheck{}); err != nil {
		t.Fatalf("PutRejection: %v", err)
	}
	checkOutcome(t, e.outcome("client-a", "cc-1"), r1)
	if err := e.s.PutRejection(e.ctx, e.p, "client-a", "cc-1", r2, store.WriterCheck{}); !errors.Is(err, store.ErrOutcomeExists) {
		t.Fatalf("second PutRejection: %v, want ErrOutcomeExists", err)
	}
	checkOutcome(t, e.outcome("client-a", "cc-1"), r1)
	if h := e.head(); h.MaxCommitSeq != 0 {
		t.Errorf("a rejection advanced MaxCommitSeq to %d", h.MaxCommitSeq)
	}
}

func testRejectionBlocksCommit(t *testing.T, e *partitionT) {
	e.touch()
	rej := store.Outcome{Result: []byte("rejected"), RecordedAtMs: baseMs}
	if err := e.s.PutRejection(e.ctx, e.p, "client-a", "cc-1", rej, store.WriterCheck{}); err != nil {
		t.Fatal(err)
	}
	req := commitReq(0, "client-a", "cc-1", upsert("tasks", "r", 1, "p"))
	if err := e.s.Commit(e.ctx, e.p, req); !errors.Is(err, store.ErrOutcomeExists) {
		t.Fatalf("Commit for a rejected key: %v, want ErrOutcomeExists", err)
	}
	if h := e.head(); h.MaxCommitSeq != 0 {
		t.Errorf("MaxCommitSeq %d, want 0", h.MaxCommitSeq)
	}
	if m := e.rows("tasks", "r"); len(m) != 0 {
		t.Errorf("blocked commit wrote its row")
	}
	if log := e.log(0, 10); len(log) != 0 {
		t.Errorf("blocked commit logged %d commits", len(log))
	}
	checkOutcome(t, e.outcome("client-a", "cc-1"), rej)
}

func testRejectionAfterCommit(t *testing.T, e *partitionT) {
	e.touch()
	req := e.commitNext(upsert("tasks", "r", 1, "p"))
	rej := store.Outcome{Result: []byte("rejected"), RecordedAtMs: baseMs}
	if err := e.s.PutRejection(e.ctx, e.p, req.Commit.ClientID, req.Commit.ClientCommitID, rej, store.WriterCheck{}); !errors.Is(err, store.ErrOutcomeExists) {
		t.Fatalf("PutRejection over an applied outcome: %v, want ErrOutcomeExists", err)
	}
	checkOutcome(t, e.outcome(req.Commit.ClientID, req.Commit.ClientCommitID), req.Outcome)
}

func testRejectionNoAliasing(t *testing.T, e *partitionT) {
	e.touch()
	buf := []byte("rejected-original")
	if err := e.s.PutRejection(e.ctx, e.p, "client-a", "cc-1", store.Outcome{Result: buf, RecordedAtMs: baseMs}, store.WriterCheck{}); err != nil {
		t.Fatal(err)
	}
	copy(buf, "XXXXXXXX")
	want := store.Outcome{Result: []byte("rejected-original"), RecordedAtMs: baseMs}
	o := e.outcome("client-a", "cc-1")
	checkOutcome(t, o, want)
	o.Result[0] = 'Y'
	checkOutcome(t, e.outcome("client-a", "cc-1"), want)
}

func testGetRowsMissing(t *testing.T, e *partitionT) {
	e.touch()
	e.commitNext(upsert("tasks", "present", 1, "p"))
	m := e.rows("tasks", "absent-1", "present", "absent-2")
	if len(m) != 1 || m["present"] == nil {
		t.Errorf("GetRows: %v, want only present", m)
	}
	for _, id := range []string{"absent-1", "absent-2"} {
		if _, ok := m[id]; ok {
			t.Errorf("missing row %q has a map entry", id)
		}
	}
	if m := e.rows("other-table", "present"); len(m) != 0 {
		t.Errorf("GetRows on another table: %v, want empty", m)
	}
	if m := e.rows("tasks"); len(m) != 0 {
		t.Errorf("GetRows with no ids: %v, want empty", m)
	}
}

// byteOrderIDs are ids whose byte order differs from case-insensitive,
// numeric and UTF-16 orders ("～" U+FF5E sorts after "😀" in UTF-16 but
// before it in UTF-8 bytes).
var byteOrderIDs = []string{"10", "9", "B", "a", "a0", "é", "日本", "～", "😀"}

func testScanByteOrder(t *testing.T, e *partitionT) {
	e.touch()
	// Insert in a scrambled order across several commits.
	order := []int{5, 1, 7, 3, 0, 8, 2, 6, 4}
	for i := 0; i < len(order); i += 3 {
		var ws []store.RowWrite
		for _, k := range order[i : i+3] {
			ws = append(ws, upsert("tasks", byteOrderIDs[k], 1, byteOrderIDs[k]))
		}
		e.commitNext(ws...)
	}
	want := slices.Clone(byteOrderIDs)
	sort.Strings(want) // Go compares strings bytewise
	if !slices.Equal(want, byteOrderIDs) {
		t.Fatalf("suite bug: byteOrderIDs not in byte order")
	}
	got := e.scan("tasks", "", false)
	if ids := rowIDs(got); !slices.Equal(ids, want) {
		t.Fatalf("ScanRows order %q, want %q", ids, want)
	}
	for _, r := range got {
		if string(r.Payload) != r.RowID {
			t.Errorf("row %q payload %q", r.RowID, r.Payload)
		}
	}
}

func testScanAfter(t *testing.T, e *partitionT) {
	e.touch()
	var ws []store.RowWrite
	for _, id := range byteOrderIDs {
		ws = append(ws, upsert("tasks", id, 1, id))
	}
	e.commitNext(ws...)
	for i, after := range byteOrderIDs {
		if got := rowIDs(e.scan("tasks", after, true)); !slices.Equal(got, byteOrderIDs[i+1:]) {
			t.Errorf("after %q: %q, want %q", after, got, byteOrderIDs[i+1:])
		}
	}
	cases := []struct {
		after string
		want  []string
	}{
		{"", byteOrderIDs},         // the empty id sorts first
		{"0", byteOrderIDs},        // before "10"
		{"A", byteOrderIDs[2:]},    // between "9" and "B"
		{"a", byteOrderIDs[4:]},    // exact: exclusive
		{"a00", byteOrderIDs[5:]},  // between "a0" and "é"
		{"\U0010FFFF", []string{}}, // past every id
	}
	for _, c := range cases {
		if got := rowIDs(e.scan("tasks", c.after, true)); !slices.Equal(got, c.want) {
			t.Errorf("after %q: %q, want %q", c.after, got, c.want)
		}
	}
	if got := rowIDs(e.scan("tasks", "zzz", false)); !slices.Equal(got, byteOrderIDs) {
		t.Errorf("hasAfter=false must ignore after: %q", got)
	}
}

func testScanEarlyStop(t *testing.T, e *partitionT) {
	e.touch()
	e.commitNext(upsert("tasks", "a", 1, "a"), upsert("tasks", "b", 1, "b"), upsert("tasks", "c", 1, "c"), upsert("tasks", "d", 1, "d"))
	var got []string
	if err := e.s.ScanRows(e.ctx, e.p, "tasks", "", false, func(r *store.Row) bool {
		got = append(got, r.RowID)
		return len(got) < 2
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("fn called for %q after returning false at b", got)
	}
}

func testScanTablesSeparate(t *testing.T, e *partitionT) {
	e.touch()
	e.commitNext(upsert("tasks", "x", 1, "task"), upsert("notes", "x", 1, "note"), upsert("notes", "y", 1, "note"))
	if got := e.scan("tasks", "", false); len(got) != 1 || string(got[0].Payload) != "task" {
		t.Errorf("tasks scan: %v", rowIDs(got))
	}
	if got := rowIDs(e.scan("notes", "", false)); !slices.Equal(got, []string{"x", "y"}) {
		t.Errorf("notes scan: %v", got)
	}
	if got := e.scan("empty", "", false); len(got) != 0 {
		t.Errorf("scan of a never-written table: %v", rowIDs(got))
	}
	if r := e.rows("notes", "x")["x"]; r == nil || string(r.Payload) != "note" {
		t.Errorf("notes/x: %+v", r)
	}
}

func testReadLogWindow(t *testing.T, e *partitionT) {
	e.touch()
	for i := 1; i <= 10; i++ {
		e.commitNext(upsert("tasks", fmt.Sprintf("r%d", i), 1, "p"))
	}
	cases := []struct {
		after, through int64
		want           []int64
	}{
		{0, 10, seqRange(1, 10)},
		{3, 7, seqRange(4, 7)},
		{0, 100, seqRange(1, 10)},
		{9, 10, []int64{10}},
		{7, 7, []int64{}},
		{10, 20, []int64{}},
		{5, 3, []int64{}},
	}
	for _, c := range cases {
		if got := seqs(e.log(c.after, c.through)); !slices.Equal(got, c.want) {
			t.Errorf("ReadLog(%d, %d) = %v, want %v", c.after, c.through, got, c.want)
		}
	}
}

func testReadLogEarlyStop(t *testing.T, e *partitionT) {
	e.touch()
	for i := 1; i <= 5; i++ {
		e.commitNext(upsert("tasks", "r", int64(i), "p"))
	}
	var got []int64
	if err := e.s.ReadLog(e.ctx, e.p, 1, 5, func(c *store.Commit) bool {
		got = append(got, c.Seq)
		return len(got) < 2
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []int64{2, 3}) {
		t.Errorf("ReadLog early stop saw %v, want [2 3]", got)
	}
}

func testClients(t *testing.T, e *partitionT) {
	e.touch()
	if c, err := e.s.GetClient(e.ctx, e.p, "client-a"); err != nil || c != nil {
		t.Fatalf("GetClient before put: %+v, %v", c, err)
	}
	a := store.Client{ClientID: "client-a", ActorID: "actor-a", Cursor: 7, UpdatedAtMs: baseMs, WireVersion: wire.Version2}
	b := store.Client{ClientID: "client-b", ActorID: "actor-b", Cursor: -1, UpdatedAtMs: baseMs + 1, WireVersion: wire.Version1}
	for _, c := range []store.Client{a, b} {
		if err := e.s.PutClient(e.ctx, e.p, &c); err != nil {
			t.Fatal(err)
		}
	}
	get := func(id string) *store.Client {
		t.Helper()
		c, err := e.s.GetClient(e.ctx, e.p, id)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if got := get("client-a"); got == nil || *got != a {
		t.Errorf("GetClient a: %+v, want %+v", got, a)
	}
	a2 := a
	a2.Cursor, a2.UpdatedAtMs, a2.ActorID = 42, baseMs+5, "actor-a2"
	if err := e.s.PutClient(e.ctx, e.p, &a2); err != nil {
		t.Fatal(err)
	}
	if got := get("client-a"); got == nil || *got != a2 {
		t.Errorf("GetClient after replace: %+v, want %+v", got, a2)
	}
	all := e.clients()
	if len(all) != 2 || all["client-a"] != a2 || all["client-b"] != b {
		t.Errorf("ListClients: %+v, want a2 and b", all)
	}
}

func testClientsEarlyStop(t *testing.T, e *partitionT) {
	e.touch()
	for i := range 3 {
		if err := e.s.PutClient(e.ctx, e.p, &store.Client{ClientID: fmt.Sprintf("c%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	calls := 0
	if err := e.s.ListClients(e.ctx, e.p, func(*store.Client) bool { calls++; return false }); err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Errorf("ListClients called fn %d times after it returned false", calls)
	}
}

func testRotateEpoch(t *testing.T, e *partitionT) {
	before := e.touch()
	e.commitNext(upsert("tasks", "r", 1, "p"))
	for _, id := range []string{"client-a", "client-b"} {
		if err := e.s.PutClient(e.ctx, e.p, &store.Client{ClientID: id, Cursor: 1, UpdatedAtMs: baseMs}); err != nil {
			t.Fatal(err)
		}
	}
	epoch := unique(t, "rotated")
	if epoch == before.LogEpoch {
		t.Fatal("suite bug: epochs not unique")
	}
	if err := e.s.RotateEpoch(e.ctx, e.p, epoch, baseMs+10); err != nil {
		t.Fatalf("RotateEpoch: %v", err)
	}
	h := e.head()
	if h.LogEpoch != epoch || !h.EpochRequired {
		t.Errorf("Head after rotation: %+v, want epoch %q and EpochRequired", h, epoch)
	}
	if h.MaxCommitSeq != 1 {
		t.Errorf("rotation changed MaxCommitSeq to %d, want 1", h.MaxCommitSeq)
	}
	th, err := e.s.TouchPartition(e.ctx, e.p, baseMs+20, unique(t, "ignored"))
	if err != nil {
		t.Fatal(err)
	}
	if th.LogEpoch != epoch || !th.EpochRequired {
		t.Errorf("TouchPartition after rotation: %+v, want epoch %q and EpochRequired", th, epoch)
	}
	if c, err := e.s.GetClient(e.ctx, e.p, "client-a"); err != nil || c != nil {
		t.Errorf("client record survived rotation: %+v, %v", c, err)
	}
	if cs := e.clients(); len(cs) != 0 {
		t.Errorf("ListClients after rotation: %v", cs)
	}
	// Records written after the rotation stay.
	if err := e.s.PutClient(e.ctx, e.p, &store.Client{ClientID: "client-c", Cursor: -1}); err != nil {
		t.Fatal(err)
	}
	if cs := e.clients(); len(cs) != 1 {
		t.Errorf("ListClients after a post-rotation put: %v", cs)
	}
}

func testPrune(t *testing.T, e *partitionT) {
	e.touch()
	for i := 1; i <= 10; i++ {
		e.commitNext(upsert("tasks", fmt.Sprintf("r%d", i), 1, "p"))
	}
	prune := func(h int64, wantRemoved int, wantHorizon int64) {
		t.Helper()
		n, err := e.s.Prune(e.ctx, e.p, h)
		if err != nil {
			t.Fatalf("Prune(%d): %v", h, err)
		}
		if n != wantRemoved {
			t.Errorf("Prune(%d) removed %d, want %d", h, n, wantRemoved)
		}
		if got := e.head().HorizonSeq; got != wantHorizon {
			t.Errorf("after Prune(%d) HorizonSeq %d, want %d", h, got, wantHorizon)
		}
	}
	prune(4, 4, 4)
	if got := seqs(e.log(0, 10)); !slices.Equal(got, seqRange(5, 10)) {
		t.Errorf("ReadLog after Prune(4): %v, want 5..10", got)
	}
	if got := e.commitTimes(0); len(got) != 6 || got[0][0] != 5 {
		t.Errorf("CommitTimes after Prune(4): %v, want seqs 5..10", got)
	}
	prune(2, 0, 4) // never backwards
	prune(4, 0, 4)
	prune(7, 3, 7)
	if got := seqs(e.log(0, 10)); !slices.Equal(got, seqRange(8, 10)) {
		t.Errorf("ReadLog after Prune(7): %v, want 8..10", got)
	}
	prune(10, 3, 10)
	if got := e.log(0, 10); len(got) != 0 {
		t.Errorf("ReadLog after pruning everything: %v", seqs(got))
	}
	if h := e.head(); h.MaxCommitSeq != 10 {
		t.Errorf("pruning moved MaxCommitSeq to %d", h.MaxCommitSeq)
	}
	// The sequence continues after the horizon.
	e.commitNext(upsert("tasks", "r11", 1, "p"))
	if got := seqs(e.log(0, 20)); !slices.Equal(got, []int64{11}) {
		t.Errorf("ReadLog after commit 11: %v", got)
	}
}

func testPruneKeepsRows(t *testing.T, e *partitionT) {
	e.touch()
	c1 := e.commitNext(upsert("tasks", "a", 1, "a"))
	e.commitNext(upsert("tasks", "b", 1, "b"))
	if _, err := e.s.Prune(e.ctx, e.p, 2); err != nil {
		t.Fatal(err)
	}
	checkRow(t, e.rows("tasks", "a")["a"], c1.Rows[0].Row)
	if got := rowIDs(e.scan("tasks", "", false)); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("ScanRows after prune: %v", got)
	}
	checkOutcome(t, e.outcome(c1.Commit.ClientID, c1.Commit.ClientCommitID), c1.Outcome)
}

func testCommitTimes(t *testing.T, e *partitionT) {
	e.touch()
	var want [][2]int64
	for i := int64(1); i <= 5; i++ {
		req := commitReq(i-1, "client-a", fmt.Sprintf("cc-%d", i), upsert("tasks", "r", i, "p"))
		req.Commit.CreatedAtMs = baseMs + i*i*100 // distinct, not derivable from seq alone
		e.commit(req)
		want = append(want, [2]int64{i, req.Commit.CreatedAtMs})
	}
	if got := e.commitTimes(0); !slices.Equal(got, want) {
		t.Errorf("CommitTimes(0) = %v, want %v", got, want)
	}
	if got := e.commitTimes(2); !slices.Equal(got, want[2:]) {
		t.Errorf("CommitTimes(2) = %v, want %v", got, want[2:])
	}
	if got := e.commitTimes(5); len(got) != 0 {
		t.Errorf("CommitTimes(5) = %v, want none", got)
	}
	var got [][2]int64
	if err := e.s.CommitTimes(e.ctx, e.p, 0, func(seq, at int64) bool {
		got = append(got, [2]int64{seq, at})
		return len(got) < 2
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want[:2]) {
		t.Errorf("CommitTimes early stop saw %v, want %v", got, want[:2])
	}
}

// The push outcome keeps the actor that recorded it (§1.5: the engine
// never replays it to another actor).
func testRejectionOwner(t *testing.T, e *partitionT) {
	e.touch()
	o := store.Outcome{Result: []byte("rejected"), RecordedAtMs: baseMs, ActorID: "actor-a"}
	if err := e.s.PutRejection(e.ctx, e.p, "client-a", "cc-1", o, store.WriterCheck{}); err != nil {
		t.Fatal(err)
	}
	if got := e.outcome("client-a", "cc-1"); got == nil || got.ActorID != "actor-a" {
		t.Fatalf("rejection outcome %+v: want owner actor-a", got)
	}
	req := commitReq(0, "client-b", "cc-1", upsert("tasks", "r", 1, "p"))
	e.commit(req)
	if got := e.outcome("client-b", "cc-1"); got == nil || got.ActorID != "actor-client-b" {
		t.Fatalf("applied outcome %+v: want owner actor-client-b", got)
	}
}

// BindClient creates the record only when absent and always returns the
// stored one (§1.5 binding is a conditional first write).
func testBindClient(t *testing.T, e *partitionT) {
	e.touch()
	a := store.Client{ClientID: "client-a", ActorID: "actor-a", Cursor: -1, UpdatedAtMs: baseMs, WireVersion: wire.Version2}
	got, err := e.s.BindClient(e.ctx, e.p, &a)
	if err != nil || got == nil || *got != a {
		t.Fatalf("first bind: %+v, %v; want %+v", got, err, a)
	}
	b := store.Client{ClientID: "client-a", ActorID: "actor-b", Cursor: 5, UpdatedAtMs: baseMs + 1, WireVersion: wire.Version1}
	got, err = e.s.BindClient(e.ctx, e.p, &b)
	if err != nil || got == nil || *got != a {
		t.Fatalf("second bind by another actor: %+v, %v; want the first record %+v", got, err, a)
	}
	if c, err := e.s.GetClient(e.ctx, e.p, "client-a"); err != nil || c == nil || *c != a {
		t.Fatalf("stored after a lost bind: %+v, %v; want %+v", c, err, a)
	}
	// An existing record from PutClient is not replaced either.
	c := store.Client{ClientID: "client-c", ActorID: "actor-c", Cursor: 3, UpdatedAtMs: baseMs, WireVersion: wire.Version2}
	if err := e.s.PutClient(e.ctx, e.p, &c); err != nil {
		t.Fatal(err)
	}
	d := c
	d.ActorID = "actor-d"
	if got, err := e.s.BindClient(e.ctx, e.p, &d); err != nil || got == nil || *got != c {
		t.Fatalf("bind over a put record: %+v, %v; want %+v", got, err, c)
	}
}

// Concurrent binds of one clientId by different actors: exactly one
// record is created and every caller is told the same winner.
func testBindClientConcurrent(t *testing.T, e *partitionT) {
	e.touch()
	const n = 8
	for round := range 3 {
		id := fmt.Sprintf("client-%d", round)
		var wg sync.WaitGroup
		winners := make([]string, n)
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := e.s.BindClient(e.ctx, e.p, &store.Client{ClientID: id, ActorID: fmt.Sprintf("actor-%d", i), Cursor: -1, UpdatedAtMs: baseMs})
				errs[i] = err
				if got != nil {
					winners[i] = got.ActorID
				}
			}()
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("bind %d: %v", i, errs[i])
			}
			if winners[i] == "" || winners[i] != winners[0] {
				t.Fatalf("round %d: binders saw actors %v; want one winner for all", round, winners)
			}
		}
		if c, err := e.s.GetClient(e.ctx, e.p, id); err != nil || c == nil || c.ActorID != winners[0] {
			t.Fatalf("stored record %+v, %v; want actor %s", c, err, winners[0])
		}
	}
}
