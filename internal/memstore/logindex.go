package memstore

import (
	"slices"
	"sort"
	"strings"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// The log's scope index (§3.1 inverted index): per (table, stored scope
// variable, value), the ascending seqs of the logged commits with a change
// of that table holding that value. A scoped read (an incremental pull)
// then costs what it returns, not the whole window: with every client
// writing into one partition, a pull of one project no longer decodes
// every other project's commits.

// CheapScopedLog implements store.CheapScopedLog: a scoped read walks an
// in-memory list, so the engine may read every window through it.
func (s *Store) CheapScopedLog() bool { return true }

var _ store.CheapScopedLog = (*Store)(nil)

type logKey struct{ table, variable, value string }

// indexCommit records commit seq under every (table, variable, value) of
// its changes. Called under the write lock, after the commit is logged.
func (p *partState) indexCommit(changes []store.Change, seq int64) {
	for i := range changes {
		ch := &changes[i]
		for _, sc := range ch.Scopes {
			k := logKey{ch.Table, sc.Key, sc.Value}
			l, ok := p.logIdx[k]
			if !ok {
				// A new key outlives the request: own its strings.
				k = logKey{strings.Clone(k.table), strings.Clone(k.variable), strings.Clone(k.value)}
			}
			if n := len(l); n == 0 || l[n-1] != seq {
				p.logIdx[k] = append(l, seq)
			}
		}
	}
}

// pruneIndexLocked drops the seqs at or below horizon; lists left empty
// go, and a list that lost most of its entries is copied so their memory
// is released.
func (p *partState) pruneIndexLocked(horizon int64) {
	for k, l := range p.logIdx {
		i := sort.Search(len(l), func(j int) bool { return l[j] > horizon })
		switch {
		case i == len(l):
			delete(p.logIdx, k)
		case i > 0:
			p.logIdx[k] = slices.Clone(l[i:])
		}
	}
}

// scopedBatchLocked appends to batch, ascending and without duplicates,
// the entries of up to scanBatchCommits commits with afterSeq < seq ≤
// throughSeq listed under (table, variable, v) for a v of values. Called
// under the read lock.
func (p *partState) scopedBatchLocked(batch []string, table, variable string, values []string, afterSeq, throughSeq int64) []string {
	var one [1][]int64
	lists := one[:0]
	if len(values) > 1 {
		lists = make([][]int64, 0, len(values))
	}
	for _, v := range values {
		l := p.logIdx[logKey{table, variable, v}]
		i := sort.Search(len(l), func(j int) bool { return l[j] > afterSeq })
		if i < len(l) {
			lists = append(lists, l[i:])
		}
	}
	for len(batch) < scanBatchCommits {
		// The smallest head among the lists; every list at it advances.
		seq := int64(-1)
		for _, l := range lists {
			if len(l) > 0 && (seq < 0 || l[0] < seq) {
				seq = l[0]
			}
		}
		if seq < 0 || seq > throughSeq {
			break
		}
		for j, l := range lists {
			if len(l) > 0 && l[0] == seq {
				lists[j] = l[1:]
			}
		}
		// Pruning trims the index with the log, so every listed seq is
		// logged; the bound check only guards the invariant.
		if i := seq - p.logBase; seq >= p.logFirst && i < int64(len(p.log)) {
			batch = append(batch, p.logArena.str(p.log[i]))
		}
	}
	return batch
}
