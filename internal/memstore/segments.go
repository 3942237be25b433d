package memstore

import (
	"bytes"
	"context"
	"io"
	"slices"
	"sync"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// Segments is an in-memory store.SegmentStore, safe for concurrent use.
// Objects are never deleted, so every publication's object trivially
// outlives it.
type Segments struct {
	mu   sync.RWMutex
	segs map[string]*segment
	// byKey indexes segment ids by the pinless SegmentKeys (see unpinned)
	// of their recorded publications so Find does not scan every segment.
	byKey map[store.SegmentKey]map[string]struct{}
}

var _ store.SegmentStore = (*Segments)(nil)

type segment struct {
	body []byte
	pubs []store.Publication
}

// NewSegments returns an empty Segments.
func NewSegments() *Segments {
	return &Segments{
		segs:  make(map[string]*segment),
		byKey: make(map[store.SegmentKey]map[string]struct{}),
	}
}

// sameContext is the publication identity of §5.1: a rebuild for the same
// key that cut the page identically.
func sameContext(a, b *store.Publication) bool {
	return a.SegmentKey == b.SegmentKey && a.NextRowCursor == b.NextRowCursor && a.RowCount == b.RowCount
}

var _ store.LatestFinder = (*Segments)(nil)

// unpinned is k without its pin: the index key of Find and FindLatest.
func unpinned(k store.SegmentKey) store.SegmentKey {
	k.AsOfCommitSeq = 0
	return k
}

// newer orders publications of one context: highest pin, then latest
// expiry.
func newer(a, b *store.Publication) bool {
	if a.AsOfCommitSeq != b.AsOfCommitSeq {
		return a.AsOfCommitSeq > b.AsOfCommitSeq
	}
	return a.ExpiresAtMs > b.ExpiresAtMs
}

// Put implements store.SegmentStore. A collision records nothing.
func (s *Segments) Put(ctx context.Context, segmentID string, body []byte, pub store.Publication, nowMs int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seg := s.segs[segmentID]
	if seg == nil {
		seg = &segment{body: bytes.Clone(body)}
		if seg.body == nil {
			seg.body = []byte{}
		}
		s.segs[segmentID] = seg
	} else if !bytes.Equal(seg.body, body) {
		return store.ErrCollision
	}

	merged := false
	for i := range seg.pubs {
		if p := &seg.pubs[i]; sameContext(p, &pub) {
			p.CreatedAtMs = min(p.CreatedAtMs, pub.CreatedAtMs)
			p.ExpiresAtMs = max(p.ExpiresAtMs, pub.ExpiresAtMs)
			merged = true
			break
		}
	}
	if !merged {
		seg.pubs = append(seg.pubs, pub)
	}

	// Prune after merging: an expired publication of a live context has
	// just been extended, and a new publication that is already expired
	// is dropped like any other.
	var gone []store.SegmentKey
	seg.pubs = slices.DeleteFunc(seg.pubs, func(p store.Publication) bool {
		if p.ExpiresAtMs > nowMs {
			return false
		}
		gone = append(gone, p.SegmentKey)
		return true
	})
	// Keep at most store.MaxPubsPerContext publications per context apart
	// from the pin: the newest ones.
	slices.SortStableFunc(seg.pubs, func(a, b store.Publication) int {
		switch {
		case newer(&a, &b):
			return -1
		case newer(&b, &a):
			return 1
		}
		return 0
	})
	kept := map[store.SegmentKey]int{}
	seg.pubs = slices.DeleteFunc(seg.pubs, func(p store.Publication) bool {
		u := unpinned(p.SegmentKey)
		kept[u]++
		if kept[u] <= store.MaxPubsPerContext {
			return false
		}
		gone = append(gone, p.SegmentKey)
		return true
	})
	for _, p := range seg.pubs {
		ids := s.byKey[unpinned(p.SegmentKey)]
		if ids == nil {
			ids = make(map[string]struct{})
			s.byKey[unpinned(p.SegmentKey)] = ids
		}
		ids[segmentID] = struct{}{}
	}
	for _, k := range gone {
		u := unpinned(k)
		if slices.ContainsFunc(seg.pubs, func(p store.Publication) bool { return unpinned(p.SegmentKey) == u }) {
			continue
		}
		if ids := s.byKey[u]; ids != nil {
			delete(ids, segmentID)
			if len(ids) == 0 {
				delete(s.byKey, u)
			}
		}
	}
	return nil
}

// Find implements store.SegmentStore. Among several live publications it
// returns the one that expires last, so callers get the longest lease.
func (s *Segments) Find(ctx context.Context, key store.SegmentKey, nowMs int64) (string, store.Publication, bool, error) {
	id, pub, _, ok, err := s.find(ctx, key, key.AsOfCommitSeq, key.AsOfCommitSeq, nowMs)
	return id, pub, ok, err
}

// FindSized implements store.SizedFinder.
func (s *Segments) FindSized(ctx context.Context, key store.SegmentKey, nowMs int64) (string, store.Publication, int64, bool, error) {
	return s.find(ctx, key, key.AsOfCommitSeq, key.AsOfCommitSeq, nowMs)
}

// FindLatest implements store.LatestFinder.
func (s *Segments) FindLatest(ctx context.Context, key store.SegmentKey, minAsOf, maxAsOf, nowMs int64) (string, store.Publication, int64, bool, error) {
	return s.find(ctx, key, minAsOf, maxAsOf, nowMs)
}

func (s *Segments) find(ctx context.Context, key store.SegmentKey, minAsOf, maxAsOf, nowMs int64) (string, store.Publication, int64, bool, error) {
	if err := ctx.Err(); err != nil {
		return "", store.Publication{}, 0, false, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	var (
		bestID  string
		best    store.Publication
		matched bool
	)
	u := unpinned(key)
	for id := range s.byKey[u] {
		for _, p := range s.segs[id].pubs {
			if unpinned(p.SegmentKey) != u || p.AsOfCommitSeq < minAsOf || p.AsOfCommitSeq > maxAsOf || p.ExpiresAtMs <= nowMs {
				continue
			}
			if !matched || newer(&p, &best) || (!newer(&best, &p) && id < bestID) {
				bestID, best, matched = id, p, true
			}
		}
	}
	if !matched {
		return "", store.Publication{}, 0, false, nil
	}
	return bestID, best, int64(len(s.segs[bestID].body)), true, nil
}

// Lookup implements store.SegmentStore.
func (s *Segments) Lookup(ctx context.Context, segmentID string, f store.PublicationFilter) (*store.Segment, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	seg := s.segs[segmentID]
	if seg == nil {
		return nil, store.ErrNotFound
	}
	out := &store.Segment{SegmentID: segmentID, ByteLength: int64(len(seg.body)), Publications: []store.Publication{}}
	inEpoch := false
	for _, p := range seg.pubs {
		if p.Partition != f.Partition || p.LogEpoch != f.LogEpoch {
			continue
		}
		inEpoch = true
		if f.Matches(&p) {
			out.Publications = append(out.Publications, p)
		}
	}
	if !inEpoch {
		return nil, store.ErrNotFound
	}
	return out, nil
}

// Open implements store.SegmentStore. The reader is over a private copy.
func (s *Segments) Open(ctx context.Context, segmentID string) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	seg := s.segs[segmentID]
	var body []byte
	if seg != nil {
		body = bytes.Clone(seg.body)
	}
	s.mu.RUnlock()
	if seg == nil {
		return nil, store.ErrNotFound
	}
	return io.NopCloser(bytes.NewReader(body)), nil
}
