package conformancehost

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// journalStore wraps a memstore with the two storage faults the catalog
// asks for. It records every successful write so a backup is just a
// journal position: restoring replays that prefix into a fresh memstore
// (memstore is deterministic given its calls), which stands in for
// restoring a database snapshot. It also injects one unreadable
// idempotency record on demand (§6.3 sync.idempotency_cache_miss).
type journalStore struct {
	mu      sync.Mutex
	inner   *memstore.Store
	ops     []journalOp
	failGet atomic.Bool
}

type journalOp func(ctx context.Context, s store.Store) error

var _ store.Store = (*journalStore)(nil)

func newJournalStore() *journalStore { return &journalStore{inner: memstore.New()} }

func (j *journalStore) cur() *memstore.Store {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.inner
}

// record appends op when the write it describes succeeded.
func (j *journalStore) record(err error, op journalOp) error {
	if err == nil {
		j.mu.Lock()
		j.ops = append(j.ops, op)
		j.mu.Unlock()
	}
	return err
}

// mark returns the current journal position (a backup).
func (j *journalStore) mark() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.ops)
}

// restore rebuilds the store from the first n journal entries, then runs
// after (e.g. an epoch rotation) on the rebuilt store and journals it.
func (j *journalStore) restore(ctx context.Context, n int, after journalOp) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if n < 0 || n > len(j.ops) {
		return fmt.Errorf("backup position %d out of range", n)
	}
	fresh := memstore.New()
	ops := slices.Clone(j.ops[:n])
	for i, op := range ops {
		if err := op(ctx, fresh); err != nil {
			return fmt.Errorf("replay journal entry %d: %w", i, err)
		}
	}
	if after != nil {
		if err := after(ctx, fresh); err != nil {
			return err
		}
		ops = append(ops, after)
	}
	j.inner, j.ops = fresh, ops
	return nil
}

// TouchPartition implements store.Store.
func (j *journalStore) TouchPartition(ctx context.Context, partition string, nowMs int64, newEpoch string) (store.Head, error) {
	h, err := j.cur().TouchPartition(ctx, partition, nowMs, newEpoch)
	return h, j.record(err, func(ctx context.Context, s store.Store) error {
		_, err := s.TouchPartition(ctx, partition, nowMs, newEpoch)
		return err
	})
}

// Head implements store.Store.
func (j *journalStore) Head(ctx context.Context, partition string) (store.Head, bool, error) {
	return j.cur().Head(ctx, partition)
}

// RotateEpoch implements store.Store.
func (j *journalStore) RotateEpoch(ctx context.Context, partition, newEpoch string, nowMs int64) error {
	err := j.cur().RotateEpoch(ctx, partition, newEpoch, nowMs)
	return j.record(err, func(ctx context.Context, s store.Store) error {
		return s.RotateEpoch(ctx, partition, newEpoch, nowMs)
	})
}

// GetOutcome implements store.Store, failing once when armed (as do
// Commit and PutRejection, whichever checks the key first).
func (j *journalStore) GetOutcome(ctx context.Context, partition, clientID, clientCommitID string, nowMs int64) (*store.Outcome, error) {
	if j.failGet.Swap(false) {
		return nil, store.ErrOutcomeUnreadable
	}
	return j.cur().GetOutcome(ctx, partition, clientID, clientCommitID, nowMs)
}

// PutRejection implements store.Store.
func (j *journalStore) PutRejection(ctx context.Context, partition, clientID, clientCommitID string, o store.Outcome, w store.WriterCheck) error {
	if j.failGet.Swap(false) {
		return store.ErrOutcomeUnreadable
	}
	o.Result = bytes.Clone(o.Result)
	err := j.cur().PutRejection(ctx, partition, clientID, clientCommitID, o, w)
	return j.record(err, func(ctx context.Context, s store.Store) error {
		return s.PutRejection(ctx, partition, clientID, clientCommitID, o, w)
	})
}

// Commit implements store.Store.
// The engine checks idempotency keys inside the atomic commit, so an
// armed fault makes that check fail as unreadable.
func (j *journalStore) Commit(ctx context.Context, partition string, req *store.CommitRequest) error {
	if j.failGet.Swap(false) {
		return store.ErrOutcomeUnreadable
	}
	err := j.cur().Commit(ctx, partition, req)
	if err != nil {
		return err
	}
	saved := cloneCommitRequest(req)
	return j.record(nil, func(ctx context.Context, s store.Store) error {
		return s.Commit(ctx, partition, cloneCommitRequest(saved))
	})
}

// GetRows implements store.Store.
func (j *journalStore) GetRows(ctx context.Context, partition, table string, rowIDs []string) (map[string]*store.Row, error) {
	return j.cur().GetRows(ctx, partition, table, rowIDs)
}

// ScanRows implements store.Store.
func (j *journalStore) ScanRows(ctx context.Context, partition, table string, after string, hasAfter bool, fn func(*store.Row) bool) error {
	return j.cur().ScanRows(ctx, partition, table, after, hasAfter, fn)
}

// ScanScopedRows implements store.Store.
func (j *journalStore) ScanScopedRows(ctx context.Context, partition, table, variable string, values []string, after *store.ScopeCursor, want int, fn func(string, *store.Row) bool) error {
	return j.cur().ScanScopedRows(ctx, partition, table, variable, values, after, want, fn)
}

// ReadLogScoped implements store.Store.
func (j *journalStore) ReadLogScoped(ctx context.Context, partition, table, variable string, values []string, afterSeq, throughSeq int64, fn func(*store.Commit) bool) (int64, error) {
	return j.cur().ReadLogScoped(ctx, partition, table, variable, values, afterSeq, throughSeq, fn)
}

// ReadLog implements store.Store.
func (j *journalStore) ReadLog(ctx context.Context, partition string, afterSeq, throughSeq int64, fn func(*store.Commit) bool) error {
	return j.cur().ReadLog(ctx, partition, afterSeq, throughSeq, fn)
}

// GetClient implements store.Store.
func (j *journalStore) GetClient(ctx context.Context, partition, clientID string) (*store.Client, error) {
	return j.cur().GetClient(ctx, partition, clientID)
}

// BindClient implements store.Store.
func (j *journalStore) BindClient(ctx context.Context, partition string, c *store.Client) (*store.Client, error) {
	saved := *c
	got, err := j.cur().BindClient(ctx, partition, c)
	return got, j.record(err, func(ctx context.Context, s store.Store) error {
		c := saved
		_, err := s.BindClient(ctx, partition, &c)
		return err
	})
}

// PutClient implements store.Store.
func (j *journalStore) PutClient(ctx context.Context, partition string, c *store.Client) error {
	saved := *c
	err := j.cur().PutClient(ctx, partition, c)
	return j.record(err, func(ctx context.Context, s store.Store) error {
		c := saved
		return s.PutClient(ctx, partition, &c)
	})
}

// AckCursor implements store.Store.
func (j *journalStore) AckCursor(ctx context.Context, partition, clientID, actorID, logEpoch string, cursor, nowMs int64) (bool, error) {
	ok, err := j.cur().AckCursor(ctx, partition, clientID, actorID, logEpoch, cursor, nowMs)
	if !ok {
		return ok, err
	}
	return ok, j.record(err, func(ctx context.Context, s store.Store) error {
		_, err := s.AckCursor(ctx, partition, clientID, actorID, logEpoch, cursor, nowMs)
		return err
	})
}

// ListClients implements store.Store.
func (j *journalStore) ListClients(ctx context.Context, partition string, fn func(*store.Client) bool) error {
	return j.cur().ListClients(ctx, partition, fn)
}

// Prune implements store.Store.
func (j *journalStore) Prune(ctx context.Context, partition string, horizonSeq int64) (int, error) {
	n, err := j.cur().Prune(ctx, partition, horizonSeq)
	return n, j.record(err, func(ctx context.Context, s store.Store) error {
		_, err := s.Prune(ctx, partition, horizonSeq)
		return err
	})
}

// CommitTimes implements store.Store.
func (j *journalStore) CommitTimes(ctx context.Context, partition string, afterSeq int64, fn func(seq, createdAtMs int64) bool) error {
	return j.cur().CommitTimes(ctx, partition, afterSeq, fn)
}

// ListChildren implements store.Store.
func (j *journalStore) ListChildren(ctx context.Context, partition string, qs []store.ChildQuery, limit int) ([][]string, error) {
	return j.cur().ListChildren(ctx, partition, qs, limit)
}

func cloneScopes(s wire.StoredScopes) wire.StoredScopes { return slices.Clone(s) }

// cloneCommitRequest deep-copies req so a journal entry never aliases
// engine buffers.
func cloneCommitRequest(req *store.CommitRequest) *store.CommitRequest {
	c := *req
	c.Commit.Changes = make([]store.Change, len(req.Commit.Changes))
	for i, ch := range req.Commit.Changes {
		ch.Scopes = cloneScopes(ch.Scopes)
		ch.Row = bytes.Clone(ch.Row)
		c.Commit.Changes[i] = ch
	}
	c.Rows = make([]store.RowWrite, len(req.Rows))
	for i, rw := range req.Rows {
		rw.Row.Scopes = cloneScopes(rw.Row.Scopes)
		rw.Row.Payload = bytes.Clone(rw.Row.Payload)
		c.Rows[i] = rw
	}
	c.RefWrites = slices.Clone(req.RefWrites)
	c.Outcome.Result = bytes.Clone(req.Outcome.Result)
	return &c
}

// The auth leases (§7.3) are journaled like every other write, so a
// restored backup holds the leases it was taken with.
var _ store.LeaseStore = (*journalStore)(nil)

func (j *journalStore) Lease(ctx context.Context, partition, clientID string) (store.Lease, bool, error) {
	return j.cur().Lease(ctx, partition, clientID)
}

func (j *journalStore) IssueLease(ctx context.Context, partition, clientID string, l store.Lease) (store.Lease, error) {
	out, err := j.cur().IssueLease(ctx, partition, clientID, l)
	return out, j.record(err, func(ctx context.Context, s store.Store) error {
		_, err := s.(store.LeaseStore).IssueLease(ctx, partition, clientID, l)
		return err
	})
}

func (j *journalStore) RevokeLease(ctx context.Context, partition, clientID, leaseID string) (bool, error) {
	ok, err := j.cur().RevokeLease(ctx, partition, clientID, leaseID)
	return ok, j.record(err, func(ctx context.Context, s store.Store) error {
		_, err := s.(store.LeaseStore).RevokeLease(ctx, partition, clientID, leaseID)
		return err
	})
}
