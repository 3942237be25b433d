package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// maxCommitAttempts bounds the optimistic retry loop of one commit: every
// lost race means another commit landed, so the partition made progress.
const maxCommitAttempts = 64

// pushCommit runs the §6 pipeline for one PUSH_COMMIT and returns its
// PUSH_RESULT. Returned errors are request-level (storage unavailable);
// every protocol outcome is a result.
func (e *Engine) pushCommit(ctx context.Context, rs *reqState, pc *wire.PushCommit, duplicate bool) (*wire.PushResult, error) {
	// §2.3/§6.3: there is no separate idempotency lookup before
	// evaluating. The key is checked where it matters, inside the atomic
	// commit (Commit and PutRejection fail with ErrOutcomeExists when the
	// key already has an outcome) and the stored outcome is replayed then.
	// A replay therefore costs one wasted evaluation, and every new push
	// saves a storage round trip. The in-request duplicate rule is the
	// same replay, answered directly.
	if duplicate {
		if res, done, err := e.replay(ctx, rs, pc.ClientCommitID); done || err != nil {
			return res, err
		}
		// The first occurrence produced no persisted outcome (a cache miss
		// report): answer the same way rather than applying twice.
		return cacheMiss(pc.ClientCommitID), nil
	}
	allowed, resolveErr := e.allowedScopes(ctx, rs)
	head := rs.head
	for attempt := 0; attempt < maxCommitAttempts; attempt++ {
		if attempt > 0 {
			h, ok, err := e.store.Head(ctx, rs.auth.Partition)
			if err != nil {
				return nil, storeErr(err, "read partition head")
			}
			if !ok {
				return nil, syncerr.New(syncerr.OperationExecutionFailed, "partition registry entry vanished")
			}
			head = h
		}
		ev, err := e.evaluate(ctx, rs, pc, allowed, resolveErr)
		if err != nil {
			return nil, err
		}
		if ev.reject != nil {
			res := &wire.PushResult{ClientCommitID: pc.ClientCommitID, Status: wire.PushRejected, Results: []wire.OpResult{*ev.reject}}
			blob, err := encodeOutcome(res)
			if err != nil {
				return nil, err
			}
			err = e.store.PutRejection(ctx, rs.auth.Partition, rs.clientID, pc.ClientCommitID, store.Outcome{Result: blob, RecordedAtMs: rs.now, ActorID: rs.auth.ActorID})
			if errors.Is(err, store.ErrOutcomeExists) {
				res, _, err := e.replay(ctx, rs, pc.ClientCommitID)
				return res, err
			}
			if errors.Is(err, store.ErrOutcomeUnreadable) {
				return cacheMiss(pc.ClientCommitID), nil
			}
			if err != nil {
				return nil, storeErr(err, "record rejected outcome")
			}
			return res, nil
		}
		seq := head.MaxCommitSeq + 1
		res := &wire.PushResult{ClientCommitID: pc.ClientCommitID, Status: wire.PushApplied, CommitSeq: wire.Some(seq), Results: make([]wire.OpResult, len(pc.Operations))}
		for i := range res.Results {
			res.Results[i] = wire.OpResult{OpIndex: int32(i), Status: wire.OpApplied}
		}
		blob, err := encodeOutcome(res)
		if err != nil {
			return nil, err
		}
		creq := &store.CommitRequest{
			ExpectedMaxSeq: head.MaxCommitSeq,
			Commit: store.Commit{
				Seq: seq, CreatedAtMs: rs.now, ActorID: rs.auth.ActorID,
				ClientID: rs.clientID, ClientCommitID: pc.ClientCommitID, Changes: ev.changes,
			},
			Rows:    ev.rows,
			Outcome: store.Outcome{Applied: true, CommitSeq: seq, Result: blob, RecordedAtMs: rs.now, ActorID: rs.auth.ActorID},
		}
		for i := range creq.Rows {
			creq.Rows[i].Row.CommitSeq = seq
		}
		err = e.store.Commit(ctx, rs.auth.Partition, creq)
		switch {
		case err == nil:
			rs.head.MaxCommitSeq = seq
			return res, nil
		case errors.Is(err, store.ErrHeadMoved):
			continue
		case errors.Is(err, store.ErrOutcomeExists):
			res, _, err := e.replay(ctx, rs, pc.ClientCommitID)
			return res, err
		case errors.Is(err, store.ErrOutcomeUnreadable):
			// The idempotency key could not be checked: report, apply nothing.
			return cacheMiss(pc.ClientCommitID), nil
		case errors.Is(err, store.ErrTooLarge):
			ev.reject = &wire.OpResult{OpIndex: 0, Status: wire.OpError, Code: string(syncerr.ConstraintViolation),
				Message: "commit exceeds what storage can hold: " + err.Error()}
			res := &wire.PushResult{ClientCommitID: pc.ClientCommitID, Status: wire.PushRejected, Results: []wire.OpResult{*ev.reject}}
			blob, berr := encodeOutcome(res)
			if berr != nil {
				return nil, berr
			}
			if perr := e.store.PutRejection(ctx, rs.auth.Partition, rs.clientID, pc.ClientCommitID, store.Outcome{Result: blob, RecordedAtMs: rs.now, ActorID: rs.auth.ActorID}); perr != nil {
				if errors.Is(perr, store.ErrOutcomeExists) {
					res, _, err := e.replay(ctx, rs, pc.ClientCommitID)
					return res, err
				}
				return nil, storeErr(perr, "record rejected outcome")
			}
			return res, nil
		default:
			return nil, storeErr(err, "append commit")
		}
	}
	return nil, syncerr.New(syncerr.RateLimited, "partition is too busy: commit lost %d races", maxCommitAttempts)
}

// replay returns the persisted result for an idempotency key: applied
// replays as cached, rejected as itself (§2.3, §6.3).
func (e *Engine) replay(ctx context.Context, rs *reqState, clientCommitID string) (*wire.PushResult, bool, error) {
	o, err := e.store.GetOutcome(ctx, rs.auth.Partition, rs.clientID, clientCommitID)
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
	res, err := decodeOutcome(o.Result)
	if err != nil || res.ClientCommitID != clientCommitID {
		e.log.ErrorContext(ctx, "stored push outcome unreadable", "partition", rs.auth.Partition, "error", fmt.Sprint(err))
		return cacheMiss(clientCommitID), true, nil
	}
	if res.Status == wire.PushApplied {
		res.Status = wire.PushCached
	}
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
}

type rowKey struct{ table, rowID string }

// evaluate applies §6.2 and §3.4 to every operation in order against a
// consistent read of the touched rows plus the commit's own earlier writes.
func (e *Engine) evaluate(ctx context.Context, rs *reqState, pc *wire.PushCommit, allowed ScopeMap, resolveErr error) (*evaluation, error) {
	storageV := e.schema.Versions[e.schema.Latest]
	// One consistent batched read per touched table.
	want := map[string][]string{}
	for _, op := range pc.Operations {
		if _, ok := rs.schemaV.Table(op.Table); ok {
			want[op.Table] = append(want[op.Table], op.RowID)
		}
	}
	current := map[rowKey]*store.Row{}
	for table, ids := range want {
		rows, err := e.store.GetRows(ctx, rs.auth.Partition, table, ids)
		if err != nil {
			return nil, storeErr(err, "read rows")
		}
		for id, r := range rows {
			current[rowKey{table, id}] = r
		}
	}
	ev := &evaluation{}
	fail := func(i int, code syncerr.Code, msg string) (*evaluation, error) {
		ev.reject = &wire.OpResult{OpIndex: int32(i), Status: wire.OpError, Code: string(code), Message: msg, Retryable: false}
		return ev, nil
	}
	var vals, storedVals []rowcodec.Value
	for i := range pc.Operations {
		op := &pc.Operations[i]
		t, ok := rs.schemaV.Table(op.Table)
		if !ok {
			return fail(i, syncerr.UnknownTable, fmt.Sprintf("table %q is not served (§1.7)", op.Table))
		}
		st, _ := storageV.Table(op.Table)
		k := rowKey{op.Table, op.RowID}
		stored := current[k]

		if op.Op == wire.OpDelete {
			if stored == nil {
				continue // §6.2: absent-row delete is applied with no change and no check
			}
			if resolveErr != nil || !authorizeRow(t, stored.Scopes, allowed) {
				return fail(i, syncerr.Forbidden, "delete denied by scope authorization (§3.4)")
			}
			ev.changes = append(ev.changes, store.Change{Table: op.Table, RowID: op.RowID, Op: wire.OpDelete, Scopes: stored.Scopes})
			ev.rows = append(ev.rows, store.RowWrite{Table: op.Table, Delete: true, Row: store.Row{RowID: op.RowID}})
			current[k] = nil
			continue
		}

		var err error
		vals, err = t.Codec.Decode(op.Payload.Value, vals[:0])
		if err != nil {
			return fail(i, syncerr.InvalidRequest, "row payload failed row-codec decode (§1.7): "+errText(err))
		}
		if valueText(t.Columns[t.PKIndex].Type, vals[t.PKIndex]) != op.RowID {
			return fail(i, syncerr.InvalidRequest, "payload primary key does not match rowId")
		}
		if hasCRDTValue(t, vals) {
			return fail(i, syncerr.CrdtMergeFailed, "no CRDT merger is registered on this server (§5.10.2)")
		}
		if stored != nil {
			// §3.4 step 2: authorize the stored row, never the payload, and
			// before disclosing anything in a conflict (§6.2).
			if resolveErr != nil || !authorizeRow(t, stored.Scopes, allowed) {
				return fail(i, syncerr.Forbidden, "write denied by scope authorization (§3.4)")
			}
			if op.BaseVersion.Present && op.BaseVersion.Value != stored.Version {
				row, err := e.transcode(st, t, stored.Payload)
				if err != nil {
					return nil, err
				}
				ev.reject = &wire.OpResult{OpIndex: int32(i), Status: wire.OpConflict, Code: string(syncerr.VersionConflict),
					Message: "baseVersion does not match the stored row (§6.2)", ServerVersion: stored.Version, ServerRow: row}
				return ev, nil
			}
			// §3.4 rule 5: scope columns keep their stored values.
			storedVals, err = st.Codec.Decode(stored.Payload, storedVals[:0])
			if err != nil {
				return nil, syncerr.Wrap(err, syncerr.OperationExecutionFailed, "stored row %s/%s does not decode", op.Table, op.RowID)
			}
			for _, p := range t.Scopes {
				if j := st.ColumnIndex(t.Columns[p.ColumnIndex].Name); j >= 0 {
					vals[p.ColumnIndex] = storedVals[j]
				}
			}
			payload, err := e.toStorage(st, t, vals, storedVals)
			if err != nil {
				return fail(i, syncerr.InvalidRequest, "row cannot be encoded: "+errText(err))
			}
			nr := &store.Row{RowID: op.RowID, Version: stored.Version + 1, Scopes: stored.Scopes, Payload: payload}
			ev.changes = append(ev.changes, store.Change{Table: op.Table, RowID: op.RowID, Op: wire.OpUpsert, RowVersion: nr.Version, Scopes: nr.Scopes, Row: payload})
			ev.rows = append(ev.rows, store.RowWrite{Table: op.Table, Row: *nr})
			current[k] = nr
			continue
		}
		// Insert path (§6.2). §3.4 step 2: with no stored row the pushed
		// payload is the authorization row, and §3.4 applies to every push
		// operation — so authorize before answering sync.row_missing, which
		// would otherwise tell an actor without the scope that the row is
		// absent.
		scopes, ok := extractScopes(t, vals)
		if !ok || resolveErr != nil || !authorizeRow(t, scopes, allowed) {
			return fail(i, syncerr.Forbidden, "insert denied by scope authorization (§3.4)")
		}
		if op.BaseVersion.Present && op.BaseVersion.Value != 0 {
			return fail(i, syncerr.RowMissing, "baseVersion names a row that does not exist (§6.2)")
		}
		payload, err := e.toStorage(st, t, vals, nil)
		if err != nil {
			return fail(i, syncerr.InvalidRequest, "row cannot be encoded: "+errText(err))
		}
		nr := &store.Row{RowID: op.RowID, Version: 1, Scopes: scopes, Payload: payload}
		ev.changes = append(ev.changes, store.Change{Table: op.Table, RowID: op.RowID, Op: wire.OpUpsert, RowVersion: 1, Scopes: scopes, Row: payload})
		ev.rows = append(ev.rows, store.RowWrite{Table: op.Table, Row: *nr})
		current[k] = nr
	}
	return ev, nil
}

func hasCRDTValue(t *schema.Table, vals []rowcodec.Value) bool {
	for i, c := range t.Columns {
		if c.Type == rowcodec.TypeCRDT && !vals[i].Null {
			return true
		}
	}
	return false
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

// encodeOutcome serializes a push result for the store: the frame is
// wrapped in a minimal response message so the codec validates it both
// ways, and replays are byte-equivalent by construction.
func encodeOutcome(res *wire.PushResult) ([]byte, error) {
	b, err := wire.Encode(&wire.Message{WireVersion: wire.Version1, Kind: wire.KindResponse, Frames: []wire.Frame{&wire.RespHeader{}, res}})
	if err != nil {
		return nil, fmt.Errorf("encode push outcome: %w", err)
	}
	return b, nil
}

func decodeOutcome(b []byte) (*wire.PushResult, error) {
	m, err := wire.Decode(b)
	if err != nil {
		return nil, err
	}
	if len(m.Frames) != 2 {
		return nil, errors.New("outcome: unexpected frame count")
	}
	res, ok := m.Frames[1].(*wire.PushResult)
	if !ok {
		return nil, errors.New("outcome: second frame is not PUSH_RESULT")
	}
	// Detach from the decode buffer.
	c := *res
	c.Results = append([]wire.OpResult(nil), res.Results...)
	for i := range c.Results {
		c.Results[i].ServerRow = append([]byte(nil), c.Results[i].ServerRow...)
	}
	return &c, nil
}
