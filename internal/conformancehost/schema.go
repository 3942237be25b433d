package conformancehost

import (
	"context"
	"net/http"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// The rolling-upgrade side of the journal store delegates to the current
// memstore; every write is journaled as the same call, so a restored
// backup replays it too.

var _ store.SchemaStore = (*journalStore)(nil)

func schemaOf(s store.Store) store.SchemaStore { return s.(store.SchemaStore) }

// ReadGate implements store.SchemaStore.
func (j *journalStore) ReadGate(ctx context.Context, p string) (store.Gate, error) {
	return j.cur().ReadGate(ctx, p)
}

// SchemaMarker implements store.SchemaStore.
func (j *journalStore) SchemaMarker(ctx context.Context) (int64, error) {
	return j.cur().SchemaMarker(ctx)
}

// BumpSchemaMarker implements store.SchemaStore.
func (j *journalStore) BumpSchemaMarker(ctx context.Context, v int64) (int64, error) {
	got, err := j.cur().BumpSchemaMarker(ctx, v)
	return got, j.record(err, func(ctx context.Context, s store.Store) error {
		_, err := schemaOf(s).BumpSchemaMarker(ctx, v)
		return err
	})
}

// RaiseWriterFence implements store.SchemaStore.
func (j *journalStore) RaiseWriterFence(ctx context.Context, p string, v int64) error {
	return j.record(j.cur().RaiseWriterFence(ctx, p, v), func(ctx context.Context, s store.Store) error {
		return schemaOf(s).RaiseWriterFence(ctx, p, v)
	})
}

// DeclareCheckpoint implements store.SchemaStore.
func (j *journalStore) DeclareCheckpoint(ctx context.Context, p, name string, v int64, sources []string, nowMs int64) (*store.Checkpoint, error) {
	c, err := j.cur().DeclareCheckpoint(ctx, p, name, v, sources, nowMs)
	return c, j.record(err, func(ctx context.Context, s store.Store) error {
		_, err := schemaOf(s).DeclareCheckpoint(ctx, p, name, v, sources, nowMs)
		return err
	})
}

// DeclareCheckpoints implements store.SchemaStore.
func (j *journalStore) DeclareCheckpoints(ctx context.Context, v int64, decls []store.CheckpointDecl) (int64, error) {
	got, err := j.cur().DeclareCheckpoints(ctx, v, decls)
	return got, j.record(err, func(ctx context.Context, s store.Store) error {
		_, err := schemaOf(s).DeclareCheckpoints(ctx, v, decls)
		return err
	})
}

// MaterializeCheckpoints implements store.SchemaStore.
func (j *journalStore) MaterializeCheckpoints(ctx context.Context, p string, nowMs int64) (store.Head, error) {
	h, err := j.cur().MaterializeCheckpoints(ctx, p, nowMs)
	return h, j.record(err, func(ctx context.Context, s store.Store) error {
		_, err := schemaOf(s).MaterializeCheckpoints(ctx, p, nowMs)
		return err
	})
}

// GetCheckpoint implements store.SchemaStore.
func (j *journalStore) GetCheckpoint(ctx context.Context, p, name string) (*store.Checkpoint, error) {
	return j.cur().GetCheckpoint(ctx, p, name)
}

// ClaimCheckpoint implements store.SchemaStore.
func (j *journalStore) ClaimCheckpoint(ctx context.Context, p, name string, nowMs int64) (*store.Checkpoint, error) {
	c, err := j.cur().ClaimCheckpoint(ctx, p, name, nowMs)
	return c, j.record(err, func(ctx context.Context, s store.Store) error {
		_, err := schemaOf(s).ClaimCheckpoint(ctx, p, name, nowMs)
		return err
	})
}

// AdvanceCheckpoint implements store.SchemaStore.
func (j *journalStore) AdvanceCheckpoint(ctx context.Context, p string, a store.CheckpointAdvance, nowMs int64) (bool, error) {
	ok, err := j.cur().AdvanceCheckpoint(ctx, p, a, nowMs)
	return ok, j.record(err, func(ctx context.Context, s store.Store) error {
		_, err := schemaOf(s).AdvanceCheckpoint(ctx, p, a, nowMs)
		return err
	})
}

// ActivateCheckpoint implements store.SchemaStore.
func (j *journalStore) ActivateCheckpoint(ctx context.Context, p, name string, epoch, nowMs int64) (store.ActivationOutcome, error) {
	o, err := j.cur().ActivateCheckpoint(ctx, p, name, epoch, nowMs)
	return o, j.record(err, func(ctx context.Context, s store.Store) error {
		_, err := schemaOf(s).ActivateCheckpoint(ctx, p, name, epoch, nowMs)
		return err
	})
}

// declareBackfillCheckpoint(name) declares a checkpoint of the running
// schema version on the instance's partition, as a newer build's
// migration would: this engine did not declare it, so it answers
// sync.schema_not_ready until the checkpoint is activated.
func (in *instance) declareBackfillCheckpoint(ctx context.Context, a *args) (any, *controlError) {
	if e := a.arity(1, 1); e != nil {
		return nil, e
	}
	var name string
	if e := a.decode(0, "name", &name); e != nil {
		return nil, e
	}
	if name == "" {
		return nil, badArgs("declareBackfillCheckpoint needs a non-empty name")
	}
	now := in.clock.Load()
	if _, err := in.st.Store().TouchPartition(ctx, in.partition, now, engine.RandomEpoch()); err != nil {
		return nil, failed(err)
	}
	if _, err := in.st.Schema().DeclareCheckpoint(ctx, in.partition, name, int64(in.schema.Latest), nil, now); err != nil {
		return nil, &controlError{http.StatusInternalServerError, codeFailed, err.Error()}
	}
	return nil, nil
}
