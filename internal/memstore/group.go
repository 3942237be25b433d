package memstore

import (
	"context"
	"fmt"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// Group commit (store.GroupCommitter, issue 20 item 7). memstore has no
// commit queue, so a group's members carry no tickets; it lands them in
// order under one hold of the partition's lock, each checked in full
// (outcome, fence, gate, head, rows as read) before any of its writes,
// and stops at the first member whose checks fail: the prefix landed,
// every commit in it whole.

var _ store.GroupCommitter = (*Store)(nil)

type pubKey struct {
	partition string
	ticket    int64
}

// PublishCommit implements store.GroupCommitter.
func (s *Store) PublishCommit(ctx context.Context, partition string, req *store.CommitRequest) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if req.Ticket < 1 {
		return fmt.Errorf("memstore: a published commit needs its ticket")
	}
	c := cloneRequest(req)
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	if s.pubs == nil {
		s.pubs = make(map[pubKey]*store.CommitRequest)
	}
	s.pubs[pubKey{partition, req.Ticket}] = c
	return nil
}

// PublishedCommits implements store.GroupCommitter.
func (s *Store) PublishedCommits(ctx context.Context, partition string, from int64, n int) ([]*store.CommitRequest, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	var out []*store.CommitRequest
	for t := from; len(out) < n; t++ {
		r, ok := s.pubs[pubKey{partition, t}]
		if !ok {
			break
		}
		out = append(out, cloneRequest(r))
	}
	return out, nil
}

// CommitGroup implements store.GroupCommitter.
func (s *Store) CommitGroup(ctx context.Context, partition string, reqs []*store.CommitRequest) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if len(reqs) == 0 {
		return 0, nil
	}
	p := s.lookup(partition)
	if p == nil {
		return 0, ErrUnknownPartition
	}
	lead := reqs[0]
	prepared := make([]*preparedCommit, 0, len(reqs))
	for i, r := range reqs {
		if i > 0 && (r.Advance != nil || r.ExpectedMaxSeq != lead.ExpectedMaxSeq+int64(i) ||
			r.WriterVersion != lead.WriterVersion || r.CheckGate != lead.CheckGate || r.GateToken != lead.GateToken) {
			break
		}
		buf := getScratch()
		defer putScratch(buf)
		pc, err := prepareCommit(buf, r)
		if err != nil {
			if i == 0 {
				return 0, err
			}
			break
		}
		prepared = append(prepared, pc)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, pc := range prepared {
		if err := s.commitLocked(p, reqs[i], pc); err != nil {
			if i == 0 {
				return 0, err
			}
			return i, nil
		}
	}
	return len(prepared), nil
}

// cloneRequest copies what a published request shares with its caller.
func cloneRequest(r *store.CommitRequest) *store.CommitRequest {
	c := *r
	c.Commit.Changes = append([]store.Change(nil), r.Commit.Changes...)
	for i := range c.Commit.Changes {
		ch := &c.Commit.Changes[i]
		ch.Row = append([]byte(nil), ch.Row...)
		ch.Scopes = append(ch.Scopes[:0:0], ch.Scopes...)
	}
	c.Rows = append([]store.RowWrite(nil), r.Rows...)
	for i := range c.Rows {
		c.Rows[i].Row = cloneRow(&r.Rows[i].Row)
	}
	c.RefWrites = append([]store.RefWrite(nil), r.RefWrites...)
	c.ReadRows = append([]store.RowRead(nil), r.ReadRows...)
	c.Outcome.Result = append([]byte(nil), r.Outcome.Result...)
	c.Commit.Reactions = append([]store.PlannedReaction(nil), r.Commit.Reactions...)
	return &c
}

// rowsAsReadLocked reports whether every row of rr is still as the
// evaluation read it (store.CommitRequest.ReadRows); p.mu is held.
func (p *partState) rowsAsReadLocked(rr []store.RowRead) bool {
	for _, r := range rr {
		var e *rowEntry
		if t := p.tables[r.Table]; t != nil {
			e = t.byID[r.RowID]
		}
		if (e != nil) != r.Present || e != nil && e.row.CommitSeq != r.CommitSeq {
			return false
		}
	}
	return true
}
