package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/validate"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// maxCommitAttempts bounds the optimistic retry loop of one commit: every
// lost race means another commit landed, so the partition made progress.
const maxCommitAttempts = 64

// pushCommit runs the §6 pipeline for one PUSH_COMMIT and returns its
// PUSH_RESULT. Returned errors are request-level (storage unavailable);
// every protocol outcome is a result.
//
// Each attempt evaluates the operations against the rows as stored
// (evaluate), runs the checks of the staged commit in their §6 order
// (commitStages), then commits or records the rejection (land). How
// attempts are paced after a lost race is the store's: a queue or a
// backoff (commitPacer).
func (e *Engine) pushCommit(ctx context.Context, rs *reqState, pc *wire.PushCommit, duplicate bool) (*wire.PushResult, error) {
	// Identifiers no store can key by are answered before any storage
	// read uses them (limits.go).
	if res := commitIDTooLong(pc); res != nil {
		return res, nil
	}
	if rej := checkOperationIdentifiers(pc); rej != nil && !duplicate {
		return e.rejectCommit(ctx, rs, pc, rej)
	}
	// §2.3/§6.3: there is no separate idempotency lookup before
	// evaluating (unless validators are installed, below). The key is
	// checked where it matters, inside the atomic commit (Commit and
	// PutRejection fail with ErrOutcomeExists when the key already has an
	// outcome) and the stored outcome is replayed then. A replay
	// therefore costs one wasted evaluation, and every new push saves a
	// storage round trip. The in-request duplicate rule is the same
	// replay, answered directly.
	if duplicate {
		if res, done, err := e.replay(ctx, rs, pc.ClientCommitID); done || err != nil {
			return res, err
		}
		// The first occurrence produced no persisted outcome (a cache miss
		// report): answer the same way rather than applying twice.
		return cacheMiss(pc.ClientCommitID), nil
	}
	allowed, resolveErr := e.allowedScopes(ctx, rs)
	run := &pushRun{e: e, rs: rs, pc: pc, grant: writeGrant{allowed: allowed, err: resolveErr}, head: rs.head, hooks: e.installedHooks()}
	if !run.hooks.Empty() {
		// §6.8: a commit whose outcome is recorded is replayed without
		// running any validator again, so with validators installed the
		// key is looked up before evaluating (one read more per commit).
		if res, done, err := e.replay(ctx, rs, pc.ClientCommitID); done || err != nil {
			return res, err
		}
	}
	pacer := e.pacerFor(rs)
	defer pacer.release(ctx)
	for attempt := 0; attempt < maxCommitAttempts; attempt++ {
		if err := pacer.prepare(ctx, run, attempt); err != nil {
			return nil, err
		}
		ev, err := e.evaluate(ctx, run, pacer.readsHead())
		if err != nil {
			return nil, err
		}
		again, err := pacer.settle(ctx, run, ev)
		if err != nil {
			return nil, err
		}
		if again {
			attempt-- // a read for the turn is not a lost race
			continue
		}
		if err := run.stages(ctx, ev); err != nil {
			return nil, err
		}
		res, retry, err := e.land(ctx, run, ev, pacer)
		if retry {
			continue
		}
		return res, err
	}
	return nil, syncerr.New(syncerr.RateLimited, "partition is too busy: commit lost %d races", maxCommitAttempts)
}

// recordRejection persists the rejected outcome of ev (§2.3, §6.3) and
// answers it, or the outcome already recorded for the key. retry means
// the serve gate moved: the caller reads the head and evaluates again.
func (e *Engine) recordRejection(ctx context.Context, rs *reqState, pc *wire.PushCommit, head store.Head, ev *evaluation) (res *wire.PushResult, retry bool, err error) {
	res = &wire.PushResult{ClientCommitID: pc.ClientCommitID, Status: wire.PushRejected, Results: []wire.OpResult{*ev.reject}}
	blob, err := encodeOutcome(res, ev.details)
	if err != nil {
		return nil, false, err
	}
	wc, err := e.gateForRejection(rs, head)
	if err != nil {
		return nil, false, err
	}
	err = e.store.PutRejection(ctx, rs.auth.Partition, rs.clientID, pc.ClientCommitID, store.Outcome{Result: blob, RecordedAtMs: rs.now, ActorID: rs.auth.ActorID}, wc)
	if stopped, retry, refusal := e.gateCommitError(err); stopped {
		return nil, retry, refusal
	}
	if err == nil {
		rs.setDetails(ev.details)
		return res, false, nil
	}
	if res, taken, err := e.keyTaken(ctx, rs, pc.ClientCommitID, err); taken {
		return res, false, err
	}
	return nil, false, storeErr(err, "record rejected outcome")
}

// keyTaken answers a commit or rejection the store refused because the
// idempotency key already has an outcome (§2.3: the stored outcome is
// replayed) or because that could not be checked (§6.3: a cache miss is
// reported and nothing applied). taken is false for any other error.
func (e *Engine) keyTaken(ctx context.Context, rs *reqState, clientCommitID string, err error) (*wire.PushResult, bool, error) {
	switch {
	case errors.Is(err, store.ErrOutcomeExists):
		res, done, err := e.replay(ctx, rs, clientCommitID)
		if err == nil && !done {
			// The outcome is gone when read: its idempotency window ended
			// (TTL deleted it) since the store's check. Nothing was applied
			// by this request; the retryable cache miss (§6.3) makes the
			// client's retry record the key afresh.
			return cacheMiss(clientCommitID), true, nil
		}
		return res, true, err
	case errors.Is(err, store.ErrOutcomeUnreadable):
		return cacheMiss(clientCommitID), true, nil
	}
	return nil, false, nil
}

// On a store without a commit queue (memstore), lost commit races back
// off with full jitter before re-evaluating: every loser of a race on one
// partition head retrying at once only makes them collide again (issue
// 11: 32 writers without backoff took ~50 round trips per commit). Over
// DynamoDB this backoff alone left 8 writers of one partition at ~9 round
// trips per commit and 50–70% of one writer's rate, 32 writers at 16–24
// round trips and under 30% (make load-dynamodb); the queue (queue.go)
// replaced it there: 8 writers ~4 round trips per commit at 90–140% of
// one writer's rate, 32 writers ~5, the partition's rate flat at the
// queue's ceiling of one commit per read-and-commit turn (dynamostore's
// doc has the numbers). The request's deadline bounds the total wait.
const (
	commitBackoffBase = 8 * time.Millisecond
	commitBackoffCap  = 256 * time.Millisecond
)

// localRetries is how many lost races in a row a store deciding commits
// in process (store.LocalCommits) retries at once: each retry reads the
// head afresh and takes microseconds, so losing this many in a row means
// real contention, which the backoff then spreads.
const localRetries = 3

// retryWait is the pause before retry attempt (≥ 1) of a commit that lost
// its race: none for the first localRetries on a local store, else the
// backoff.
func retryWait(ctx context.Context, attempt int, local bool) error {
	if local && attempt <= localRetries {
		return nil
	}
	return commitBackoff(ctx, attempt)
}

// commitBackoff sleeps a random delay in (0, min(cap, base·2^(attempt−1))],
// or returns the context's error when it ends first.
func commitBackoff(ctx context.Context, attempt int) error {
	d := commitBackoffBase << min(attempt-1, 16)
	if d > commitBackoffCap {
		d = commitBackoffCap
	}
	return sleep(ctx, time.Duration(rand.Int64N(int64(d)))+1)
}

// replay returns the persisted result for an idempotency key: applied
// replays as cached, rejected as itself (§2.3, §6.3).
func (e *Engine) replay(ctx context.Context, rs *reqState, clientCommitID string) (*wire.PushResult, bool, error) {
	o, err := e.store.GetOutcome(ctx, rs.auth.Partition, rs.clientID, clientCommitID, rs.now)
	if errors.Is(err, store.ErrOutcomeUnreadable) {
		return cacheMiss(clientCommitID), true, nil
	}
	if err != nil {
		return nil, false, storeErr(err, "read push outcome")
	}
	if o == nil {
		return nil, false, nil
	}
	// §1.5/§2.3: an idempotency key belongs to the actor that recorded its
	// outcome. checkClient already refuses a foreign actor on a bound
	// clientId; this is the second fence (e.g. a clientId re-bound after
	// an epoch rotation deleted the client records but kept outcomes), so
	// another actor's result — which may carry a conflict serverRow from a
	// scope it cannot read — is never answered, and nothing is applied.
	if o.ActorID != "" && o.ActorID != rs.auth.ActorID {
		return nil, false, syncerr.New(syncerr.InvalidClientID, "clientCommitId %q of this clientId was recorded by a different actor (§1.5)", clientCommitID)
	}
	res, det, err := decodeOutcome(o.Result)
	if err != nil || res.ClientCommitID != clientCommitID {
		e.log.ErrorContext(ctx, "stored push outcome unreadable", "partition", rs.auth.Partition, "error", fmt.Sprint(err))
		return cacheMiss(clientCommitID), true, nil
	}
	if res.Status == wire.PushApplied {
		res.Status = wire.PushCached
	}
	rs.setDetails(det) // §6.3.1: a replayed rejection emits the same companion
	return res, true, nil
}

// cacheMiss is the §6.3 sync.idempotency_cache_miss encoding; never
// persisted.
func cacheMiss(clientCommitID string) *wire.PushResult {
	return &wire.PushResult{ClientCommitID: clientCommitID, Status: wire.PushRejected, Results: []wire.OpResult{{
		OpIndex: 0, Status: wire.OpError, Code: string(syncerr.IdempotencyCacheMiss),
		Message: "the stored result of this commit cannot be read; retry later", Retryable: true,
	}}}
}

// evaluation is the outcome of running a commit's operations against the
// rows as currently stored.
type evaluation struct {
	reject  *wire.OpResult
	changes []store.Change
	rows    []store.RowWrite

	// stored is the pre-commit state of every row the operations named
	// (absent key: not read; nil: no such row).
	stored rowSet
	// The §6.11 pass (references.go) adds the companion details of a
	// reference rejection, the reference-index writes, and how many
	// operations it appended on behalf of which client operation.
	details       *wire.PushResultDetails
	refs          []store.RefWrite
	cascaded      int
	cascadeOrigin int32

	// blobChecks are the blob references §5.9.6 checks (blobs.go).
	blobChecks []blobCheck

	// evidence is every operation as the whole-commit validator sees it
	// (§6.8), recorded only when one is installed; appended lists the
	// operations §6.11 appended (validators.go).
	evidence []validate.Operation
	appended []appendedOp

	changeBuf [1]store.Change
	rowBuf    [1]store.RowWrite
	// current is evaluate's working state of the rows (its own).
	current rowSet
	// creq is the commit request built from the evaluation, result and
	// oneResult its applied result (pushCommit).
	creq      store.CommitRequest
	result    wire.PushResult
	oneResult [1]wire.OpResult
	// wantBuf backs wantedRows for a one-operation commit.
	wantBuf wantBuf

	// head, when set, is the head read with the rows (evaluate's
	// withHead), and read the rows as read, for CommitRequest.ReadRows.
	head *store.Head
	read []store.RowRead
}

// headWithRows: on a store with a commit queue, evaluate reads the head
// with the commit's rows (it names 1 to maxReadChecks rows).
func headWithRows(rs *reqState, pc *wire.PushCommit) bool {
	n := 0
	for _, tr := range wantedRows(rs.schemaV, pc) {
		n += len(tr.ids)
	}
	return n > 0 && n <= maxReadChecks
}

// tableRows are the rows of one table an evaluation reads.
type tableRows struct {
	table string
	ids   []string
}

// wantedRows lists, per table of sv, the rows the operations of pc name
// (what evaluation reads), tables in order of first mention.
func wantedRows(sv *schema.Version, pc *wire.PushCommit) []tableRows {
	return new(wantBuf).wantedRows(sv, pc)
}

// wantBuf holds wantedRows' answer for a one-operation commit.
type wantBuf struct {
	tr [1]tableRows
	id [1]string
}

// wantedRows is the function wantedRows, answering a one-operation
// commit in a (no allocation of its own when a is).
func (a *wantBuf) wantedRows(sv *schema.Version, pc *wire.PushCommit) []tableRows {
	if len(pc.Operations) == 1 {
		// The usual commit: its one table and row.
		op := &pc.Operations[0]
		if _, ok := sv.Table(op.Table); !ok {
			return nil
		}
		a.id[0] = op.RowID
		a.tr[0] = tableRows{table: op.Table, ids: a.id[:]}
		return a.tr[:]
	}
	var want []tableRows
	for _, op := range pc.Operations {
		if _, ok := sv.Table(op.Table); !ok {
			continue
		}
		// A linear search: a commit names at most the schema's tables.
		j := slices.IndexFunc(want, func(w tableRows) bool { return w.table == op.Table })
		if j < 0 {
			want = append(want, tableRows{table: op.Table})
			j = len(want) - 1
		}
		want[j].ids = append(want[j].ids, op.RowID)
	}
	return want
}

func commitSeqOf(r *store.Row) int64 {
	if r == nil {
		return 0
	}
	return r.CommitSeq
}

type rowKey struct{ table, rowID string }

// rowSet maps rowKey to rows: a slice searched linearly while it holds
// at most rowSetSmall entries (the usual commit names one or two rows),
// a map from then on, so a large commit stays linear.
type rowSet struct {
	small []rowSetEntry // nil once m is in use
	buf   [2]rowSetEntry
	m     map[rowKey]*store.Row
}

type rowSetEntry struct {
	k rowKey
	r *store.Row
}

const rowSetSmall = 8

func (s *rowSet) get(k rowKey) *store.Row {
	if s.m != nil {
		return s.m[k]
	}
	for i := range s.small {
		if s.small[i].k == k {
			return s.small[i].r
		}
	}
	return nil
}

func (s *rowSet) set(k rowKey, r *store.Row) {
	if s.m != nil {
		s.m[k] = r
		return
	}
	for i := range s.small {
		if s.small[i].k == k {
			s.small[i].r = r
			return
		}
	}
	if len(s.small) < rowSetSmall {
		s.small = append(s.small, rowSetEntry{k, r})
		return
	}
	s.m = make(map[rowKey]*store.Row, 2*rowSetSmall)
	for _, e := range s.small {
		s.m[e.k] = e.r
	}
	s.m[k] = r
	s.small = nil
}

// lookup is get that also reports whether k is in the set.
func (s *rowSet) lookup(k rowKey) (*store.Row, bool) {
	if s.m != nil {
		r, ok := s.m[k]
		return r, ok
	}
	for i := range s.small {
		if s.small[i].k == k {
			return s.small[i].r, true
		}
	}
	return nil, false
}

// size is the number of entries.
func (s *rowSet) size() int {
	if s.m != nil {
		return len(s.m)
	}
	return len(s.small)
}

// each calls fn for every entry, in no particular order.
func (s *rowSet) each(fn func(k rowKey, r *store.Row)) {
	if s.m != nil {
		for k, r := range s.m {
			fn(k, r)
		}
		return
	}
	for _, e := range s.small {
		fn(e.k, e.r)
	}
}

// copyTo makes dst a copy of s that later writes to either do not reach
// (dst's own buffer holds a small copy).
func (s *rowSet) copyTo(dst *rowSet) {
	*dst = rowSet{}
	if s.m != nil {
		dst.m = maps.Clone(s.m)
		return
	}
	dst.small = append(dst.buf[:0], s.small...)
}

// pushRules are the edges where §6.2 evaluation differs by wire version;
// everything else is one code path. Version 3 follows the 0.21+ spec,
// versions 1 and 2 keep the 0.15.48 rules their clients were built for.
type pushRules struct {
	// sparse: operation payloads are sparse rows (§2.4 "Sparse rows"),
	// writing their present columns only. Otherwise payloads are full rows
	// and every column of the client's schema version is present.
	sparse bool
	// columnConflicts: baseVersion is compared with the column versions of
	// the present columns and conflicts report conflictColumns; a
	// baseVersion above server_version is sync.invalid_request (§6.2).
	// Otherwise any baseVersion other than the row's version conflicts.
	columnConflicts bool
	// rejectScopeChange: a present scope column whose value differs from
	// the stored row is sync.invalid_request (§3.4 rule 5). Otherwise
	// scope columns are silently kept at their stored values.
	rejectScopeChange bool
	// deletePrecedence: an upsert against an absent row consults the
	// row's tombstone and requires every column for an insert (§6.2).
	// Otherwise an upsert after a delete simply inserts again.
	deletePrecedence bool
}

func rulesFor(wireVersion uint16) pushRules {
	if wireVersion >= wire.Version3 {
		return pushRules{sparse: true, columnConflicts: true, rejectScopeChange: true, deletePrecedence: true}
	}
	return pushRules{}
}

// opScratch holds the per-operation value buffers, reused across a commit
// and, through scratchPool, across requests.
type opScratch struct {
	cvals, svals, stored []rowcodec.Value
	cpresent, spresent   []bool
}

var scratchPool = sync.Pool{New: func() any { return new(opScratch) }}

// maxPooledColumns: the buffers of a very wide table are left to the GC.
const maxPooledColumns = 256

// getScratch takes an opScratch from the pool; putScratch returns it.
// Nothing evaluate returns refers to the buffers (payloads are encoded
// into new slices, scopes and messages are strings), so they are free
// once evaluate is done; the values are cleared first so the pool keeps
// no request's strings or bytes alive.
func getScratch() *opScratch { return scratchPool.Get().(*opScratch) }

func putScratch(sc *opScratch) {
	for _, v := range [][]rowcodec.Value{sc.cvals, sc.svals, sc.stored} {
		if cap(v) > maxPooledColumns {
			return
		}
	}
	if cap(sc.cpresent) > maxPooledColumns || cap(sc.spresent) > maxPooledColumns {
		return
	}
	clear(sc.cvals[:cap(sc.cvals)])
	clear(sc.svals[:cap(sc.svals)])
	clear(sc.stored[:cap(sc.stored)])
	scratchPool.Put(sc)
}

// evaluate applies §6.2 and §3.4 to every operation in order against a
// consistent read of the touched rows plus the commit's own earlier writes.
// Rows are stored, scoped and authorized by the storage (latest) schema
// version whatever version the client speaks: the client's version only
// decides how its payload decodes and how rows are encoded back to it.
//
// withHead (a store with a commit queue): the first row read also
// returns the head (evaluation.head) when the commit reads at most
// maxReadChecks rows, and evaluation.read records what was read.
func (e *Engine) evaluate(ctx context.Context, run *pushRun, withHead bool) (*evaluation, error) {
	rs, pc, g := run.rs, run.pc, run.grant
	storageV := e.schema.Versions[e.schema.Latest]
	rules := rulesFor(rs.version)
	// One consistent batched read per touched table.
	ev := &evaluation{}
	want := ev.wantBuf.wantedRows(rs.schemaV, pc)
	pre := rs.prefetch
	rs.prefetch = nil
	// current holds live rows and tombstones (Deleted); a missing entry
	// is a row never seen or whose tombstone was pruned.
	//
	// It lives in the evaluation's allocation: a few rows in a slice
	// (rowSet), the usual commit naming one.
	current := &ev.current
	current.small = current.buf[:0]
	var q store.CommitQueue
	if withHead && headWithRows(rs, pc) {
		q, _ = e.store.(store.CommitQueue)
	}
	var head *store.Head
	var read []store.RowRead
	for _, tr := range want {
		table, ids := tr.table, tr.ids
		var rows map[string]*store.Row
		var err error
		if q != nil && pre != nil && pre.pc == pc && len(want) == 1 && pre.table == table && slices.Equal(pre.ids, ids) {
			// Read with the head at the start of the request (Engine.touch).
			h := rs.head
			rows, head = pre.rows, &h
		} else if q != nil && head == nil {
			var h store.Head
			var ok bool
			if rows, h, ok, err = q.GetRowsHead(ctx, rs.auth.Partition, table, ids); err == nil && !ok {
				return nil, syncerr.New(syncerr.OperationExecutionFailed, "partition registry entry vanished")
			}
			head = &h
		} else {
			rows, err = e.store.GetRows(ctx, rs.auth.Partition, table, ids)
		}
		if err != nil {
			return nil, storeErr(err, "read rows")
		}
		for id, r := range rows {
			current.set(rowKey{table, id}, r)
		}
		if q != nil {
			for _, id := range ids {
				r := rows[id]
				read = append(read, store.RowRead{Table: table, RowID: id, Present: r != nil, CommitSeq: commitSeqOf(r)})
			}
		}
	}
	// The §6.11 pass needs the pre-commit state (tombstones included)
	// after evaluation has staged its writes over current; so does the
	// blob index (§5.9.4). Nothing else reads ev.stored: without either
	// the copy is not made.
	if e.blobs != nil || storageV.HasReferences() {
		current.copyTo(&ev.stored)
	}
	// The usual commit has one operation: its change and row write live
	// in the evaluation's own allocation.
	ev.changes, ev.rows = ev.changeBuf[:0:len(ev.changeBuf)], ev.rowBuf[:0:len(ev.rowBuf)]
	if head != nil {
		ev.head, ev.read = head, read
	}
	sc := getScratch()
	defer putScratch(sc)
	o := opEval{rules: rules, grant: g, sc: sc}
	for i := range pc.Operations {
		op := &pc.Operations[i]
		t, ok := rs.schemaV.Table(op.Table)
		if !ok {
			ev.reject = opError(i, syncerr.UnknownTable, fmt.Sprintf("table %q is not served (§1.7)", op.Table))
			return ev, nil
		}
		// The schema loader guarantees every served table is stored.
		st, _ := storageV.Table(op.Table)
		k := rowKey{op.Table, op.RowID}
		o.reset(i, op, t, st, current.get(k))

		if op.Op == wire.OpDelete {
			if o.stored == nil {
				run.validateAbsentDelete(ev, &o)
				continue // §6.2: absent-row delete is applied with no change and no check
			}
			if !g.permits(st, o.stored.Scopes) {
				ev.reject = opError(i, syncerr.Forbidden, "delete denied by scope authorization (§3.4)")
				return ev, nil
			}
			// §6.7: decode → scope authorization → validation → write.
			if err := run.validateOp(ctx, ev, &o, nil); err != nil || ev.reject != nil {
				return ev, err
			}
			ev.changes = append(ev.changes, store.Change{Table: op.Table, RowID: op.RowID, Op: wire.OpDelete, Scopes: o.stored.Scopes})
			// The tombstone keeps the deleted row's scopes, so a later
			// upsert is authorized against them before it learns anything.
			ev.rows = append(ev.rows, store.RowWrite{Table: op.Table, Delete: true, Row: store.Row{RowID: op.RowID, Scopes: o.stored.Scopes}})
			// §2.2: the delete leaves a tombstone, also for later
			// operations of this commit.
			current.set(k, &store.Row{RowID: op.RowID, Deleted: true, Scopes: o.stored.Scopes})
			continue
		}

		reject, nr, err := e.evalUpsert(&o)
		if err != nil {
			return nil, err
		}
		if reject != nil {
			ev.reject = reject
			return ev, nil
		}
		if err := run.validateOp(ctx, ev, &o, nr); err != nil || ev.reject != nil {
			return ev, err
		}
		if err := e.collectBlobRefs(ev, i, st, o.stored, nr, sc.present(st, t)); err != nil {
			return nil, err
		}
		ev.changes = append(ev.changes, store.Change{Table: op.Table, RowID: op.RowID, Op: wire.OpUpsert, RowVersion: nr.Version, Scopes: nr.Scopes, Row: nr.Payload})
		ev.rows = append(ev.rows, store.RowWrite{Table: op.Table, Row: *nr})
		current.set(k, nr)
	}
	return ev, nil
}

// opEval is one operation under §6.2 evaluation: what evaluate knows of
// it (index, operation, the client's and the storage version of its
// table, its stored row or tombstone) and, once evalUpsert decoded the
// payload, its values in the storage version's columns. One value serves
// every operation of a commit (reset), with the commit's rules, grant and
// scratch buffers.
type opEval struct {
	rules pushRules
	grant writeGrant
	sc    *opScratch

	i  int
	op *wire.Operation
	// t is the client's schema version of the table, st the storage
	// version.
	t, st *schema.Table
	// stored is the live row (nil when absent) and tomb its tombstone
	// within the horizon (nil when none).
	stored, tomb *store.Row

	// vals and present are the payload's values and presence flags in
	// st's columns; full: the payload presents every column.
	vals    []rowcodec.Value
	present []bool
	full    bool
}

// reset points o at operation i; cur is the row's current state (a live
// row, a tombstone, or nil).
func (o *opEval) reset(i int, op *wire.Operation, t, st *schema.Table, cur *store.Row) {
	o.i, o.op, o.t, o.st = i, op, t, st
	o.stored, o.tomb = cur, nil
	if cur != nil && cur.Deleted {
		o.tomb, o.stored = cur, nil
	}
	o.vals, o.present, o.full = nil, nil, false
}

// fail is the rejecting result record of o.
func (o *opEval) fail(code syncerr.Code, msg string) (*wire.OpResult, *store.Row, error) {
	return opError(o.i, code, msg), nil, nil
}

func opError(i int, code syncerr.Code, msg string) *wire.OpResult {
	return &wire.OpResult{OpIndex: int32(i), Status: wire.OpError, Code: string(code), Message: msg}
}

// evalUpsert runs §6.2 for one upsert. It returns the rejecting result
// record, or the row to write.
func (e *Engine) evalUpsert(o *opEval) (*wire.OpResult, *store.Row, error) {
	op, t, st, stored, sc := o.op, o.t, o.st, o.stored, o.sc
	var err error
	if o.rules.sparse {
		sc.cvals, sc.cpresent, err = t.Codec.DecodeSparse(op.Payload.Value, t.PKIndex, sc.cvals[:0], sc.cpresent[:0])
	} else {
		sc.cvals, err = t.Codec.Decode(op.Payload.Value, sc.cvals[:0])
		sc.cpresent = fill(sc.cpresent, len(t.Columns), true)
	}
	if err != nil {
		return o.fail(syncerr.InvalidRequest, "row payload failed row-codec decode (§1.7): "+errText(err))
	}
	if valueText(t.Columns[t.PKIndex].Type, sc.cvals[t.PKIndex]) != op.RowID {
		return o.fail(syncerr.InvalidRequest, "payload primary key does not match rowId")
	}
	o.full = !slices.Contains(sc.cpresent, false)

	// Work in the storage version's columns from here on. A column the
	// client's version lacks is absent: an update keeps its stored value,
	// an insert stores NULL.
	o.vals, o.present = sc.cvals, sc.cpresent
	if st != t {
		sc.svals = slices.Grow(sc.svals[:0], len(st.Columns))[:len(st.Columns)]
		sc.spresent = fill(sc.spresent, len(st.Columns), false)
		for j, c := range st.Columns {
			if ci := t.ColumnIndex(c.Name); ci >= 0 {
				sc.svals[j], sc.spresent[j] = sc.cvals[ci], sc.cpresent[ci]
			} else {
				sc.svals[j] = rowcodec.Value{Null: true}
			}
		}
		o.vals, o.present = sc.svals, sc.spresent
	}
	vals, present := o.vals, o.present

	if stored == nil {
		return e.evalInsert(o)
	}

	// §3.4 step 2 / §6.2 step 1: authorize the stored row, never the
	// payload, and before disclosing anything in a conflict.
	if !o.grant.permits(st, stored.Scopes) {
		return o.fail(syncerr.Forbidden, "write denied by scope authorization (§3.4)")
	}
	sc.stored, stored, err = e.storedRow(st, stored, sc.stored[:0])
	if err != nil {
		return nil, nil, syncerr.Wrap(err, syncerr.OperationExecutionFailed, "stored row %s/%s does not decode", op.Table, op.RowID)
	}
	// §3.4 rule 5 / §6.2 step 2: scope columns are immutable on update.
	// (Version 2 keeps a differing value silently at the stored one.)
	if o.rules.rejectScopeChange {
		for _, p := range st.Scopes {
			j := p.ColumnIndex
			if present[j] && !sameScopeValue(st.Columns[j].Type, vals[j], sc.stored[j]) {
				return o.fail(syncerr.InvalidRequest, fmt.Sprintf("scope column %q is immutable on update (§3.4 rule 5)", p.Column))
			}
		}
	}
	if op.BaseVersion.Present {
		base := op.BaseVersion.Value
		var marked []bool // storage columns that conflict
		switch {
		case !o.rules.columnConflicts:
			if base != stored.Version {
				marked = []bool{}
			}
		case base > stored.Version:
			return o.fail(syncerr.InvalidRequest, fmt.Sprintf("baseVersion %d exceeds the row's server_version %d (§6.2)", base, stored.Version))
		default:
			// §6.2 steps 4–5: baseVersion 0 (lost insert race) marks every
			// present non-crdt column; otherwise the present non-crdt
			// columns written after baseVersion. The primary key never
			// marks; the stored row was authorized above.
			marked = make([]bool, len(st.Columns))
			hit := base == 0
			for j := range st.Columns {
				if present[j] && j != st.PKIndex && st.Columns[j].Type != rowcodec.TypeCRDT &&
					(base == 0 || columnVersion(stored, j) > base) {
					marked[j], hit = true, true
				}
			}
			if !hit {
				marked = nil
			}
		}
		if marked != nil {
			row, err := e.transcode(st, t, stored.Payload)
			if err != nil {
				return nil, nil, err
			}
			res := &wire.OpResult{OpIndex: int32(o.i), Status: wire.OpConflict, Code: string(syncerr.VersionConflict),
				Message: "baseVersion does not match the stored row (§6.2)", ServerVersion: stored.Version, ServerRow: row}
			if o.rules.columnConflicts {
				res.Message = "columns changed after baseVersion (§6.2)"
				res.ConflictColumns = rowcodec.PresenceBitmap(len(t.Columns), toClientColumns(st, t, marked))
			}
			return res, nil, nil
		}
	}
	// A present scope column is evidence in a conflict (steps 4–5 mark
	// it like any present column) but a no-op for the write: it neither
	// writes nor restamps.
	for _, p := range st.Scopes {
		present[p.ColumnIndex] = false
	}
	if r := e.unsupportedValues(o.i, st, vals, present); r != nil {
		return r, nil, nil
	}
	// §5.10.3 rule 2: on a clean apply each present crdt column becomes
	// merge(stored, incoming), never the pushed bytes.
	if r := e.mergeCRDT(o.i, st, vals, present, sc.stored); r != nil {
		return r, nil, nil
	}
	// §6.2 apply: present columns replace the stored ones, absent columns
	// stay; the stored payload is always a full row (§2.4). Merged in
	// place: sc.stored is this operation's scratch decode of the stored
	// row, read no further.
	merged := sc.stored
	for j := range merged {
		if present[j] {
			merged[j] = vals[j]
		}
	}
	// Sized for the merged row up front (it is at most the stored row
	// plus the new values): one allocation, not one per doubling.
	payload, err := st.Codec.Append(make([]byte, 0, len(stored.Payload)+len(op.Payload.Value)), merged)
	if err != nil {
		return o.fail(syncerr.InvalidRequest, "row cannot be encoded: "+errText(err))
	}
	// §2.2: every present column except the primary key takes the new
	// server_version; version-2 writes (full rows) restamp all they carry.
	next := stored.Version + 1
	cv := make([]int64, len(st.Columns))
	for j := range cv {
		if present[j] && j != st.PKIndex {
			cv[j] = next
		} else {
			cv[j] = columnVersion(stored, j)
		}
	}
	return nil, &store.Row{RowID: op.RowID, Version: next, ColumnVersions: cv, Scopes: stored.Scopes, Payload: payload}, nil
}

// evalInsert is §6.2 for an upsert whose row is absent (never stored,
// deleted, or pruned past the horizon).
func (e *Engine) evalInsert(o *opEval) (*wire.OpResult, *store.Row, error) {
	op, st, vals, present, tomb := o.op, o.st, o.vals, o.present, o.tomb
	// §3.4 step 2: with no stored row the pushed payload is the
	// authorization row. It is checked before sync.row_missing for a
	// baseVersion, which would otherwise tell an actor without the scope
	// that the row is absent.
	authorized := func() bool {
		for _, p := range st.Scopes {
			if !present[p.ColumnIndex] {
				return false
			}
		}
		scopes, ok := extractScopes(st, vals)
		return ok && o.grant.permits(st, scopes)
	}
	if op.BaseVersion.Present && op.BaseVersion.Value != 0 {
		if !authorized() {
			return o.fail(syncerr.Forbidden, "write denied by scope authorization (§3.4)")
		}
		return o.fail(syncerr.RowMissing, "baseVersion names a row that does not exist (§6.2)")
	}
	if o.rules.deletePrecedence {
		if !op.BaseVersion.Present && tomb != nil {
			// §3.4 before §6.2: the tombstone's scopes are the deleted
			// row's, and only an actor allowed to see that row learns it
			// was deleted; anyone else learns only sync.forbidden, never
			// that the rowId exists in another scope. A tombstone written
			// before tombstones kept scopes has none: the payload is then
			// the authorization row (fail closed for a partial payload).
			if len(tomb.Scopes) > 0 {
				if !o.grant.permits(st, tomb.Scopes) {
					return o.fail(syncerr.Forbidden, "write denied by scope authorization (§3.4)")
				}
			} else if !authorized() {
				return o.fail(syncerr.Forbidden, "write denied by scope authorization (§3.4)")
			}
			// §6.2: a delete within the horizon beats an unversioned upsert.
			return o.fail(syncerr.RowDeleted, "the row was deleted; an unversioned upsert does not recreate it (baseVersion 0 does) (§6.2)")
		}
		if !o.full {
			return o.fail(syncerr.RowMissing, "a partial payload targets an absent row; an insert presents every column (§6.2)")
		}
	}
	if !authorized() {
		return o.fail(syncerr.Forbidden, "insert denied by scope authorization (§3.4)")
	}
	scopes, _ := extractScopes(st, vals)
	if r := e.unsupportedValues(o.i, st, vals, present); r != nil {
		return r, nil, nil
	}
	// §5.10.2: a new row's crdt value is merge(null, incoming).
	if r := e.mergeCRDT(o.i, st, vals, present, nil); r != nil {
		return r, nil, nil
	}
	// An insert presents every column: about the client's payload size.
	payload, err := st.Codec.Append(make([]byte, 0, len(op.Payload.Value)+16), vals)
	if err != nil {
		return o.fail(syncerr.InvalidRequest, "row cannot be encoded: "+errText(err))
	}
	// §2.2: an insert sets every column version to 1 (and clears the
	// tombstone, which the store does when it writes the row).
	cv := make([]int64, len(st.Columns))
	for j := range cv {
		cv[j] = 1
	}
	return nil, &store.Row{RowID: op.RowID, Version: 1, ColumnVersions: cv, Scopes: scopes, Payload: payload}, nil
}

// unsupportedValues refuses values this server cannot store. It runs
// after authorization, so an actor without the scope learns only
// sync.forbidden. A crdt value needs a merger for its column's crdtType
// (§5.10.2). Blob references are checked once the commit is staged
// (checkBlobs, §5.9.6).
func (e *Engine) unsupportedValues(i int, st *schema.Table, vals []rowcodec.Value, present []bool) *wire.OpResult {
	for _, j := range st.CRDTColumns {
		if present[j] && !vals[j].Null && !e.cfg.CRDTMergers.Has(st.Meta[j].CRDTType) {
			return opError(i, syncerr.CrdtMergeFailed, fmt.Sprintf("no CRDT merger is registered for crdtType %q (§5.10.2)", st.Meta[j].CRDTType))
		}
	}
	return nil
}

// mergeCRDT replaces each present crdt value in vals by the merge of the
// stored value (stored[j], or none when stored is nil or the column is
// NULL) with it (§5.10.2, §5.10.3 rule 2). A pushed NULL keeps the stored
// state: NULL is the empty document, and merging it changes nothing. A
// merger error rejects the operation with sync.crdt_merge_failed, so the
// commit rolls back (§6.4).
func (e *Engine) mergeCRDT(i int, st *schema.Table, vals []rowcodec.Value, present []bool, stored []rowcodec.Value) *wire.OpResult {
	for _, j := range st.CRDTColumns {
		if !present[j] {
			continue
		}
		var old []byte // none: a new row, or NULL (the empty document)
		if stored != nil && !stored[j].Null && len(stored[j].Bytes) > 0 {
			old = stored[j].Bytes
		}
		if vals[j].Null {
			if stored != nil {
				vals[j] = stored[j]
			}
			continue
		}
		// A value larger than a row could never be stored; refusing it
		// before the merge bounds the merger's memory by the row limit.
		if n := len(vals[j].Bytes); n > e.limits.MaxRowBytes {
			return opError(i, syncerr.ConstraintViolation, fmt.Sprintf("crdt value is %d bytes; one row may hold at most %d", n, e.limits.MaxRowBytes))
		}
		m, ok := e.cfg.CRDTMergers.Lookup(st.Meta[j].CRDTType)
		if !ok {
			return opError(i, syncerr.CrdtMergeFailed, fmt.Sprintf("no CRDT merger is registered for crdtType %q (§5.10.2)", st.Meta[j].CRDTType))
		}
		out, err := m.Merge(old, vals[j].Bytes)
		if err != nil {
			// The merger's message says what is wrong with the bytes; it
			// never echoes them.
			return opError(i, syncerr.CrdtMergeFailed, fmt.Sprintf("column %q: the %s merger refused the value: %v (§5.10.2)", st.Columns[j].Name, st.Meta[j].CRDTType, err))
		}
		vals[j] = rowcodec.Value{Bytes: out}
	}
	return nil
}

// columnVersion is the §2.2 column_version of storage column j; a row
// stored without column versions has every column at its server_version.
func columnVersion(r *store.Row, j int) int64 {
	if j < len(r.ColumnVersions) {
		return r.ColumnVersions[j]
	}
	return r.Version
}

// toClientColumns maps per-storage-column flags to the client version's
// columns (a flagged column is always present in the client's payload, so
// it exists in its version).
func toClientColumns(st, t *schema.Table, flags []bool) []bool {
	if st == t {
		return flags
	}
	out := make([]bool, len(t.Columns))
	for j, f := range flags {
		if f {
			if ci := t.ColumnIndex(st.Columns[j].Name); ci >= 0 {
				out[ci] = true
			}
		}
	}
	return out
}

// sameScopeValue compares scope-column values the way stored scopes do:
// by their rendered text.
func sameScopeValue(typ rowcodec.Type, a, b rowcodec.Value) bool {
	return a.Null == b.Null && valueText(typ, a) == valueText(typ, b)
}

func fill(b []bool, n int, v bool) []bool {
	b = slices.Grow(b[:0], n)[:n]
	for i := range b {
		b[i] = v
	}
	return b
}

func errText(err error) string {
	if se := syncerr.As(err); se != nil {
		return se.Message
	}
	return err.Error()
}

// valueText renders a primary-key or scope column value as the text used
// for rowId and stored scopes, the way JavaScript's String() does for the
// types a key may have.
func valueText(t rowcodec.Type, v rowcodec.Value) string {
	if v.Null {
		return ""
	}
	switch t {
	case rowcodec.TypeInteger:
		return strconv.FormatInt(v.Int, 10)
	case rowcodec.TypeBoolean:
		return strconv.FormatBool(v.Bool)
	case rowcodec.TypeFloat:
		// Number.prototype.toString, the form grants and clients use
		// (1000000, 1e-7, 1e+21, 0 for -0).
		return string(rowcodec.AppendFloat(nil, v.Float))
	case rowcodec.TypeBytes, rowcodec.TypeCRDT:
		return ""
	default:
		return v.Str
	}
}

// encodeOutcome serializes a push result and its PUSH_RESULT_DETAILS
// companion, if any, for the store: the frames are wrapped in a minimal
// response message so the codec validates them both ways, and replays are
// byte-equivalent by construction (§6.3.1 persists details with the
// outcome). Outcomes are stored at wire version 3, the richest layout
// (conflictColumns survive); a replay is re-encoded in the requesting
// client's version, its details frame included.
// outcomeHeader is the empty RESP_HEADER of every stored outcome; the
// encoder only reads it (never modified, so shared by all requests).
var outcomeHeader = &wire.RespHeader{}

func encodeOutcome(res *wire.PushResult, det *wire.PushResultDetails) ([]byte, error) {
	frames := []wire.Frame{outcomeHeader, res}
	if det != nil {
		frames = append(frames, det)
	}
	b, err := wire.Encode(&wire.Message{WireVersion: wire.Version3, Kind: wire.KindResponse, Frames: frames})
	if err != nil {
		return nil, fmt.Errorf("encode push outcome: %w", err)
	}
	return b, nil
}

// decodeOutcome reads a stored outcome of any wire version: version 1 (all
// outcomes stored before wire version 3 was served) or version 3, with or
// without its PUSH_RESULT_DETAILS companion.
func decodeOutcome(b []byte) (*wire.PushResult, *wire.PushResultDetails, error) {
	m, err := wire.Decode(b)
	if err != nil {
		return nil, nil, err
	}
	if len(m.Frames) != 2 && len(m.Frames) != 3 {
		return nil, nil, errors.New("outcome: unexpected frame count")
	}
	res, ok := m.Frames[1].(*wire.PushResult)
	if !ok {
		return nil, nil, errors.New("outcome: second frame is not PUSH_RESULT")
	}
	var det *wire.PushResultDetails
	if len(m.Frames) == 3 {
		d, ok := m.Frames[2].(*wire.PushResultDetails)
		if !ok {
			return nil, nil, errors.New("outcome: third frame is not PUSH_RESULT_DETAILS")
		}
		det = &wire.PushResultDetails{ClientCommitID: d.ClientCommitID, Entries: slices.Clone(d.Entries)}
	}
	// Detach from the decode buffer.
	c := *res
	c.Results = append([]wire.OpResult(nil), res.Results...)
	for i := range c.Results {
		c.Results[i].ServerRow = append([]byte(nil), c.Results[i].ServerRow...)
		if cc := c.Results[i].ConflictColumns; cc != nil {
			c.Results[i].ConflictColumns = append([]byte(nil), cc...)
		}
	}
	return &c, det, nil
}

// present returns the storage-column presence flags of the operation
// evalUpsert last decoded.
func (sc *opScratch) present(st, t *schema.Table) []bool {
	if st != t {
		return sc.spresent
	}
	return sc.cpresent
}
