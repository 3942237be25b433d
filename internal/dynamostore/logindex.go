package dynamostore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// The log's scope index (SPEC §3.1 inverted index; issue 11 item 2).
// Once a partition has it on, every commit writes, in its log
// transaction, one key-only item per (table, scope variable, value) its
// changes touch:
//
//	pk P#<p>#I#<table>#<variable>#<value key>   sk <seq:020d>
//
// (<value key> as for scope copies, scopeindex.go). A commit touching
// more than logIndexMaxKeys of them writes one item per table under the
// variable "*" instead, which every scoped read of that table includes.
// An incremental pull then Queries the entries of its values in its
// window and reads only those commits' log items (ReadLogScoped), not
// every commit of the window.
//
// The head's hLogIndexFrom is the first commit written with index
// entries (set by the first such commit); a window starting below it is
// read from the log directly up to that commit. Prune deletes a pruned
// commit's entries with its log items; a reader that finds an entry whose
// log item is gone, or a horizon past its window, lets the engine decide
// (§4.6) — the horizon is read after the entries, and it advances before
// any delete.
//
// # Adaptive (issue 23)
//
// The entries pay off only where pulls skip most commits: in a partition
// whose commits all touch the values its clients pull (one project, one
// user) the log read is already what the client sees, and each entry is
// 2 WCU of every 1-op commit (a sixth of it) that no read ever uses. So a
// partition starts without the index (a partition created before this
// has hLogIndexFrom once it has a commit, and keeps its index), and turns
// it on when a pull shows it is wide: ReadLogScoped, reading a window
// from the log itself, counts the commits it read and those touching the
// requested values, and when at least logIndexWideMin were read and
// fewer than 1 in logIndexWideRatio matched it sets hLogIndexOn on the
// head (one conditional UpdateItem, once per partition). From then on
// every commit writes entries and the first sets hLogIndexFrom; commits
// before it are read from the log, as they were for partitions older than
// the index.
//
// Why no commit without entries lands at or above hLogIndexFrom: a
// commit without entries is conditioned on the head having neither
// hLogIndexOn nor hLogIndexFrom (indexOffCondition), in the same head
// update that moves maxCommitSeq; hLogIndexFrom = k is set by the update
// that moves maxCommitSeq to k, so any later commit's head condition
// (maxCommitSeq = its expected seq ≥ k) sees it. The index never turns
// off. Which way a commit goes is this instance's memory of the head
// (noteIndex, from the head reads every push makes first); a memory that
// is behind costs one failed transaction and a retry with entries
// (layoutError), never a commit without its entries. Scope copies are
// adaptive the same way (scopeindex.go).

const (
	// scopedFirstBatch is how many keys (the head and the first listed
	// commits) ReadLogScoped reads in its first BatchGetItem.
	scopedFirstBatch = 16
	hLogIndexFrom    = "li" // N first commitSeq with log-index entries
	logIndexMaxKeys  = 16
	logIndexAny      = "*"
)

const (
	hLogIndexOn       = "io" // BOOL the log index is on (set by a wide pull)
	logIndexWideMin   = 64
	logIndexWideRatio = 8
	// indexOffCondition is the head condition of a commit written
	// without log-index entries.
	indexOffCondition = "attribute_not_exists(" + hLogIndexFrom + ") AND attribute_not_exists(" + hLogIndexOn + ")"
	// indexMemoryMax bounds indexState: past it the memory is dropped
	// and refilled from the next head reads.
	indexMemoryMax = 4096
)

// indexOn reports whether the head has the log index on.
func (h head) indexOn() bool { return h.indexFrom > 0 || h.indexRequested }

// indexState is what this Store last saw of each partition's log index
// and scope copies (layout; true: on). It only ever learns "on" late,
// never wrongly: neither turns off.
type indexState struct {
	mu sync.Mutex
	on map[string]noted
	// pending: the seq of the small commit pending on the head last read
	// (fast.go), for partitions where it was; a hint only.
	pending map[string]int64
}

// noted is what noteIndex keeps of a head.
type noted struct {
	layout
	backfill bool // hScopeOn without hScoped (ScopeBackfillDue)
}

// noteIndex records the log-index and scope-copy state of a head just
// read, and whether it showed a small commit pending.
func (s *Store) noteIndex(p string, h head) {
	s.index.mu.Lock()
	defer s.index.mu.Unlock()
	if s.index.on == nil || len(s.index.on) >= indexMemoryMax {
		s.index.on = make(map[string]noted)
	}
	s.index.on[p] = noted{layout: h.layout(), backfill: h.copiesRequested && !h.scoped}
	if h.pendingSmall() {
		if s.index.pending == nil || len(s.index.pending) >= indexMemoryMax {
			s.index.pending = make(map[string]int64)
		}
		s.index.pending[p] = h.pendSeq
	} else {
		delete(s.index.pending, p)
	}
}

// pendingHint is the seq of the small commit this Store last saw pending
// on p's head (0: none).
func (s *Store) pendingHint(p string) int64 {
	s.index.mu.Lock()
	defer s.index.mu.Unlock()
	return s.index.pending[p]
}

// indexOn is this Store's memory of p's log index: false when it has
// none (the commit's condition then checks it).
func (s *Store) indexOn(p string) bool { return s.layout(p).index }

// layout is this Store's memory of what p's commits write. Without one
// (no head of p read yet) a commit writes its scope copies, which needs
// no condition and is only a write more where they are off, and no
// log-index entries, which the commit's condition then checks: a
// transaction refused for a layout costs it whole.
func (s *Store) layout(p string) layout {
	s.index.mu.Lock()
	defer s.index.mu.Unlock()
	n, ok := s.index.on[p]
	if !ok {
		return layout{copies: true}
	}
	return n.layout
}

// ScopeBackfillDue reports whether p's head, as this Store last read it,
// asks for scope copies that are not all written yet (hScopeOn without
// hScoped): the scheduled prune run then calls BackfillScopeIndex. It
// reads nothing (Prune reads the head first).
func (s *Store) ScopeBackfillDue(p string) bool {
	s.index.mu.Lock()
	defer s.index.mu.Unlock()
	return s.index.on[p].backfill
}

// wideWindow reports whether a window read from the log (read commits,
// matched of them touching the requested values) shows a wide partition.
func wideWindow(read, matched int) bool {
	return read >= logIndexWideMin && matched*logIndexWideRatio < read
}

// touches reports whether c changes a row of table under one of values
// of variable.
func touches(c *store.Commit, table, variable string, values []string) bool {
	for i := range c.Changes {
		ch := &c.Changes[i]
		if ch.Table != table {
			continue
		}
		for _, sc := range ch.Scopes {
			if sc.Key == variable && slices.Contains(values, sc.Value) {
				return true
			}
		}
	}
	return false
}

// turnIndexOn sets hLogIndexOn on p's head (once). The commits after it
// write their entries.
func (s *Store) turnIndexOn(ctx context.Context, p string) error {
	return s.setHeadFlag(ctx, "turn log index on", p, hLogIndexOn)
}

// setHeadFlag sets the boolean attribute attr on p's head, conditioned
// on its absence (a flag set once, never cleared).
func (s *Store) setHeadFlag(ctx context.Context, op, p, attr string) error {
	_, err := s.updateItem(ctx, op, &dynamodb.UpdateItemInput{
		Key:                       Key(headPK(p), headSK),
		UpdateExpression:          aws.String("SET " + attr + " = :t"),
		ConditionExpression:       aws.String("attribute_exists(pk) AND attribute_not_exists(" + attr + ")"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": BOOL(true)},
	})
	if isConditionFailed(err) {
		return nil // set already
	}
	return err
}

func logIndexPK(p, table, variable, value string) string {
	base := PartitionPK(p) + "#I#" + esc(table) + "#" + esc(variable) + "#"
	if variable == logIndexAny {
		return base
	}
	if k := base + "=" + esc(value); len(k) <= maxPKBytes {
		return k
	}
	sum := sha256.Sum256([]byte(value))
	return base + "H" + hex.EncodeToString(sum[:])
}

// logIndexKeys returns the index pks of a commit's changes, deduplicated,
// in first-seen order.
func logIndexKeys(p string, changes []store.Change) []string {
	var keys []string
	seen := map[string]bool{}
	tables := map[string]bool{}
	var tableOrder []string
	for i := range changes {
		c := &changes[i]
		if !tables[c.Table] && len(c.Scopes) > 0 {
			tables[c.Table] = true
			tableOrder = append(tableOrder, c.Table)
		}
		for _, sc := range c.Scopes {
			k := logIndexPK(p, c.Table, sc.Key, sc.Value)
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	if len(keys) <= logIndexMaxKeys {
		return keys
	}
	keys = keys[:0]
	for _, t := range tableOrder {
		keys = append(keys, logIndexPK(p, t, logIndexAny, ""))
	}
	return keys
}

func logIndexActions(tbl *string, p string, seq int64, changes []store.Change) []txItem {
	keys := logIndexKeys(p, changes)
	out := make([]txItem, len(keys))
	for i, k := range keys {
		item := Key(k, seqSK(seq))
		out[i] = txItem{size: ItemSize(item), w: types.TransactWriteItem{Put: &types.Put{TableName: tbl, Item: item}}}
	}
	return out
}

// ReadLogScoped implements store.Store: the index entries of each value
// (and the table's "*" entries) in the window, 8 Queries in flight; then
// the listed commits' first log items in BatchGetItems, the head riding
// in the first, and any further chunks by Query.
func (s *Store) ReadLogScoped(ctx context.Context, partition, table, variable string, values []string, afterSeq, throughSeq int64, fn func(*store.Commit) bool) (int64, error) {
	if err := checkPartition(partition); err != nil {
		return 0, err
	}
	afterSeq = max(afterSeq, 0)
	if throughSeq <= afterSeq {
		h, _, err := s.readHead(ctx, partition)
		return h.HorizonSeq, err
	}
	pks := []string{logIndexPK(partition, table, logIndexAny, "")}
	for _, v := range values {
		if validKeyPart(v) {
			pks = append(pks, logIndexPK(partition, table, variable, v))
		}
	}
	slices.Sort(pks)
	pks = slices.Compact(pks)
	seqs, err := s.indexedSeqs(ctx, pks, afterSeq, throughSeq)
	if err != nil {
		return 0, err
	}
	bt := newIndexedBatches(s, partition, seqs)
	if err := bt.fetch(ctx); err != nil {
		return 0, err
	}
	h := bt.head
	if h == nil {
		return 0, nil // unknown partition: no log
	}
	// A window reaching below the first indexed commit reads that part
	// from the log itself.
	from := afterSeq
	if idx, ok := h.logIndexFrom(); !ok || idx > afterSeq+1 {
		upto := throughSeq
		if ok {
			upto = min(throughSeq, idx-1)
		}
		// Only the commits of the values go to fn, as from the index.
		read, matched := 0, 0
		stop, err := s.readLogUntil(ctx, partition, afterSeq, upto, func(c *store.Commit) bool {
			read++
			if !touches(c, table, variable, values) {
				return true
			}
			matched++
			return fn(c)
		})
		if err == nil && !h.indexOn() && wideWindow(read, matched) {
			// Most of the window was other values' commits: index the
			// commits from here on (adaptive, above).
			err = s.turnIndexOn(ctx, partition)
		}
		if err != nil || stop {
			return h.HorizonSeq, err
		}
		from = upto
	}
	pruned := false
	for i, seq := range seqs {
		if seq <= from {
			continue
		}
		if i+1 >= bt.fetched { // keys[i+1] is seq's item
			if err := bt.fetch(ctx); err != nil {
				return 0, err
			}
		}
		it := bt.firsts[seq]
		var c *store.Commit
		if it != nil {
			var err error
			if c, err = s.decodeIndexed(ctx, partition, seq, it); err != nil {
				return 0, err
			}
		}
		if c == nil {
			pruned = true // pruned meanwhile: the horizon tells the caller
			continue
		}
		if !fn(c) {
			break
		}
	}
	if pruned {
		// The head read with the first batch may predate the prune that
		// removed a listed commit: report the horizon as it is now.
		hh, _, err := s.readHead(ctx, partition)
		if err != nil {
			return 0, err
		}
		return max(h.HorizonSeq, hh.HorizonSeq), nil
	}
	return h.HorizonSeq, nil
}

// indexedBatches reads the head and the listed commits' first log items,
// a BatchGetItem at a time as the caller consumes them: a caller that
// stops at an early commit (a page budget, a probe for any change) does
// not pay for the rest. The first batch is small (every item read costs
// at least one unit); the later ones are full. keys[0] is the head,
// keys[i+1] the first item of the i-th listed seq.
type indexedBatches struct {
	s       *Store
	keys    []map[string]types.AttributeValue
	fetched int
	head    *head
	firsts  map[int64]map[string]types.AttributeValue
}

func newIndexedBatches(s *Store, partition string, seqs []int64) *indexedBatches {
	keys := []map[string]types.AttributeValue{Key(headPK(partition), headSK)}
	for _, seq := range seqs {
		keys = append(keys, Key(logPK(partition), seqSK(seq)))
	}
	return &indexedBatches{s: s, keys: keys, firsts: map[int64]map[string]types.AttributeValue{}}
}

// fetch reads the next batch of keys. The first carries the head and is
// consistent; the later ones hold only log items and are read
// eventually consistently (half the units), any key missing from that
// answer read again consistently: an index entry is written in its
// commit's transaction with the log item, which never changes once
// written, so a stale answer can only lack an item, and a lacking one
// is either not replicated yet (the consistent read finds it) or pruned
// (it does not).
func (b *indexedBatches) fetch(ctx context.Context) error {
	n := batchGetMax
	if b.fetched == 0 {
		n = scopedFirstBatch
	}
	end := min(len(b.keys), b.fetched+n)
	keys := b.keys[b.fetched:end]
	items, err := b.s.batchGetAt(ctx, "read indexed commits", keys, b.fetched == 0)
	if err != nil {
		return err
	}
	if b.fetched > 0 && len(items) < len(keys) {
		got := make(map[string]bool, len(items))
		for _, it := range items {
			sk, _ := getS(it, AttrSK)
			got[sk] = true
		}
		var missing []map[string]types.AttributeValue
		for _, k := range keys {
			if sk, _ := getS(k, AttrSK); !got[sk] {
				missing = append(missing, k)
			}
		}
		again, err := b.s.batchGet(ctx, "read indexed commits", missing)
		if err != nil {
			return err
		}
		items = append(items, again...)
	}
	b.fetched = end
	for _, it := range items {
		sk, _ := getS(it, AttrSK)
		if sk == headSK {
			hh, err := parseHead(it)
			if err != nil {
				return err
			}
			b.head = &hh
			continue
		}
		if seq, chunk, ok := parseLogSK(sk); ok && chunk == 0 {
			b.firsts[seq] = it
		}
	}
	return nil
}

// readLogUntil hands the log's commits in (afterSeq, upto] to fn in
// order; stop reports that fn asked to stop.
func (s *Store) readLogUntil(ctx context.Context, partition string, afterSeq, upto int64, fn func(*store.Commit) bool) (stop bool, err error) {
	var derr error
	err = s.readLogCheap(ctx, partition, afterSeq, upto, func(c *store.Commit, _ *logBody, err error) bool {
		if err != nil {
			derr = err
			return false
		}
		if !fn(c) {
			stop = true
			return false
		}
		return true
	})
	if err == nil {
		err = derr
	}
	return stop, err
}

// logIndexFrom returns the first indexed seq recorded on the head.
func (h head) logIndexFrom() (int64, bool) { return h.indexFrom, h.indexFrom > 0 }

// indexedSeqs queries the entries of pks in (after, through], merged and
// sorted.
func (s *Store) indexedSeqs(ctx context.Context, pks []string, after, through int64) ([]int64, error) {
	var (
		mu    sync.Mutex
		seqs  []int64
		first error
		wg    sync.WaitGroup
	)
	sem := make(chan struct{}, 8)
	for _, pk := range pks {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var local []int64
			err := s.query(ctx, "read log index", &dynamodb.QueryInput{
				KeyConditionExpression: aws.String("pk = :pk AND sk BETWEEN :lo AND :hi"),
				ExpressionAttributeValues: map[string]types.AttributeValue{
					":pk": S(pk), ":lo": S(seqSK(after + 1)), ":hi": S(seqSK(through)),
				},
			}, func(items []map[string]types.AttributeValue) bool {
				for _, it := range items {
					sk, _ := getS(it, AttrSK)
					if seq, chunk, ok := parseLogSK(sk); ok && chunk == 0 {
						local = append(local, seq)
					}
				}
				return true
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
			}
			seqs = append(seqs, local...)
		})
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	slices.Sort(seqs)
	return slices.Compact(seqs), nil
}

// decodeIndexed decodes commit seq from its first log item, reading its
// further chunks when it has any; nil when a chunk is gone (pruned).
func (s *Store) decodeIndexed(ctx context.Context, p string, seq int64, first map[string]types.AttributeValue) (*store.Commit, error) {
	n, _ := getN(first, lChunks)
	if n <= 1 {
		var c *store.Commit
		var derr error
		// One item: decode it the way readLog does.
		created, ok1 := getN(first, lCreated)
		actor, ok2 := getS(first, lActor)
		client, ok3 := getS(first, lClient)
		cc, ok4 := getS(first, lCommit)
		data, _ := getB(first, lData)
		if !ok1 || !ok2 || !ok3 || !ok4 || n < 1 {
			return nil, fmt.Errorf("dynamostore: log item %d is malformed: %w", seq, errCorrupt)
		}
		lb, err := s.decodeLog(data, seq)
		if err != nil {
			derr = fmt.Errorf("dynamostore: log item %d: %w", seq, err)
		} else {
			c = &store.Commit{Seq: seq, CreatedAtMs: created, ActorID: actor, ClientID: client, ClientCommitID: cc, Changes: lb.changes, Reactions: lb.reactions}
		}
		return c, derr
	}
	var c *store.Commit
	var derr error
	err := s.readLog(ctx, p, seq-1, seq, func(cc *store.Commit, _ *logBody, err error) bool {
		c, derr = cc, err
		return false
	})
	if err == nil {
		err = derr
	}
	return c, err
}
