// Package migrate is the operator side of rolling schema upgrades
// (store/schema.go): the migration step a deploy runs once traffic has
// shifted to the new build (bump the schema marker, declare backfill
// checkpoints) and the backfill runner that fills a checkpoint's
// projection in resumable batches and activates it.
//
// Nothing here holds traffic back (issue 20). Partitions are fenced
// lazily: the new build's first commit that writes a table layout an
// older build cannot read raises that partition's writer fence in the
// same transaction (engine readerFloor), and a checkpoint declaration
// raises its partition's fence with the declaration. A step without
// checkpoints is therefore O(1) in partitions (the marker bump and, on a
// store with a store-format level, the level raise: FormatLeveler), and
// an older build serves every partition nothing newer was written to,
// during the traffic shift and after a rollback.
package migrate

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// Backend is a store with the rolling-upgrade side.
type Backend interface {
	store.Store
	store.SchemaStore
}

// FormatLeveler is a backend whose stored formats are gated by a
// store-format level (dynamostore, formats.go: "read first, write
// later"). Step raises the level to what this build reads: it runs once
// every request is served by this build, so from then on writers may
// use the formats only this build (and newer ones) can read. The level
// never drops; RaiseFormatLevel fails when a newer build raised it above
// this one's (roll forward only).
type FormatLeveler interface {
	RaiseFormatLevel(ctx context.Context) (int64, error)
}

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
	// walked when the plan declares checkpoints.
	Partitions func(ctx context.Context, fn func(partition string) bool) error
	// Now is the clock of checkpoint timestamps.
	Now func() int64
	// Parallel is how many partitions are fenced and declared at once
	// (0: DefaultParallel). Each partition's step stays sequential.
	Parallel int
}

// Progress reports what a step or a backfill did.
type Progress struct {
	Marker int64
	// FormatLevel is the stored-format level after the step (backends
	// implementing FormatLeveler; 0 otherwise).
	FormatLevel int64
	Partitions  int
	Fenced      int // partitions with every checkpoint declared (fenced with it)
	Declared    int
	Batches     int
	Rows        int64
	Activated   int
	Outcomes    map[string]store.ActivationOutcome // partition␟name → last outcome
	Incomplete  int                                // checkpoints not activated
	Superseded  bool                               // a newer owner took over
	TimedOutNow bool                               // stopped at the deadline; resume later
}

// Step bumps the marker to p.Version, raises the store-format level when
// the backend has one (FormatLeveler), and declares p's checkpoints on
// every partition (each declaration raises that partition's writer fence
// in the same transaction). Without checkpoints it touches no partition:
// the marker is then one update, whatever the number of partitions.
// Every part is idempotent: a step interrupted anywhere is finished by
// running it again.
func Step(ctx context.Context, b Backend, p Plan) (Progress, error) {
	var pr Progress
	m, err := b.BumpSchemaMarker(ctx, p.Version)
	if err != nil {
		return pr, fmt.Errorf("bump schema marker: %w", err)
	}
	pr.Marker = m
	if m > p.Version {
		return pr, fmt.Errorf("stored schema marker %d is newer than %d: roll forward only", m, p.Version)
	}
	if fl, ok := b.(FormatLeveler); ok {
		if pr.FormatLevel, err = fl.RaiseFormatLevel(ctx); err != nil {
			return pr, fmt.Errorf("raise store-format level: %w", err)
		}
	}
	if len(p.Checkpoints) == 0 {
		return pr, nil
	}
	var (
		mu   sync.Mutex
		errs []error
	)
	err = eachPartition(ctx, p.Partitions, p.Parallel, func(part string) bool {
		declared, err := stepPartition(ctx, b, p, part)
		mu.Lock()
		defer mu.Unlock()
		pr.Partitions++
		if declared == len(p.Checkpoints) {
			pr.Fenced++
		}
		pr.Declared += declared
		if err != nil {
			errs = append(errs, err)
			return false
		}
		return true
	})
	return pr, errors.Join(append(errs, err)...)
}

// stepPartition declares p's checkpoints on one partition; each
// declaration raises the partition's writer fence to p.Version in its own
// transaction, so a checkpoint is only declared on a partition the old
// build can no longer write.
func stepPartition(ctx context.Context, b Backend, p Plan, part string) (declared int, err error) {
	for _, d := range p.Checkpoints {
		if _, err := b.DeclareCheckpoint(ctx, part, d.Name, p.Version, d.Sources, p.Now()); err != nil {
			return declared, fmt.Errorf("declare checkpoint %s on %q: %w", d.Name, part, err)
		}
		declared++
	}
	return declared, nil
}
