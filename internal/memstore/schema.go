package memstore

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

var _ store.SchemaStore = (*Store)(nil)

// gateLocked builds the partition part of the gate, with the table-wide
// declaration decl (may be nil) while the partition has not materialised
// it; nil when the partition has no gate state. p.mu must be held.
func (p *partState) gateLocked(decl *store.TableDeclaration) *store.Gate {
	var g *store.Gate
	if p.fence != 0 || p.gateToken != 0 || len(p.checkpoints) != 0 {
		g = &store.Gate{WriterFence: p.fence, Token: p.gateToken}
		for _, c := range p.checkpoints {
			if c.State != store.CheckpointActivated {
				g.Pending = append(g.Pending, store.PendingCheckpoint{Name: c.Name, SchemaVersion: c.SchemaVersion})
			}
		}
		sort.Slice(g.Pending, func(i, j int) bool { return g.Pending[i].Name < g.Pending[j].Name })
	}
	// Not materialised here yet: gated as declared.
	return decl.Lazy(g, p.materialized)
}

// withMarker returns g (possibly nil) with the marker filled in; nil
// stays nil when there is no marker either.
func withMarker(g *store.Gate, marker int64) *store.Gate {
	if marker == 0 {
		return g
	}
	if g == nil {
		g = &store.Gate{}
	}
	g.StoredSchema = marker
	return g
}

func (s *Store) markerValue() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.marker
}

// markerDecl returns the marker and the table-wide declaration.
func (s *Store) markerDecl() (int64, *store.TableDeclaration) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.marker, s.decl.Load()
}

// ReadGate implements store.SchemaStore.
func (s *Store) ReadGate(ctx context.Context, partition string) (store.Gate, error) {
	if err := ctx.Err(); err != nil {
		return store.Gate{}, err
	}
	var g *store.Gate
	marker, decl := s.markerDecl()
	if p := s.lookup(partition); p != nil {
		p.mu.RLock()
		g = p.gateLocked(decl)
		p.mu.RUnlock()
	}
	g = withMarker(g, marker)
	if g == nil {
		return store.Gate{}, nil
	}
	return *g, nil
}

// SchemaMarker implements store.SchemaStore.
func (s *Store) SchemaMarker(ctx context.Context) (int64, error) {
	return s.markerValue(), ctx.Err()
}

// BumpSchemaMarker implements store.SchemaStore.
func (s *Store) BumpSchemaMarker(ctx context.Context, v int64) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.marker = max(s.marker, v)
	return s.marker, nil
}

// RaiseWriterFence implements store.SchemaStore.
func (s *Store) RaiseWriterFence(ctx context.Context, partition string, v int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p := s.lookup(partition)
	if p == nil {
		return ErrUnknownPartition
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if v > p.fence {
		p.fence = v
		p.gateToken++
	}
	return nil
}

func copyCheckpoint(c *store.Checkpoint) *store.Checkpoint {
	d := *c
	d.Sources = slices.Clone(c.Sources)
	return &d
}

// DeclareCheckpoint implements store.SchemaStore.
func (s *Store) DeclareCheckpoint(ctx context.Context, partition, name string, version int64, sources []string, nowMs int64) (*store.Checkpoint, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p := s.lookup(partition)
	if p == nil {
		return nil, ErrUnknownPartition
	}
	// The marker first: no one sees the declaration without it.
	if _, err := s.BumpSchemaMarker(ctx, version); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.checkpoints[name]
	changed := false
	if c == nil {
		if p.checkpoints == nil {
			p.checkpoints = make(map[string]*store.Checkpoint)
		}
		c = &store.Checkpoint{Name: name, SchemaVersion: version, State: store.CheckpointDeclared,
			Sources: slices.Clone(sources), UpdatedAtMs: nowMs}
		p.checkpoints[name] = c
		changed = true
	}
	if version > p.fence {
		p.fence = version
		changed = true
	}
	if changed {
		p.gateToken++
	}
	return copyCheckpoint(c), nil
}

// DeclareCheckpoints implements store.SchemaStore.
func (s *Store) DeclareCheckpoints(ctx context.Context, version int64, decls []store.CheckpointDecl) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.marker > version {
		return s.marker, nil
	}
	d := s.decl.Load()
	if d != nil && d.Version > version {
		return s.marker, fmt.Errorf("memstore: checkpoints of version %d are declared: %w", d.Version, store.ErrNewerDeclaration)
	}
	if !d.Declares(version, decls) {
		nd := &store.TableDeclaration{Version: version, Generation: d.Gen() + 1, Checkpoints: make([]store.CheckpointDecl, len(decls))}
		for i, c := range decls {
			nd.Checkpoints[i] = store.CheckpointDecl{Name: c.Name, Sources: slices.Clone(c.Sources)}
		}
		s.decl.Store(nd)
	}
	s.marker = version
	return s.marker, nil
}

// MaterializeCheckpoints implements store.SchemaStore.
func (s *Store) MaterializeCheckpoints(ctx context.Context, partition string, nowMs int64) (store.Head, error) {
	if err := ctx.Err(); err != nil {
		return store.Head{}, err
	}
	p := s.lookup(partition)
	if p == nil {
		return store.Head{}, ErrUnknownPartition
	}
	decl := s.decl.Load()
	p.mu.Lock()
	defer p.mu.Unlock()
	if decl.Gen() > p.materialized {
		if p.checkpoints == nil {
			p.checkpoints = make(map[string]*store.Checkpoint)
		}
		for _, d := range decl.Checkpoints {
			if p.checkpoints[d.Name] == nil {
				p.checkpoints[d.Name] = &store.Checkpoint{Name: d.Name, SchemaVersion: decl.Version, State: store.CheckpointDeclared,
					Sources: slices.Clone(d.Sources), UpdatedAtMs: nowMs}
			}
		}
		p.fence = max(p.fence, decl.Version)
		p.materialized = decl.Generation
		p.gateToken++
	}
	h := p.head
	h.Gate = p.gateLocked(decl)
	if h.Gate == nil {
		h.Gate = &store.Gate{}
	}
	return h, nil
}

// GetCheckpoint implements store.SchemaStore.
func (s *Store) GetCheckpoint(ctx context.Context, partition, name string) (*store.Checkpoint, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p := s.lookup(partition)
	if p == nil {
		return nil, nil
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if c := p.checkpoints[name]; c != nil {
		return copyCheckpoint(c), nil
	}
	return nil, nil
}

// ClaimCheckpoint implements store.SchemaStore.
func (s *Store) ClaimCheckpoint(ctx context.Context, partition, name string, nowMs int64) (*store.Checkpoint, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p := s.lookup(partition)
	if p == nil {
		return nil, store.ErrNotFound
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.checkpoints[name]
	switch {
	case c == nil:
		return nil, store.ErrNotFound
	case c.State == store.CheckpointActivated:
		return nil, store.ErrCheckpointActivated
	}
	c.OwnerEpoch++
	c.State = store.CheckpointBackfilling
	c.UpdatedAtMs = nowMs
	return copyCheckpoint(c), nil
}

// advanceLocked applies a to its checkpoint; p.mu must be held.
func (p *partState) checkAdvanceLocked(a *store.CheckpointAdvance) *store.Checkpoint {
	c := p.checkpoints[a.Name]
	if c == nil || c.OwnerEpoch != a.Epoch || c.State == store.CheckpointActivated {
		return nil
	}
	return c
}

func applyAdvance(c *store.Checkpoint, a *store.CheckpointAdvance, nowMs int64) {
	c.Watermark = a.Watermark
	c.Cursor = a.Cursor
	c.ObservedRows += a.Observed
	c.UpdatedAtMs = nowMs
}

// AdvanceCheckpoint implements store.SchemaStore.
func (s *Store) AdvanceCheckpoint(ctx context.Context, partition string, a store.CheckpointAdvance, nowMs int64) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	p := s.lookup(partition)
	if p == nil {
		return false, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.checkAdvanceLocked(&a)
	if c == nil {
		return false, nil
	}
	if a.Activate {
		if p.head.MaxCommitSeq != a.Watermark || p.fence < a.SchemaVersion || p.head.HorizonSeq > a.Watermark {
			return false, nil
		}
		c.State = store.CheckpointActivated
		p.gateToken++
	}
	applyAdvance(c, &a, nowMs)
	return true, nil
}

// ActivateCheckpoint implements store.SchemaStore. The partition lock
// makes the source check and the activation one atomic step.
func (s *Store) ActivateCheckpoint(ctx context.Context, partition, name string, epoch, nowMs int64) (store.ActivationOutcome, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	p := s.lookup(partition)
	if p == nil {
		return "", store.ErrNotFound
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.checkpoints[name]
	if c == nil {
		return "", store.ErrNotFound
	}
	if p.fence < c.SchemaVersion {
		return "", store.ErrFenceMissing
	}
	for _, sp := range p.log[p.logFirst-p.logBase:] {
		e := p.logArena.str(sp)
		if entrySeq(e) <= c.Watermark {
			continue
		}
		for _, ch := range decodeCommit(e).Changes {
			if slices.Contains(c.Sources, ch.Table) {
				return store.Stale, nil
			}
		}
	}
	if p.head.HorizonSeq > c.Watermark {
		return store.Unverifiable, nil
	}
	if c.OwnerEpoch != epoch || c.State == store.CheckpointActivated {
		return store.Stale, nil
	}
	c.State = store.CheckpointActivated
	c.UpdatedAtMs = nowMs
	p.gateToken++
	return store.Activated, nil
}
