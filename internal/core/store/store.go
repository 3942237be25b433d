// Package store declares what the sync engine needs from durable storage:
// the partition registry, the commit log, current rows, push outcomes,
// client cursor records and bootstrap segments. Implementations live in
// packages named by technology (memstore, dynamostore, s3segments) and all
// pass the one contract suite in package storetest.
//
// Every method is partition-local (SPEC §2.1). Every read that a
// correctness decision depends on is strongly consistent.
package store

import (
	"context"
	"errors"
	"io"

	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// Errors with a protocol meaning that implementations return (wrapped or
// not) so the engine can decide with errors.Is.
var (
	// ErrHeadMoved reports that Commit lost the per-partition race: another
	// commit advanced maxCommitSeq first. The engine re-runs the evaluation.
	ErrHeadMoved = errors.New("store: partition head moved")
	// ErrOutcomeExists reports that an outcome for the idempotency key was
	// already recorded (§2.3); the engine replays the stored one.
	ErrOutcomeExists = errors.New("store: push outcome already recorded")
	// ErrOutcomeUnreadable reports a recorded outcome that cannot be read
	// back, or an idempotency key that Commit or PutRejection could not
	// check; the engine answers sync.idempotency_cache_miss (§6.3) and
	// applies nothing.
	ErrOutcomeUnreadable = errors.New("store: push outcome unreadable")
	// ErrNotFound reports an absent segment object or record.
	ErrNotFound = errors.New("store: not found")
	// ErrCollision reports a content address whose stored bytes differ
	// from the bytes being written (§5.1): never silently overwritten.
	ErrCollision = errors.New("store: content-address collision")
	// ErrTooLarge reports data the backend cannot hold (e.g. a row past
	// the item size limit); the engine maps it to a catalog error.
	ErrTooLarge = errors.New("store: item too large")
)

// HeadMovedError is ErrHeadMoved (errors.Is) carrying the head the
// failed commit condition saw, when the backend returned it, so the
// engine's retry needs no separate head read.
type HeadMovedError struct{ Head Head }

func (e *HeadMovedError) Error() string { return ErrHeadMoved.Error() }

// Is makes errors.Is(err, ErrHeadMoved) hold.
func (e *HeadMovedError) Is(target error) bool { return target == ErrHeadMoved }

// Head is the partition registry entry and log head (§2.1, §4.6).
type Head struct {
	// LogEpoch identifies the continuity of the log (§2.1), non-empty.
	LogEpoch string
	// EpochRequired is set once the epoch was rotated: wire version 1
	// clients are then rejected (§1.5).
	EpochRequired bool
	// MaxCommitSeq is the newest commitSeq; 0 for an empty log.
	MaxCommitSeq int64
	// HorizonSeq: every commit with commitSeq ≤ HorizonSeq may be gone (§4.6).
	HorizonSeq int64
	// LastSeenAtMs is the last authentication time recorded (§2.1).
	LastSeenAtMs int64

	// Gate is the serve-gate state (schema.go), nil when there is none
	// (no marker, fence or checkpoint): the partition's writer fence,
	// pending checkpoints and gate token come with the head item at no
	// extra read; the stored schema marker is filled by TouchPartition
	// only (Head leaves it zero).
	Gate *Gate

	// Turn is the commit queue's turn (CommitQueue): the last ticket
	// whose holder committed, passed or was skipped; 0 before any. TurnAtUs
	// is when it last moved (µs since the Unix epoch, the mover's clock)
	// and TurnGapUs the smoothed interval between moves: waiters estimate
	// their wait from them. All zero on a store without a queue.
	Turn, TurnAtUs, TurnGapUs int64
	// Dead are tickets above the turn that a skip of a stalled turn
	// found dead (not marked waiting, CommitQueue.MarkWaiting) but could
	// not pass yet, a live ticket coming before them: a waiter that finds
	// the turn just before one skips it at once, not after another lease.
	// Tickets at or below Turn are stale and mean nothing.
	Dead DeadTickets
}

// DeadTickets is a small set of commit-queue tickets: From+i for each
// bit i set in Mask (at most 63 tickets from From; Mask 0: none). A
// comparable value, so Head stays comparable.
type DeadTickets struct {
	From, Mask int64
}

// NewDeadTickets is the set of the ascending tickets ts; those beyond
// the 63rd ticket after the first are left out (they cost a lease when
// the turn reaches them, as any stalled ticket does).
func NewDeadTickets(ts []int64) DeadTickets {
	if len(ts) == 0 {
		return DeadTickets{}
	}
	d := DeadTickets{From: ts[0]}
	for _, t := range ts {
		if i := t - d.From; i >= 0 && i < 63 {
			d.Mask |= 1 << i
		}
	}
	return d
}

// Has reports whether ticket t is in the set.
func (d DeadTickets) Has(t int64) bool {
	i := t - d.From
	return d.Mask != 0 && i >= 0 && i < 63 && d.Mask&(1<<i) != 0
}

// List is the set's tickets, ascending.
func (d DeadTickets) List() []int64 {
	var out []int64
	for i := range int64(63) {
		if d.Mask&(1<<i) != 0 {
			out = append(out, d.From+i)
		}
	}
	return out
}

// Row is the current stored state of one synced row, or its delete
// tombstone (§2.2 of the wire-3 spec).
type Row struct {
	RowID string
	// Deleted marks a tombstone: the row was deleted by commit CommitSeq.
	// Only GetRows returns tombstones (ScanRows never does); a tombstone
	// keeps the deleted row's Scopes (those of the delete's RowWrite, so
	// a later upsert is authorized against them, §3.4) and has no Payload
	// or ColumnVersions, and Version 0. A tombstone written before
	// tombstones kept scopes has none. Writing an upsert replaces it;
	// Prune removes tombstones with CommitSeq at or below the horizon.
	Deleted bool
	// Version is server_version (§2.2): 1 on insert, +1 per applied upsert.
	Version int64
	// ColumnVersions holds, per column of the storage schema version in
	// column order, the server_version that last wrote that column (§2.2
	// of the wire-3 spec). Server-internal: never on the wire. Nil for a
	// row stored before column versions existed, which reads as every
	// column at Version.
	ColumnVersions []int64
	// Scopes are the stored scopes (§3.1), canonical key order.
	Scopes wire.StoredScopes
	// Payload is the row-codec encoding (§2.4) for the storage schema version.
	Payload []byte
	// CommitSeq is the commit that last wrote the row.
	CommitSeq int64
}

// Change is one change of a commit as stored in the log (§2.2).
type Change struct {
	Table      string
	RowID      string
	Op         wire.Op
	RowVersion int64 // upsert only
	Scopes     wire.StoredScopes
	Row        []byte // upsert only: row-codec payload
}

// Commit is one applied commit in the log.
type Commit struct {
	Seq            int64
	CreatedAtMs    int64
	ActorID        string
	ClientID       string
	ClientCommitID string
	Changes        []Change
	// WriterVersion is the storage schema version of the function that
	// wrote the commit (0 for commits written before writers recorded
	// it). Stores record CommitRequest.WriterVersion here; the field of
	// CommitRequest.Commit is ignored.
	WriterVersion int64
	// Reactions are the §6.9 records planned for the commit, logged with
	// it (nil for most commits).
	Reactions []PlannedReaction
}

// Outcome is a persisted push result (§2.3, §6.3). Result holds the
// engine's own encoding of the result; the store keeps it opaque.
type Outcome struct {
	Applied      bool
	CommitSeq    int64
	Result       []byte
	RecordedAtMs int64
	// ActorID is the actor whose request recorded the outcome: a replay
	// is only ever answered to that actor (§1.5, §2.3). Empty for an
	// outcome recorded before owners were stored.
	ActorID string
}

// RowWrite is the materialization of one change into the row table.
// A Delete replaces the row with a tombstone at the commit's seq; its
// Row carries RowID and the deleted row's stored Scopes.
type RowWrite struct {
	Table  string
	Delete bool
	Row    Row // RowID always set; the rest for upserts
}

// Change is the log change that writes w as a full row (an upsert of
// its version and payload, or a delete), for callers that build a
// commit from row writes alone.
func (w *RowWrite) Change() Change {
	ch := Change{Table: w.Table, RowID: w.Row.RowID, Op: wire.OpDelete, Scopes: w.Row.Scopes}
	if !w.Delete {
		ch.Op, ch.RowVersion, ch.Row = wire.OpUpsert, w.Row.Version, w.Row.Payload
	}
	return ch
}

// CommitRequest appends one commit atomically with its row writes and its
// applied outcome (§6.4).
type CommitRequest struct {
	// ExpectedMaxSeq is the head the evaluation read; the commit gets
	// ExpectedMaxSeq+1 and fails with ErrHeadMoved if the head moved.
	ExpectedMaxSeq int64
	Commit         Commit
	Rows           []RowWrite
	Outcome        Outcome
	// RefWrites maintain the reference index (§6.11) in the same atomic
	// commit as the row writes that caused them. Each entry is net for
	// the commit (one entry per index key at most); applying an entry
	// twice is a no-op, so a backend may replay them.
	RefWrites []RefWrite
	// WriterVersion is the writer's running storage schema version,
	// recorded on the commit and checked by the commit's own conditional
	// write against the partition's writer fence: below the fence the
	// commit fails with ErrWriterFenced and writes nothing.
	WriterVersion int64
	// CheckGate makes the commit conditional on the partition's gate
	// token still being GateToken, the Gate.Token the writer's serve gate
	// passed on (0 for a partition without gate state): it fails with
	// ErrGateMoved when the token changed since (a checkpoint was
	// declared or activated, or the fence moved), so the gate is
	// re-checked before anything lands.
	CheckGate bool
	GateToken int64
	// RaiseFence, when above the partition's writer fence, raises the
	// fence to it in the same atomic commit (and moves the gate token):
	// the lowest storage schema version that can read what the commit
	// writes. A build whose layout of a written table is newer than an
	// older build's fences that older build out of the partition with
	// its first such write, not before (lazy per-partition fencing,
	// docs/OPERATIONS.md "Rolling schema upgrades"). Only valid with
	// CheckGate: the token pins the fence the writer read.
	RaiseFence int64
	// Advance, when set, moves a backfill checkpoint in the same atomic
	// commit; when the owner epoch no longer matches the commit fails
	// with ErrCheckpointSuperseded and writes nothing.
	Advance *CheckpointAdvance

	// Ticket, when non-zero, is the CommitQueue ticket the commit holds:
	// it additionally requires the head's Turn to be Ticket−1 and moves
	// it to Ticket, recording TurnAtUs and TurnGapUs with it. A commit
	// whose turn has passed fails with a *HeadMovedError whose head shows
	// the turn. Only a store implementing CommitQueue is given one.
	Ticket              int64
	TurnAtUs, TurnGapUs int64
	// ReadRows, when set, are the rows the evaluation read, as read (a
	// store returns them with the head from CommitQueue.GetRowsHead):
	// the commit additionally requires each to be still as read (same
	// CommitSeq, or still absent) and fails with ErrHeadMoved otherwise.
	// The head and rows of one batched read are not one snapshot; this
	// is what makes a commit conditioned on that head sound.
	ReadRows []RowRead
}

// RowRead is the state of one row as an evaluation read it: Present
// with the CommitSeq that last wrote it (live row or tombstone), or
// absent.
type RowRead struct {
	Table, RowID string
	Present      bool
	CommitSeq    int64
}

// CommitQueue is an optional Store extension that orders the commits of
// one contended partition (issue 11) instead of letting every writer
// race the head: a writer takes a ticket, waits until the head's Turn is
// ticket−1, and commits with CommitRequest.Ticket. The queue only orders
// attempts; every commit keeps its head condition, so no correctness
// property depends on it. All of its state lives in the store (each
// writer may be a separate process).
type CommitQueue interface {
	// GetRowsHead is GetRows that also returns the partition head read
	// in the same round trip (ok false when there is none). The head is
	// not a snapshot with the rows: a commit built on it passes the
	// rows as CommitRequest.ReadRows.
	GetRowsHead(ctx context.Context, partition, table string, rowIDs []string) (rows map[string]*Row, h Head, ok bool, err error)
	// TouchPartitionRows is TouchPartition that also reads rows of one
	// table in the same round trip (a push's first commit): rowsOK false
	// when it could not (the caller reads them with GetRows). The head
	// is not a snapshot with the rows, as for GetRowsHead.
	TouchPartitionRows(ctx context.Context, partition string, nowMs int64, newEpoch, table string, rowIDs []string) (h Head, rows map[string]*Row, rowsOK bool, err error)
	// TakeTicket hands out the partition's next ticket (1, 2, …).
	TakeTicket(ctx context.Context, partition string) (int64, error)
	// PassTurn moves the turn from ticket−1 to ticket without a commit
	// (the holder rejected, replayed or failed); a no-op when the turn is
	// elsewhere.
	PassTurn(ctx context.Context, partition string, ticket, nowUs int64) error
	// SkipTurn moves the turn from `from` to `to` when it is still `from`
	// (its holders stalled past their lease, or are known dead); false
	// when it had moved. A non-empty dead replaces the head's Dead in the
	// same update; an empty one leaves it.
	SkipTurn(ctx context.Context, partition string, from, to, nowUs int64, dead DeadTickets) (bool, error)
	// MarkWaiting records that ticket's holder is alive and still
	// waiting while the turn has stood at `turn` (ticket > turn+1) for
	// longer than a waiter expects: a stalled turn's skipper then tells
	// live tickets from dead ones.
	MarkWaiting(ctx context.Context, partition string, ticket, turn int64) error
	// WaitingTickets returns, ascending, the tickets above `turn` whose
	// holders marked themselves waiting at that turn (MarkWaiting).
	WaitingTickets(ctx context.Context, partition string, turn int64) ([]int64, error)
}

// WriterCheck is the writer-fence and serve-gate condition of a write
// that is not a commit (a rejected outcome): the same check as
// CommitRequest's WriterVersion, CheckGate and GateToken, so an old build
// that passed its entry gate just before a migration records nothing
// after the fence was raised.
type WriterCheck struct {
	WriterVersion int64
	CheckGate     bool
	GateToken     int64
}

// RefEntry is one reference-index entry (§6.11): row ChildID of
// ChildTable holds ParentID in its reference column Column.
type RefEntry struct {
	ChildTable string
	Column     string
	ParentID   string
	ChildID    string
}

// ChildQuery selects the reference-index entries of one parent through
// one reference column: the ChildTable rows whose Column holds ParentID.
type ChildQuery struct {
	ChildTable string
	Column     string
	ParentID   string
}

// RefWrite adds or (Remove) deletes one reference-index entry.
type RefWrite struct {
	RefEntry
	Remove bool
}

// ScopeCursor is a position of ScanScopedRows: the row RowID found
// under scope value Value.
type ScopeCursor struct {
	Value string
	RowID string
}

// Client is the per-(partition, clientId) record (§1.5 actor binding,
// §4.5 retention watermark).
type Client struct {
	ClientID    string
	ActorID     string
	Cursor      int64
	UpdatedAtMs int64
	WireVersion uint16
	// Registration is the client's most recent pull's subscription list
	// (§8.1: persisted per (partition, clientId) with the cursor and the
	// wire version, loaded at realtime connect). Opaque to stores: the
	// engine encodes it. Empty for a client that never pulled.
	Registration string
}

// Store is commit, row and client storage for all partitions.
type Store interface {
	// TouchPartition returns the partition head, creating the registry
	// entry with newEpoch on first sight and refreshing LastSeenAtMs when it
	// is older than the store's refresh interval (§2.1). Consistent read.
	TouchPartition(ctx context.Context, partition string, nowMs int64, newEpoch string) (Head, error)
	// Head returns the partition head without touching it; ok is false for
	// an unknown partition. Consistent read.
	Head(ctx context.Context, partition string) (h Head, ok bool, err error)
	// RotateEpoch installs a new log epoch, marks epoch validation
	// required and deletes the partition's client records (§2.1 restore rule).
	RotateEpoch(ctx context.Context, partition, newEpoch string, nowMs int64) error

	// GetOutcome returns the recorded outcome of an idempotency key (§2.3),
	// nil when none or when its idempotency window (the store's; see
	// OutcomeExpiry) ended by nowMs; ErrOutcomeUnreadable when one exists
	// but cannot be read.
	GetOutcome(ctx context.Context, partition, clientID, clientCommitID string, nowMs int64) (*Outcome, error)
	// PutRejection records a rejected outcome unless one exists; it returns
	// ErrOutcomeExists when the key already has an outcome. An outcome
	// whose window ended by o.RecordedAtMs counts as none, here and in
	// Commit (by req.Outcome.RecordedAtMs): the key is recorded again. The write is
	// fenced like a commit (w; rolling schema upgrades): ErrWriterFenced
	// when w.WriterVersion is below the partition's writer fence,
	// ErrGateMoved when w.CheckGate and the gate token is no longer
	// w.GateToken; nothing is written then.
	PutRejection(ctx context.Context, partition, clientID, clientCommitID string, o Outcome, w WriterCheck) error
	// Commit appends req.Commit as commitSeq ExpectedMaxSeq+1 together with
	// its row writes and applied outcome, all or nothing (§6.4). It returns
	// ErrHeadMoved on a lost race (a *HeadMovedError with the current head
	// when the backend has it at no extra cost) and ErrOutcomeExists when
	// the idempotency key already has an outcome.
	Commit(ctx context.Context, partition string, req *CommitRequest) error

	// GetRows returns the current rows for rowIDs of table (absent rows are
	// missing from the map; a deleted row whose tombstone is not pruned yet
	// is returned as the tombstone), after finishing any partially
	// materialized commit. Consistent read.
	GetRows(ctx context.Context, partition, table string, rowIDs []string) (map[string]*Row, error)
	// ScanRows calls fn for the rows of table in ascending rowId byte order,
	// starting strictly after `after` when hasAfter, until fn returns false
	// or the table ends. Consistent read; rows reflect every commit up to
	// at least the head read before the scan. Tombstones are never passed
	// to fn.
	ScanRows(ctx context.Context, partition, table string, after string, hasAfter bool, fn func(*Row) bool) error
	// ScanScopedRows calls fn for the live rows of table whose stored
	// scope variable has one of values (§3.2 read rule, one variable), in
	// ascending (value, rowId) byte order: values ascending, and within
	// a value rowIds ascending, starting strictly after `after` when it is
	// non-nil, until fn returns false or the values end. fn receives the
	// value the row was found under. Consistent read, like ScanRows. A
	// backend keys rows by their scope values so this reads only the
	// matching rows (a bootstrap's cost follows what the client may see,
	// not the table). Scope values are immutable after insert (§3.4): an
	// upsert of a live row carries the row's stored Scopes, and a row
	// changes scopes only by a delete (whose RowWrite carries the old
	// scopes) followed by an insert. want > 0 is how many rows the caller
	// expects to take at most (a page and its one-row lookahead): the
	// store sizes its reads to it rather than to its own batch, so a
	// page never pays for rows it will not use. Past want the scan goes
	// on at the store's own batch size, as with want 0 (unknown).
	ScanScopedRows(ctx context.Context, partition, table, variable string, values []string, after *ScopeCursor, want int, fn func(value string, r *Row) bool) error
	// ReadLog calls fn for commits with afterSeq < Seq ≤ throughSeq, oldest
	// first, until fn returns false. Commits at or below the horizon may be
	// missing.
	ReadLog(ctx context.Context, partition string, afterSeq, throughSeq int64, fn func(*Commit) bool) error

	// ReadLogScoped is the §3.1 inverted-index read of the log: it calls
	// fn, oldest first, for the commits with afterSeq < Seq ≤ throughSeq
	// that have a change of table whose stored scope variable holds one of
	// values, until fn returns false. It may pass further commits (fn
	// filters changes anyway) but never misses one above the returned
	// horizon, which it reads after the index: when horizon > afterSeq,
	// commits of the window may be pruned and the caller must not treat
	// the read as complete (§4.6).
	ReadLogScoped(ctx context.Context, partition, table, variable string, values []string, afterSeq, throughSeq int64, fn func(*Commit) bool) (horizon int64, err error)

	// GetClient returns the client record, nil when none.
	GetClient(ctx context.Context, partition, clientID string) (*Client, error)
	// BindClient is the atomic first write of the §1.5 clientId → actor
	// binding: it creates c when the partition has no record for
	// c.ClientID and returns c; otherwise it writes nothing and returns
	// the stored record (whose ActorID may differ from c's). Of concurrent
	// binds of one clientId exactly one creates the record, and every
	// caller sees that record's actor.
	BindClient(ctx context.Context, partition string, c *Client) (*Client, error)
	// PutClient creates or replaces the client record.
	PutClient(ctx context.Context, partition string, c *Client) error
	// AckCursor records a realtime ack (§8.2 of the newer spec): it
	// advances the existing record's Cursor and UpdatedAtMs to their
	// maxima with cursor and nowMs, atomically, and only while the record
	// is bound to actorID and the partition's log epoch is logEpoch. It
	// never creates a record and never touches ActorID, WireVersion or
	// Registration. ok is false when nothing was written because the
	// guard failed or the record is missing; a cursor at or below the
	// stored one is ok with nothing changed.
	AckCursor(ctx context.Context, partition, clientID, actorID, logEpoch string, cursor, nowMs int64) (ok bool, err error)
	// ListClients calls fn for every client record of the partition.
	ListClients(ctx context.Context, partition string, fn func(*Client) bool) error

	// Prune advances the horizon to horizonSeq (never backwards) and deletes
	// commits at or below it (§4.6), and in the same pass the tombstones
	// with CommitSeq at or below it (§4.6 of the wire-3 spec). It returns
	// how many commits it removed.
	Prune(ctx context.Context, partition string, horizonSeq int64) (int, error)
	// CommitTimes calls fn with (seq, createdAtMs) for commits after
	// afterSeq, oldest first, until fn returns false (pruning policy input).
	CommitTimes(ctx context.Context, partition string, afterSeq int64, fn func(seq, createdAtMs int64) bool) error

	// ListChildren answers each query with the ids of its child rows, in
	// ascending byte order, at most limit per query (§6.11 enforcement
	// reads limit = cap+1 to detect an overflow); out[i] answers qs[i].
	// One call reflects every commit up to the partition head, like
	// GetRows, however many queries it carries: the §6.11 pass asks for
	// every parent of one cascade level at once.
	ListChildren(ctx context.Context, partition string, qs []ChildQuery, limit int) ([][]string, error)
}

// CheapScopedLog is implemented by a store whose ReadLogScoped never costs
// more than ReadLog of the same window, whatever the window's length (an
// in-memory index: no round trip per read). The engine then reads every
// incremental window through the scope index; otherwise only windows long
// enough to pay for the index's extra round trip (DynamoDB: the index
// Query, then the commits it lists).
type CheapScopedLog interface {
	CheapScopedLog() bool
}

// LocalCommits is implemented by a store that decides commits in this
// process, under a lock (memstore). A lost commit race there means another
// request of the same process committed a moment ago, and the contention
// is for CPU, not for a remote item: the engine retries the first lost
// races at once (with a fresh head) instead of sleeping a backoff that
// leaves the client idle for milliseconds.
type LocalCommits interface {
	LocalCommits() bool
}

// SegmentKey identifies one publication context (§5.1 build-once key).
type SegmentKey struct {
	Partition     string
	LogEpoch      string
	Table         string
	SchemaVersion int32
	MediaType     wire.MediaType
	ScopeDigest   string
	AsOfCommitSeq int64
	RowCursor     wire.Opt[string]
}

// Publication is one grant of a segment's bytes to a context: identical
// bytes published under two partitions, scopes or pins are two
// publications of one content address.
type Publication struct {
	SegmentKey
	NextRowCursor wire.Opt[string]
	RowCount      int64
	CreatedAtMs   int64
	ExpiresAtMs   int64
}

// Segment is a content-addressed object with its live publications.
type Segment struct {
	SegmentID    string
	ByteLength   int64
	Publications []Publication
}

// PublicationFilter selects the publications of a segment that one
// download can use: those of one partition, log epoch and scope digest
// (§5.4 binds a token to them; §5.5 re-derives them for a direct
// download).
type PublicationFilter struct {
	Partition   string
	LogEpoch    string
	ScopeDigest string
}

// FilterOf is the filter matching k's publications.
func FilterOf(k SegmentKey) PublicationFilter {
	return PublicationFilter{Partition: k.Partition, LogEpoch: k.LogEpoch, ScopeDigest: k.ScopeDigest}
}

// Matches reports whether p is selected by f.
func (f PublicationFilter) Matches(p *Publication) bool {
	return p.Partition == f.Partition && p.LogEpoch == f.LogEpoch && p.ScopeDigest == f.ScopeDigest
}

// SegmentStore holds segment bytes by content address and their
// publications (§5.1, §5.5).
type SegmentStore interface {
	// Put stores body under segmentID (bytes written once; a different body
	// under an existing id is ErrCollision) and records pub: a publication
	// with the same context merges lifetimes (earliest created, latest
	// expiry), a new context is appended, and publications already expired
	// at nowMs are pruned.
	Put(ctx context.Context, segmentID string, body []byte, pub Publication, nowMs int64) error
	// Find returns a live publication (ExpiresAtMs > nowMs) for key and its
	// segment id, or ok=false. A returned publication's object is
	// guaranteed to outlive the publication.
	Find(ctx context.Context, key SegmentKey, nowMs int64) (segmentID string, pub Publication, ok bool, err error)
	// Lookup returns the segment's metadata with the recorded
	// publications matching f (expired ones included until pruned), or
	// ErrNotFound when f.Partition has no publication of the segment in
	// f.LogEpoch. A Segment with no publications means the partition has
	// some in that epoch, only under other scope digests. Its cost is
	// bounded by the publications matching f: other partitions', other
	// epochs' and other scope digests' never add to it (issue 11 item 5).
	Lookup(ctx context.Context, segmentID string, f PublicationFilter) (*Segment, error)
	// Open streams the segment bytes, or ErrNotFound.
	Open(ctx context.Context, segmentID string) (io.ReadCloser, error)
}

// SizedFinder is implemented by segment stores whose Find also knows the
// segment's byte length, so reusing a publication needs no Lookup.
type SizedFinder interface {
	// FindSized is Find plus the segment's byte length (0: unknown).
	FindSized(ctx context.Context, key SegmentKey, nowMs int64) (segmentID string, pub Publication, byteLength int64, ok bool, err error)
}

// MaxPubsPerContext bounds the publications a segment keeps for one
// context apart from its pin (SegmentKey with AsOfCommitSeq ignored, plus
// the page cut): a Put keeps the newest ones (highest pin, then latest
// expiry) and prunes the rest, so a lookup's cost does not grow with how
// often the same bytes were re-published at later pins.
const MaxPubsPerContext = 4

// LatestFinder is implemented by segment stores that can find a
// publication of a context whatever its pin (issue 11 item 5). A bootstrap
// may then start at that older pin instead of rebuilding at the head, as
// long as no commit after the pin changed the context's scope (the engine
// checks the log's scope index, ReadLogScoped): the snapshot is then the
// scope's state at the head, as §4.7 requires of a fresh bootstrap.
type LatestFinder interface {
	// FindLatest is FindSized with key.AsOfCommitSeq ignored: among live
	// publications of key's context whose pin is in [minAsOf, maxAsOf]
	// it returns one with the highest pin (ties: the latest expiry).
	FindLatest(ctx context.Context, key SegmentKey, minAsOf, maxAsOf, nowMs int64) (segmentID string, pub Publication, byteLength int64, ok bool, err error)
}

// Presigner issues delegated download URLs for segment objects (§5.4).
type Presigner interface {
	// PresignGet returns a URL for segmentID valid until the returned
	// expiry (ms), which is never later than nowMs+ttlMs.
	PresignGet(ctx context.Context, segmentID string, nowMs, ttlMs int64) (url string, expiresAtMs int64, err error)
}
