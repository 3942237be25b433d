package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/validate"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// Host validation (§6.7, §6.8). A row validator runs inside evaluate,
// per operation, after the decode and the §3.4 authorization and before
// the operation's write is staged; the whole-commit validator runs as a
// commit stage once everything is staged (references included), over
// the candidate state. Either rejection ends the commit like any other
// operation failure: nothing is written and the rejected outcome is
// recorded (§6.4). With no hooks installed nothing here runs.

// The fixed public messages of unexpected validator failures: the
// error's own text never reaches a result (§6.7).
const (
	msgRowValidatorFailed    = "write validator failed"
	msgCommitValidatorFailed = "whole-commit validator failed"
)

// SetValidators installs the hooks every later commit runs (nil or empty:
// none). Every table a row validator names must be served. Safe to call
// while requests are in flight: a commit uses the hooks installed when it
// started.
func (e *Engine) SetValidators(h *validate.Hooks) error {
	if h.Empty() {
		e.hooks.Store(nil)
		return nil
	}
	sv := e.schema.Versions[e.schema.Latest]
	for table := range h.Rows {
		if _, ok := sv.Table(table); !ok {
			return fmt.Errorf("engine: a validator names table %q, which the schema does not serve", table)
		}
	}
	e.hooks.Store(h)
	return nil
}

// TableColumns answers the columns of a served table (storage version),
// for compiling declarative rules (validate.ParseRules).
func TableColumns(sc *schema.Schema) validate.Columns {
	sv := sc.Versions[sc.Latest]
	return func(table string) ([]string, bool) {
		t, ok := sv.Table(table)
		if !ok {
			return nil, false
		}
		out := make([]string, len(t.Columns))
		for i, c := range t.Columns {
			out[i] = c.Name
		}
		return out, true
	}
}

// caller is the commit's validate.Caller.
func (run *pushRun) caller() validate.Caller {
	return validate.Caller{Partition: run.rs.auth.Partition, ActorID: run.rs.auth.ActorID, ClientID: run.rs.clientID, ClientCommitID: run.pc.ClientCommitID}
}

// validateOp runs the §6.7 validator of o's table over the operation
// about to be staged (nr: the row to write, nil for a delete) and, when
// a whole-commit validator is installed, records the operation's
// evidence (§6.8). A rejection sets ev.reject.
func (run *pushRun) validateOp(ctx context.Context, ev *evaluation, o *opEval, nr *store.Row) error {
	rv := run.hooks.Row(o.op.Table)
	if rv == nil && run.hooks.Commit == nil {
		return nil
	}
	op := validate.Operation{OpIndex: o.i, Op: validate.Upsert, Table: o.op.Table, RowID: o.op.RowID}
	return run.checkOp(ctx, ev, rv, o.st, &op, o.stored, nr)
}

// validateAbsentDelete records the evidence of a delete of an absent row:
// it stages nothing and runs no row validator (§6.7), but the whole-commit
// validator sees it (§6.8).
func (run *pushRun) validateAbsentDelete(ev *evaluation, o *opEval) {
	if run.hooks.Commit != nil {
		ev.evidence = append(ev.evidence, validate.Operation{OpIndex: o.i, Op: validate.Delete, Table: o.op.Table, RowID: o.op.RowID})
	}
}

// checkOp completes op from the stored row and the row to write, runs
// rv (when set) and records the evidence.
func (run *pushRun) checkOp(ctx context.Context, ev *evaluation, rv validate.RowValidator, st *schema.Table, op *validate.Operation, stored, nr *store.Row) error {
	var err error
	if stored != nil {
		if op.Stored, err = decodeRow(st, stored.Payload); err != nil {
			return err
		}
		op.StoredVersion = stored.Version
	}
	if nr == nil {
		op.Op = validate.Delete
	} else {
		if op.Row, err = decodeRow(st, nr.Payload); err != nil {
			return err
		}
		op.NextVersion = nr.Version
	}
	if rv != nil {
		if verr := callRow(ctx, rv, run.caller(), op); verr != nil {
			run.reject(ctx, ev, op.OpIndex, verr, false)
			return nil
		}
	}
	if run.hooks.Commit != nil {
		ev.evidence = append(ev.evidence, *op)
	}
	return nil
}

// callRow runs a row validator; a panic is an unexpected failure.
func callRow(ctx context.Context, rv validate.RowValidator, who validate.Caller, op *validate.Operation) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("row validator panicked: %v", p)
		}
	}()
	return rv.ValidateRow(ctx, who, op)
}

// callCommit runs the whole-commit validator; a panic is an unexpected
// failure.
func callCommit(ctx context.Context, cv validate.CommitValidator, c *validate.Commit, r validate.Reader) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("commit validator panicked: %v", p)
		}
	}()
	return cv.ValidateCommit(ctx, c, r)
}

// decodeRow decodes a stored-form payload of t into a validate.Row.
func decodeRow(t *schema.Table, payload []byte) (validate.Row, error) {
	vals, err := t.Codec.Decode(payload, nil)
	if err != nil {
		return nil, syncerr.Wrap(err, syncerr.OperationExecutionFailed, "row of %s does not decode for validation", t.Name)
	}
	row := make(validate.Row, len(vals))
	for j, c := range t.Columns {
		row[c.Name] = vals[j].Plain(c.Type)
	}
	return row, nil
}

// reject turns a validator's error into the commit's terminating record
// (§6.3): a deliberate rejection carries its host code, message and
// details; anything else, a host bug included (a reserved code, details
// outside §6.3.1, an operation index outside the commit), is
// sync.constraint_violation with a fixed message, the error's text only
// in the log. opIndex is the operation a row validator ran for; a
// whole-commit rejection (commit) names its own or the first.
func (run *pushRun) reject(ctx context.Context, ev *evaluation, opIndex int, err error, commit bool) {
	msg := msgRowValidatorFailed
	if commit {
		msg, opIndex = msgCommitValidatorFailed, 0
	}
	r, ok := errors.AsType[*validate.Rejection](err)
	if ok {
		idx := opIndex
		if commit && r.Attributed {
			idx = r.OpIndex
		}
		if bug := run.checkRejection(r, idx); bug != nil {
			err, ok = bug, false
		} else {
			opIndex = idx
		}
	}
	if !ok {
		// The error's text may hold row values: only its type, and a host
		// bug's description (never row data), are logged.
		attrs := []any{"partition", run.rs.auth.Partition, "clientCommitId", run.pc.ClientCommitID, "opIndex", opIndex, "errorType", fmt.Sprintf("%T", err)}
		what := "unexpected validator error"
		if hb, bug := errors.AsType[*validate.HostBugError](err); bug {
			what = "validator host bug"
			attrs = append(attrs, "bug", hb.What)
		}
		run.e.log.WarnContext(ctx, what, attrs...)
		ev.reject, ev.details = opError(opIndex, syncerr.ConstraintViolation, msg), nil
		return
	}
	ev.reject = &wire.OpResult{OpIndex: int32(opIndex), Status: wire.OpError, Code: r.Code, Message: r.Message}
	ev.details = nil
	if r.DetailsJSON != "" {
		ev.details = &wire.PushResultDetails{ClientCommitID: run.pc.ClientCommitID, Entries: []wire.DetailEntry{{OpIndex: int32(opIndex), DetailsJSON: r.DetailsJSON}}}
	}
}

// checkRejection re-checks a rejection a hook may have built by hand:
// its code, its details and the operation it names.
func (run *pushRun) checkRejection(r *validate.Rejection, opIndex int) error {
	if err := validate.CheckCode(r.Code); err != nil {
		return err
	}
	if opIndex < 0 || opIndex >= len(run.pc.Operations) {
		return &validate.HostBugError{What: fmt.Sprintf("rejection names operation %d of a commit of %d", opIndex, len(run.pc.Operations))}
	}
	if r.DetailsJSON != "" {
		if norm, err := wire.NormalizeDetailsJSON(r.DetailsJSON); err != nil || norm != r.DetailsJSON {
			return &validate.HostBugError{What: "rejection details are not a normalized §6.3.1 object"}
		}
	}
	return nil
}

// stageAppendedValidators runs the row validators over the operations
// §6.11 appended (CASCADE deletes, SET NULL upserts), attributed to the
// client delete each follows from, and records their evidence.
func stageAppendedValidators(ctx context.Context, run *pushRun, ev *evaluation) error {
	if run.hooks.Empty() {
		return nil
	}
	sv := run.e.schema.Versions[run.e.schema.Latest]
	for _, a := range ev.appended {
		if ev.reject != nil {
			return nil
		}
		w := &ev.rows[a.row]
		rv := run.hooks.Row(w.Table)
		if rv == nil && run.hooks.Commit == nil {
			continue
		}
		st, _ := sv.Table(w.Table)
		op := validate.Operation{OpIndex: a.origin, Appended: true, Op: validate.Upsert, Table: w.Table, RowID: w.Row.RowID}
		var nr *store.Row
		if !w.Delete {
			nr = &w.Row
		}
		if err := run.checkOp(ctx, ev, rv, st, &op, a.stored, nr); err != nil {
			return err
		}
	}
	return nil
}

// stageCommitValidator runs the §6.8 whole-commit validator once over
// the staged commit and its candidate state.
func stageCommitValidator(ctx context.Context, run *pushRun, ev *evaluation) error {
	if run.hooks == nil || run.hooks.Commit == nil {
		return nil
	}
	c := &validate.Commit{Caller: run.caller(), Operations: ev.evidence}
	r := newCandidateReader(run, ev)
	if err := callCommit(ctx, run.hooks.Commit, c, r); err != nil {
		if r.failed != nil {
			// The store failed under the reader: a request-level error,
			// not a validation outcome.
			return r.failed
		}
		run.reject(ctx, ev, 0, err, true)
	}
	return nil
}

// appendedOp is an operation §6.11 appended to the commit: the index of
// its write in evaluation.rows, the client delete it follows from, and
// the row before it.
type appendedOp struct {
	row    int
	origin int
	stored *store.Row
}

// noHooks is the empty set a commit runs when none are installed.
var noHooks = &validate.Hooks{}

// installedHooks returns the installed validators, never nil.
func (e *Engine) installedHooks() *validate.Hooks {
	if h := e.hooks.Load(); h != nil {
		return h
	}
	return noHooks
}
