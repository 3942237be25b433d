package store

import (
	"context"
	"errors"
	"slices"
	"strings"
)

// Rolling schema upgrades. During a deploy two function versions serve
// one table; these promises keep the older from serving or writing data
// migrated past it, and the newer from serving a projection before its
// backfill finished (sync.schema_not_ready, §10.2 of the wire-3 spec).
//
//   - Schema marker: one stored value per table, the newest storage
//     schema version migrated to. Never part of a commit transaction.
//   - Writer fence: per partition, the lowest writer version allowed to
//     commit; checked by the commit's own conditional write.
//   - Checkpoints: per (partition, name), declared → backfilling →
//     activated, with an owner epoch fencing concurrent backfill runs.
//   - Table-wide declaration: a release declares its checkpoints once,
//     on the schema marker (DeclareCheckpoints, O(1) in partitions);
//     each partition materialises them lazily (MaterializeCheckpoints)
//     and gates as though they were declared there until it does.

var (
	// ErrWriterFenced reports a commit whose WriterVersion is below the
	// partition's writer fence; nothing was written.
	ErrWriterFenced = errors.New("store: writer version below the partition's writer fence")
	// ErrGateMoved reports a commit whose GateToken no longer matches the
	// partition's; nothing was written. The caller re-reads the gate.
	ErrGateMoved = errors.New("store: partition serve gate changed")
	// ErrCheckpointSuperseded reports a checkpoint advance (alone or in a
	// commit) by an owner epoch that is no longer current, or of an
	// activated checkpoint; nothing was written.
	ErrCheckpointSuperseded = errors.New("store: checkpoint owner superseded")
	// ErrCheckpointActivated reports a claim of an activated checkpoint.
	ErrCheckpointActivated = errors.New("store: checkpoint already activated")
	// ErrFenceMissing reports an activation while the partition's writer
	// fence is below the checkpoint's version.
	ErrFenceMissing = errors.New("store: writer fence below the checkpoint's version")
	// ErrNewerDeclaration reports a table-wide checkpoint declaration
	// below the one stored; nothing was written.
	ErrNewerDeclaration = errors.New("store: a newer version's checkpoints are declared")
)

// Gate is what the serve gate reads. StoredSchema comes from the table's
// schema marker; the rest from the partition head.
type Gate struct {
	// StoredSchema is the schema marker (0 when never set).
	StoredSchema int64
	// WriterFence is the partition's required writer version (0: none).
	WriterFence int64
	// Pending lists the partition's checkpoints that are not activated.
	Pending []PendingCheckpoint
	// Token changes whenever the partition's fence, pending set or log
	// epoch changes (0 until the first change): a commit or response
	// begun before an epoch rotation is re-checked like one begun before
	// a migration step.
	Token int64
	// Unmaterialized is the generation of the table-wide checkpoint
	// declaration (SchemaStore.DeclareCheckpoints) while this partition
	// has not materialised it, else 0. Its checkpoints are listed in
	// Pending (at its version) meanwhile, even one activated here under
	// an earlier generation (materialising finds it activated), so every
	// build gates them at least as strictly as checkpoints declared in
	// the partition; they are not in Token. It comes from the store's
	// copy of the marker (bounded age, like StoredSchema).
	Unmaterialized int64
}

// CheckpointDecl is one checkpoint of a table-wide declaration.
type CheckpointDecl struct {
	Name    string
	Sources []string
}

// TableDeclaration is a stored table-wide declaration, as stores keep
// it: Generation rises with every declaration that changed the set, and
// a partition records the generation it materialised. Immutable.
type TableDeclaration struct {
	Version, Generation int64
	Checkpoints         []CheckpointDecl
}

// Gen is d's generation, 0 for none (nil).
func (d *TableDeclaration) Gen() int64 {
	if d == nil {
		return 0
	}
	return d.Generation
}

// Declares reports whether d is version's declaration of decls.
func (d *TableDeclaration) Declares(version int64, decls []CheckpointDecl) bool {
	return d != nil && d.Version == version && slices.EqualFunc(d.Checkpoints, decls, func(a, b CheckpointDecl) bool {
		return a.Name == b.Name && slices.Equal(a.Sources, b.Sources)
	})
}

// Lazy returns g (nil: no gate state) with d's checkpoints pending, at
// d's version, when the partition materialised an older generation than
// d's (Gate.Unmaterialized); g itself is not modified.
func (d *TableDeclaration) Lazy(g *Gate, materialized int64) *Gate {
	if d == nil || d.Generation <= materialized {
		return g
	}
	out := &Gate{}
	if g != nil {
		*out = *g
		out.Pending = slices.Clone(g.Pending)
	}
	out.Unmaterialized = d.Generation
	for _, c := range d.Checkpoints {
		if !slices.ContainsFunc(out.Pending, func(p PendingCheckpoint) bool { return p.Name == c.Name }) {
			out.Pending = append(out.Pending, PendingCheckpoint{Name: c.Name, SchemaVersion: d.Version})
		}
	}
	slices.SortFunc(out.Pending, func(a, b PendingCheckpoint) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// PendingCheckpoint names a checkpoint that is not activated yet.
type PendingCheckpoint struct {
	Name          string
	SchemaVersion int64
}

// CheckpointState is the life cycle of a backfill checkpoint.
type CheckpointState string

// Checkpoint states; activated is terminal.
const (
	CheckpointDeclared    CheckpointState = "declared"
	CheckpointBackfilling CheckpointState = "backfilling"
	CheckpointActivated   CheckpointState = "activated"
)

// Checkpoint is one stored backfill checkpoint.
type Checkpoint struct {
	Name          string
	SchemaVersion int64
	State         CheckpointState
	// Sources are the tables whose changes the projection derives from.
	Sources []string
	// Watermark is the highest commitSeq whose source changes the
	// backfill reflects.
	Watermark int64
	// Cursor is the backfill's resume position (opaque to the store).
	Cursor string
	// OwnerEpoch increments with every claim; only the newest owner may
	// advance or activate.
	OwnerEpoch   int64
	ObservedRows int64
	UpdatedAtMs  int64
}

// CheckpointAdvance moves a checkpoint's progress for owner Epoch.
type CheckpointAdvance struct {
	Name      string
	Epoch     int64
	Watermark int64
	Cursor    string
	// Observed is added to ObservedRows.
	Observed int64
	// Activate (AdvanceCheckpoint only, not inside a commit) also
	// activates the checkpoint, in the same atomic write, and only while
	// the partition's head is still at Watermark: the caller caught up
	// with every commit up to it, and the head condition is the lock that
	// keeps a source write from landing in between (issue 20: activation
	// does not keep losing on a busy partition; a lost race costs one
	// catch-up of the commits since). It also requires the writer fence
	// at or above SchemaVersion and the pruning horizon at or below
	// Watermark. false when any of that does not hold.
	Activate      bool
	SchemaVersion int64
}

// ActivationOutcome is the result of ActivateCheckpoint.
type ActivationOutcome string

// Activation outcomes. Stale: a source table changed above the watermark
// (catch up and retry), or the caller's epoch is not current, or the
// checkpoint was already activated. Unverifiable: the log above the
// watermark was pruned, so cleanliness cannot be shown. Neither changes
// the stored checkpoint.
const (
	Activated    ActivationOutcome = "activated"
	Stale        ActivationOutcome = "stale"
	Unverifiable ActivationOutcome = "unverifiable"
)

// SchemaStore is the storage side of rolling schema upgrades, implemented
// by stores that support them (memstore, dynamostore). The gate's
// per-request reads ride on Store.TouchPartition (Head.Gate) and the fence
// and token checks on Store.Commit; these methods serve the operator path
// and the read after a response is built.
type SchemaStore interface {
	// ReadGate returns the marker and the partition's gate state in one
	// round trip. The partition part is strongly consistent; the marker
	// may be a copy cached for a bounded time (dynamostore: 5 s), since
	// the writer fence, not the marker, stops a stale writer. An unknown
	// partition has a zero partition part.
	ReadGate(ctx context.Context, partition string) (Gate, error)
	// SchemaMarker returns the stored marker, 0 when unset, read from
	// storage (never a cached copy).
	SchemaMarker(ctx context.Context) (int64, error)
	// BumpSchemaMarker raises the marker to v; it never lowers it, and
	// returns the stored marker afterwards.
	BumpSchemaMarker(ctx context.Context, v int64) (int64, error)
	// RaiseWriterFence raises the partition's writer fence to v (never
	// lowers it; idempotent). An unknown partition is ErrNotFound.
	RaiseWriterFence(ctx context.Context, partition string, v int64) error
	// DeclareCheckpoint atomically creates the checkpoint as declared if
	// it does not exist (an existing one is left as it is), adds it to the
	// partition's pending set unless activated, and raises the writer
	// fence to version. The schema marker is at or above version once it
	// returns, never after the declaration is visible (raised with it,
	// unless it was there already). It returns the stored checkpoint.
	DeclareCheckpoint(ctx context.Context, partition, name string, version int64, sources []string, nowMs int64) (*Checkpoint, error)
	// DeclareCheckpoints raises the marker to version and records decls
	// as the table-wide checkpoint declaration of version in the same
	// atomic write (one item, whatever the number of partitions). A new
	// version's declaration, or another set at the same version, is a
	// new generation, which every partition materialises again (keeping
	// the checkpoints it has); the same set again is a no-op. A
	// partition that has not materialised the current generation gates
	// as though each checkpoint were declared there (Gate.
	// Unmaterialized). It returns the stored marker: when that is above
	// version nothing is written (roll forward only);
	// ErrNewerDeclaration when a newer version's checkpoints are
	// declared.
	DeclareCheckpoints(ctx context.Context, version int64, decls []CheckpointDecl) (int64, error)
	// MaterializeCheckpoints makes the table-wide declaration partition
	// state: one atomic write declares each of its checkpoints there
	// (absent ones as declared; existing ones are left as they are, and
	// pending unless activated), raises the writer fence to its version
	// and records the partition as materialised. Nothing is written when
	// it already is, or when there is no declaration. It returns the
	// partition's head as read, with its gate as it is afterwards (Gate
	// never nil; StoredSchema unset): a backfill starting next may take
	// it as its first head. An unknown partition is an error.
	MaterializeCheckpoints(ctx context.Context, partition string, nowMs int64) (Head, error)
	// GetCheckpoint returns a checkpoint, nil when absent.
	GetCheckpoint(ctx context.Context, partition, name string) (*Checkpoint, error)
	// ClaimCheckpoint makes the caller the owner: OwnerEpoch+1, state
	// backfilling. ErrNotFound when undeclared, ErrCheckpointActivated
	// when activated. Concurrent claims get distinct epochs.
	ClaimCheckpoint(ctx context.Context, partition, name string, nowMs int64) (*Checkpoint, error)
	// AdvanceCheckpoint records progress for owner a.Epoch; false (no
	// error, nothing written) when that owner was superseded or the
	// checkpoint is activated.
	AdvanceCheckpoint(ctx context.Context, partition string, a CheckpointAdvance, nowMs int64) (bool, error)
	// ActivateCheckpoint activates the checkpoint for owner epoch when no
	// change to a source table landed above its watermark (see
	// ActivationOutcome). ErrFenceMissing when the writer fence is below
	// the checkpoint's version; ErrNotFound when undeclared.
	ActivateCheckpoint(ctx context.Context, partition, name string, epoch, nowMs int64) (ActivationOutcome, error)
}

// Build is one deployed build of a function as the build registry records
// it: Version is the platform's name for it (a Lambda function version),
// SchemaVersion the storage schema it runs.
type Build struct {
	Function      string
	SchemaVersion int64
	Version       string
}

// BuildRegistry records, per function and schema version, the newest
// build that served it, so that an older build refused by a partition's
// writer fence can hand the request to a build past that fence
// (docs/OPERATIONS.md "Rolling schema upgrades"). Implemented by stores
// on a shared table (dynamostore); memstore runs one build.
type BuildRegistry interface {
	// RegisterBuild records b for its function and schema version,
	// replacing a different version recorded there; a no-op when b is
	// recorded already.
	RegisterBuild(ctx context.Context, b Build) error
	// NewestBuild returns the registered build of function with the
	// highest schema version above schemaVersion; false when none.
	NewestBuild(ctx context.Context, function string, schemaVersion int64) (Build, bool, error)
}
