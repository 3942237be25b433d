package dynamostore

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// batchGetMax is BatchGetItem's key limit.
const batchGetMax = 100

// GetRows implements store.Store. The head rides along in the first
// BatchGetItem, so a push's row read costs no extra round trip: when it
// shows an unmaterialized commit, that commit is rolled forward and the
// rows are read again. Rows read in the same batch as a finished head
// can only be newer than it, and any evaluation built on them commits
// only if the head has not moved since (Commit's condition).
func (s *Store) GetRows(ctx context.Context, partition, table string, rowIDs []string) (map[string]*store.Row, error) {
	if len(rowIDs) == 0 {
		return map[string]*store.Row{}, nil
	}
	rows, _, err := s.getRows(ctx, partition, table, rowIDs)
	return rows, err
}

// GetRowsHead implements store.CommitQueue: GetRows, returning the head
// its BatchGetItem read (read even for no rows).
func (s *Store) GetRowsHead(ctx context.Context, partition, table string, rowIDs []string) (map[string]*store.Row, store.Head, bool, error) {
	rows, h, err := s.getRows(ctx, partition, table, rowIDs)
	if err != nil || h == nil {
		return rows, store.Head{}, false, err
	}
	return rows, h.Head, true, nil
}

func (s *Store) getRows(ctx context.Context, partition, table string, rowIDs []string) (map[string]*store.Row, *head, error) {
	out := make(map[string]*store.Row, len(rowIDs))
	if err := checkPartition(partition); err != nil {
		return nil, nil, err
	}
	if err := checkName("table", table); err != nil {
		return nil, nil, err
	}
	keys := rowKeysOf(partition, table, rowIDs)
	headKey := Key(headPK(partition), headSK)
	read := func(withHead bool) (*head, error) {
		var h *head
		for start := 0; start < len(keys) || withHead; {
			batch := keys[start:min(len(keys), start+batchGetMax)]
			if withHead {
				batch = append([]map[string]types.AttributeValue{headKey}, keys[start:min(len(keys), start+batchGetMax-1)]...)
			}
			items, err := s.batchGet(ctx, "read rows", batch)
			if err != nil {
				return nil, err
			}
			for _, it := range items {
				if sk, _ := getS(it, AttrSK); sk == headSK {
					if pkv, _ := getS(it, AttrPK); pkv == headKey[AttrPK].(*types.AttributeValueMemberS).Value {
						hh, err := parseHead(it)
						if err != nil {
							return nil, err
						}
						s.noteHeadItem(partition, it)
						h = &hh
						continue
					}
				}
				r, err := parseRow(it)
				if err != nil {
					return nil, err
				}
				out[r.RowID] = r
			}
			start += len(batch)
			if withHead {
				start--
				withHead = false
			}
		}
		return h, nil
	}
	// The latest look at the head that completed before the rows are read
	// (taken before read remembers the one it makes).
	prior := s.lastHead(partition)
	h, err := read(true)
	if err != nil {
		return nil, nil, err
	}
	if h != nil {
		s.lazyGate(h)
		s.noteIndex(partition, *h)
	}
	if h != nil && h.pendingSmall() {
		// A small commit not settled yet (fast.go): its writes, from the
		// head, are the rows' state after it; nothing more is read.
		if err := overlayPending(partition, h, table, wanted(rowIDs), out); err != nil {
			return nil, nil, err
		}
		h.applied = h.MaxCommitSeq
	} else if err := overlaySettled(partition, prior, h, table, rowIDs, out); err != nil {
		return nil, nil, err
	}
	if h != nil && h.applied < h.MaxCommitSeq {
		if err := s.rollForward(ctx, partition, *h); err != nil {
			return nil, nil, err
		}
		h.applied = h.MaxCommitSeq
		clear(out)
		if _, err := read(false); err != nil {
			return nil, nil, err
		}
	}
	return out, h, nil
}

// keyableRow reports whether a row of table could be stored under rowID
// at all; GetRows and the read checks skip ids no item can have (such a
// row is absent for good).
func keyableRow(p, table, rowID string) bool {
	return validKeyPart(rowID) && len(rowSK(rowID)) <= maxSKBytes && len(rowPK(p, table)) <= maxPKBytes
}

// rowKeysOf are the item keys of rowIDs of table, duplicates and ids no
// row can have left out.
func rowKeysOf(p, table string, rowIDs []string) []map[string]types.AttributeValue {
	pk := rowPK(p, table)
	seen := make(map[string]bool, len(rowIDs))
	var keys []map[string]types.AttributeValue
	for _, id := range rowIDs {
		if seen[id] || !keyableRow(p, table, id) {
			continue
		}
		seen[id] = true
		keys = append(keys, Key(pk, rowSK(id)))
	}
	return keys
}

// wanted is the set of ids.
// overlaySettled covers the one row state a batch read can miss when its
// head shows the last commit materialized: the head and the rows of one
// BatchGetItem are read in no particular order, so with a small commit
// E pending on an earlier look at the head (prior) and settled by
// another instance while the batch ran, the head can show E applied
// while a row read went before E's puts. E's writes (prior's pl) are
// then put over the rows, as when the batch's own head shows E pending.
// Only when the batch's head is still at E (mx = E): a later commit
// fails the caller's commit condition anyway. Commits before E were
// materialized before E's commit point, before prior's look, before
// these reads (fast.go (O)); a prior that shows E applied means E's
// puts returned before it. Without a remembered head (older than
// headMemoAge) the rows are as read: every push reads the head first
// (TouchPartition), so a push's evaluation always has one.
func overlaySettled(p string, prior map[string]types.AttributeValue, h *head, table string, rowIDs []string, rows map[string]*store.Row) error {
	if prior == nil || h == nil || h.applied != h.MaxCommitSeq {
		return nil
	}
	ph, err := parseHead(prior)
	if err != nil {
		return fmt.Errorf("dynamostore: remembered head: %w", err)
	}
	if !ph.pendingSmall() || ph.pendSeq != h.MaxCommitSeq {
		return nil
	}
	return overlayPending(p, &ph, table, wanted(rowIDs), rows)
}

func wanted(ids []string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// ensureApplied reads the head and settles an unmaterialized commit, so
// a following row read reflects every commit up to the head (a pending
// small commit costs one read of its log item, fast.go).
func (s *Store) ensureApplied(ctx context.Context, p string) error {
	h, ok, err := s.readHead(ctx, p)
	if err != nil || !ok {
		return err
	}
	return s.settle(ctx, p, h)
}

// ScanRows implements store.Store: one consistent Query on the table's
// row partition, sorted by rowId bytes (the sk is "R"+rowId). Tombstones
// are read (and charged, about 40 bytes of a 4 KB read unit each) and
// skipped; they stay until pruning passes their commit.
func (s *Store) ScanRows(ctx context.Context, partition, table string, after string, hasAfter bool, fn func(*store.Row) bool) error {
	if err := checkPartition(partition); err != nil {
		return err
	}
	if err := checkName("table", table); err != nil {
		return err
	}
	if err := s.ensureApplied(ctx, partition); err != nil {
		return err
	}
	in := &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": S(rowPK(partition, table))},
		Limit:                     aws.Int32(s.scanPage),
	}
	if hasAfter {
		if !validKeyPart(after) {
			return fmt.Errorf("dynamostore: scan cursor is not valid UTF-8")
		}
		// A key condition value is limited to the 1024-byte sk size: a
		// longer cursor is cut at a rune boundary (a lower bound, so no
		// row is skipped) and the exact bound is applied below.
		lo := rowSK(after)
		if len(lo) > maxSKBytes {
			cut := maxSKBytes
			for cut > 0 && !utf8.RuneStart(lo[cut]) {
				cut--
			}
			lo = lo[:cut]
		}
		in.KeyConditionExpression = aws.String("pk = :pk AND sk > :after")
		in.ExpressionAttributeValues[":after"] = S(lo)
	}
	var perr error
	err := s.query(ctx, "scan rows", in, func(items []map[string]types.AttributeValue) bool {
		for _, it := range items {
			r, err := parseRow(it)
			if err != nil {
				perr = err
				return false
			}
			if r.Deleted || hasAfter && r.RowID <= after {
				continue
			}
			if !fn(r) {
				return false
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	return perr
}

// ReadLog implements store.Store.
func (s *Store) ReadLog(ctx context.Context, partition string, afterSeq, throughSeq int64, fn func(*store.Commit) bool) error {
	if err := checkPartition(partition); err != nil {
		return err
	}
	var derr error
	err := s.readLogCheap(ctx, partition, afterSeq, throughSeq, func(c *store.Commit, _ *logBody, err error) bool {
		if err != nil {
			derr = err
			return false
		}
		return fn(c)
	})
	if err != nil {
		return err
	}
	return derr
}

// readLogCheap is readLog at half the read units: the window is read
// eventually consistently first. That is exact where it answers: a log
// item never changes once written (put-if-absent, every chunk in the
// commit's transaction), so an eventually consistent read can only miss
// items, never return other content. And a miss shows: commit seqs are
// gapless above the horizon, so the first seq that does not follow the
// last one handed on (a commit not yet replicated, a chunk missing, the
// window's tail, or commits pruned away) ends the cheap read, and the
// rest of the window, from that seq, is read consistently as before.
// A window reaching below the horizon therefore costs its consistent
// read on top (the engine reads above its horizon), and the caller sees
// every commit a consistent read would show, once, in order. When even
// the consistent read ends before the window, the head is read: a small
// commit not yet materialized (fast.go) is finished and read.
func (s *Store) readLogCheap(ctx context.Context, p string, afterSeq, throughSeq int64, fn func(*store.Commit, *logBody, error) bool) error {
	afterSeq = max(afterSeq, 0)
	next := afterSeq + 1 // the first seq not handed on
	stopped := false
	err := s.readLogAt(ctx, p, afterSeq, throughSeq, false, func(c *store.Commit, lb *logBody, err error) bool {
		if err != nil {
			stopped = true
			return fn(nil, nil, err)
		}
		if c.Seq != next {
			return false // a gap: from here on consistently
		}
		next = c.Seq + 1
		if !fn(c, lb, nil) {
			stopped = true
			return false
		}
		return true
	})
	if err != nil || stopped || next > throughSeq {
		return err
	}
	track := func(c *store.Commit, lb *logBody, err error) bool {
		if err != nil {
			stopped = true
			return fn(nil, nil, err)
		}
		next = c.Seq + 1
		if !fn(c, lb, nil) {
			stopped = true
			return false
		}
		return true
	}
	if err := s.readLogAt(ctx, p, next-1, throughSeq, true, track); err != nil || stopped || next > throughSeq {
		return err
	}
	// The log ends before the window: the window's last commit may be a
	// small commit still on the head (fast.go), whose log item is
	// written after its rows. It is durable on the head as it will be in
	// its log item: hand it on from there, writing nothing. Anything
	// else missing is finished first, then read.
	h, ok, err := s.readHead(ctx, p)
	if err != nil || !ok || h.applied >= h.MaxCommitSeq || h.MaxCommitSeq < next {
		return err
	}
	if h.pendingSmall() && next == h.pendSeq {
		c, lb, err := pendingCommit(p, &h)
		fn(c, lb, err)
		return nil
	}
	if err := s.rollForward(ctx, p, h); err != nil {
		return err
	}
	return s.readLogAt(ctx, p, next-1, throughSeq, true, fn)
}

// readLog queries log items for afterSeq < seq ≤ throughSeq in sk order,
// reassembles chunked commits and decodes them. A commit with missing
// chunks can only be one Prune is deleting (the horizon advances before
// deletes start), so it is skipped like the already deleted ones.
func (s *Store) readLog(ctx context.Context, p string, afterSeq, throughSeq int64, fn func(*store.Commit, *logBody, error) bool) error {
	return s.readLogAt(ctx, p, afterSeq, throughSeq, true, fn)
}

// readLogAt is readLog, eventually consistent unless consistent.
func (s *Store) readLogAt(ctx context.Context, p string, afterSeq, throughSeq int64, consistent bool, fn func(*store.Commit, *logBody, error) bool) error {
	afterSeq = max(afterSeq, 0)
	if throughSeq <= afterSeq {
		return nil
	}
	var (
		cur    *store.Commit
		want   int
		parts  [][]byte
		stop   bool
		hasCur bool
	)
	flush := func() {
		if !hasCur || len(parts) != want {
			hasCur = false
			return
		}
		hasCur = false
		body := make([]byte, 0, func() int {
			n := 0
			for _, b := range parts {
				n += len(b)
			}
			return n
		}())
		for _, b := range parts {
			body = append(body, b...)
		}
		lb, err := s.decodeLog(body, cur.Seq)
		if err != nil {
			fn(nil, nil, fmt.Errorf("dynamostore: log item %d: %w", cur.Seq, err))
			stop = true
			return
		}
		cur.Changes, cur.Reactions = lb.changes, lb.reactions
		if !fn(cur, lb, nil) {
			stop = true
		}
	}
	err := s.query(ctx, "read commit log", &dynamodb.QueryInput{
		KeyConditionExpression: aws.String("pk = :pk AND sk BETWEEN :lo AND :hi"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": S(logPK(p)), ":lo": S(seqSK(afterSeq + 1)), ":hi": S(seqRangeHi(throughSeq)),
		},
		Limit:          aws.Int32(s.logPage),
		ConsistentRead: aws.Bool(consistent),
	}, func(items []map[string]types.AttributeValue) bool {
		for _, it := range items {
			sk, _ := getS(it, AttrSK)
			seq, chunk, ok := parseLogSK(sk)
			if !ok {
				continue
			}
			data, _ := getB(it, lData)
			if chunk == 0 {
				if hasCur {
					flush()
					if stop {
						return false
					}
				}
				created, ok1 := getN(it, lCreated)
				actor, ok2 := getS(it, lActor)
				client, ok3 := getS(it, lClient)
				cc, ok4 := getS(it, lCommit)
				n, ok5 := getN(it, lChunks)
				if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || n < 1 {
					fn(nil, nil, fmt.Errorf("dynamostore: log item %d is malformed: %w", seq, errCorrupt))
					stop = true
					return false
				}
				cur = &store.Commit{Seq: seq, CreatedAtMs: created, ActorID: actor, ClientID: client, ClientCommitID: cc}
				cur.WriterVersion, _ = getN(it, lWriter)
				want, parts, hasCur = int(n), [][]byte{data}, true
				continue
			}
			if !hasCur || cur.Seq != seq || chunk != len(parts) {
				hasCur = false // orphan chunk of a commit being pruned
				continue
			}
			parts = append(parts, data)
		}
		if hasCur && len(parts) == want && cur.Seq >= throughSeq {
			// The last commit of the window is complete: no need for the
			// extra request a full page's LastEvaluatedKey would cost.
			flush()
			stop = true
			return false
		}
		return true
	})
	if err != nil || stop {
		return err
	}
	flush()
	return nil
}

// parseLogSK splits "<seq:020d>[#<chunk>]".
func parseLogSK(sk string) (seq int64, chunk int, ok bool) {
	s, c, has := strings.Cut(sk, "#")
	seq, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	if has {
		n, err := strconv.Atoi(c)
		if err != nil || n < 1 {
			return 0, 0, false
		}
		chunk = n
	}
	return seq, chunk, true
}

// CommitTimes implements store.Store. It projects the log to (sk,
// createdAtMs); chunk items beyond the first carry no createdAtMs and
// are skipped. (Capacity is charged on whole items regardless.)
func (s *Store) CommitTimes(ctx context.Context, partition string, afterSeq int64, fn func(seq, createdAtMs int64) bool) error {
	if err := checkPartition(partition); err != nil {
		return err
	}
	return s.query(ctx, "read commit times", &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("pk = :pk AND sk >= :lo"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": S(logPK(partition)), ":lo": S(seqSK(max(afterSeq, 0) + 1))},
		ProjectionExpression:      aws.String("sk, ca"),
		Limit:                     aws.Int32(s.logPage),
	}, func(items []map[string]types.AttributeValue) bool {
		for _, it := range items {
			sk, _ := getS(it, AttrSK)
			seq, chunk, ok := parseLogSK(sk)
			created, okc := getN(it, lCreated)
			if !ok || chunk != 0 || !okc {
				continue
			}
			if !fn(seq, created) {
				return false
			}
		}
		return true
	})
}

// Prune implements store.Store (§4.6). The horizon is clamped to the
// head (after finishing any unmaterialized commit, whose log it still
// needs) and advanced with a monotonic condition before any delete, so
// a reader never sees a hole above the horizon. Log items at or below it
// are then deleted commit by commit, each commit's tombstones first
// (pruneLog), so the row table is never scanned.
func (s *Store) Prune(ctx context.Context, partition string, horizonSeq int64) (int, error) {
	if err := checkPartition(partition); err != nil {
		return 0, err
	}
	var target, indexFrom int64
	for attempt := 0; ; attempt++ {
		h, ok, err := s.readHead(ctx, partition)
		if err != nil || !ok {
			return 0, err
		}
		target, indexFrom = min(horizonSeq, h.MaxCommitSeq), h.indexFrom
		if h.applied < target {
			// Only a horizon past appliedSeq needs the commits above it
			// finished (the usual horizon, §4.6's newest 1,000 commits
			// below the head, does not touch a pending small commit).
			if err := s.rollForward(ctx, partition, h); err != nil {
				return 0, err
			}
		}
		if target <= h.HorizonSeq {
			return 0, nil
		}
		_, err = s.updateItem(ctx, "advance horizon", &dynamodb.UpdateItemInput{
			Key:                       Key(headPK(partition), headSK),
			UpdateExpression:          aws.String("SET hz = :h"),
			ConditionExpression:       aws.String("hz < :h AND ap >= :h"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":h": N(target)},
		})
		if err == nil {
			break
		}
		if !isConditionFailed(err) || attempt >= 3 {
			return 0, err
		}
	}
	return s.pruneLog(ctx, partition, target, indexFrom)
}

// pruneLog deletes the log items at or below target. Before any item of
// a commit goes, the tombstones that commit wrote are deleted, each only
// if it is still a tombstone at or below target (§4.6 of the wire-3
// spec: tombstones go in the same pass). The order makes an interrupted
// prune safe to repeat: a commit whose log is partly deleted has no
// tombstones left, so skipping it (it no longer decodes) loses nothing.
// Log items are read whole; a projection would not lower the read cost,
// which DynamoDB charges on item size.
//
// Deletes go in rounds of about pruneRoundKeys log and index keys: the
// tombstones of every commit of the round first (pruneConcurrency in
// flight, across commits), then the round's keys in batches of 25. A
// round thus waits for its tombstones once, not once per commit, which
// is what bounds a prune worker on a real table (round trips, not
// units; docs/SCALE.md, "Lifecycle").
//
// indexFrom is the head's first commit with log-index entries (0: none
// yet): the entries of commits from it on go with their log items;
// earlier commits have none (logindex.go).
func (s *Store) pruneLog(ctx context.Context, p string, target, indexFrom int64) (int, error) {
	var (
		removed int
		seq     = int64(-1)
		keys    []map[string]types.AttributeValue // log items of seq
		parts   [][]byte
		want    int  // chunk count from chunk 0; ≤ 0 when incomplete
		has0    bool // chunk 0 is among keys
		pending []map[string]types.AttributeValue
		tombs   []store.RowWrite // writes of the commits in pending (their tombstones are dropped)
		ferr    error
	)
	flush := func() error {
		// Tombstones before the log items that name them (see above).
		if err := s.dropTombstones(ctx, p, target, tombs); err != nil {
			return err
		}
		err := s.batchDelete(ctx, "delete pruned log items", pending)
		pending, tombs = pending[:0], tombs[:0]
		return err
	}
	finish := func() error {
		if seq < 0 {
			return nil
		}
		if has0 {
			removed++
		}
		if want > 0 && len(parts) == want {
			lb, err := s.decodeLog(bytes.Join(parts, nil), seq)
			if err != nil {
				return fmt.Errorf("dynamostore: log item %d: %w", seq, err)
			}
			// The commit's log-index entries go with its log items; the
			// horizon, already advanced, tells readers they may be gone.
			if indexFrom > 0 && seq >= indexFrom {
				for _, k := range logIndexKeys(p, lb.changes) {
					keys = append(keys, Key(k, seqSK(seq)))
				}
			}
			rows, err := lb.materialization(seq)
			if err != nil {
				return fmt.Errorf("dynamostore: log item %d: %w", seq, err)
			}
			// Every write: a row deleted and recreated under other
			// scopes in one commit leaves only copy tombstones
			// (tombstoneKeys picks the tombstones).
			tombs = append(tombs, rows...)
		}
		pending = append(pending, keys...)
		seq, keys, parts, want, has0 = -1, nil, nil, 0, false
		if len(pending) >= pruneRoundKeys {
			return flush()
		}
		return nil
	}
	err := s.query(ctx, "read pruned log items", &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("pk = :pk AND sk <= :hi"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": S(logPK(p)), ":hi": S(seqRangeHi(target))},
		Limit:                     aws.Int32(s.logPage),
	}, func(items []map[string]types.AttributeValue) bool {
		for _, it := range items {
			sk, _ := getS(it, AttrSK)
			n, chunk, ok := parseLogSK(sk)
			if !ok {
				continue
			}
			if n != seq {
				if ferr = finish(); ferr != nil {
					return false
				}
				seq = n
			}
			keys = append(keys, Key(logPK(p), sk))
			data, _ := getB(it, lData)
			switch {
			case chunk == 0:
				nc, _ := getN(it, lChunks)
				want, parts, has0 = int(max(nc, 0)), [][]byte{data}, true
			case want > 0 && chunk == len(parts):
				parts = append(parts, data)
			default:
				want = -1 // a chunk is missing: an interrupted prune's leftover
			}
		}
		return true
	})
	if err == nil {
		err = ferr
	}
	if err == nil {
		err = finish()
	}
	if err == nil && (len(pending) > 0 || len(tombs) > 0) {
		err = flush()
	}
	return removed, err
}

// pruneConcurrency bounds the conditional tombstone deletes in flight.
const pruneConcurrency = 8

// pruneRoundKeys is about how many log and index keys one prune round
// deletes (4 batches of 25) after dropping their commits' tombstones.
const pruneRoundKeys = 100

// dropTombstones deletes the tombstones among rows (the materialization
// of the commits of one prune round) that are still tombstones at or
// below horizon: a recreated row, or one deleted again after the
// horizon, stays. A row named twice is deleted once and then fails the
// condition, which is not an error.
func (s *Store) dropTombstones(ctx context.Context, p string, horizon int64, rows []store.RowWrite) error {
	return fanOut(pruneConcurrency, tombstoneKeys(s.table, p, rows), func(key map[string]types.AttributeValue) error {
		err := s.deleteItem(ctx, "delete pruned tombstone", key,
			"dl = :t AND cs <= :h", map[string]types.AttributeValue{":t": BOOL(true), ":h": N(horizon)})
		if isConditionFailed(err) {
			return nil // recreated, deleted again, or gone
		}
		return err
	})
}

// tombstoneKeys are the keys of the tombstones row deletes leave: the
// row items and their scope copies (scopeIndexActions; a key named twice
// is deleted once, the second delete fails its condition).
func tombstoneKeys(tbl *string, p string, rows []store.RowWrite) []map[string]types.AttributeValue {
	var keys []map[string]types.AttributeValue
	for _, w := range dedupeRows(rows) {
		if w.Delete {
			keys = append(keys, Key(rowPK(p, w.Table), rowSK(w.Row.RowID)))
		}
	}
	for _, a := range scopeIndexActions(tbl, p, 0, rows) {
		if put := a.w.Put; put != nil && put.Item[rDeleted] != nil {
			keys = append(keys, Key(put.Item[AttrPK].(*types.AttributeValueMemberS).Value, put.Item[AttrSK].(*types.AttributeValueMemberS).Value))
		}
	}
	return keys
}
