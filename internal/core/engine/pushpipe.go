package engine

import (
	"context"
	"errors"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/validate"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// pushRun is what one commit carries across its attempts (pushCommit).
type pushRun struct {
	e     *Engine
	rs    *reqState
	pc    *wire.PushCommit
	grant writeGrant
	// head is the partition head the next commit request is
	// conditioned on (§2.1 gapless commitSeq).
	head store.Head
	// hooks are the validators installed when the commit started (never
	// nil; empty for none).
	hooks *validate.Hooks
	// grouped: a holder landed this waiter's published commit; its
	// answer (groupcommit.go).
	grouped *wire.PushResult
	// materialized: this push materialised the table-wide checkpoint
	// declaration in its partition (gate.go), once.
	materialized bool
}

// readHead reads the partition head into run.head.
func (run *pushRun) readHead(ctx context.Context) error {
	h, ok, err := run.e.store.Head(ctx, run.rs.auth.Partition)
	if err != nil {
		return storeErr(err, "read partition head")
	}
	if !ok {
		return syncerr.New(syncerr.OperationExecutionFailed, "partition registry entry vanished")
	}
	run.head = h
	return nil
}

// writeGrant is the actor's resolved write authority for one request: the
// allowed scopes (§3.2) and the resolver's error, if it failed. A failed
// resolution permits nothing (§3.4 fails closed).
type writeGrant struct {
	allowed ScopeMap
	err     error
}

// permits is the §3.4 row check: the resolver answered and the row's
// stored scopes are allowed.
func (g writeGrant) permits(t *schema.Table, scopes wire.StoredScopes) bool {
	return g.err == nil && authorizeRow(t, scopes, g.allowed)
}

// commitPacer paces the attempts of one commit. On a store with a commit
// queue (queue.go) a lost race, or a queue already in use, puts the
// commit in line (queueState); on any other store a lost race backs off
// before the next attempt (backoff).
type commitPacer interface {
	// prepare readies attempt n (0 first): it waits for the turn or
	// backs off, and reads run.head when the evaluation will not.
	prepare(ctx context.Context, run *pushRun, attempt int) error
	// readsHead: evaluate reads the head with the rows.
	readsHead() bool
	// settle takes what the evaluation read; again means the commit is
	// not in its turn yet and reads once more.
	settle(ctx context.Context, run *pushRun, ev *evaluation) (again bool, err error)
	// stamp puts the turn the commit takes on its request.
	stamp(creq *store.CommitRequest)
	// commit appends the commit; a queue may land commits others
	// published with it (group commit). last is the highest commitSeq
	// that landed.
	commit(ctx context.Context, run *pushRun, creq *store.CommitRequest) (last int64, err error)
	// landed notes a commit that was appended; lost one that lost its
	// race (store.ErrHeadMoved).
	landed(run *pushRun, creq *store.CommitRequest)
	lost(run *pushRun, err error)
	// release passes a turn the commit holds and did not use.
	release(ctx context.Context)
}

// pacerFor picks the request's pacer: its early ticket (ticketFirst) or
// a queue of the store's, else a backoff.
func (e *Engine) pacerFor(rs *reqState) commitPacer {
	qs := e.commitQueue(rs.auth.Partition, rs.head)
	if qs == nil {
		return backoff{}
	}
	if rs.early != nil {
		qs, rs.early = rs.early, nil
		qs.adopt(rs)
	}
	return qs
}

// backoff paces a store without a commit queue: a retry backs off
// (retryWait), then reads the head afresh. The head a lost race returns
// is stale by then whenever others keep committing, and a commit
// conditioned on it (§2.1 gapless commitSeq) loses again: under steady
// load a writer that retried from it starved until "lost 64 races".
type backoff struct{}

func (backoff) prepare(ctx context.Context, run *pushRun, attempt int) error {
	// The first attempt uses the head the request read before the rows.
	if attempt == 0 {
		return nil
	}
	if err := retryWait(ctx, attempt, run.e.localCommits); err != nil {
		return storeErr(err, "wait after a lost commit race")
	}
	return run.readHead(ctx)
}

func (backoff) readsHead() bool                                             { return false }
func (backoff) settle(context.Context, *pushRun, *evaluation) (bool, error) { return false, nil }
func (backoff) stamp(*store.CommitRequest)                                  {}
func (backoff) commit(ctx context.Context, run *pushRun, creq *store.CommitRequest) (int64, error) {
	return creq.Commit.Seq, run.e.store.Commit(ctx, run.rs.auth.Partition, creq)
}
func (backoff) landed(*pushRun, *store.CommitRequest) {}
func (backoff) lost(*pushRun, error)                  {}
func (backoff) release(context.Context)               {}

// prepare: a queued commit takes its ticket and waits for its turn. The
// first read uses the head the request read with the rows (or reads it
// with them in evaluate); a later one reads the head first when the
// rows' read will not carry it, since a head read after the rows could
// be newer than they are.
func (qs *queueState) prepare(ctx context.Context, run *pushRun, attempt int) error {
	if qs.queued && qs.ticket == 0 {
		if err := qs.take(ctx); err != nil {
			return err
		}
		if qs.seen.Turn != qs.ticket-1 {
			run.rs.prefetch = nil // read after the wait, not before it
		}
	}
	if err := qs.wait(ctx); err != nil {
		return storeErr(err, "wait for the commit turn")
	}
	qs.prefetchPublished(ctx, run)
	qs.readStart = time.Now()
	if run.rs.prefetch != nil {
		qs.readStart = time.Time{} // no read to time
	}
	if (attempt > 0 || qs.ticket > 0) && !headWithRows(run.rs, run.pc) {
		return run.readHead(ctx)
	}
	return nil
}

func (qs *queueState) readsHead() bool { return true }

// settle: the head read with the rows is the newest there is (the
// commit then also checks the rows are still as read); a ticket whose
// turn it is not yet waits and reads again.
func (qs *queueState) settle(ctx context.Context, run *pushRun, ev *evaluation) (bool, error) {
	if ev.head != nil {
		run.head = *ev.head
	}
	run.e.queueMemo.note(qs.partition, run.head)
	if qs.ticket == 0 {
		return false, nil
	}
	qs.seen = run.head
	if run.head.Turn == qs.ticket-1 {
		return false, nil
	}
	qs.polls++
	if run.head.Turn >= qs.ticket {
		// The turn passed the ticket: a holder may have landed the
		// commit this waiter published (group commit).
		res, err := qs.groupedResult(ctx, run)
		if err != nil || res != nil {
			run.grouped = res
			return false, err
		}
	} else if err := qs.publish(ctx, run, ev); err != nil {
		return false, err
	}
	if qs.polls > maxQueuePolls {
		return false, syncerr.New(syncerr.RateLimited, "partition is too busy: commit waited %d reads for its turn", maxQueuePolls)
	}
	if err := qs.notInTurn(ctx, run.head); err != nil {
		return false, err
	}
	return true, nil
}

// commit: a queued commit lands with the commits published behind it
// (groupcommit.go).
func (qs *queueState) commit(ctx context.Context, run *pushRun, creq *store.CommitRequest) (int64, error) {
	last, ticket, err := qs.commitGrouped(ctx, run, creq)
	qs.groupTicket = ticket
	return last, err
}

func (qs *queueState) stamp(creq *store.CommitRequest) {
	if qs.ticket > 0 {
		now := time.Now()
		creq.Ticket, creq.TurnAtUs, creq.TurnGapUs = qs.ticket, now.UnixMicro(), qs.turnGap(now)
	}
}

// landed: the commit took the turn. The turn moved when the commit
// landed, not when it was sent: the next turns are estimated from now.
func (qs *queueState) landed(run *pushRun, creq *store.CommitRequest) {
	if creq.Ticket > 0 {
		qs.ticket = 0
		run.e.queueMemo.noteOwn(qs.partition, max(creq.Ticket, qs.groupTicket), time.Now().UnixMicro(), creq.TurnGapUs)
	}
}

// lost lines the commit up; a queued commit whose turn still stands
// retries at once (a commit outside the queue took the head), one
// skipped as stalled lines up again.
func (qs *queueState) lost(run *pushRun, err error) {
	qs.queued = true
	if hm, ok := errors.AsType[*store.HeadMovedError](err); ok {
		run.e.queueMemo.note(qs.partition, hm.Head)
		qs.seen = hm.Head
		if qs.ticket > 0 && hm.Head.Turn != qs.ticket-1 {
			qs.ticket = 0
		}
	}
}

// A commitStage checks or completes the staged commit after every
// operation evaluated (§6 order). It ends the commit by setting
// ev.reject; a returned error is request-level.
type commitStage func(ctx context.Context, run *pushRun, ev *evaluation) error

// commitStages run in order until one rejects.
var commitStages = [...]commitStage{
	stageCommitSize,
	stageBlobs,
	stageReferences,
	stageAppendedValidators,
	stageCommitValidator,
	stageBlobIndex,
}

// stages runs commitStages over ev.
func (run *pushRun) stages(ctx context.Context, ev *evaluation) error {
	for _, s := range commitStages {
		if ev.reject != nil {
			return nil
		}
		if err := s(ctx, run, ev); err != nil {
			return err
		}
	}
	return nil
}

// stageCommitSize: what storage could not hold is refused (limits.go).
func stageCommitSize(_ context.Context, run *pushRun, ev *evaluation) error {
	ev.reject = run.e.checkCommitSize(run.rs.auth.ActorID, run.pc, ev)
	return nil
}

// stageBlobs: §5.9.6 / §6.6, every blob the commit references must exist
// before anything applies (blobs.go).
func stageBlobs(ctx context.Context, run *pushRun, ev *evaluation) error {
	return run.e.checkBlobs(ctx, run.rs, ev, run.grant)
}

// stageReferences: §6.8 order, declared references once over the
// candidate state after every operation is staged (references.go).
func stageReferences(ctx context.Context, run *pushRun, ev *evaluation) error {
	if err := run.e.enforceReferences(ctx, run.rs, run.pc, ev); err != nil {
		return err
	}
	if ev.reject == nil && ev.cascaded > 0 && run.e.checkCommitSize(run.rs.auth.ActorID, run.pc, ev) != nil {
		// The client's own writes fit (checked before), so what no
		// longer fits is the cascade: §6.11 reports it as the cap.
		ev.rejectCascadeLimit(run.pc.ClientCommitID)
	}
	return nil
}

// stageBlobIndex: §5.9.4, the blob reference index changes in the same
// commit.
func stageBlobIndex(ctx context.Context, run *pushRun, ev *evaluation) error {
	if run.e.blobs == nil {
		return nil
	}
	return run.e.blobIndexWrites(ctx, run.rs, ev)
}

// rejectCascadeLimit makes ev's rejection the §6.11 cascade cap,
// attributed to the client delete the cascade started from.
func (ev *evaluation) rejectCascadeLimit(clientCommitID string) {
	ev.reject, ev.details = referenceReject(clientCommitID, ev.cascadeOrigin, reasonCascadeLimit, nil, nil)
}

// land appends the evaluated commit, or records its rejection, and
// answers the result. retry means the attempt lost its race (or the
// serve gate moved): the caller evaluates again.
func (e *Engine) land(ctx context.Context, run *pushRun, ev *evaluation, pacer commitPacer) (*wire.PushResult, bool, error) {
	rs, pc := run.rs, run.pc
	if retry, err := e.materializeFirst(ctx, run); retry || err != nil {
		return nil, retry, err
	}
	if ev.reject != nil {
		return e.recordRejection(ctx, rs, pc, run.head, ev)
	}
	// §6.9: reactions are planned last, over the accepted candidate
	// state, and logged with the commit (reactions.go).
	planned, err := e.planReactions(ctx, rs, pc, ev)
	if err != nil {
		return nil, false, err
	}
	res, creq, err := e.commitRequest(run, ev)
	if err != nil {
		return nil, false, err
	}
	creq.Commit.Reactions = planned
	pacer.stamp(creq)
	if err := e.gateForCommit(rs, run.head, creq); err != nil {
		return nil, false, err
	}
	last, err := pacer.commit(ctx, run, creq)
	if stopped, retry, refusal := e.gateCommitError(err); stopped {
		return nil, retry, refusal
	}
	if res, taken, err := e.keyTaken(ctx, rs, pc.ClientCommitID, err); taken {
		return res, false, err
	}
	switch {
	case err == nil:
		rs.head.MaxCommitSeq = max(creq.Commit.Seq, last)
		e.gateCovered(rs, creq)
		e.gateOwnRaise(rs, creq)
		rs.noteOwn(&creq.Commit)
		pacer.landed(run, creq)
		rs.report.CommittedSeq = max(rs.report.CommittedSeq, creq.Commit.Seq)
		if e.cfg.OnCommit != nil {
			e.cfg.OnCommit(rs.auth.Partition, &creq.Commit)
		}
		return res, false, nil
	case errors.Is(err, store.ErrHeadMoved):
		rs.report.CommitRacesLost++
		pacer.lost(run, err)
		return nil, true, nil
	case errors.Is(err, store.ErrTooLarge):
		ev.reject = &wire.OpResult{OpIndex: 0, Status: wire.OpError, Code: string(syncerr.ConstraintViolation),
			Message: "commit exceeds what storage can hold: " + err.Error()}
		ev.details = nil
		if ev.cascaded > 0 {
			// §6.11: a cascade storage cannot hold in one atomic
			// commit is the cap, reported as such, never half-applied.
			ev.rejectCascadeLimit(pc.ClientCommitID)
		}
		return e.recordRejection(ctx, rs, pc, run.head, ev)
	default:
		return nil, false, storeErr(err, "append commit")
	}
}

// commitRequest builds the applied result and the commit request of an
// evaluation that passed every stage, as commitSeq head+1. The result
// and (for the usual one-operation commit) its record live in the
// evaluation's allocation.
func (e *Engine) commitRequest(run *pushRun, ev *evaluation) (*wire.PushResult, *store.CommitRequest, error) {
	rs, pc := run.rs, run.pc
	seq := run.head.MaxCommitSeq + 1
	res := &ev.result
	*res = wire.PushResult{ClientCommitID: pc.ClientCommitID, Status: wire.PushApplied, CommitSeq: wire.Some(seq)}
	if len(pc.Operations) <= len(ev.oneResult) {
		res.Results = ev.oneResult[:len(pc.Operations)]
	} else {
		res.Results = make([]wire.OpResult, len(pc.Operations))
	}
	for i := range res.Results {
		res.Results[i] = wire.OpResult{OpIndex: int32(i), Status: wire.OpApplied}
	}
	blob, err := encodeOutcome(res, nil)
	if err != nil {
		return nil, nil, err
	}
	creq := &ev.creq
	*creq = store.CommitRequest{
		ExpectedMaxSeq: run.head.MaxCommitSeq,
		Commit: store.Commit{
			Seq: seq, CreatedAtMs: rs.now, ActorID: rs.auth.ActorID,
			ClientID: rs.clientID, ClientCommitID: pc.ClientCommitID, Changes: ev.changes,
		},
		Rows:      ev.rows,
		RefWrites: ev.refs,
		Outcome:   store.Outcome{Applied: true, CommitSeq: seq, Result: blob, RecordedAtMs: rs.now, ActorID: rs.auth.ActorID},
	}
	for i := range creq.Rows {
		creq.Rows[i].Row.CommitSeq = seq
	}
	if ev.head != nil {
		creq.ReadRows = ev.read
	}
	return res, creq, nil
}
