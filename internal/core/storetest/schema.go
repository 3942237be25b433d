package storetest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// SchemaBackend is a store with the rolling-upgrade methods.
type SchemaBackend interface {
	store.Store
	store.SchemaStore
}

// RunSchemaStore runs the store.SchemaStore contract. The schema marker
// is table-wide, so newStore must return a fresh, empty backend on
// every call.
func RunSchemaStore(t *testing.T, newStore func(t *testing.T) SchemaBackend) {
	tests := []struct {
		name string
		fn   func(*testing.T, *schemaT)
	}{
		{"Marker/OnlyRises", testMarkerRises},
		{"Marker/InTouchPartition", testMarkerInTouch},
		{"Fence/RefusesOlderWriter", testFenceRefuses},
		{"Fence/RacingWriterFenced", testFenceRace},
		{"Fence/NewPartitionStartsAtMarker", testFenceNewPartition},
		{"Fence/RaisedByCommit", testFenceRaisedByCommit},
		{"Gate/TokenFencesCommit", testGateToken},
		{"Gate/TokenBoundToLogEpoch", testGateTokenEpoch},
		{"Gate/HeadMovedCarriesGate", testHeadMovedGate},
		{"Fence/RefusesOlderRejection", testFenceRejection},
		{"Gate/TokenFencesRejection", testGateTokenRejection},
		{"Checkpoint/DeclareClaimAdvance", testCheckpointLifecycle},
		{"Checkpoint/DeclaredWithTheMarker", testDeclareRaisesMarker},
		{"Checkpoint/SupersededOwnerWritesNothing", testCheckpointSuperseded},
		{"Checkpoint/ActivationOutcomes", testCheckpointActivation},
		{"Checkpoint/Unverifiable", testCheckpointUnverifiable},
		{"TableWide/GatedBeforeMaterialised", testTableWideGated},
		{"TableWide/MaterialiseKeepsExisting", testTableWideKeepsExisting},
		{"TableWide/NewPartitionStartsMaterialised", testTableWideNewPartition},
		{"TableWide/NewGenerationMaterialisesAgain", testTableWideGeneration},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			e := &schemaT{partitionT: &partitionT{t: t, s: s, ctx: t.Context(), p: unique(t, "p")}, ss: s}
			tc.fn(t, e)
		})
	}
}

type schemaT struct {
	*partitionT
	ss SchemaBackend
}

func (e *schemaT) gate() store.Gate {
	e.t.Helper()
	g, err := e.ss.ReadGate(e.ctx, e.p)
	if err != nil {
		e.t.Fatalf("ReadGate: %v", err)
	}
	return g
}

func (e *schemaT) bump(v int64) int64 {
	e.t.Helper()
	got, err := e.ss.BumpSchemaMarker(e.ctx, v)
	if err != nil {
		e.t.Fatalf("BumpSchemaMarker(%d): %v", v, err)
	}
	return got
}

func (e *schemaT) fence(v int64) {
	e.t.Helper()
	if err := e.ss.RaiseWriterFence(e.ctx, e.p, v); err != nil {
		e.t.Fatalf("RaiseWriterFence(%d): %v", v, err)
	}
}

func (e *schemaT) declare(name string, v int64, sources ...string) *store.Checkpoint {
	e.t.Helper()
	c, err := e.ss.DeclareCheckpoint(e.ctx, e.p, name, v, sources, baseMs)
	if err != nil {
		e.t.Fatalf("DeclareCheckpoint(%s): %v", name, err)
	}
	return c
}

func (e *schemaT) checkpoint(name string) *store.Checkpoint {
	e.t.Helper()
	c, err := e.ss.GetCheckpoint(e.ctx, e.p, name)
	if err != nil || c == nil {
		e.t.Fatalf("GetCheckpoint(%s) = %v, %v", name, c, err)
	}
	return c
}

func (e *schemaT) claim(name string) int64 {
	e.t.Helper()
	c, err := e.ss.ClaimCheckpoint(e.ctx, e.p, name, baseMs)
	if err != nil {
		e.t.Fatalf("ClaimCheckpoint(%s): %v", name, err)
	}
	return c.OwnerEpoch
}

func (e *schemaT) activate(name string, epoch int64) store.ActivationOutcome {
	e.t.Helper()
	o, err := e.ss.ActivateCheckpoint(e.ctx, e.p, name, epoch, baseMs)
	if err != nil {
		e.t.Fatalf("ActivateCheckpoint(%s): %v", name, err)
	}
	return o
}

// versioned builds the next commit for writer version wv.
func (e *schemaT) versioned(wv int64, writes ...store.RowWrite) *store.CommitRequest {
	e.t.Helper()
	h := e.head()
	req := commitReq(h.MaxCommitSeq, "client-a", fmt.Sprintf("cc-%d-%d", h.MaxCommitSeq+1, wv), writes...)
	req.WriterVersion = wv
	return req
}

func testMarkerRises(t *testing.T, e *schemaT) {
	if v, err := e.ss.SchemaMarker(e.ctx); err != nil || v != 0 {
		t.Fatalf("fresh marker = %d, %v; want 0", v, err)
	}
	if got := e.bump(3); got != 3 {
		t.Fatalf("bump to 3 = %d", got)
	}
	if got := e.bump(2); got != 3 {
		t.Fatalf("bump to 2 lowered the marker: %d", got)
	}
	if got := e.bump(3); got != 3 {
		t.Fatalf("repeated bump = %d", got)
	}
	if v, _ := e.ss.SchemaMarker(e.ctx); v != 3 {
		t.Fatalf("marker = %d, want 3", v)
	}
}

func testMarkerInTouch(t *testing.T, e *schemaT) {
	if h := e.touch(); h.Gate != nil {
		t.Fatalf("gate of a store without gate state = %+v, want nil", *h.Gate)
	}
	e.bump(5)
	h := e.touch()
	if h.Gate == nil || h.Gate.StoredSchema != 5 {
		t.Fatalf("TouchPartition gate = %+v, want marker 5", h.Gate)
	}
	if g := e.gate(); g.StoredSchema != 5 {
		t.Fatalf("ReadGate marker = %d", g.StoredSchema)
	}
}

func testFenceRefuses(t *testing.T, e *schemaT) {
	e.touch()
	if err := e.ss.RaiseWriterFence(e.ctx, unique(t, "nope"), 2); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("fence on an unknown partition: %v, want ErrNotFound", err)
	}
	e.commit(e.versioned(1, upsert("t", "a", 1, "v1")))
	e.fence(2)
	e.fence(1) // never lowers
	if g := e.gate(); g.WriterFence != 2 {
		t.Fatalf("fence = %d, want 2", g.WriterFence)
	}
	old := e.versioned(1, upsert("t", "b", 1, "old"))
	if err := e.s.Commit(e.ctx, e.p, old); !errors.Is(err, store.ErrWriterFenced) {
		t.Fatalf("commit below the fence: %v, want ErrWriterFenced", err)
	}
	if h := e.head(); h.MaxCommitSeq != 1 {
		t.Fatalf("fenced commit moved the head to %d", h.MaxCommitSeq)
	}
	if len(e.rows("t", "b")) != 0 || e.outcome("client-a", old.Commit.ClientCommitID) != nil {
		t.Fatal("a fenced commit wrote its row or outcome")
	}
	e.commit(e.versioned(2, upsert("t", "b", 1, "new")))
	log := e.log(0, 2)
	if len(log) != 2 || log[0].WriterVersion != 1 || log[1].WriterVersion != 2 {
		t.Fatalf("recorded writer versions: %+v", log)
	}
}

// testFenceRace: writers at version 1 commit in a loop while the fence is
// raised to 2; every commit after the fence call returned is a version-2
// commit (a version-1 writer that read the head before the fence still
// loses at its commit).
func testFenceRace(t *testing.T, e *schemaT) {
	e.touch()
	var stop atomic.Bool
	var wg sync.WaitGroup
	var landed atomic.Int64
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				h, _, err := e.s.Head(e.ctx, e.p)
				if err != nil {
					return
				}
				req := commitReq(h.MaxCommitSeq, fmt.Sprintf("old-%d", w), fmt.Sprintf("c%d", i), upsert("t", fmt.Sprintf("w%d-%d", w, i), 1, "x"))
				req.WriterVersion = 1
				if err := e.s.Commit(e.ctx, e.p, req); err == nil {
					landed.Add(1)
				} else if errors.Is(err, store.ErrWriterFenced) {
					return
				}
			}
		}()
	}
	for landed.Load() < 3 {
		if t.Context().Err() != nil {
			break
		}
	}
	e.fence(2)
	at := e.head().MaxCommitSeq
	for range 3 {
		e.commit(e.versioned(2, upsert("t", "new", 1, "y")))
	}
	stop.Store(true)
	wg.Wait()
	for _, c := range e.log(0, e.head().MaxCommitSeq) {
		if c.Seq > at && c.WriterVersion < 2 {
			t.Fatalf("commit %d of writer version %d landed after the fence (raised at head %d)", c.Seq, c.WriterVersion, at)
		}
	}
	if at < 3 {
		t.Fatalf("only %d old commits landed before the fence", at)
	}
}

func testFenceNewPartition(t *testing.T, e *schemaT) {
	e.bump(4)
	h := e.touch()
	if h.Gate == nil || h.Gate.WriterFence != 4 {
		t.Fatalf("new partition gate = %+v, want fence 4", h.Gate)
	}
	if err := e.s.Commit(e.ctx, e.p, e.versioned(3, upsert("t", "a", 1, "x"))); !errors.Is(err, store.ErrWriterFenced) {
		t.Fatalf("version-3 commit on a partition created at marker 4: %v", err)
	}
}

// testFenceRaisedByCommit: lazy per-partition fencing. A commit that
// carries RaiseFence lifts the partition's fence in its own atomic write
// and moves the gate token, so an older writer that passed its gate
// before is stopped at its commit; a raise on a stale token writes
// nothing.
func testFenceRaisedByCommit(t *testing.T, e *schemaT) {
	e.touch()
	tok := e.gate().Token
	oldReq := e.versioned(1, upsert("t", "old", 1, "x"))
	oldReq.CheckGate, oldReq.GateToken = true, tok
	stale := e.versioned(2, upsert("t", "stale", 1, "y"))
	stale.CheckGate, stale.GateToken, stale.RaiseFence = true, tok+7, 2
	if err := e.s.Commit(e.ctx, e.p, stale); !errors.Is(err, store.ErrGateMoved) {
		t.Fatalf("raise on a stale gate token: %v, want ErrGateMoved", err)
	}
	if g := e.gate(); g.WriterFence != 0 || e.head().MaxCommitSeq != 0 {
		t.Fatalf("a refused raise changed the partition: gate %+v", g)
	}
	req := e.versioned(2, upsert("t", "a", 1, "new"))
	req.CheckGate, req.GateToken, req.RaiseFence = true, tok, 2
	e.commit(req)
	g := e.gate()
	if g.WriterFence != 2 || g.Token == tok {
		t.Fatalf("after the raising commit: gate %+v, want fence 2 and a new token", g)
	}
	if err := e.s.Commit(e.ctx, e.p, oldReq); !errors.Is(err, store.ErrWriterFenced) && !errors.Is(err, store.ErrGateMoved) {
		t.Fatalf("older writer after the raise: %v, want fenced", err)
	}
	older := e.versioned(1, upsert("t", "b", 1, "old"))
	if err := e.s.Commit(e.ctx, e.p, older); !errors.Is(err, store.ErrWriterFenced) {
		t.Fatalf("version-1 commit after the raise: %v, want ErrWriterFenced", err)
	}
	if h := e.head(); h.MaxCommitSeq != 1 || len(e.rows("t", "old", "b")) != 0 {
		t.Fatalf("fenced writers landed: head %d", h.MaxCommitSeq)
	}
}

// testGateTokenEpoch: rotating the log epoch moves the gate token, so a
// commit checked against the token read before the rotation writes
// nothing (issue 20: the gate token is bound to the log epoch).
func testGateTokenEpoch(t *testing.T, e *schemaT) {
	e.touch()
	tok := e.gate().Token
	req := e.versioned(1, upsert("t", "a", 1, "x"))
	req.CheckGate, req.GateToken = true, tok
	if err := e.s.RotateEpoch(e.ctx, e.p, "epoch-rotated", baseMs); err != nil {
		t.Fatal(err)
	}
	if g := e.gate(); g.Token == tok {
		t.Fatalf("gate token %d unchanged by an epoch rotation", g.Token)
	}
	if err := e.s.Commit(e.ctx, e.p, req); !errors.Is(err, store.ErrGateMoved) {
		t.Fatalf("commit on the token of the previous epoch: %v, want ErrGateMoved", err)
	}
	if h := e.head(); h.MaxCommitSeq != 0 {
		t.Fatal("a commit begun in the previous epoch landed")
	}
}

// testDeclareRaisesMarker (issue 20: declaring a checkpoint is atomic
// with the marker bump): a declaration at version 3 leaves the marker at
// 3 however it was before; one below a newer marker leaves the marker.
func testDeclareRaisesMarker(t *testing.T, e *schemaT) {
	e.touch()
	e.declare("proj", 3, "t")
	if m, err := e.ss.SchemaMarker(e.ctx); err != nil || m != 3 {
		t.Fatalf("marker after a version-3 declaration: %d, %v; want 3", m, err)
	}
	e.bump(5)
	e.declare("older", 4, "t")
	if m, _ := e.ss.SchemaMarker(e.ctx); m != 5 {
		t.Fatalf("a declaration lowered the marker to %d", m)
	}
	if c := e.checkpoint("older"); c.SchemaVersion != 4 {
		t.Fatalf("checkpoint %+v", c)
	}
}

func testGateToken(t *testing.T, e *schemaT) {
	e.touch()
	tok := e.gate().Token
	req := e.versioned(1, upsert("t", "a", 1, "x"))
	req.CheckGate, req.GateToken = true, tok
	e.declare("proj", 1, "t")
	if err := e.s.Commit(e.ctx, e.p, req); !errors.Is(err, store.ErrGateMoved) {
		t.Fatalf("commit on a stale gate token: %v, want ErrGateMoved", err)
	}
	if h := e.head(); h.MaxCommitSeq != 0 {
		t.Fatal("a commit on a stale token landed")
	}
	req.GateToken = e.gate().Token
	e.commit(req)
}

// testHeadMovedGate: the head a lost race returns (store.HeadMovedError)
// carries the partition's gate as Head reads it, so an engine that
// retries from it without reading the head commits on the current token
// and fence rather than failing once more on ErrGateMoved.
func testHeadMovedGate(t *testing.T, e *schemaT) {
	e.touch()
	e.fence(1)
	e.declare("proj", 1, "t")
	tok := e.gate().Token
	stale := e.versioned(1, upsert("t", "b", 1, "y"))
	req := e.versioned(1, upsert("t", "a", 1, "x"))
	req.CheckGate, req.GateToken = true, tok
	e.commit(req)
	stale.Commit.ClientCommitID = "stale"
	stale.CheckGate, stale.GateToken = true, tok
	err := e.s.Commit(e.ctx, e.p, stale)
	var hm *store.HeadMovedError
	if !errors.As(err, &hm) {
		t.Fatalf("commit behind the head: %v, want a HeadMovedError", err)
	}
	if g := hm.Head.Gate; g == nil || g.Token != tok || g.WriterFence != 1 || hm.Head.MaxCommitSeq != 1 {
		t.Fatalf("HeadMovedError head %+v gate %+v, want maxCommitSeq 1, token %d, fence 1", hm.Head, g, tok)
	}
}

// outcomeOf reads the recorded outcome of (client-a, id).
func (e *schemaT) outcomeOf(id string) *store.Outcome {
	e.t.Helper()
	o, err := e.s.GetOutcome(e.ctx, e.p, "client-a", id, baseMs)
	if err != nil {
		e.t.Fatalf("GetOutcome(%s): %v", id, err)
	}
	return o
}

// testFenceRejection: a rejected outcome is fenced like a commit, so an
// old build that passed its entry gate before the migration cannot
// record one after the fence was raised; the idempotency check still
// comes first.
func testFenceRejection(t *testing.T, e *schemaT) {
	e.touch()
	rej := store.Outcome{Result: []byte("rejected"), RecordedAtMs: baseMs}
	if err := e.s.PutRejection(e.ctx, e.p, "client-a", "before", rej, store.WriterCheck{WriterVersion: 1}); err != nil {
		t.Fatalf("rejection before the fence: %v", err)
	}
	e.fence(2)
	if err := e.s.PutRejection(e.ctx, e.p, "client-a", "old", rej, store.WriterCheck{WriterVersion: 1}); !errors.Is(err, store.ErrWriterFenced) {
		t.Fatalf("version-1 rejection below fence 2: %v, want ErrWriterFenced", err)
	}
	if err := e.s.PutRejection(e.ctx, e.p, "client-a", "unversioned", rej, store.WriterCheck{}); !errors.Is(err, store.ErrWriterFenced) {
		t.Fatalf("rejection without a writer version below fence 2: %v, want ErrWriterFenced", err)
	}
	if o := e.outcomeOf("old"); o != nil {
		t.Fatalf("a fenced rejection was recorded: %+v", o)
	}
	if err := e.s.PutRejection(e.ctx, e.p, "client-a", "before", rej, store.WriterCheck{WriterVersion: 1}); !errors.Is(err, store.ErrOutcomeExists) {
		t.Fatalf("fenced rejection of a key with an outcome: %v, want ErrOutcomeExists (replay first)", err)
	}
	if err := e.s.PutRejection(e.ctx, e.p, "client-a", "new", rej, store.WriterCheck{WriterVersion: 2}); err != nil {
		t.Fatalf("version-2 rejection at fence 2: %v", err)
	}
	if o := e.outcomeOf("new"); o == nil || o.Applied || string(o.Result) != "rejected" {
		t.Fatalf("recorded rejection = %+v", o)
	}
	if h := e.head(); h.MaxCommitSeq != 0 {
		t.Fatalf("rejections moved the head to %d", h.MaxCommitSeq)
	}
}

// testGateTokenRejection: a rejection on a gate token that moved since
// (a checkpoint was declared) is refused and writes nothing.
func testGateTokenRejection(t *testing.T, e *schemaT) {
	e.touch()
	tok := e.gate().Token
	rej := store.Outcome{Result: []byte("rejected"), RecordedAtMs: baseMs}
	e.declare("proj", 1, "t")
	w := store.WriterCheck{WriterVersion: 1, CheckGate: true, GateToken: tok}
	if err := e.s.PutRejection(e.ctx, e.p, "client-a", "r", rej, w); !errors.Is(err, store.ErrGateMoved) {
		t.Fatalf("rejection on a stale gate token: %v, want ErrGateMoved", err)
	}
	if o := e.outcomeOf("r"); o != nil {
		t.Fatal("a rejection on a stale token was recorded")
	}
	w.GateToken = e.gate().Token
	if err := e.s.PutRejection(e.ctx, e.p, "client-a", "r", rej, w); err != nil {
		t.Fatalf("rejection on the current token: %v", err)
	}
}

func testCheckpointLifecycle(t *testing.T, e *schemaT) {
	e.touch()
	if _, err := e.ss.ClaimCheckpoint(e.ctx, e.p, "proj", baseMs); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("claim of an undeclared checkpoint: %v", err)
	}
	c := e.declare("proj", 2, "tasks")
	if c.State != store.CheckpointDeclared || c.SchemaVersion != 2 || len(c.Sources) != 1 || c.Sources[0] != "tasks" {
		t.Fatalf("declared checkpoint = %+v", c)
	}
	g := e.gate()
	if g.WriterFence != 2 || len(g.Pending) != 1 || g.Pending[0] != (store.PendingCheckpoint{Name: "proj", SchemaVersion: 2}) {
		t.Fatalf("gate after declare = %+v", g)
	}
	if h := e.head(); h.Gate == nil || len(h.Gate.Pending) != 1 {
		t.Fatalf("Head does not carry the pending checkpoint: %+v", h.Gate)
	}
	tok := g.Token
	e.declare("proj", 2, "tasks") // idempotent
	if g := e.gate(); g.Token != tok || len(g.Pending) != 1 {
		t.Fatalf("re-declare changed the gate: %+v", g)
	}
	e1 := e.claim("proj")
	e2 := e.claim("proj")
	if e2 <= e1 {
		t.Fatalf("claims got epochs %d then %d", e1, e2)
	}
	if c := e.checkpoint("proj"); c.State != store.CheckpointBackfilling || c.OwnerEpoch != e2 {
		t.Fatalf("after claims: %+v", c)
	}
	ok, err := e.ss.AdvanceCheckpoint(e.ctx, e.p, store.CheckpointAdvance{Name: "proj", Epoch: e1, Watermark: 9, Cursor: "z", Observed: 5}, baseMs)
	if err != nil || ok {
		t.Fatalf("advance by the superseded owner = %v, %v; want false, nil", ok, err)
	}
	ok, err = e.ss.AdvanceCheckpoint(e.ctx, e.p, store.CheckpointAdvance{Name: "proj", Epoch: e2, Watermark: 0, Cursor: "k", Observed: 5}, baseMs)
	if err != nil || !ok {
		t.Fatalf("advance by the owner = %v, %v", ok, err)
	}
	if c := e.checkpoint("proj"); c.Cursor != "k" || c.ObservedRows != 5 || c.Watermark != 0 {
		t.Fatalf("after advance: %+v", c)
	}
}

func testCheckpointSuperseded(t *testing.T, e *schemaT) {
	e.touch()
	e.declare("proj", 1, "tasks")
	old := e.claim("proj")
	cur := e.claim("proj")
	req := e.versioned(1, upsert("tasks", "a", 1, "x"))
	req.Advance = &store.CheckpointAdvance{Name: "proj", Epoch: old, Watermark: 1, Cursor: "a", Observed: 1}
	if err := e.s.Commit(e.ctx, e.p, req); !errors.Is(err, store.ErrCheckpointSuperseded) {
		t.Fatalf("batch of a superseded owner: %v, want ErrCheckpointSuperseded", err)
	}
	if h := e.head(); h.MaxCommitSeq != 0 || len(e.rows("tasks", "a")) != 0 {
		t.Fatal("the superseded owner's batch wrote something")
	}
	req.Advance.Epoch = cur
	e.commit(req)
	if c := e.checkpoint("proj"); c.Watermark != 1 || c.Cursor != "a" || c.ObservedRows != 1 {
		t.Fatalf("checkpoint after the owner's batch: %+v", c)
	}
}

func testCheckpointActivation(t *testing.T, e *schemaT) {
	e.touch()
	e.declare("proj", 1, "tasks")
	ep := e.claim("proj")
	e.commit(e.versioned(1, upsert("tasks", "a", 1, "x"))) // seq 1, above watermark 0
	if o := e.activate("proj", ep); o != store.Stale {
		t.Fatalf("activation with a source change above the watermark = %s, want stale", o)
	}
	if c := e.checkpoint("proj"); c.State != store.CheckpointBackfilling {
		t.Fatalf("stale activation changed the state: %s", c.State)
	}
	// Catch up, then a write to another table does not invalidate.
	if ok, _ := e.ss.AdvanceCheckpoint(e.ctx, e.p, store.CheckpointAdvance{Name: "proj", Epoch: ep, Watermark: 1}, baseMs); !ok {
		t.Fatal("advance failed")
	}
	e.commit(e.versioned(1, upsert("notes", "n", 1, "y")))
	if o := e.activate("proj", ep-1); o != store.Stale {
		t.Fatalf("activation by a wrong epoch = %s, want stale", o)
	}
	if o := e.activate("proj", ep); o != store.Activated {
		t.Fatalf("activation = %s, want activated", o)
	}
	c := e.checkpoint("proj")
	if c.State != store.CheckpointActivated {
		t.Fatalf("state = %s", c.State)
	}
	if g := e.gate(); len(g.Pending) != 0 {
		t.Fatalf("activated checkpoint still pending: %+v", g.Pending)
	}
	// Terminal.
	if o := e.activate("proj", ep); o != store.Stale {
		t.Fatalf("second activation = %s, want stale", o)
	}
	if _, err := e.ss.ClaimCheckpoint(e.ctx, e.p, "proj", baseMs); !errors.Is(err, store.ErrCheckpointActivated) {
		t.Fatalf("claim after activation: %v", err)
	}
	if ok, _ := e.ss.AdvanceCheckpoint(e.ctx, e.p, store.CheckpointAdvance{Name: "proj", Epoch: ep, Watermark: 5}, baseMs); ok {
		t.Fatal("advance of an activated checkpoint succeeded")
	}
	if d := e.declare("proj", 1, "tasks"); d.State != store.CheckpointActivated {
		t.Fatalf("re-declare reset an activated checkpoint: %s", d.State)
	}
	if g := e.gate(); len(g.Pending) != 0 {
		t.Fatal("re-declare made an activated checkpoint pending")
	}
}

func testCheckpointUnverifiable(t *testing.T, e *schemaT) {
	e.touch()
	e.commit(e.versioned(1, upsert("notes", "n1", 1, "y")))
	e.commit(e.versioned(1, upsert("notes", "n2", 1, "y")))
	e.declare("proj", 1, "tasks")
	ep := e.claim("proj")
	if _, err := e.s.Prune(e.ctx, e.p, 2); err != nil {
		t.Fatal(err)
	}
	if o := e.activate("proj", ep); o != store.Unverifiable {
		t.Fatalf("activation below a pruned horizon = %s, want unverifiable", o)
	}
	if c := e.checkpoint("proj"); c.State != store.CheckpointBackfilling {
		t.Fatalf("unverifiable activation changed the state: %s", c.State)
	}
	if ok, _ := e.ss.AdvanceCheckpoint(e.ctx, e.p, store.CheckpointAdvance{Name: "proj", Epoch: ep, Watermark: 2}, baseMs); !ok {
		t.Fatal("advance failed")
	}
	if o := e.activate("proj", ep); o != store.Activated {
		t.Fatalf("activation at the horizon = %s, want activated", o)
	}
}

func (e *schemaT) declareAll(v int64, decls ...store.CheckpointDecl) int64 {
	e.t.Helper()
	m, err := e.ss.DeclareCheckpoints(e.ctx, v, decls)
	if err != nil {
		e.t.Fatalf("DeclareCheckpoints(%d): %v", v, err)
	}
	return m
}

func (e *schemaT) materialize() store.Gate {
	e.t.Helper()
	h, err := e.ss.MaterializeCheckpoints(e.ctx, e.p, baseMs)
	if err != nil || h.Gate == nil {
		e.t.Fatalf("MaterializeCheckpoints: %+v, %v", h.Gate, err)
	}
	if want := e.head(); h.MaxCommitSeq != want.MaxCommitSeq || h.LogEpoch != want.LogEpoch {
		e.t.Fatalf("MaterializeCheckpoints returned head %+v, stored %+v", h, want)
	}
	return *h.Gate
}

func pendingNames(g *store.Gate) []string {
	if g == nil {
		return nil
	}
	var out []string
	for _, p := range g.Pending {
		out = append(out, fmt.Sprintf("%s@%d", p.Name, p.SchemaVersion))
	}
	return out
}

// testTableWideGated: a table-wide declaration is one write with the
// marker; an existing partition gates its checkpoints as pending (in
// TouchPartition, Head and ReadGate alike) before it holds any
// checkpoint item; materialising declares them there and raises the
// fence in one write, once.
func testTableWideGated(t *testing.T, e *schemaT) {
	e.touch()
	e.commit(e.versioned(2, upsert("tasks", "a", 1, "x")))
	if m := e.declareAll(3, store.CheckpointDecl{Name: "proj", Sources: []string{"tasks"}}); m != 3 {
		t.Fatalf("marker after the declaration = %d, want 3", m)
	}
	if m, _ := e.ss.SchemaMarker(e.ctx); m != 3 {
		t.Fatalf("stored marker = %d, want 3", m)
	}
	want := "[proj@3]"
	g := e.gate()
	if fmt.Sprint(pendingNames(&g)) != want || g.Unmaterialized == 0 || g.WriterFence != 0 {
		t.Fatalf("ReadGate before materialising: %+v", g)
	}
	if h := e.touch(); fmt.Sprint(pendingNames(h.Gate)) != want || h.Gate.Unmaterialized == 0 {
		t.Fatalf("TouchPartition gate before materialising: %+v", h.Gate)
	}
	if h := e.head(); fmt.Sprint(pendingNames(h.Gate)) != want || h.Gate.Unmaterialized == 0 {
		t.Fatalf("Head gate before materialising: %+v", h.Gate)
	}
	if c, err := e.ss.GetCheckpoint(e.ctx, e.p, "proj"); err != nil || c != nil {
		t.Fatalf("checkpoint item before materialising: %+v, %v", c, err)
	}
	if m := e.declareAll(3, store.CheckpointDecl{Name: "proj", Sources: []string{"tasks"}}); m != 3 || e.gate().Unmaterialized != g.Unmaterialized {
		t.Fatalf("the same declaration again changed it: marker %d, gate %+v", m, e.gate())
	}
	before := e.gate().Token
	mg := e.materialize()
	if fmt.Sprint(pendingNames(&mg)) != want || mg.Unmaterialized != 0 || mg.WriterFence != 3 || mg.Token == before {
		t.Fatalf("gate MaterializeCheckpoints returned: %+v (token before %d)", mg, before)
	}
	if g := e.gate(); g.Unmaterialized != 0 || g.WriterFence != 3 || g.Token != mg.Token || fmt.Sprint(pendingNames(&g)) != want {
		t.Fatalf("stored gate after materialising: %+v", g)
	}
	if c := e.checkpoint("proj"); c.State != store.CheckpointDeclared || c.SchemaVersion != 3 || fmt.Sprint(c.Sources) != "[tasks]" {
		t.Fatalf("materialised checkpoint: %+v", c)
	}
	if again := e.materialize(); again.Token != mg.Token {
		t.Fatalf("a second materialisation wrote: %+v", again)
	}
	if err := e.s.Commit(e.ctx, e.p, e.versioned(2, upsert("tasks", "b", 1, "old"))); !errors.Is(err, store.ErrWriterFenced) {
		t.Fatalf("version-2 commit after materialising: %v, want ErrWriterFenced", err)
	}
	if _, err := e.ss.MaterializeCheckpoints(e.ctx, unique(t, "nope"), baseMs); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("materialising an unknown partition: %v, want ErrNotFound", err)
	}
	// The marker never goes back: an older declaration writes nothing.
	if m, err := e.ss.DeclareCheckpoints(e.ctx, 2, []store.CheckpointDecl{{Name: "older", Sources: []string{"t"}}}); m != 3 || err != nil {
		t.Fatalf("an older declaration: marker %d, %v", m, err)
	}
	if g := e.gate(); fmt.Sprint(pendingNames(&g)) != want || g.Unmaterialized != 0 {
		t.Fatalf("gate after an older declaration: %+v", g)
	}
}

// testTableWideKeepsExisting: materialising leaves a checkpoint the
// partition declared before as it is: an activated one stays activated
// and leaves the pending set (it pends only until then, failing closed).
func testTableWideKeepsExisting(t *testing.T, e *schemaT) {
	e.touch()
	e.declare("proj", 2, "tasks")
	ep := e.claim("proj")
	if o := e.activate("proj", ep); o != store.Activated {
		t.Fatalf("activation = %s", o)
	}
	e.declareAll(2, store.CheckpointDecl{Name: "proj", Sources: []string{"tasks"}}, store.CheckpointDecl{Name: "extra", Sources: []string{"notes"}})
	if g := e.gate(); fmt.Sprint(pendingNames(&g)) != "[extra@2 proj@2]" || g.Unmaterialized == 0 {
		t.Fatalf("gate before materialising: %+v", g)
	}
	g := e.materialize()
	if fmt.Sprint(pendingNames(&g)) != "[extra@2]" || g.WriterFence != 2 || g.Unmaterialized != 0 {
		t.Fatalf("gate after materialising: %+v", g)
	}
	if c := e.checkpoint("proj"); c.State != store.CheckpointActivated || c.OwnerEpoch != ep {
		t.Fatalf("existing checkpoint after materialising: %+v", c)
	}
	if c := e.checkpoint("extra"); c.State != store.CheckpointDeclared || c.SchemaVersion != 2 {
		t.Fatalf("new checkpoint: %+v", c)
	}
}

// testTableWideNewPartition: a partition created after the declaration
// has nothing to backfill: it starts materialised, fenced at the marker,
// with nothing pending.
func testTableWideNewPartition(t *testing.T, e *schemaT) {
	e.declareAll(4, store.CheckpointDecl{Name: "proj", Sources: []string{"tasks"}})
	h := e.touch()
	if h.Gate == nil || h.Gate.WriterFence != 4 || len(h.Gate.Pending) != 0 || h.Gate.Unmaterialized != 0 {
		t.Fatalf("new partition gate: %+v", h.Gate)
	}
	if g := e.gate(); len(g.Pending) != 0 || g.Unmaterialized != 0 {
		t.Fatalf("new partition ReadGate: %+v", g)
	}
	if g := e.materialize(); len(g.Pending) != 0 || g.WriterFence != 4 {
		t.Fatalf("materialising a new partition: %+v", g)
	}
	if c, err := e.ss.GetCheckpoint(e.ctx, e.p, "proj"); err != nil || c != nil {
		t.Fatalf("checkpoint of a new partition: %+v, %v", c, err)
	}
}

// testTableWideGeneration: another set at the same version is a new
// generation: partitions that materialised the first set gate the new
// one until they materialise again, keeping the checkpoints they have.
func testTableWideGeneration(t *testing.T, e *schemaT) {
	e.touch()
	e.declareAll(3, store.CheckpointDecl{Name: "a", Sources: []string{"t"}})
	e.materialize()
	ep := e.claim("a")
	e.declareAll(3, store.CheckpointDecl{Name: "a", Sources: []string{"t"}}, store.CheckpointDecl{Name: "b", Sources: []string{"t"}})
	if g := e.gate(); fmt.Sprint(pendingNames(&g)) != "[a@3 b@3]" || g.Unmaterialized == 0 {
		t.Fatalf("gate after the second set: %+v", g)
	}
	g := e.materialize()
	if fmt.Sprint(pendingNames(&g)) != "[a@3 b@3]" || g.Unmaterialized != 0 {
		t.Fatalf("gate after materialising again: %+v", g)
	}
	if c := e.checkpoint("a"); c.State != store.CheckpointBackfilling || c.OwnerEpoch != ep {
		t.Fatalf("checkpoint a after materialising again: %+v", c)
	}
	if m := e.declareAll(5); m != 5 {
		t.Fatalf("an empty declaration at 5: marker %d", m)
	}
	if g := e.gate(); len(g.Pending) != 2 || g.Unmaterialized == 0 {
		t.Fatalf("gate after an empty declaration: %+v", g)
	}
	if g := e.materialize(); g.WriterFence != 5 || len(g.Pending) != 2 {
		t.Fatalf("materialising an empty declaration: %+v", g)
	}
}
