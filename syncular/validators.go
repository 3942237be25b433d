package syncular

import (
	"context"

	"github.com/skyfold/syncular-lambda/internal/core/validate"
)

// Row is a row by column name: nil (NULL), string (string, json and
// blob_ref columns), int64, float64, bool or []byte (bytes and crdt).
// Validators must not modify it.
type Row map[string]any

// Caller is who pushes a commit, and which commit.
type Caller struct {
	Partition      string
	ActorID        string
	ClientID       string
	ClientCommitID string
}

// Operation is one operation of a pushed commit as a validator sees it.
type Operation struct {
	// OpIndex is the operation's index in the commit; an operation a
	// declared reference added (Appended: a CASCADE delete or SET NULL)
	// carries the index of the client delete it follows from.
	OpIndex  int
	Appended bool
	Delete   bool
	Table    string
	RowID    string
	// Row is the row that will persist (nil for a delete); Stored the row
	// before, nil when there is none, at StoredVersion; NextVersion the
	// row's version after the operation (0 for a delete).
	Row           Row
	Stored        Row
	StoredVersion int64
	NextVersion   int64
}

// RowValidator checks one operation on its table (§6.7) after decode and
// scope authorization, before the write. Return nil to accept, Reject to
// refuse with your own code; any other error refuses the commit as
// sync.constraint_violation without its text. It runs for upserts and for
// deletes of an existing row, and must have no side effects (a commit
// that loses a race on its partition is evaluated again).
type RowValidator func(ctx context.Context, who Caller, op *Operation) error

// Commit operations, for a whole-commit validator.
type CommitOperations struct {
	Caller
	Operations []Operation
}

// CommitValidator checks a whole commit over its candidate state (§6.8),
// once every operation passed. Refuse with RejectOp to name an operation.
type CommitValidator func(ctx context.Context, c *CommitOperations, r CandidateReader) error

// CandidateReader reads the partition's rows as the commit would leave
// them.
type CandidateReader interface {
	// GetRow returns a row and its version; ok false when absent.
	GetRow(ctx context.Context, table, rowID string) (row Row, version int64, ok bool, err error)
	// ScanRows returns rows of table whose scope variables hold one of
	// the values given, in rowId order, after `after` when not empty, at
	// most limit (1–1000; 0 means 100). scopes must not be empty.
	ScanRows(ctx context.Context, table string, scopes Scopes, after string, limit int) ([]ScannedRow, error)
}

// ScannedRow is one row of a candidate scan.
type ScannedRow struct {
	RowID   string
	Version int64
	Row     Row
}

// RejectDetails are the bounded recovery hints a rejection may carry
// (§6.3.1): the fields to focus, a machine reason and action, and ids
// safe to show the actor.
type RejectDetails struct {
	FieldPaths     []string
	Reason         string
	RequiredAction string
	References     map[string]string
}

// Reject refuses a commit with code (yours: never starting with sync.,
// blob., operation., presence. or client.), a message the client may
// show, and optional details.
func Reject(code, message string, d *RejectDetails) error {
	return validate.Reject(code, message, d.internal())
}

// RejectOp is Reject from a whole-commit validator, naming operation
// opIndex of the commit.
func RejectOp(opIndex int, code, message string, d *RejectDetails) error {
	return validate.RejectOp(opIndex, code, message, d.internal())
}

func (d *RejectDetails) internal() *validate.Details {
	if d == nil {
		return nil
	}
	return &validate.Details{FieldPaths: d.FieldPaths, Reason: d.Reason, RequiredAction: d.RequiredAction, References: d.References}
}

func publicOp(op *validate.Operation) Operation {
	return Operation{
		OpIndex: op.OpIndex, Appended: op.Appended, Delete: op.Op == validate.Delete,
		Table: op.Table, RowID: op.RowID, Row: Row(op.Row), Stored: Row(op.Stored),
		StoredVersion: op.StoredVersion, NextVersion: op.NextVersion,
	}
}

// validators converts the App's validators; nil when it has none.
func (a *App) validators() *validate.Hooks {
	if len(a.Validators) == 0 && a.CommitValidator == nil {
		return nil
	}
	h := &validate.Hooks{}
	if len(a.Validators) > 0 {
		h.Rows = make(map[string]validate.RowValidator, len(a.Validators))
		for table, v := range a.Validators {
			h.Rows[table] = validate.RowValidatorFunc(func(ctx context.Context, who validate.Caller, op *validate.Operation) error {
				p := publicOp(op)
				return v(ctx, Caller(who), &p)
			})
		}
	}
	if cv := a.CommitValidator; cv != nil {
		h.Commit = validate.CommitValidatorFunc(func(ctx context.Context, c *validate.Commit, r validate.Reader) error {
			pc := &CommitOperations{Caller: Caller(c.Caller), Operations: make([]Operation, len(c.Operations))}
			for i := range c.Operations {
				pc.Operations[i] = publicOp(&c.Operations[i])
			}
			return cv(ctx, pc, readerAdapter{r})
		})
	}
	return h
}

type readerAdapter struct{ r validate.Reader }

func (a readerAdapter) GetRow(ctx context.Context, table, rowID string) (Row, int64, bool, error) {
	row, v, ok, err := a.r.GetRow(ctx, table, rowID)
	return Row(row), v, ok, err
}

func (a readerAdapter) ScanRows(ctx context.Context, table string, scopes Scopes, after string, limit int) ([]ScannedRow, error) {
	rows, err := a.r.ScanRows(ctx, validate.Scan{Table: table, Scopes: scopes, AfterRowID: after, HasAfter: after != "", Limit: limit})
	if err != nil {
		return nil, err
	}
	out := make([]ScannedRow, len(rows))
	for i, r := range rows {
		out[i] = ScannedRow{RowID: r.RowID, Version: r.Version, Row: Row(r.Row)}
	}
	return out, nil
}
