package dynamostore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// Transaction and item budgets, with margin under the hard limits
// (100 actions, 4 MB aggregate, 400 KB per item) for the estimate's
// rounding of numbers.
const (
	txMaxActions = 100
	txMaxBytes   = 4*1024*1024 - 64*1024
	itemBudget   = MaxItemBytes - 512
)

// Log item attributes (chunk 0 carries the commit's metadata; every chunk
// carries a slice of the encoded body in order).
const (
	lCreated = "ca" // N createdAtMs
	lActor   = "ac" // S actorId
	lClient  = "ci" // S clientId
	lCommit  = "cc" // S clientCommitId
	lChunks  = "nc" // N number of chunk items
	lData    = "d"  // B body slice
	lWriter  = "wv" // N writer's storage schema version (absent when 0)
)

// Row item attributes. A tombstone (§2.2 of the wire-3 spec) is the row
// item itself reduced to key, rSeq, rDeleted and the deleted row's rScopes, so a delete is one small
// Put under the same key and a recreate simply overwrites it. Items
// written before column versions and tombstones existed have neither
// rCV nor rDeleted and read as live rows with nil ColumnVersions.
const (
	rVersion = "v"  // N server_version (absent on a tombstone)
	rSeq     = "cs" // N commitSeq that last wrote the row
	rScopes  = "sc" // B encoded stored scopes (absent when none)
	rPayload = "d"  // B row-codec payload (absent when empty)
	rCV      = "cv" // B column versions, encodeCV relative to v (absent when nil)
	rDeleted = "dl" // BOOL true on a tombstone (absent on a live row)
)

type rowKey struct{ table, id string }

// dedupeRows keeps the last write of each (table, rowId): a commit's
// final state per row (a transaction may not touch an item twice).
func dedupeRows(rows []store.RowWrite) []store.RowWrite {
	last := make(map[rowKey]int, len(rows))
	for i := range rows {
		last[rowKey{rows[i].Table, rows[i].Row.RowID}] = i
	}
	if len(last) == len(rows) {
		return rows
	}
	out := make([]store.RowWrite, 0, len(last))
	for i := range rows {
		if last[rowKey{rows[i].Table, rows[i].Row.RowID}] == i {
			out = append(out, rows[i])
		}
	}
	return out
}

// sameRows compares materializations (the commit seq is stamped by the
// store and ignored; deletes compare by key only).
func sameRows(a, b []store.RowWrite) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := &a[i], &b[i]
		if x.Table != y.Table || x.Row.RowID != y.Row.RowID || x.Delete != y.Delete {
			return false
		}
		if x.Delete {
			if !slices.Equal(x.Row.Scopes, y.Row.Scopes) {
				return false
			}
			continue
		}
		if x.Row.Version != y.Row.Version || !bytes.Equal(x.Row.Payload, y.Row.Payload) ||
			!slices.Equal(x.Row.Scopes, y.Row.Scopes) || !sameCV(x.Row.ColumnVersions, y.Row.ColumnVersions) {
			return false
		}
	}
	return true
}

// sameCV compares column versions, nil distinct from empty.
func sameCV(a, b []int64) bool {
	return (a == nil) == (b == nil) && slices.Equal(a, b)
}

func rowItem(p string, seq int64, w *store.RowWrite) map[string]types.AttributeValue {
	item := Key(rowPK(p, w.Table), rowSK(w.Row.RowID))
	if w.Delete {
		item[rSeq], item[rDeleted] = N(seq), BOOL(true)
		if sc := encodeScopes(w.Row.Scopes); len(sc) > 0 {
			item[rScopes] = B(sc)
		}
		return item
	}
	item[rVersion], item[rSeq] = N(w.Row.Version), N(seq)
	if w.Row.ColumnVersions != nil {
		item[rCV] = B(encodeCV(nil, w.Row.ColumnVersions, w.Row.Version))
	}
	if sc := encodeScopes(w.Row.Scopes); len(sc) > 0 {
		item[rScopes] = B(sc)
	}
	if len(w.Row.Payload) > 0 {
		item[rPayload] = B(bytes.Clone(w.Row.Payload))
	}
	return item
}

func parseRow(item map[string]types.AttributeValue) (*store.Row, error) {
	sk, ok0 := getS(item, AttrSK)
	cs, ok2 := getN(item, rSeq)
	if _, tomb := item[rDeleted]; tomb {
		if dl, ok := getBool(item, rDeleted); !ok0 || len(sk) < 1 || !ok2 || !ok || !dl {
			return nil, fmt.Errorf("dynamostore: tombstone item is malformed: %w", errCorrupt)
		}
		r := &store.Row{RowID: sk[1:], Deleted: true, CommitSeq: cs}
		sc, ok := getB(item, rScopes) // absent on tombstones from before scopes were kept
		if !ok {
			return nil, fmt.Errorf("dynamostore: tombstone item is malformed: %w", errCorrupt)
		}
		scopes, err := decodeScopes(sc)
		if err != nil {
			return nil, err
		}
		r.Scopes = scopes
		return r, nil
	}
	v, ok1 := getN(item, rVersion)
	sc, ok3 := getB(item, rScopes)
	d, ok4 := getB(item, rPayload)
	if !ok0 || len(sk) < 1 || !ok1 || !ok2 || !ok3 || !ok4 {
		return nil, fmt.Errorf("dynamostore: row item is malformed: %w", errCorrupt)
	}
	scopes, err := decodeScopes(sc)
	if err != nil {
		return nil, err
	}
	cvb, ok5 := getB(item, rCV)
	if !ok5 {
		return nil, fmt.Errorf("dynamostore: row item is malformed: %w", errCorrupt)
	}
	cv, err := decodeCV(cvb, v)
	if err != nil {
		return nil, err
	}
	r := &store.Row{RowID: sk[1:], Version: v, Scopes: scopes, CommitSeq: cs, ColumnVersions: cv}
	if len(d) > 0 {
		r.Payload = d // the SDK decoded into a fresh buffer we own
	}
	return r, nil
}

func checkRowKey(p string, w *store.RowWrite) error {
	if err := checkName("table", w.Table); err != nil {
		return err
	}
	if err := checkName("rowId", w.Row.RowID); err != nil {
		return err
	}
	if len(rowPK(p, w.Table)) > maxPKBytes || len(rowSK(w.Row.RowID)) > maxSKBytes {
		return fmt.Errorf("dynamostore: table %q / rowId of %d bytes exceed the key limits: %w", w.Table, len(w.Row.RowID), store.ErrTooLarge)
	}
	return nil
}

// rowAction is the transaction action materializing w: a Put of the row,
// or of its tombstone for a delete.
func rowAction(table *string, p string, seq int64, w *store.RowWrite) txItem {
	item := rowItem(p, seq, w)
	return txItem{w: types.TransactWriteItem{Put: &types.Put{TableName: table, Item: item}}, size: ItemSize(item)}
}

// logItems splits the encoded commit into chunk items of at most
// itemBudget bytes each.
func logItems(p string, c *store.Commit, body []byte) ([]map[string]types.AttributeValue, error) {
	first := Key(logPK(p), chunkSK(c.Seq, 0))
	first[lCreated], first[lActor], first[lClient], first[lCommit] = N(c.CreatedAtMs), S(c.ActorID), S(c.ClientID), S(c.ClientCommitID)
	first[lChunks] = N(9999) // placeholder of maximal size for the budget
	room0 := itemBudget - ItemSize(first) - len(lData)
	roomN := itemBudget - ItemSize(Key(logPK(p), chunkSK(c.Seq, 9999))) - len(lData)
	if room0 < 1024 {
		return nil, fmt.Errorf("dynamostore: commit metadata does not fit one item: %w", store.ErrTooLarge)
	}
	items := []map[string]types.AttributeValue{first}
	n := min(len(body), room0)
	first[lData] = B(body[:n])
	for rest := body[n:]; len(rest) > 0; {
		n := min(len(rest), roomN)
		it := Key(logPK(p), chunkSK(c.Seq, len(items)))
		it[lData] = B(rest[:n])
		items = append(items, it)
		rest = rest[n:]
		if len(items) > 9999 {
			return nil, fmt.Errorf("dynamostore: commit log too large: %w", store.ErrTooLarge)
		}
	}
	first[lChunks] = N(int64(len(items)))
	return items, nil
}

// Commit implements store.Store (§6.4). One TransactWriteItems holds:
//
//	[0] head Update: maxCommitSeq ExpectedMaxSeq → +1 (and appliedSeq with
//	    it when rows are included), conditioned on the head existing with
//	    maxCommitSeq = appliedSeq = ExpectedMaxSeq;
//	[1] outcome Put, conditioned on attribute_not_exists (§2.3);
//	[2…] log chunk Puts, conditioned on attribute_not_exists;
//	[…] row Puts/Deletes, when everything fits one transaction.
//
// A commit that does not fit writes [0..] without rows, then materializes
// the rows (rollForward) and advances appliedSeq. Because every commit
// requires appliedSeq = maxCommitSeq, at most one commit per partition is
// ever unmaterialized, and it is finished before the next one lands. A
// small commit takes no transaction (fast.go, commitFast); the commit
// after it marks it applied in its own head update, and a transactional
// commit meeting it on the head settles it first (rollForward).
//
// Further per-commit items (planned reactions, say) are encoded in
// prepare (type prepared); the transaction takes them with the log items
// in commitParts (shared by commit and CommitGroup), and fastCandidate sends a commit that has them the
// transactional way until completeFast writes them too.
func (s *Store) Commit(ctx context.Context, partition string, req *store.CommitRequest) error {
	pc, err := s.prepare(partition, req)
	if err != nil {
		return err
	}
	if s.fastCandidate(partition, req, pc) {
		// A small commit goes without a transaction (fast.go).
		if err := s.commitFast(ctx, partition, req, pc); !errors.Is(err, errNotFast) {
			return err
		}
	}
	if err := s.settleHinted(ctx, partition, req.ExpectedMaxSeq); err != nil {
		return err
	}
	l := s.layout(partition)
	err = s.commit(ctx, partition, req, pc, l)
	var le *layoutError
	if errors.As(err, &le) {
		// The head's log index or scope copies are on (logindex.go,
		// scopeindex.go: adaptive): the same commit with them.
		err = s.commit(ctx, partition, req, pc, l.or(le.want))
	}
	return err
}

// prepared is a commit checked and encoded for the store: its final
// row writes, reference writes, scope copies, log items and outcome item.
type prepared struct {
	seq     int64
	rows    []store.RowWrite // the last write of each row
	refs    []store.RefWrite
	index   []txItem // scope-copy writes, live copies included (copyWrites)
	body    []byte   // the log body
	chunks  []map[string]types.AttributeValue
	outcome map[string]types.AttributeValue
}

// prepare checks req's keys and sizes and encodes its items.
func (s *Store) prepare(partition string, req *store.CommitRequest) (*prepared, error) {
	seq := req.ExpectedMaxSeq + 1
	if req.Commit.Seq != seq {
		return nil, fmt.Errorf("dynamostore: commit seq %d does not follow expected head %d", req.Commit.Seq, req.ExpectedMaxSeq)
	}
	if err := checkOutcomeKey(partition, req.Commit.ClientID, req.Commit.ClientCommitID); err != nil {
		return nil, err
	}
	rows := dedupeRows(req.Rows)
	for i := range req.Rows {
		if err := checkRowKey(partition, &req.Rows[i]); err != nil {
			return nil, err
		}
		if err := checkScopeKeys(&req.Rows[i]); err != nil {
			return nil, err
		}
	}
	index := scopeIndexActions(s.table, partition, seq, req.Rows)
	// The log carries what roll-forward needs to write the rows again:
	// the changes plus each one's column versions, or explicit rows when
	// the changes do not imply them.
	var explicit []store.RowWrite
	cvs := changeCVs(req.Commit.Changes, req.Rows)
	derived, err := rowsFromChanges(seq, req.Commit.Changes, cvs)
	if err != nil {
		return nil, err
	}
	if !sameRows(dedupeRows(derived), rows) {
		explicit, cvs = req.Rows, nil
	}
	refs := dedupeRefs(req.RefWrites)
	for i := range refs {
		if err := checkRefKey(partition, &refs[i]); err != nil {
			return nil, err
		}
	}
	body := s.storeLogBody(encodeLogBody(req.Commit.Changes, cvs, explicit, refs, req.Commit.Reactions))
	chunks, err := logItems(partition, &req.Commit, body)
	if err != nil {
		return nil, err
	}
	if req.WriterVersion > 0 {
		chunks[0][lWriter] = N(req.WriterVersion)
	}
	oitem := s.outcomeItem(partition, req.Commit.ClientID, req.Commit.ClientCommitID, &req.Outcome)
	if ItemSize(oitem) > itemBudget {
		return nil, fmt.Errorf("dynamostore: outcome of %d bytes: %w", ItemSize(oitem), store.ErrTooLarge)
	}
	return &prepared{seq: seq, rows: rows, refs: refs, index: index, body: body, chunks: chunks, outcome: oitem}, nil
}

// commit is Commit with or without the log-index entries and the live
// scope copies: l is what this instance knows of the partition's head.
// A commit without either is conditioned on the head not asking for it
// and fails with a layoutError when it does.
func (s *Store) commit(ctx context.Context, partition string, req *store.CommitRequest, pc *prepared, l layout) error {
	parts, err := s.commitParts(partition, req, pc, l)
	if err != nil {
		return err
	}
	seq, body, logBytes, rowBytes := parts.seq, parts.body, parts.logBytes, parts.rowBytes
	// [0] head, [1] outcome, [2…] log.
	items := make([]txItem, 0, 1+len(parts.log)+len(parts.rows)+len(parts.checks))
	items = append(items, txItem{}) // head, filled per attempt
	items = append(items, parts.log...)
	advIdx := -1
	if parts.advIdx >= 0 {
		advIdx = 1 + parts.advIdx
	}
	if len(items) > txMaxActions || logBytes > txMaxBytes {
		return fmt.Errorf("dynamostore: commit of %d bytes in %d log items exceeds one transaction: %w", logBytes, parts.chunks, store.ErrTooLarge)
	}
	inline := len(items)+len(parts.rows)+len(parts.checks) <= txMaxActions && logBytes+rowBytes <= txMaxBytes
	update := "SET mx = :n"
	if inline {
		update = "SET mx = :n, ap = :n"
		items = append(items, parts.rows...)
		items = append(items, parts.checks...)
	} else if len(parts.allChecks) > 0 {
		if len(items)+len(parts.allChecks) > txMaxActions {
			return fmt.Errorf("dynamostore: %d read-row checks do not fit the log transaction of a large commit", len(parts.allChecks))
		}
		items = append(items, parts.allChecks...)
	}
	cond, vals := commitCondition(req)
	vals[":n"] = N(seq)
	update, cond = indexHead(update, cond, ":n", l)
	if req.Ticket > 0 {
		// A queued commit (store.CommitQueue) also takes its turn.
		cond += " AND " + turnCondition(req.Ticket-1)
		update += ", tn = :t, tt = :at, tg = :gap"
		vals[":tp"], vals[":t"], vals[":at"], vals[":gap"] = N(req.Ticket-1), N(req.Ticket), N(req.TurnAtUs), N(req.TurnGapUs)
	}
	if req.RaiseFence > 0 && req.CheckGate {
		// Lazy fencing (store.CommitRequest.RaiseFence): the gate token
		// the condition pins is the one read with the fence below it.
		update += ", rwv = :rf ADD gt :one" // ADD last: the SET list ends here
		cond += " AND (attribute_not_exists(rwv) OR rwv < :rf)"
		vals[":rf"], vals[":one"] = N(req.RaiseFence), N(1)
	}
	items[0] = s.headUpdate(partition, update, cond, vals)

	for range 4 {
		err := s.transact(ctx, "append commit", items)
		if err == nil {
			if inline {
				return nil
			}
			if s.afterLog != nil {
				if err := s.afterLog(); err != nil {
					return err
				}
			}
			// The commit is durable in the log; any reader finishes the
			// materialization if this one fails (from the batch it
			// stopped at), so only the hook's error is reported. The
			// batches are planned from the log body, exactly as a
			// roll-forward plans them.
			if acts, err := s.materialization(partition, seq, body, l.copies); err == nil {
				_ = s.materialize(ctx, partition, seq, acts, nil)
			}
			return nil
		}
		codes, olds := cancelReasons(err)
		if codes == nil {
			return wrap("append commit", err)
		}
		if len(codes) > 1 && codes[1] == "ConditionalCheckFailed" {
			// The outcome condition failed: a live outcome exists for certain,
			// whatever else failed (§2.3 replay wins over a lost race).
			return store.ErrOutcomeExists
		}
		if codes[0] == "ConditionalCheckFailed" {
			var h head
			if olds[0] != nil {
				if h, err = parseHead(olds[0]); err != nil {
					return err
				}
			} else { // backend without ALL_OLD support, or no head at all
				var ok bool
				if h, ok, err = s.readHead(ctx, partition); err != nil {
					return err
				}
				if !ok {
					return ErrUnknownPartition
				}
			}
			s.lazyGate(&h)
			if err := gateFailure(h.Gate, req); err != nil {
				return err
			}
			if req.Ticket > 0 && h.Turn != req.Ticket-1 {
				return &store.HeadMovedError{Head: h.Head} // the turn passed: skipped
			}
			if h.MaxCommitSeq != req.ExpectedMaxSeq {
				// The condition's ALL_OLD image is the current head: the
				// engine's retry starts from it without reading it again.
				return &store.HeadMovedError{Head: h.Head}
			}
			s.noteIndex(partition, h)
			if !l.covers(h.layout()) {
				return &layoutError{want: h.layout()}
			}
			// The head is where the caller read it but its last commit is
			// not materialized yet: finish it, then try again.
			if err := s.rollForward(ctx, partition, h); err != nil {
				return err
			}
			continue
		}
		if advIdx > 0 && advIdx < len(codes) && codes[advIdx] == "ConditionalCheckFailed" {
			return store.ErrCheckpointSuperseded
		}
		for _, c := range codes[2:] {
			if c == "ConditionalCheckFailed" {
				return store.ErrHeadMoved // a log item at this seq exists
			}
		}
		return wrap("append commit", err)
	}
	return store.ErrHeadMoved
}

// headUpdate is the head action of a commit's (or a group's)
// transaction; a failed condition returns the head as it was.
func (s *Store) headUpdate(partition, update, cond string, vals map[string]types.AttributeValue) txItem {
	return txItem{size: 100, w: types.TransactWriteItem{Update: &types.Update{
		TableName:                           s.table,
		Key:                                 Key(headPK(partition), headSK),
		UpdateExpression:                    aws.String(update),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeValues:           vals,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}}
}

// indexHead adds the adaptive log index (logindex.go) and scope copies
// (scopeindex.go) to the update and condition of a head update that
// moves maxCommitSeq: with entries (l.index), the first commit written
// with them, whose seq is the value first, starts the index; without,
// the head must have the index off, so no commit lacking entries lands
// once it is on. Likewise a commit without live copies requires the
// head to have copies off.
func indexHead(update, cond, first string, l layout) (string, string) {
	if l.index {
		update += ", " + hLogIndexFrom + " = if_not_exists(" + hLogIndexFrom + ", " + first + ")"
	} else {
		cond += " AND " + indexOffCondition
	}
	if !l.copies {
		cond += " AND " + copiesOffCondition
	}
	return update, cond
}

// commitParts are the transaction actions of one prepared commit at its
// seq (ExpectedMaxSeq+1), everything but the partition head's update:
// the outcome, log and, with l.index, log-index items (log, outcome
// first), the row, reference and scope-copy writes (rows, each row
// conditioned on being as read when the evaluation read it; a deleted
// scope copy is a tombstone; live copies only with l.copies), and the
// checks of rows read but not written. commit and CommitGroup (group.go)
// build their transactions from them alone; the head update of either
// takes indexHead with the same l.
type commitParts struct {
	seq  int64
	body []byte
	// log: [0] outcome Put, then log chunks, log index, checkpoint advance.
	log      []txItem
	advIdx   int // index in log of the advance, -1 for none
	chunks   int
	logBytes int // log plus the head's budget
	rows     []txItem
	// checks: read rows the commit does not write (inline); allChecks:
	// every read row (the large-commit path, rows written later).
	checks, allChecks []txItem
	rowBytes          int // rows plus checks
}

func (s *Store) commitParts(partition string, req *store.CommitRequest, pc *prepared, l layout) (*commitParts, error) {
	seq, rows, refs, index, chunks, oitem := pc.seq, pc.rows, pc.refs, copyWrites(pc.index, l.copies), pc.chunks, pc.outcome
	cp := &commitParts{seq: seq, body: pc.body, advIdx: -1, chunks: len(chunks)}
	items := make([]txItem, 0, 1+len(chunks))
	notExists := aws.String("attribute_not_exists(pk)")
	ocond, onames, ovals := outcomeAbsent(req.Outcome.RecordedAtMs)
	items = append(items, txItem{w: types.TransactWriteItem{Put: &types.Put{TableName: s.table, Item: oitem,
		ConditionExpression: aws.String(ocond), ExpressionAttributeNames: onames, ExpressionAttributeValues: ovals}}, size: ItemSize(oitem)})
	for _, it := range chunks {
		items = append(items, txItem{w: types.TransactWriteItem{Put: &types.Put{TableName: s.table, Item: it, ConditionExpression: notExists}}, size: ItemSize(it)})
	}
	// The log's scope index (logindex.go) lands with the log itself, once
	// the partition has it on.
	if l.index {
		items = append(items, logIndexActions(s.table, partition, seq, req.Commit.Changes)...)
	}
	// A backfill batch moves its checkpoint in the same transaction,
	// conditioned on its owner epoch (store.CommitRequest.Advance).
	if req.Advance != nil {
		cp.advIdx = len(items)
		items = append(items, txItem{size: 200, w: types.TransactWriteItem{Update: s.advanceUpdate(partition, req.Advance, req.Commit.CreatedAtMs)}})
	}
	cp.log = items
	cp.logBytes = 200 // head
	for _, it := range items {
		cp.logBytes += it.size
	}
	rowActs := make([]txItem, len(rows))
	for i := range rows {
		rowActs[i] = rowAction(s.table, partition, seq, &rows[i])
		if rowActs[i].size > itemBudget {
			return nil, fmt.Errorf("dynamostore: row %q of table %q is %d bytes, over the %d-byte item limit: %w",
				rows[i].Row.RowID, rows[i].Table, rowActs[i].size, MaxItemBytes, store.ErrTooLarge)
		}
		cp.rowBytes += rowActs[i].size
	}
	for i := range refs {
		a := refAction(s.table, partition, &refs[i])
		rowActs = append(rowActs, a)
		cp.rowBytes += a.size
	}
	for _, a := range index {
		rowActs = append(rowActs, a)
		cp.rowBytes += a.size
	}
	// Rows read with the head in one batch (store.RowRead) must still be
	// as read: the condition rides on the row's own Put when the commit
	// writes it inline, else a ConditionCheck of the row.
	if rr := readRowChecks(partition, req.ReadRows); rr != nil {
		written := make(map[rowKey]bool, len(rows))
		for i := range rows {
			k := rowKey{rows[i].Table, rows[i].Row.RowID}
			if r, ok := rr[k]; ok {
				written[k] = true
				put := rowActs[i].w.Put
				put.ConditionExpression, put.ExpressionAttributeValues = rowReadCondition(r)
			}
		}
		done := make(map[rowKey]bool, len(rr))
		for _, r := range req.ReadRows {
			k := rowKey{r.Table, r.RowID}
			if _, ok := rr[k]; !ok || done[k] {
				continue
			}
			done[k] = true
			c := rowReadCheck(s.table, partition, rr[k])
			cp.allChecks = append(cp.allChecks, c)
			if !written[k] {
				cp.checks = append(cp.checks, c)
				cp.rowBytes += c.size
			}
		}
	}
	cp.rows = rowActs
	return cp, nil
}

// commitCondition is the head condition of a commit: the head where the
// caller read it, the writer at or above the partition's writer fence
// and, when asked, the serve gate's token unchanged. The fence and token
// ride on the condition the commit makes anyway: no extra action, read
// or round trip.
func commitCondition(req *store.CommitRequest) (string, map[string]types.AttributeValue) {
	cond, vals := writerCondition(store.WriterCheck{WriterVersion: req.WriterVersion, CheckGate: req.CheckGate, GateToken: req.GateToken})
	vals[":e"] = N(req.ExpectedMaxSeq)
	return "attribute_exists(pk) AND mx = :e AND ap = :e AND " + cond, vals
}

// writerCondition is the head condition of the writer fence and, when
// asked, the serve gate's token (commits and rejected outcomes).
func writerCondition(w store.WriterCheck) (string, map[string]types.AttributeValue) {
	cond := "(attribute_not_exists(rwv) OR rwv <= :wv)"
	vals := map[string]types.AttributeValue{":wv": N(w.WriterVersion)}
	if w.CheckGate {
		if w.GateToken == 0 {
			cond += " AND attribute_not_exists(gt)"
		} else {
			cond += " AND gt = :gt"
			vals[":gt"] = N(w.GateToken)
		}
	}
	return cond, vals
}

// gateFailure names the gate part of a failed commit condition, nil
// when the fence and the token both held.
func gateFailure(g *store.Gate, req *store.CommitRequest) error {
	var fence, token int64
	if g != nil {
		fence, token = g.WriterFence, g.Token
	}
	if req.WriterVersion < fence {
		return store.ErrWriterFenced
	}
	if req.CheckGate && token != req.GateToken || req.RaiseFence > 0 && fence >= req.RaiseFence {
		return store.ErrGateMoved
	}
	return nil
}

// errApplied stops a materialization that another instance finished.
var errApplied = errors.New("dynamostore: commit already materialized")

// Head attributes of a large commit's materialization in progress (§2.1:
// a commit's rows become visible together, when appliedSeq reaches it).
const (
	hRollSeq  = "fs" // N the commit being materialized
	hRollDone = "fb" // N how many of its batches are written
	hRollPlan = "fp" // S planPrint of the batches being written
)

// rollDone is how many batches of plan the head records as written for
// commit seq (0 when it records another commit's, another plan's, or
// none).
func (h *head) rollDone(seq int64, plan string) int {
	if h == nil || h.rollSeq != seq || h.rollPlan != plan {
		return 0
	}
	return int(h.rollBatches)
}

// planPrint fingerprints a batch plan: the key and kind of every action,
// batch by batch. A build that cuts batches differently (another budget,
// another order) sees another print and starts over at the first batch
// instead of skipping writes it never made; every batch is idempotent,
// so starting over is only slower.
func planPrint(batches [][]txItem) string {
	h := fnv.New64a()
	for _, b := range batches {
		for _, a := range b {
			key, kind := map[string]types.AttributeValue(nil), "d"
			if a.w.Put != nil {
				key, kind = a.w.Put.Item, "p"
			} else if a.w.Delete != nil {
				key = a.w.Delete.Key
			}
			pk, _ := getS(key, AttrPK)
			sk, _ := getS(key, AttrSK)
			fmt.Fprintf(h, "%s%d:%s%d:%s", kind, len(pk), pk, len(sk), sk)
		}
		h.Write([]byte{'|'})
	}
	return strconv.FormatUint(h.Sum64(), 36)
}

// materialization is every write a large commit makes after its log
// transaction, in a fixed order derived from the log body alone: the
// rows (the last write of each), the reference index, the scope copies
// (live ones with copies: the head the writer read asks for them,
// scopeindex.go; copy tombstones always). Whoever materializes the
// commit (its writer or any roll-forward) plans the same actions from
// the same head state, so the same batches, and a batch count on the
// head names exactly what is written. A roller that reads hScopeOn set
// after the commit was written plans its live copies too: another plan
// print, so it starts over at the first batch (planPrint), which is
// only slower.
func (s *Store) materialization(p string, seq int64, body []byte, copies bool) ([]txItem, error) {
	lb, err := s.decodeLog(body, seq)
	if err != nil {
		return nil, fmt.Errorf("dynamostore: log item %d: %w", seq, err)
	}
	return s.materializationOf(p, seq, lb, copies)
}

func (s *Store) materializationOf(p string, seq int64, lb *logBody, copies bool) ([]txItem, error) {
	rows, err := lb.materialization(seq)
	if err != nil {
		return nil, fmt.Errorf("dynamostore: log item %d: %w", seq, err)
	}
	last := dedupeRows(rows)
	acts := make([]txItem, 0, 2*len(last)+len(lb.refs))
	for i := range last {
		acts = append(acts, rowAction(s.table, p, seq, &last[i]))
	}
	// Index entries are puts and deletes without conditions: replaying
	// them is idempotent, and the fence stops a replay after appliedSeq
	// passed seq, exactly as for rows.
	for i := range lb.refs {
		acts = append(acts, refAction(s.table, p, &lb.refs[i]))
	}
	// Scope copies (scopeindex.go) are unconditional puts and deletes of
	// the commit's final state per copy: idempotent under the same fence.
	return append(acts, copyWrites(scopeIndexActions(s.table, p, seq, rows), copies)...), nil
}

// progressSize is the size budgeted for the head update of a batch.
const progressSize = 150

// plainBatchActions is how many plain writes (writeBatchPlain) one
// recorded batch holds. A plain batch is no transaction, so nothing caps
// it at 100 actions; its head update is only a resumption point, and a
// roller cut off inside a batch writes that batch again (idempotent), so
// the size trades one head update per batch against the writes redone
// after a cut-off. 400 makes every commit of up to 200 one-variable rows
// a single head update (a commit at the 500-operation cap, 1,000 writes:
// 3), and redoes at most 400 writes (25 waves of 16).
const plainBatchActions = 400

// materializationBatches splits acts greedily into batches of at most
// txMaxBytes with the head update and at most 99 actions (a transaction
// with its head update) or, for a plain materialization, at most
// plainBatchActions: a pure function of acts and plain (itself a
// function of acts, monotonic), so every roller cuts the same batches.
func materializationBatches(acts []txItem, plain bool) [][]txItem {
	limit := txMaxActions - 1
	if plain {
		limit = plainBatchActions
	}
	var out [][]txItem
	start, bytes := 0, progressSize
	for i, a := range acts {
		if i-start == limit || bytes+a.size > txMaxBytes {
			out = append(out, acts[start:i])
			start, bytes = i, progressSize
		}
		bytes += a.size
	}
	if start < len(acts) {
		out = append(out, acts[start:])
	}
	return out
}

// progressUpdate is the head update riding in batch k of n of commit
// seq's materialization. Its condition is the fence (appliedSeq below
// seq) and the progress (exactly k batches written), so each batch lands
// once, in order, whoever writes it. Batches other than the last record
// k+1; the last advances appliedSeq itself and clears the progress.
//
// The fence, rather than a per-row commitSeq condition, is what makes
// replays safe: once appliedSeq reached seq a later commit may have
// rewritten or deleted these rows, and no stale roller can then write (a
// per-row condition could not stop a replayed upsert from resurrecting a
// row a later commit deleted). A progress attribute left by a build that
// did not clear it names an earlier commit and reads as none.
func (s *Store) progressUpdate(p string, seq int64, plan string, k, n int) txItem {
	vals := map[string]types.AttributeValue{":s": N(seq), ":fp": S(plan)}
	cond := "ap < :s AND mx >= :s AND "
	if k == 0 {
		cond += "(attribute_not_exists(" + hRollSeq + ") OR " + hRollSeq + " <> :s OR " + hRollPlan + " <> :fp)"
	} else {
		cond += hRollSeq + " = :s AND " + hRollPlan + " = :fp AND " + hRollDone + " = :k"
		vals[":k"] = N(int64(k))
	}
	update := "SET ap = :s REMOVE " + hRollSeq + ", " + hRollDone + ", " + hRollPlan
	if k+1 < n {
		update = "SET " + hRollSeq + " = :s, " + hRollDone + " = :k1, " + hRollPlan + " = :fp"
		vals[":k1"] = N(int64(k + 1))
	}
	return txItem{size: progressSize, w: types.TransactWriteItem{Update: &types.Update{
		TableName:                 s.table,
		Key:                       Key(headPK(p), headSK),
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeValues: vals,
	}}}
}

// materialize writes commit seq's actions (materialization) from the
// first batch the head h records as not written (all of them when h is
// nil), each batch one transaction with its progressUpdate, the last
// one advancing appliedSeq. Every batch written is recorded with it, so
// a materialization cut off by a crash or the request's deadline costs
// the next request only the batches still missing, whatever the commit's
// size. When the head shows another instance ahead, it continues from
// there; errApplied when the commit is finished.
func (s *Store) materialize(ctx context.Context, p string, seq int64, acts []txItem, h *head) error {
	plain := monotonic(acts)
	batches := materializationBatches(acts, plain)
	if len(batches) == 0 {
		return s.advanceApplied(ctx, p, seq)
	}
	plan := planPrint(batches)
	for k := h.rollDone(seq, plan); k < len(batches); {
		var err error
		if plain {
			err = s.writeBatchPlain(ctx, p, seq, plan, k, batches)
		} else {
			items := make([]txItem, 0, 1+len(batches[k]))
			items = append(items, s.progressUpdate(p, seq, plan, k, len(batches)))
			items = append(items, batches[k]...)
			err = s.transact(ctx, "materialize rows", items)
			if codes, _ := cancelReasons(err); len(codes) > 0 && codes[0] == "ConditionalCheckFailed" {
				err = errProgressMoved
			} else if err != nil {
				err = wrap("materialize rows", err)
			}
		}
		if err == nil {
			k++
			continue
		}
		if !errors.Is(err, errProgressMoved) {
			return err
		}
		// Another instance wrote this batch (or finished the commit), or
		// this one's batch landed but its answer was lost: read where the
		// head stands and go on from there.
		h, ok, err := s.readHead(ctx, p)
		if err != nil {
			return err
		}
		if !ok {
			return ErrUnknownPartition
		}
		if h.applied >= seq {
			return errApplied
		}
		next := h.rollDone(seq, plan)
		if next < k && h.rollPlan == plan {
			return fmt.Errorf("dynamostore: materialization of commit %d went back from batch %d to %d: %w", seq, k, next, errCorrupt)
		}
		k = next
	}
	return nil
}

// errProgressMoved: the head's progress of a materialization is not
// where the batch being written expected it.
var errProgressMoved = errors.New("dynamostore: materialization progress moved")

// monotonic reports whether every action of a materialization is a Put
// of an item carrying its commit seq (rows, tombstones, scope copies and
// their tombstones): such a materialization is written with plain
// conditional writes instead of transactions (writeBatchPlain). The
// reference index's puts and deletes carry no seq, so a commit with
// reference writes keeps the fenced transactions.
func monotonic(acts []txItem) bool {
	for _, a := range acts {
		if a.w.Put == nil || a.w.Put.Item[rSeq] == nil {
			return false
		}
	}
	return true
}

// plainConcurrency is how many of a batch's plain writes are in flight.
const plainConcurrency = 16

// writeBatchPlain writes batch k of commit seq's materialization as one
// conditional PutItem per action, then records the batch with the same
// head update a transactional batch carries (progressUpdate: the fence
// and the progress; the last batch advances appliedSeq). Each Put is
// conditioned on the stored item's commit seq being at most seq
// ("attribute_not_exists(pk) OR cs <= seq"), so writing it again is
// idempotent and a late write never lowers an item: where a later
// commit wrote or deleted the row or copy (deletes are tombstones with
// their cs), the condition fails and the item stays. That per-item
// condition is what lets the writes go outside a transaction: the fence
// on the head keeps a stale roller from recording progress, and the cs
// condition keeps its writes from mattering. A batch cut off before its
// head update is written again by the next roller (one batch at most).
// Each write costs 1 WCU per KB instead of 2 in a transaction.
func (s *Store) writeBatchPlain(ctx context.Context, p string, seq int64, plan string, k int, batches [][]txItem) error {
	err := fanOut(plainConcurrency, batches[k], func(a txItem) error {
		err := s.putItem(ctx, "materialize rows", a.w.Put.Item, "attribute_not_exists(pk) OR cs <= :s",
			map[string]types.AttributeValue{":s": N(seq)})
		if isConditionFailed(err) {
			return nil // a later commit wrote or deleted it: it stays
		}
		return err
	})
	if err != nil {
		return err
	}
	u := s.progressUpdate(p, seq, plan, k, len(batches)).w.Update
	_, err = s.updateItem(ctx, "materialize rows: progress", &dynamodb.UpdateItemInput{
		Key: u.Key, UpdateExpression: u.UpdateExpression, ConditionExpression: u.ConditionExpression,
		ExpressionAttributeValues: u.ExpressionAttributeValues,
	})
	if isConditionFailed(err) {
		return errProgressMoved
	}
	return err
}

// advanceApplied moves appliedSeq to seq once its rows are written (a
// commit whose materialization has no actions).
func (s *Store) advanceApplied(ctx context.Context, p string, seq int64) error {
	_, err := s.updateItem(ctx, "advance applied seq", &dynamodb.UpdateItemInput{
		Key:                       Key(headPK(p), headSK),
		UpdateExpression:          aws.String("SET ap = :s REMOVE " + hRollSeq + ", " + hRollDone + ", " + hRollPlan + ", " + hPendSeq + ", " + hPendLog + ", " + hPendOutcome),
		ConditionExpression:       aws.String("ap < :s AND mx >= :s"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": N(seq)},
	})
	if isConditionFailed(err) {
		return nil // another instance got there first
	}
	return err
}

// rollForward finishes every logged but unmaterialized commit of h
// (appliedSeq < seq ≤ maxCommitSeq) from the log, resuming each from the
// batch the head records as written.
func (s *Store) rollForward(ctx context.Context, p string, h head) error {
	for seq := h.applied + 1; seq <= h.MaxCommitSeq; seq++ {
		if done, err := s.rollForwardFast(ctx, p, &h, seq); err != nil {
			return err
		} else if done {
			continue // a small commit, finished from the head (fast.go)
		}
		var c *store.Commit
		var body *logBody
		var derr error
		err := s.readLog(ctx, p, seq-1, seq, func(cc *store.Commit, lb *logBody, err error) bool {
			c, body, derr = cc, lb, err
			return false
		})
		if err == nil {
			err = derr
		}
		if err != nil {
			return err
		}
		if c == nil || c.Seq != seq {
			return fmt.Errorf("dynamostore: commit %d is not materialized and missing from the log: %w", seq, errCorrupt)
		}
		acts, err := s.materializationOf(p, seq, body, h.copiesOn())
		if err != nil {
			return err
		}
		err = s.materialize(ctx, p, seq, acts, &h)
		if err != nil && !errors.Is(err, errApplied) {
			return err
		}
	}
	return nil
}
