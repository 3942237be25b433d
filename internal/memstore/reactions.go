package memstore

import (
	"context"
	"slices"
	"strconv"
	"sync"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// rxState holds a partition's §6.9 reactions: the records planned by
// logged commits (kept beside the log, dropped with it by Prune, which
// the engine precedes with an enqueue) and the delivery records.
type rxState struct {
	mu      sync.Mutex
	plan    map[int64][]store.PlannedReaction
	records map[store.ReactionID]*store.Reaction
	cursor  int64
}

func (x *rxState) logPlanned(seq int64, ps []store.PlannedReaction) {
	if len(ps) == 0 {
		return
	}
	cp := make([]store.PlannedReaction, len(ps))
	for i, p := range ps {
		p.Payload = slices.Clone(p.Payload)
		cp[i] = p
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.plan == nil {
		x.plan = make(map[int64][]store.PlannedReaction)
	}
	x.plan[seq] = cp
}

// planned returns a caller-owned copy of the records of commit seq.
func (x *rxState) planned(seq int64) []store.PlannedReaction {
	x.mu.Lock()
	defer x.mu.Unlock()
	ps := x.plan[seq]
	if ps == nil {
		return nil
	}
	out := make([]store.PlannedReaction, len(ps))
	for i, p := range ps {
		p.Payload = slices.Clone(p.Payload)
		out[i] = p
	}
	return out
}

func (x *rxState) dropPlanned(horizon int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for seq := range x.plan {
		if seq <= horizon {
			delete(x.plan, seq)
		}
	}
}

// rxDue is the store-wide set of partitions that may have live
// reactions, with the mark token ClearReactionsDue compares.
type rxDue struct {
	mu    sync.Mutex
	marks map[string]string
	next  int64
}

func (d *rxDue) mark(partition string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.marks == nil {
		d.marks = make(map[string]string)
	}
	d.next++
	d.marks[partition] = strconv.FormatInt(d.next, 10)
}

// partRx returns the partition's reaction state, nil when the partition
// does not exist.
func (s *Store) partRx(partition string) *rxState {
	if p := s.lookup(partition); p != nil {
		return &p.rx
	}
	return nil
}

func cloneReaction(r *store.Reaction) *store.Reaction {
	c := *r
	c.Payload = slices.Clone(r.Payload)
	c.FailureDetails = slices.Clone(r.FailureDetails)
	return &c
}

// ReactionCursor implements store.ReactionStore.
func (s *Store) ReactionCursor(ctx context.Context, partition string) (int64, error) {
	x := s.partRx(partition)
	if x == nil {
		return 0, ctx.Err()
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.cursor, ctx.Err()
}

// AdvanceReactionCursor implements store.ReactionStore.
func (s *Store) AdvanceReactionCursor(ctx context.Context, partition string, from, to int64) (bool, error) {
	x := s.partRx(partition)
	if x == nil {
		return false, ctx.Err()
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.cursor != from || to <= from {
		return false, ctx.Err()
	}
	x.cursor = to
	return true, ctx.Err()
}

// EnqueueReactions implements store.ReactionStore.
func (s *Store) EnqueueReactions(ctx context.Context, partition string, rs []store.Reaction) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	x := s.partRx(partition)
	if x == nil || len(rs) == 0 {
		return nil
	}
	x.mu.Lock()
	if x.records == nil {
		x.records = make(map[store.ReactionID]*store.Reaction)
	}
	for i := range rs {
		if _, ok := x.records[rs[i].ID]; !ok {
			x.records[rs[i].ID] = cloneReaction(&rs[i])
		}
	}
	x.mu.Unlock()
	s.rxDue.mark(partition)
	return nil
}

// claimable is the §6.9 claim rule: pending and due, or leased with an
// expired lease.
func claimable(r *store.Reaction, nowMs int64) bool {
	return (r.State == store.ReactionPending || r.State == store.ReactionLeased) && r.DueAtMs <= nowMs
}

// sortedIDs returns the ids of the records that pass keep, in commit
// order. Called under x.mu.
func (x *rxState) sortedIDs(keep func(*store.Reaction) bool) []store.ReactionID {
	var ids []store.ReactionID
	for id, r := range x.records {
		if keep(r) {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, store.CompareReactionIDs)
	return ids
}

// cloned returns caller-owned copies of the records of ids. Called
// under x.mu.
func (x *rxState) cloned(ids []store.ReactionID) []*store.Reaction {
	out := make([]*store.Reaction, len(ids))
	for i, id := range ids {
		out[i] = cloneReaction(x.records[id])
	}
	return out
}

// each calls fn for each of rs until it returns false.
func each(rs []*store.Reaction, fn func(*store.Reaction) bool) {
	for _, r := range rs {
		if !fn(r) {
			return
		}
	}
}

// DueReactions implements store.ReactionStore.
func (s *Store) DueReactions(ctx context.Context, partition string, types []string, nowMs int64, limit int, fn func(*store.Reaction) bool) error {
	x := s.partRx(partition)
	if x == nil {
		return ctx.Err()
	}
	x.mu.Lock()
	ids := x.sortedIDs(func(r *store.Reaction) bool { return claimable(r, nowMs) && slices.Contains(types, r.Type) })
	if limit > 0 && len(ids) > limit {
		ids = ids[:limit]
	}
	out := x.cloned(ids)
	x.mu.Unlock()
	each(out, fn)
	return ctx.Err()
}

// ClaimReaction implements store.ReactionStore.
func (s *Store) ClaimReaction(ctx context.Context, partition string, id store.ReactionID, owner string, nowMs, leaseMs int64) (*store.Reaction, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	x := s.partRx(partition)
	if x == nil {
		return nil, false, nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	r := x.records[id]
	if r == nil || !claimable(r, nowMs) {
		return nil, false, nil
	}
	r.State, r.Owner, r.DueAtMs = store.ReactionLeased, owner, nowMs+leaseMs
	r.Attempts++
	return cloneReaction(r), true, nil
}

// UpdateReaction implements store.ReactionStore.
func (s *Store) UpdateReaction(ctx context.Context, partition, owner string, r *store.Reaction) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	x := s.partRx(partition)
	if x == nil {
		return false, nil
	}
	x.mu.Lock()
	cur := x.records[r.ID]
	if cur == nil || cur.State != store.ReactionLeased || cur.Owner != owner {
		x.mu.Unlock()
		return false, nil
	}
	x.records[r.ID] = cloneReaction(r)
	x.mu.Unlock()
	if r.State == store.ReactionPending {
		s.rxDue.mark(partition)
	}
	return true, nil
}

// ResetDeadReaction implements store.ReactionStore.
func (s *Store) ResetDeadReaction(ctx context.Context, partition string, id store.ReactionID, nowMs int64) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	x := s.partRx(partition)
	if x == nil {
		return false, nil
	}
	x.mu.Lock()
	r := x.records[id]
	if r == nil || r.State != store.ReactionDead {
		x.mu.Unlock()
		return false, nil
	}
	r.State, r.DueAtMs, r.Attempts, r.FailureCode, r.FailureDetails, r.FinishedAtMs, r.Owner = store.ReactionPending, nowMs, 0, "", nil, 0, ""
	x.mu.Unlock()
	s.rxDue.mark(partition)
	return true, nil
}

// PruneReactions implements store.ReactionStore.
func (s *Store) PruneReactions(ctx context.Context, partition string, completedBefore, deadBefore int64, limit int) (int, int, bool, error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, false, err
	}
	x := s.partRx(partition)
	if x == nil {
		return 0, 0, false, nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	ids := x.sortedIDs(func(r *store.Reaction) bool {
		return r.State == store.ReactionCompleted && r.FinishedAtMs < completedBefore ||
			r.State == store.ReactionDead && r.FinishedAtMs < deadBefore
	})
	more := limit > 0 && len(ids) > limit
	if more {
		ids = ids[:limit]
	}
	completed, dead := 0, 0
	for _, id := range ids {
		if x.records[id].State == store.ReactionCompleted {
			completed++
		} else {
			dead++
		}
		delete(x.records, id)
	}
	return completed, dead, more, nil
}

// ListReactions implements store.ReactionStore.
func (s *Store) ListReactions(ctx context.Context, partition string, fn func(*store.Reaction) bool) error {
	x := s.partRx(partition)
	if x == nil {
		return ctx.Err()
	}
	x.mu.Lock()
	out := x.cloned(x.sortedIDs(func(*store.Reaction) bool { return true }))
	x.mu.Unlock()
	each(out, fn)
	return ctx.Err()
}

// HasLiveReactions implements store.ReactionStore.
func (s *Store) HasLiveReactions(ctx context.Context, partition string) (bool, error) {
	x := s.partRx(partition)
	if x == nil {
		return false, ctx.Err()
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, r := range x.records {
		if r.State == store.ReactionPending || r.State == store.ReactionLeased {
			return true, ctx.Err()
		}
	}
	return false, ctx.Err()
}

// DueReactionPartitions implements store.ReactionStore.
func (s *Store) DueReactionPartitions(ctx context.Context, fn func(partition, token string) bool) error {
	s.rxDue.mu.Lock()
	type mark struct{ p, tok string }
	marks := make([]mark, 0, len(s.rxDue.marks))
	for p, tok := range s.rxDue.marks {
		marks = append(marks, mark{p, tok})
	}
	s.rxDue.mu.Unlock()
	slices.SortFunc(marks, func(a, b mark) int {
		switch {
		case a.p < b.p:
			return -1
		case a.p > b.p:
			return 1
		}
		return 0
	})
	for _, m := range marks {
		if !fn(m.p, m.tok) {
			break
		}
	}
	return ctx.Err()
}

// ClearReactionsDue implements store.ReactionStore.
func (s *Store) ClearReactionsDue(ctx context.Context, partition, token string) error {
	s.rxDue.mu.Lock()
	defer s.rxDue.mu.Unlock()
	if s.rxDue.marks[partition] == token {
		delete(s.rxDue.marks, partition)
	}
	return ctx.Err()
}

var _ store.ReactionStore = (*Store)(nil)
