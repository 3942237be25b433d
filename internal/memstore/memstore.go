// Package memstore is the in-memory implementation of store.Store and
// store.SegmentStore: the embedded backend of the local runner and the
// reference the engine tests run against. It keeps everything in process
// memory, so it is durable only as long as the process lives.
//
// Every byte slice is copied on the way in and on the way out, so callers
// may reuse their buffers and may modify what they get back. Commits and
// outcomes are kept encoded (logcodec.go) in pointer-free arenas
// (arena.go), so a long log costs the garbage collector next to nothing,
// and the log has a scope index (logindex.go) so a scoped read touches
// only the commits it returns.
package memstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// DefaultRefreshInterval is how stale LastSeenAtMs may get before
// TouchPartition rewrites it. Retention only needs coarse last-seen times,
// and skipping the rewrite keeps a quiet pull a pure read.
const DefaultRefreshInterval = 60 * time.Second

// ErrUnknownPartition reports a write to a partition that TouchPartition
// never created: the engine always touches first, so this is a caller bug
// rather than a protocol condition. It wraps store.ErrNotFound.
var ErrUnknownPartition = fmt.Errorf("memstore: unknown partition: %w", store.ErrNotFound)

// Callbacks run without any lock held (so fn may call back into the
// store); scans copy this many items per locked step.
const (
	scanBatchRows    = 256
	scanBatchCommits = 64
)

// Option configures a Store.
type Option func(*Store)

// WithRefreshInterval sets how old LastSeenAtMs must be before
// TouchPartition rewrites it (default DefaultRefreshInterval).
func WithRefreshInterval(d time.Duration) Option {
	return func(s *Store) { s.refreshMs = d.Milliseconds() }
}

// Store is an in-memory store.Store, safe for concurrent use. Partitions
// are independent: each has its own lock, so traffic on one never waits
// for another.
type Store struct {
	refreshMs int64
	// outcomeWindow is the idempotency window of outcomes (outcomes.go).
	outcomeWindow time.Duration
	// seed hashes outcome keys (arena.go).
	seed maphash.Seed

	mu         sync.RWMutex // guards partitions (the map, not its values) and marker
	partitions map[string]*partState
	// rxDue marks the partitions that may have live §6.9 reactions.
	rxDue rxDue
	// marker is the stored schema marker (schema.go); decl the
	// table-wide checkpoint declaration stored with it.
	marker int64
	decl   atomic.Pointer[store.TableDeclaration] // written under mu, read without it
	// leases are the §7.3 auth leases (leases.go), under their own lock.
	leases leaseTable
	// pubs are commits published for group commit (group.go).
	pubMu sync.Mutex
	pubs  map[pubKey]*store.CommitRequest
}

var _ store.Store = (*Store)(nil)

// LocalCommits implements store.LocalCommits: Commit decides under the
// partition's lock in this process, so a lost race is retried at once.
func (s *Store) LocalCommits() bool { return true }

var _ store.LocalCommits = (*Store)(nil)

// partState is one partition's registry entry, log, rows, outcomes and
// client records under a single lock, which makes Commit trivially atomic.
type partState struct {
	mu   sync.RWMutex
	head store.Head
	// log locates the encoded commits (logcodec.go) in logArena: log[i]
	// has seq logBase+i. Those below logFirst are pruned; they stay
	// listed only while their chunk holds a commit that is not, so that
	// dropping the chunk finds their outcomes (Prune).
	log      []span
	logBase  int64
	logFirst int64
	logArena arena
	// logIdx lists, per (table, scope variable, value), the seqs of the
	// logged commits with a change of that table holding that value
	// (§3.1 inverted index), ascending.
	logIdx map[logKey][]int64
	tables map[string]*table
	// outcomes finds the encoded outcome (logcodec.go) of a key
	// (appendOutcomeKey): in the commit's log entry while its chunk is
	// kept, else in outArena (rejections, pruned commits).
	outcomes outcomeIndex
	outArena arena
	// clients is guarded by clientsMu, not mu: every pull records its
	// client, and taking the partition's write lock for it made pulls
	// queue behind commits. Lock order: mu before clientsMu (AckCursor
	// and RotateEpoch need the epoch with the records).
	clientsMu sync.Mutex
	clients   map[string]*store.Client
	// refs is the §6.11 reference index: child row ids by (child table,
	// reference column, parent id).
	refs map[refKey]map[string]struct{}
	// tombs lists the tombstones written, in commit order, so Prune finds
	// those at or below the horizon without walking the rows. An entry
	// whose row was since rewritten is dropped when pruned.
	tombs []tombRef
	// Rolling-upgrade state (schema.go): writer fence, gate token and
	// backfill checkpoints by name.
	fence       int64
	gateToken   int64
	checkpoints map[string]*store.Checkpoint
	// materialized is the table-wide declaration generation materialised here.
	materialized int64
	// §6.9 reactions (reactions.go), under their own lock.
	rx rxState
}

type tombRef struct {
	table, rowID string
	seq          int64
}

type refKey struct{ table, column, parentID string }

// table pairs an id map (GetRows) with the ordered index (ScanRows) and
// one ordered index per stored scope (variable, value) (ScanScopedRows).
// Tombstones live only in the id map, so a scan never meets them.
type table struct {
	byID   map[string]*rowEntry
	order  rowIndex
	scoped map[scopeKey]*rowIndex
}

type scopeKey struct{ variable, value string }

// index adds a live entry to the scope indexes of its stored scopes.
func (t *table) index(e *rowEntry) {
	for _, sc := range e.row.Scopes {
		k := scopeKey{sc.Key, sc.Value}
		x := t.scoped[k]
		if x == nil {
			x = &rowIndex{}
			t.scoped[k] = x
		}
		x.insert(e)
	}
}

// unindex removes a live entry from the scope indexes of its scopes.
func (t *table) unindex(e *rowEntry) {
	for _, sc := range e.row.Scopes {
		k := scopeKey{sc.Key, sc.Value}
		if x := t.scoped[k]; x != nil {
			x.remove(e.row.RowID)
			if len(x.blocks) == 0 {
				delete(t.scoped, k)
			}
		}
	}
}

// New returns an empty Store.
func New(opts ...Option) *Store {
	s := &Store{
		refreshMs:  DefaultRefreshInterval.Milliseconds(),
		seed:       maphash.MakeSeed(),
		partitions: make(map[string]*partState),
	}
	for _, o := range opts {
		o(s)
	}
	s.outcomeWindow = max(s.outcomeWindow, 0)
	return s
}

// lookup returns the partition or nil.
func (s *Store) lookup(name string) *partState {
	s.mu.RLock()
	p := s.partitions[name]
	s.mu.RUnlock()
	return p
}

// TouchPartition implements store.Store. The common case (known partition,
// LastSeenAtMs fresh) takes only read locks and does not allocate.
func (s *Store) TouchPartition(ctx context.Context, partition string, nowMs int64, newEpoch string) (store.Head, error) {
	if err := ctx.Err(); err != nil {
		return store.Head{}, err
	}
	p := s.lookup(partition)
	if p == nil {
		if newEpoch == "" {
			return store.Head{}, errors.New("memstore: TouchPartition needs a non-empty epoch to create a partition")
		}
		s.mu.Lock()
		p = s.partitions[partition]
		if p == nil {
			p = &partState{
				head:     store.Head{LogEpoch: newEpoch, LastSeenAtMs: nowMs},
				fence:    s.marker, // a new partition starts fenced at the marker
				tables:   make(map[string]*table),
				logIdx:   make(map[logKey][]int64),
				outcomes: outcomeIndex{seed: s.seed, byHash: make(map[uint64]outRef)},
				clients:  make(map[string]*store.Client),
				refs:     make(map[refKey]map[string]struct{}),
			}
			// It has nothing to backfill: the table-wide declaration
			// holds for it as materialised (and activated).
			p.materialized = s.decl.Load().Gen()
			s.partitions[partition] = p
		}
		s.mu.Unlock()
	}
	marker, decl := s.markerDecl()
	p.mu.RLock()
	h := p.head
	h.Gate = withMarker(p.gateLocked(decl), marker)
	p.mu.RUnlock()
	if !s.stale(h.LastSeenAtMs, nowMs) {
		return h, nil
	}
	p.mu.Lock()
	if s.stale(p.head.LastSeenAtMs, nowMs) {
		p.head.LastSeenAtMs = nowMs
	}
	h = p.head
	h.Gate = withMarker(p.gateLocked(decl), marker)
	p.mu.Unlock()
	return h, nil
}

// stale reports whether lastSeen is older than the refresh interval at
// nowMs. A clock behind lastSeen never moves it backwards.
func (s *Store) stale(lastSeen, nowMs int64) bool {
	return nowMs-lastSeen > s.refreshMs
}

// Head implements store.Store.
func (s *Store) Head(ctx context.Context, partition string) (store.Head, bool, error) {
	if err := ctx.Err(); err != nil {
		return store.Head{}, false, err
	}
	p := s.lookup(partition)
	if p == nil {
		return store.Head{}, false, nil
	}
	decl := s.decl.Load()
	p.mu.RLock()
	h := p.head
	h.Gate = p.gateLocked(decl)
	p.mu.RUnlock()
	return h, true, nil
}

// RotateEpoch implements store.Store. Rows, log, outcomes and the horizon
// stay: rotation marks a discontinuity for clients, it does not reset the
// data. nowMs is not needed by this backend.
func (s *Store) RotateEpoch(ctx context.Context, partition, newEpoch string, nowMs int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if newEpoch == "" {
		return errors.New("memstore: RotateEpoch needs a non-empty epoch")
	}
	p := s.lookup(partition)
	if p == nil {
		return ErrUnknownPartition
	}
	p.mu.Lock()
	p.head.LogEpoch = newEpoch
	p.head.EpochRequired = true
	p.gateToken++ // the serve gate's token is bound to the log epoch
	p.clientsMu.Lock()
	p.clients = make(map[string]*store.Client)
	p.clientsMu.Unlock()
	p.mu.Unlock()
	return nil
}

// GetOutcome implements store.Store.
func (s *Store) GetOutcome(ctx context.Context, partition, clientID, clientCommitID string, nowMs int64) (*store.Outcome, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p := s.lookup(partition)
	if p == nil {
		return nil, nil
	}
	var buf [96]byte
	k := viewBytes(appendOutcomeKey(buf[:0], clientID, clientCommitID))
	h := p.outcomes.hash(k)
	var o string
	p.mu.RLock()
	r, _, ok := p.findOutcomeLocked(h, k)
	if ok {
		o = p.outcomeLocked(r)
	}
	p.mu.RUnlock()
	if !ok || s.expiredOutcome(o, nowMs) {
		return nil, nil
	}
	return decodeOutcome(o), nil
}

// PutRejection implements store.Store.
func (s *Store) PutRejection(ctx context.Context, partition, clientID, clientCommitID string, o store.Outcome, w store.WriterCheck) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p := s.lookup(partition)
	if p == nil {
		return ErrUnknownPartition
	}
	buf := getScratch()
	defer putScratch(buf)
	b := appendOutcomeKey((*buf)[:0], clientID, clientCommitID)
	kl := len(b)
	b = appendOutcome(b, &o)
	*buf = b
	k := viewBytes(b[:kl])
	h := p.outcomes.hash(k)
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.liveOutcomeLocked(p, h, k, o.RecordedAtMs) {
		return store.ErrOutcomeExists
	}
	if w.WriterVersion < p.fence {
		return store.ErrWriterFenced
	}
	if w.CheckGate && w.GateToken != p.gateToken {
		return store.ErrGateMoved
	}
	p.addOutcomeLocked(h, k, p.putOutcomeLocked(k, viewBytes(b[kl:])))
	return nil
}

// Commit implements store.Store. Every check happens before the first
// write and nothing after the checks can fail, which is what makes the
// commit all or nothing. Row CommitSeq is stamped with the assigned seq;
// a delete leaves a tombstone (§2.2 of the wire-3 spec).
func (s *Store) Commit(ctx context.Context, partition string, req *store.CommitRequest) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p := s.lookup(partition)
	if p == nil {
		return ErrUnknownPartition
	}
	buf := getScratch()
	defer putScratch(buf)
	pc, err := prepareCommit(buf, req)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return s.commitLocked(p, req, pc)
}

// preparedCommit is a commit request encoded outside the partition's
// lock: its log entry (in the caller's scratch buffer), its outcome key
// and the row entries it will write.
type preparedCommit struct {
	entry []byte
	l     entryLayout
	k     string
	rows  []*rowEntry
}

// prepareCommit encodes req into buf. Encoding is the expensive part and
// touches only caller memory; the lock only copies the entry into the
// arena.
func prepareCommit(buf *[]byte, req *store.CommitRequest) (*preparedCommit, error) {
	seq := req.ExpectedMaxSeq + 1
	if req.Commit.Seq != seq {
		return nil, fmt.Errorf("memstore: commit seq %d does not follow expected head %d", req.Commit.Seq, req.ExpectedMaxSeq)
	}
	entry, l := appendCommit((*buf)[:0], &req.Commit, req.WriterVersion, &req.Outcome)
	*buf = entry
	pc := &preparedCommit{entry: entry, l: l, k: viewBytes(entry[l.keyOff:l.keyEnd])}
	pc.rows = make([]*rowEntry, len(req.Rows))
	for i := range req.Rows {
		w := &req.Rows[i]
		e := &rowEntry{row: store.Row{RowID: w.Row.RowID, Deleted: true, Scopes: cloneRow(&w.Row).Scopes}}
		if !w.Delete {
			e.row = cloneRow(&w.Row)
			e.row.Deleted = false
		}
		e.row.CommitSeq = seq
		pc.rows[i] = e
	}
	return pc, nil
}

// commitLocked checks and applies one prepared commit; p.mu is held.
func (s *Store) commitLocked(p *partState, req *store.CommitRequest, pc *preparedCommit) error {
	seq := req.ExpectedMaxSeq + 1
	entry, l, k, rows := pc.entry, pc.l, pc.k, pc.rows
	h := p.outcomes.hash(k)
	// The idempotency check goes first: when both fail, replaying the
	// recorded outcome is what the engine ends up doing anyway.
	if s.liveOutcomeLocked(p, h, k, req.Outcome.RecordedAtMs) {
		return store.ErrOutcomeExists
	}
	if req.WriterVersion < p.fence {
		return store.ErrWriterFenced
	}
	if req.CheckGate && req.GateToken != p.gateToken {
		return store.ErrGateMoved
	}
	if p.head.MaxCommitSeq != req.ExpectedMaxSeq {
		// The current head with its gate, as Head reads it: the engine's
		// retry commits against it without reading the head again.
		h := p.head
		h.Gate = p.gateLocked(s.decl.Load())
		return &store.HeadMovedError{Head: h}
	}
	if !p.rowsAsReadLocked(req.ReadRows) {
		return store.ErrHeadMoved
	}
	var adv *store.Checkpoint
	if req.Advance != nil {
		if adv = p.checkAdvanceLocked(req.Advance); adv == nil {
			return store.ErrCheckpointSuperseded
		}
	}
	if req.RaiseFence > p.fence {
		// Lazy fencing: the first write an older build cannot read.
		p.fence = req.RaiseFence
		p.gateToken++
	}
	for i := range req.Rows {
		w := &req.Rows[i]
		t := p.tables[w.Table]
		if t == nil {
			t = &table{byID: make(map[string]*rowEntry), scoped: make(map[scopeKey]*rowIndex)}
			p.tables[w.Table] = t
		}
		id := w.Row.RowID
		old := t.byID[id]
		live := old != nil && !old.row.Deleted
		switch {
		case w.Delete:
			if live {
				t.order.remove(id)
				t.unindex(old)
			}
			t.byID[id] = rows[i]
			p.tombs = append(p.tombs, tombRef{w.Table, id, seq})
		case live:
			// Scopes are immutable on a live row (§3.4); should a caller
			// change them anyway, the scope indexes follow.
			moved := !slices.Equal(old.row.Scopes, rows[i].row.Scopes)
			if moved {
				t.unindex(old)
			}
			old.row = rows[i].row // the indexes share the entry
			if moved {
				t.index(old)
			}
		default: // absent or a tombstone: the upsert replaces it
			t.byID[id] = rows[i]
			t.order.insert(rows[i])
			t.index(rows[i])
		}
	}
	for _, w := range req.RefWrites {
		p.applyRef(w)
	}
	if len(p.log) == 0 {
		p.logBase, p.logFirst = seq, seq
	} else if p.logBase+int64(len(p.log)) != seq {
		// Unreachable while the head check above holds; guards the log
		// indexing invariant against future edits.
		panic("memstore: log is not contiguous")
	}
	sp, dst := p.logArena.alloc(len(entry))
	copy(dst, entry)
	p.log = append(p.log, sp)
	p.indexCommit(req.Commit.Changes, seq)
	p.rx.logPlanned(seq, req.Commit.Reactions)
	p.addOutcomeLocked(h, k, outRef{
		chunk:  sp.chunk,
		keyOff: sp.off + uint32(l.keyOff), keyLen: uint32(l.keyEnd - l.keyOff),
		outOff: sp.off + uint32(l.outcomeOff), outLen: sp.n - uint32(l.outcomeOff),
	})
	p.head.MaxCommitSeq = seq
	if adv != nil {
		applyAdvance(adv, req.Advance, req.Commit.CreatedAtMs)
	}
	return nil
}

// applyRef adds or removes one reference-index entry; both are
// idempotent.
func (p *partState) applyRef(w store.RefWrite) {
	k := refKey{w.ChildTable, w.Column, w.ParentID}
	set := p.refs[k]
	if w.Remove {
		delete(set, w.ChildID)
		if len(set) == 0 {
			delete(p.refs, k)
		}
		return
	}
	if set == nil {
		set = make(map[string]struct{})
		p.refs[k] = set
	}
	set[w.ChildID] = struct{}{}
}

// ListChildren implements store.Store.
func (s *Store) ListChildren(ctx context.Context, partition string, qs []store.ChildQuery, limit int) ([][]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([][]string, len(qs))
	p := s.lookup(partition)
	if p == nil || limit <= 0 {
		return out, nil
	}
	p.mu.RLock()
	for i, q := range qs {
		set := p.refs[refKey{q.ChildTable, q.Column, q.ParentID}]
		if len(set) == 0 {
			continue
		}
		ids := make([]string, 0, len(set))
		for id := range set {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		out[i] = ids[:min(len(ids), limit)]
	}
	p.mu.RUnlock()
	return out, nil
}

// GetRows implements store.Store.
func (s *Store) GetRows(ctx context.Context, partition, tableName string, rowIDs []string) (map[string]*store.Row, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make(map[string]*store.Row, len(rowIDs))
	p := s.lookup(partition)
	if p == nil {
		return out, nil
	}
	// The read lock covers only copying the rows' headers: a stored
	// row's slices are never written once stored (an update replaces the
	// whole row), so they are cloned after it is released, and a commit
	// waiting for the write lock does not wait for the allocations.
	rows := make([]store.Row, len(rowIDs))
	var foundBuf [8]bool
	found := foundBuf[:0]
	p.mu.RLock()
	if t := p.tables[tableName]; t != nil {
		for i, id := range rowIDs {
			e := t.byID[id]
			if e != nil {
				rows[i] = e.row
			}
			found = append(found, e != nil)
		}
	}
	p.mu.RUnlock()
	for i, ok := range found {
		if ok {
			r := &rows[i]
			*r = cloneRow(r)
			out[rowIDs[i]] = r
		}
	}
	return out, nil
}

// ScanRows implements store.Store. It copies up to scanBatchRows rows per
// locked step and resumes after the last id, so fn runs unlocked. The
// index holds no tombstones.
func (s *Store) ScanRows(ctx context.Context, partition, tableName string, after string, hasAfter bool, fn func(*store.Row) bool) error {
	p := s.lookup(partition)
	if p == nil {
		return ctx.Err()
	}
	if !hasAfter {
		after = "" // every id is >= ""
	}
	var batch []*store.Row
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		batch = batch[:0]
		p.mu.RLock()
		if t := p.tables[tableName]; t != nil {
			t.order.ascend(after, hasAfter, func(e *rowEntry) bool {
				r := cloneRow(&e.row)
				batch = append(batch, &r)
				return len(batch) < scanBatchRows
			})
		}
		p.mu.RUnlock()
		for _, r := range batch {
			if !fn(r) {
				return nil
			}
		}
		if len(batch) < scanBatchRows {
			return nil
		}
		after, hasAfter = batch[len(batch)-1].RowID, true
	}
}

// ScanScopedRows implements store.Store: it walks the (variable, value)
// indexes in value order, copying up to scanBatchRows rows per locked
// step like ScanRows (fewer while want says the caller stops sooner).
func (s *Store) ScanScopedRows(ctx context.Context, partition, tableName, variable string, values []string, after *store.ScopeCursor, want int, fn func(string, *store.Row) bool) error {
	p := s.lookup(partition)
	if p == nil {
		return ctx.Err()
	}
	vals := slices.Clone(values)
	slices.Sort(vals)
	vals = slices.Compact(vals)
	var batch []*store.Row
	for _, v := range vals {
		from, exclusive := "", false
		if after != nil {
			if v < after.Value {
				continue
			}
			if v == after.Value {
				from, exclusive = after.RowID, true
			}
		}
		for {
			if err := ctx.Err(); err != nil {
				return err
			}
			n := scanBatchRows
			if want > 0 {
				n = min(n, want)
			}
			batch = batch[:0]
			p.mu.RLock()
			if t := p.tables[tableName]; t != nil {
				if x := t.scoped[scopeKey{variable, v}]; x != nil {
					x.ascend(from, exclusive, func(e *rowEntry) bool {
						r := cloneRow(&e.row)
						batch = append(batch, &r)
						return len(batch) < n
					})
				}
			}
			p.mu.RUnlock()
			for _, r := range batch {
				if !fn(v, r) {
					return nil
				}
			}
			if want > 0 {
				want = max(want-len(batch), 0)
			}
			if len(batch) < n {
				break
			}
			from, exclusive = batch[len(batch)-1].RowID, true
		}
	}
	return nil
}

// ReadLogScoped implements store.Store through the log's scope index
// (logindex.go): it decodes only the commits of the window listed under
// (table, variable, value) for one of values, never the rest of the
// window. The horizon is read in the same locked step as the last batch
// of the index.
func (s *Store) ReadLogScoped(ctx context.Context, partition, table, variable string, values []string, afterSeq, throughSeq int64, fn func(*store.Commit) bool) (int64, error) {
	p := s.lookup(partition)
	if p == nil {
		return 0, ctx.Err()
	}
	if throughSeq < 0 {
		throughSeq = maxInt64
	}
	var batch []string
	for {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		p.mu.RLock()
		batch = p.scopedBatchLocked(batch[:0], table, variable, values, afterSeq, throughSeq)
		horizon := p.head.HorizonSeq
		p.mu.RUnlock()
		for _, e := range batch {
			if !fn(decodeCommit(e)) {
				return horizon, nil
			}
		}
		if len(batch) < scanBatchCommits {
			return horizon, nil
		}
		afterSeq = entrySeq(batch[len(batch)-1])
	}
}

// ReadLog implements store.Store.
func (s *Store) ReadLog(ctx context.Context, partition string, afterSeq, throughSeq int64, fn func(*store.Commit) bool) error {
	p := s.lookup(partition)
	return s.walkLog(ctx, partition, afterSeq, throughSeq, func(e string) bool {
		c := decodeCommit(e)
		if p != nil {
			c.Reactions = p.rx.planned(c.Seq)
		}
		return fn(c)
	})
}

// CommitTimes implements store.Store: it reads only the entries' fixed
// headers.
func (s *Store) CommitTimes(ctx context.Context, partition string, afterSeq int64, fn func(seq, createdAtMs int64) bool) error {
	return s.walkLog(ctx, partition, afterSeq, -1, func(e string) bool { return fn(entrySeq(e), entryTime(e)) })
}

// walkLog calls fn for the entries with afterSeq < Seq ≤ throughSeq (no
// upper bound when throughSeq < 0), in batches. An entry is never
// modified once appended (arena.go), so the read lock
// is held only to collect a batch of entries and fn decodes them after it
// is released: a pull reading many commits must not keep a committing
// writer — and, behind it, every other reader — waiting.
func (s *Store) walkLog(ctx context.Context, partition string, afterSeq, throughSeq int64, fn func(string) bool) error {
	p := s.lookup(partition)
	if p == nil {
		return ctx.Err()
	}
	if throughSeq < 0 {
		throughSeq = maxInt64
	}
	var batch []string
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		p.mu.RLock()
		from := max(afterSeq+1, p.logFirst) - p.logBase
		to := min(int64(len(p.log)), from+scanBatchCommits)
		if last := throughSeq - p.logBase; last < to-1 {
			to = last + 1
		}
		batch = batch[:0]
		if from < to {
			batch = slices.Grow(batch, int(to-from))
			for _, sp := range p.log[from:to] {
				batch = append(batch, p.logArena.str(sp))
			}
		}
		p.mu.RUnlock()
		for _, e := range batch {
			if !fn(e) {
				return nil
			}
		}
		if len(batch) < scanBatchCommits {
			return nil
		}
		afterSeq = entrySeq(batch[len(batch)-1])
	}
}

// GetClient implements store.Store.
func (s *Store) GetClient(ctx context.Context, partition, clientID string) (*store.Client, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p := s.lookup(partition)
	if p == nil {
		return nil, nil
	}
	p.clientsMu.Lock()
	defer p.clientsMu.Unlock()
	c := p.clients[clientID]
	if c == nil {
		return nil, nil
	}
	cc := *c
	return &cc, nil
}

// BindClient implements store.Store: create-if-absent under the
// client records' lock.
func (s *Store) BindClient(ctx context.Context, partition string, c *store.Client) (*store.Client, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p := s.lookup(partition)
	if p == nil {
		return nil, ErrUnknownPartition
	}
	p.clientsMu.Lock()
	defer p.clientsMu.Unlock()
	if cur := p.clients[c.ClientID]; cur != nil {
		cc := *cur
		return &cc, nil
	}
	stored, out := *c, *c
	p.clients[c.ClientID] = &stored
	return &out, nil
}

// PutClient implements store.Store.
func (s *Store) PutClient(ctx context.Context, partition string, c *store.Client) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p := s.lookup(partition)
	if p == nil {
		return ErrUnknownPartition
	}
	cc := *c
	p.clientsMu.Lock()
	p.clients[c.ClientID] = &cc
	p.clientsMu.Unlock()
	return nil
}

// AckCursor implements store.Store: the epoch is read under the
// partition lock, held while the record changes, so a rotation cannot
// slip in between.
func (s *Store) AckCursor(ctx context.Context, partition, clientID, actorID, logEpoch string, cursor, nowMs int64) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	p := s.lookup(partition)
	if p == nil {
		return false, nil
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	p.clientsMu.Lock()
	defer p.clientsMu.Unlock()
	c := p.clients[clientID]
	if c == nil || c.ActorID != actorID || p.head.LogEpoch != logEpoch {
		return false, nil
	}
	c.Cursor = max(c.Cursor, cursor)
	c.UpdatedAtMs = max(c.UpdatedAtMs, nowMs)
	return true, nil
}

// ListClients implements store.Store. It snapshots the records first so
// fn runs unlocked.
func (s *Store) ListClients(ctx context.Context, partition string, fn func(*store.Client) bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p := s.lookup(partition)
	if p == nil {
		return nil
	}
	p.clientsMu.Lock()
	list := make([]store.Client, 0, len(p.clients))
	for _, c := range p.clients {
		list = append(list, *c)
	}
	p.clientsMu.Unlock()
	for i := range list {
		if !fn(&list[i]) {
			return nil
		}
	}
	return nil
}

// Prune implements store.Store. The horizon is clamped to MaxCommitSeq: a
// horizon above the head would declare future commits already gone.
// Tombstones at or below the new horizon go in the same locked step
// (§4.6 of the wire-3 spec).
func (s *Store) Prune(ctx context.Context, partition string, horizonSeq int64) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	p := s.lookup(partition)
	if p == nil {
		return 0, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	h := min(horizonSeq, p.head.MaxCommitSeq)
	if h <= p.head.HorizonSeq {
		return 0, nil
	}
	p.head.HorizonSeq = h
	n := min(max(h-p.logFirst+1, 0), p.logBase+int64(len(p.log))-p.logFirst)
	p.logFirst += n
	p.releaseLogLocked()
	p.pruneIndexLocked(h)
	p.rx.dropPlanned(h)
	k := 0
	for k < len(p.tombs) && p.tombs[k].seq <= h {
		ref := p.tombs[k]
		if t := p.tables[ref.table]; t != nil {
			if e := t.byID[ref.rowID]; e != nil && e.row.Deleted && e.row.CommitSeq <= h {
				delete(t.byID, ref.rowID)
			}
		}
		k++
	}
	p.tombs = append([]tombRef(nil), p.tombs[k:]...)
	return int(n), nil
}

// releaseLogLocked drops the log chunks that hold only pruned commits:
// every chunk before the first unpruned commit's, all of them when none
// is left. A dropped commit's outcome stays (store.Store.Prune): it is
// copied to the outcome arena first. Called under the write lock.
func (p *partState) releaseLogLocked() {
	keep := p.logArena.end()
	if i := p.logFirst - p.logBase; i < int64(len(p.log)) {
		keep = p.log[i].chunk
	}
	j := 0
	for j < len(p.log) && p.log[j].chunk < keep {
		p.keepOutcomeLocked(p.logArena.str(p.log[j]))
		j++
	}
	if j > 0 {
		// Copy the survivors so the dropped positions' memory goes too.
		p.log = append([]span(nil), p.log[j:]...)
		p.logBase += int64(j)
	}
	p.logArena.dropBefore(keep)
}

// scratch holds the buffers commits and rejections are encoded into
// before the lock copies them into an arena.
var scratch = sync.Pool{New: func() any { return new([]byte) }}

// maxScratch bounds the buffers kept for reuse: one huge commit must not
// pin its size forever.
const maxScratch = 64 << 10

func getScratch() *[]byte { return scratch.Get().(*[]byte) }

func putScratch(b *[]byte) {
	if cap(*b) <= maxScratch {
		scratch.Put(b)
	}
}
