// Package migrate is the operator side of rolling schema upgrades
// (store/schema.go): the migration step a deploy runs once traffic has
// shifted to the new build (bump the schema marker, declare backfill
// checkpoints) and the backfill runner that fills a checkpoint's
// projection in resumable batches and activates it.
//
// Nothing here holds traffic back (issue 20). Partitions are fenced
// lazily: the new build's first commit that writes a table layout an
// older build cannot read raises that partition's writer fence in the
// same transaction (engine readerFloor). Checkpoints are declared once,
// table-wide, with the marker (one item update), and gated in every
// partition from then on; a partition materialises them (declares them
// there, raising its fence) with the new build's first write in it or
// when Run's backfill walk over the registry reaches it, whichever comes
// first. A step is therefore O(1) in partitions, with or without
// checkpoints (the marker bump with the declaration and, on a store with
// a store-format level, the level raise: FormatLeveler); only the
// backfills walk the registry, in parallel and resumably. An older build
// serves every partition nothing newer was written to, during the
// traffic shift and after a rollback of a release without checkpoints.
package migrate

import (
	"context"
	"fmt"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// Backend is a store with the rolling-upgrade side.
type Backend interface {
	store.Store
	store.SchemaStore
}

// FormatLeveler is a backend whose stored formats are gated by a
// store-format level (dynamostore, formats.go: "read first, write
// later"). Step raises the level towards what this build reads: it runs
// once every request to the functions is served by this build, so from
// then on writers may use the formats only this build (and newer ones)
// can read. Readers that roll out on their own (the realtime tier's
// instances, registered in the backend) hold the raise back to the
// lowest level a live one reads; the next step raises it further. The
// level never drops; RaiseFormatLevel fails when a newer build raised it
// above this one's (roll forward only).
type FormatLeveler interface {
	RaiseFormatLevel(ctx context.Context) (FormatRaise, error)
}

// FormatRaise is what a store-format level raise did.
type FormatRaise struct {
	// Level is the stored level after the raise.
	Level int64
	// Target is the level this build reads: where the raise goes when
	// nothing holds it back.
	Target int64
	// Readers is how many live registered readers that roll out on their
	// own (realtime tier instances) there are, and Limit the lowest level
	// one of them reads (meaningless when Readers is 0).
	Readers int
	Limit   int64
}

// HeldBack reports whether a live reader kept the level below Target.
func (r FormatRaise) HeldBack() bool { return r.Level < r.Target }

// Declaration is one backfill checkpoint a schema version declares.
type Declaration struct {
	Name    string
	Sources []string
	// Transform is what its backfill writes (Declarations builds it from
	// the schema's rules and the host's hook); nil verifies only: the
	// backfill scans and advances the watermark, writes no row.
	Transform Transform
}

// Plan is one migration step to storage schema Version.
type Plan struct {
	Version     int64
	Checkpoints []Declaration
	// Partitions lists every partition (the partition registry); only
	// walked by Run's backfills, never by Step.
	Partitions func(ctx context.Context, fn func(partition string) bool) error
	// Now is the clock of checkpoint timestamps.
	Now func() int64
	// Parallel is how many partitions Run's backfill walk works on at
	// once (0: DefaultParallel). Each partition's work stays sequential.
	Parallel int
}

// Progress reports what a step or a backfill did.
type Progress struct {
	Marker int64
	// FormatLevel is the stored-format level after the step (backends
	// implementing FormatLeveler; 0 otherwise).
	FormatLevel int64
	// FormatRaise is the step's raise in detail (FormatLevel is its
	// Level): whether a live reader held it back (HeldBack).
	FormatRaise FormatRaise
	Partitions  int // partitions the backfill walk reached
	Fenced      int // of them, with the declaration materialised (fenced with it)
	Declared    int // checkpoints declared table-wide
	Batches     int
	Rows        int64
	Activated   int
	Outcomes    map[string]store.ActivationOutcome // partition␟name → last outcome
	Incomplete  int                                // checkpoints not activated
	Superseded  bool                               // a newer owner took over
	TimedOutNow bool                               // stopped at the deadline; resume later
}

// Step bumps the marker to p.Version and declares p's checkpoints
// table-wide in the same atomic write (store.SchemaStore.
// DeclareCheckpoints): O(1) in partitions, with or without checkpoints.
// From then on every partition gates those checkpoints as declared; each
// materialises them (its own checkpoint items, its writer fence raised
// with them) lazily: with the first write of the new build there, or when
// Run's backfill walk reaches it. It then raises the store-format level
// when the backend has one (FormatLeveler), as far as the live readers
// that roll out on their own allow. Step is idempotent: running it again
// changes nothing, except raising a level held back further once those
// readers are gone.
func Step(ctx context.Context, b Backend, p Plan) (Progress, error) {
	var (
		pr  Progress
		m   int64
		err error
	)
	if len(p.Checkpoints) == 0 {
		m, err = b.BumpSchemaMarker(ctx, p.Version)
	} else {
		m, err = b.DeclareCheckpoints(ctx, p.Version, decls(p.Checkpoints))
	}
	if err != nil {
		return pr, fmt.Errorf("bump schema marker and declare checkpoints: %w", err)
	}
	pr.Marker = m
	if m > p.Version {
		return pr, fmt.Errorf("stored schema marker %d is newer than %d: roll forward only", m, p.Version)
	}
	if fl, ok := b.(FormatLeveler); ok {
		pr.FormatRaise, err = fl.RaiseFormatLevel(ctx)
		pr.FormatLevel = pr.FormatRaise.Level
		if err != nil {
			return pr, fmt.Errorf("raise store-format level: %w", err)
		}
	}
	pr.Declared = len(p.Checkpoints)
	return pr, nil
}

func decls(ds []Declaration) []store.CheckpointDecl {
	out := make([]store.CheckpointDecl, len(ds))
	for i, d := range ds {
		out[i] = store.CheckpointDecl{Name: d.Name, Sources: d.Sources}
	}
	return out
}
