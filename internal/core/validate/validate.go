// Package validate is the host's write-validation seam: per-table row
// validators (SPEC §6.7) and one whole-commit validator (§6.8). Hooks see
// plain values (rows keyed by column name) and answer with nil, a
// deliberate *Rejection (Reject, RejectOp) carrying a host code, or any
// other error, which the server reports as the generic
// sync.constraint_violation without its text.
//
// The engine runs the hooks inside the commit pipeline: a row validator
// after the operation's decode and §3.4 scope authorization and before
// its write, the commit validator once after every operation (and §6.11
// reference enforcement) is staged, over the candidate state. A
// rejection rolls the whole commit back. The package imports nothing
// from storage or AWS.
package validate

import (
	"context"
	"errors"
	"strings"
)

// Row is a decoded row keyed by column name. Values are nil (SQL NULL),
// string (string, json and blob_ref columns, their text verbatim), int64,
// float64, bool, or []byte (bytes columns, and crdt columns as the state
// that will persist). Hooks must not modify a Row.
type Row map[string]any

// OpKind is an operation's kind.
type OpKind string

// Operation kinds.
const (
	Upsert OpKind = "upsert"
	Delete OpKind = "delete"
)

// Operation is the evidence of one operation of a commit.
type Operation struct {
	// OpIndex is the operation's index in the pushed commit; for an
	// operation a declared reference appended (Appended), the index of
	// the client delete it follows from (§6.11).
	OpIndex  int
	Appended bool
	Op       OpKind
	Table    string
	RowID    string
	// Row is the row that will persist (every column, after the scope
	// rules); nil for a delete.
	Row Row
	// Stored is the row before this operation (an earlier operation of
	// the same commit included), nil when there is none; StoredVersion
	// its server_version (0 when none).
	Stored        Row
	StoredVersion int64
	// NextVersion is the server_version the row will have; 0 for a
	// delete.
	NextVersion int64
}

// Caller is who pushes the commit, and which commit.
type Caller struct {
	Partition      string
	ActorID        string
	ClientID       string
	ClientCommitID string
}

// RowValidator validates one operation on its table (§6.7). It runs for
// upserts, and for deletes of an existing row (Row nil, Stored set); a
// delete of an absent row runs no validator.
type RowValidator interface {
	ValidateRow(ctx context.Context, who Caller, op *Operation) error
}

// RowValidatorFunc adapts a function to RowValidator.
type RowValidatorFunc func(ctx context.Context, who Caller, op *Operation) error

// ValidateRow calls f.
func (f RowValidatorFunc) ValidateRow(ctx context.Context, who Caller, op *Operation) error {
	return f(ctx, who, op)
}

// Commit is what a whole-commit validator sees: the caller and every
// operation in order, including deletes of absent rows (no Stored, no
// Row) and the operations declared references appended.
type Commit struct {
	Caller
	Operations []Operation
}

// CommitValidator validates a whole commit over its candidate state
// (§6.8). It runs once per new commit, after every operation passed, and
// never for a replayed one.
type CommitValidator interface {
	ValidateCommit(ctx context.Context, c *Commit, r Reader) error
}

// CommitValidatorFunc adapts a function to CommitValidator.
type CommitValidatorFunc func(ctx context.Context, c *Commit, r Reader) error

// ValidateCommit calls f.
func (f CommitValidatorFunc) ValidateCommit(ctx context.Context, c *Commit, r Reader) error {
	return f(ctx, c, r)
}

// Reader reads the commit's candidate state: the partition's rows with
// every operation of the commit applied. It is bound to the commit's
// partition and to the state the commit is conditioned on.
type Reader interface {
	// GetRow returns a row and its server_version as the commit would
	// leave it; ok is false when the row is absent (or deleted by it).
	GetRow(ctx context.Context, table, rowID string) (row Row, version int64, ok bool, err error)
	// ScanRows returns candidate rows of one table whose scopes match
	// the filter, in ascending rowId order.
	ScanRows(ctx context.Context, q Scan) ([]ScannedRow, error)
}

// Scan selects the rows of Table whose scope variables hold one of the
// listed values, each listed variable (§3.2 read rule), after AfterRowID
// (exclusive) when HasAfter, at most Limit (default DefaultScanLimit, at
// most MaxScanLimit). Scopes must not be empty (ErrScanRequiresScope).
type Scan struct {
	Table      string
	Scopes     map[string][]string
	AfterRowID string
	HasAfter   bool
	Limit      int
}

// ScannedRow is one row of a scan.
type ScannedRow struct {
	RowID   string
	Version int64
	Row     Row
}

// Scan bounds (§6.8).
const (
	DefaultScanLimit = 100
	MaxScanLimit     = 1000
)

// Reader errors. Inside a validator they are unexpected errors (the
// commit is rejected with sync.constraint_violation) unless the
// validator handles them.
var (
	// ErrScanRequiresScope: a scan named no scope filter
	// (sync.storage.scan_requires_scope).
	ErrScanRequiresScope = errors.New("sync.storage.scan_requires_scope: a candidate scan needs a scope filter")
	// ErrBadScan: an unknown table or variable, or a limit out of range.
	ErrBadScan = errors.New("validate: invalid candidate read")
)

// Hooks are the validators an engine runs. The zero value (and nil)
// validates nothing and costs nothing per operation.
type Hooks struct {
	// Rows maps a table name to its validator.
	Rows map[string]RowValidator
	// Commit is the whole-commit validator, nil for none.
	Commit CommitValidator
}

// Empty reports whether h validates nothing.
func (h *Hooks) Empty() bool { return h == nil || (len(h.Rows) == 0 && h.Commit == nil) }

// Row returns the validator of table, nil when none.
func (h *Hooks) Row(table string) RowValidator {
	if h == nil {
		return nil
	}
	return h.Rows[table]
}

// reservedPrefixes are the protocol's code families (§6.7): a host code
// never starts with one.
var reservedPrefixes = []string{"sync.", "blob.", "operation.", "presence.", "client."}

// CheckCode reports why code cannot be a host validation code: empty, or
// in a reserved protocol family (§6.7).
func CheckCode(code string) error {
	if code == "" {
		return errors.New("validate: a rejection code must not be empty")
	}
	for _, p := range reservedPrefixes {
		if strings.HasPrefix(code, p) {
			return &HostBugError{What: "rejection code " + code + " uses the reserved prefix " + p + " (§6.7)"}
		}
	}
	return nil
}

// HostBugError is a hook programming error the server reports loudly in
// its log and to the client only as sync.constraint_violation: a reserved
// code, invalid details, or an operation index outside the commit.
type HostBugError struct{ What string }

func (e *HostBugError) Error() string { return "validate: host bug: " + e.What }
