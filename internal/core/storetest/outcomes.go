package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// RunOutcomeExpiry runs the idempotency-window contract (issue 20): an
// outcome answers its key (§2.3) until window after its RecordedAtMs,
// and is absent from then on, to reads at a later time and to the
// put-if-absent of Commit and PutRejection recording the key again at a
// later time, whether or not the backend has deleted it yet. newStore
// returns a store whose outcome window is window (a whole number of
// seconds).
//
// Outcomes are recorded at the wall clock's current second: a backend
// whose own TTL sweeper runs on wall time (DynamoDB Local) then deletes
// nothing while the subtests run, and every expiry they see is the
// store's own rule.
func RunOutcomeExpiry(t *testing.T, window time.Duration, newStore func(t *testing.T) store.Store) {
	w := window.Milliseconds()
	t0 := time.Now().Truncate(time.Second).UnixMilli()
	tests := []struct {
		name string
		fn   func(*testing.T, *partitionT, int64, int64)
	}{
		{"Commit/ReplayedWithinWindow", testOutcomeWithinWindow},
		{"Commit/ExpiredIsAbsent", testOutcomeExpired},
		{"PutRejection/ExpiredIsAbsent", testRejectionExpired},
		{"NoRecordingTimeNeverExpires", testOutcomeNoTime},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newPartition(t, newStore), t0, w) })
	}
}

// outcomeAt reads the outcome of (clientID, id) at nowMs.
func (e *partitionT) outcomeAt(clientID, id string, nowMs int64) *store.Outcome {
	e.t.Helper()
	o, err := e.s.GetOutcome(e.ctx, e.p, clientID, id, nowMs)
	if err != nil {
		e.t.Fatalf("GetOutcome at %d: %v", nowMs, err)
	}
	return o
}

// recordedAt re-stamps req's commit and outcome at ms.
func recordedAt(req *store.CommitRequest, ms int64) *store.CommitRequest {
	req.Commit.CreatedAtMs, req.Outcome.RecordedAtMs = ms, ms
	return req
}

func testOutcomeWithinWindow(t *testing.T, e *partitionT, t0, w int64) {
	e.touch()
	first := recordedAt(commitReq(0, "client-a", "cc-1", upsert("tasks", "r1", 1, "v1")), t0)
	e.commit(first)
	at := first.Outcome.RecordedAtMs
	checkOutcome(t, e.outcomeAt("client-a", first.Commit.ClientCommitID, at+w-1), first.Outcome)
	dup := recordedAt(commitReq(1, "client-a", first.Commit.ClientCommitID, upsert("tasks", "r1", 2, "dup")), at+w-1)
	if err := e.s.Commit(e.ctx, e.p, dup); !errors.Is(err, store.ErrOutcomeExists) {
		t.Fatalf("Commit 1 ms before the window ends: %v, want ErrOutcomeExists", err)
	}
	if h := e.head(); h.MaxCommitSeq != 1 {
		t.Fatalf("MaxCommitSeq %d after a replay inside the window, want 1", h.MaxCommitSeq)
	}
	checkRow(t, e.rows("tasks", "r1")["r1"], first.Rows[0].Row)
}

func testOutcomeExpired(t *testing.T, e *partitionT, t0, w int64) {
	e.touch()
	first := recordedAt(commitReq(0, "client-a", "cc-1", upsert("tasks", "r1", 1, "v1")), t0)
	e.commit(first)
	id, end := first.Commit.ClientCommitID, first.Outcome.RecordedAtMs+w
	if o := e.outcomeAt("client-a", id, end); o != nil {
		t.Fatalf("outcome read when its window ended: %+v, want absent", o)
	}
	// Read at an earlier time, the outcome is still there: expiry is a
	// matter of the reader's clock, not a deletion.
	checkOutcome(t, e.outcomeAt("client-a", id, end-1), first.Outcome)
	again := recordedAt(commitReq(1, "client-a", id, upsert("tasks", "r1", 2, "v2")), end)
	if err := e.s.Commit(e.ctx, e.p, again); err != nil {
		t.Fatalf("Commit of a key whose outcome expired: %v, want it recorded again", err)
	}
	checkOutcome(t, e.outcomeAt("client-a", id, end), again.Outcome)
	if got := seqs(e.log(0, 10)); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("log %v after re-recording, want [1 2]", got)
	}
	checkRow(t, e.rows("tasks", "r1")["r1"], again.Rows[0].Row)
	// The new outcome has a window of its own.
	dup := recordedAt(commitReq(2, "client-a", id, upsert("tasks", "r1", 3, "v3")), end+w-1)
	if err := e.s.Commit(e.ctx, e.p, dup); !errors.Is(err, store.ErrOutcomeExists) {
		t.Fatalf("Commit inside the new outcome's window: %v, want ErrOutcomeExists", err)
	}
}

func testRejectionExpired(t *testing.T, e *partitionT, t0, w int64) {
	e.touch()
	rej := store.Outcome{Result: []byte("rejected-1"), RecordedAtMs: t0, ActorID: "actor-client-a"}
	if err := e.s.PutRejection(e.ctx, e.p, "client-a", "cc-r", rej, store.WriterCheck{}); err != nil {
		t.Fatal(err)
	}
	late := store.Outcome{Result: []byte("rejected-2"), RecordedAtMs: t0 + w - 1, ActorID: "actor-client-a"}
	if err := e.s.PutRejection(e.ctx, e.p, "client-a", "cc-r", late, store.WriterCheck{}); !errors.Is(err, store.ErrOutcomeExists) {
		t.Fatalf("PutRejection inside the window: %v, want ErrOutcomeExists", err)
	}
	late.RecordedAtMs = t0 + w
	if err := e.s.PutRejection(e.ctx, e.p, "client-a", "cc-r", late, store.WriterCheck{}); err != nil {
		t.Fatalf("PutRejection after the window: %v, want it recorded again", err)
	}
	checkOutcome(t, e.outcomeAt("client-a", "cc-r", t0+w), late)
	// A commit of the key after that rejection's window applies.
	req := recordedAt(commitReq(0, "client-a", "cc-r", upsert("tasks", "r", 1, "p")), t0+2*w)
	if err := e.s.Commit(e.ctx, e.p, req); err != nil {
		t.Fatalf("Commit after the rejection's window: %v", err)
	}
	checkOutcome(t, e.outcomeAt("client-a", "cc-r", t0+2*w), req.Outcome)
}

func testOutcomeNoTime(t *testing.T, e *partitionT, t0, w int64) {
	e.touch()
	req := commitReq(0, "client-a", "cc-0", upsert("tasks", "r", 1, "p"))
	req.Outcome.RecordedAtMs = 0
	e.commit(req)
	far := t0 + 100*w
	checkOutcome(t, e.outcomeAt("client-a", "cc-0", far), req.Outcome)
	dup := recordedAt(commitReq(1, "client-a", "cc-0", upsert("tasks", "r", 2, "q")), far)
	if err := e.s.Commit(e.ctx, e.p, dup); !errors.Is(err, store.ErrOutcomeExists) {
		t.Fatalf("Commit of a key whose outcome has no time: %v, want ErrOutcomeExists", err)
	}
}
