// Package migrate is the operator side of rolling schema upgrades
// (store/schema.go): the migration step a deploy runs before shifting
// traffic (bump the schema marker, raise every partition's writer fence,
// declare backfill checkpoints) and the backfill runner that fills a
// checkpoint's projection in resumable batches and activates it.
//
// Roll forward only: once the marker moved to N+1 a build of N refuses
// to serve (sync.schema_not_ready) and cannot commit, so a rollback past
// the migration is an outage; fix forward with N+2.
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
	// Partitions lists every partition (the store's operator scan).
	Partitions func(ctx context.Context, fn func(partition string) bool) error
	// Now is the clock of checkpoint timestamps.
	Now func() int64
	// Parallel is how many partitions are fenced and declared at once
	// (0: DefaultParallel). Each partition's step stays sequential.
	Parallel int
}

// Progress reports what a step or a backfill did.
type Progress struct {
	Marker      int64
	Partitions  int
	Fenced      int
	Declared    int
	Batches     int
	Rows        int64
	Activated   int
	Outcomes    map[string]store.ActivationOutcome // partition␟name → last outcome
	Incomplete  int                                // checkpoints not activated
	Superseded  bool                               // a newer owner took over
	TimedOutNow bool                               // stopped at the deadline; resume later
}

// Step bumps the marker to p.Version, then raises the writer fence of
// every partition to it and declares p's checkpoints there. Every part is
// idempotent: a step interrupted anywhere is finished by running it
// again.
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
	var (
		mu   sync.Mutex
		errs []error
	)
	err = eachPartition(ctx, p.Partitions, p.Parallel, func(part string) bool {
		fenced, declared, err := stepPartition(ctx, b, p, part)
		mu.Lock()
		defer mu.Unlock()
		pr.Partitions++
		if fenced {
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

// stepPartition raises one partition's writer fence to p.Version, then
// declares p's checkpoints there (the fence first: a checkpoint is only
// declared on a partition the old build can no longer write).
func stepPartition(ctx context.Context, b Backend, p Plan, part string) (fenced bool, declared int, err error) {
	if err := b.RaiseWriterFence(ctx, part, p.Version); err != nil {
		return false, 0, fmt.Errorf("raise writer fence of %q: %w", part, err)
	}
	for _, d := range p.Checkpoints {
		if _, err := b.DeclareCheckpoint(ctx, part, d.Name, p.Version, d.Sources, p.Now()); err != nil {
			return true, declared, fmt.Errorf("declare checkpoint %s on %q: %w", d.Name, part, err)
		}
		declared++
	}
	return true, declared, nil
}
