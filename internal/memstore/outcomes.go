package memstore

import (
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// Push outcomes expire after the same idempotency window as in
// dynamostore (store.OutcomeExpiry), when one is set (WithOutcomeTTL):
// an outcome past it at the caller's time is absent to GetOutcome, and
// Commit and PutRejection record the key again when its outcome expired
// by the new outcome's RecordedAtMs. The expired outcome's bytes stay in
// memory until its log chunk is released (memstore is the local and
// test backend; dynamostore's TTL is what reclaims storage).

// WithOutcomeTTL sets the idempotency window of push outcomes (default:
// none, outcomes never expire; the local runner passes SYNC_OUTCOME_TTL).
func WithOutcomeTTL(d time.Duration) Option {
	return func(s *Store) { s.outcomeWindow = d }
}

// expiredOutcome reports whether encoded outcome o (logcodec.go) is past
// its window at nowMs.
func (s *Store) expiredOutcome(o string, nowMs int64) bool {
	r := entryReader{s: o, off: 1}
	r.varint() // commitSeq
	sec, ok := store.OutcomeExpiry(r.varint(), s.outcomeWindow)
	return ok && store.OutcomeExpired(sec, nowMs)
}

// liveOutcomeLocked reports whether key k (hash h) has an outcome within
// its window at nowMs; an expired one is unlinked, so the caller may
// record the key again. Called under the write lock.
func (s *Store) liveOutcomeLocked(p *partState, h uint64, k string, nowMs int64) bool {
	r, overflow, ok := p.findOutcomeLocked(h, k)
	if !ok {
		return false
	}
	if !s.expiredOutcome(p.outcomeLocked(r), nowMs) {
		return true
	}
	if overflow {
		delete(p.outcomes.overflow, k)
	} else {
		delete(p.outcomes.byHash, h)
	}
	return false
}
