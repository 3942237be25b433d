package dynamostore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

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
// ever unmaterialized, and it is finished before the next one lands.
func (s *Store) Commit(ctx context.Context, partition string, req *store.CommitRequest) error {
	seq := req.ExpectedMaxSeq + 1
	if req.Commit.Seq != seq {
		return fmt.Errorf("dynamostore: commit seq %d does not follow expected head %d", req.Commit.Seq, req.ExpectedMaxSeq)
	}
	if err := checkOutcomeKey(partition, req.Commit.ClientID, req.Commit.ClientCommitID); err != nil {
		return err
	}
	rows := dedupeRows(req.Rows)
	for i := range req.Rows {
		if err := checkRowKey(partition, &req.Rows[i]); err != nil {
			return err
		}
		if err := checkScopeKeys(&req.Rows[i]); err != nil {
			return err
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
		return err
	}
	if !sameRows(dedupeRows(derived), rows) {
		explicit, cvs = req.Rows, nil
	}
	refs := dedupeRefs(req.RefWrites)
	for i := range refs {
		if err := checkRefKey(partition, &refs[i]); err != nil {
			return err
		}
	}
	chunks, err := logItems(partition, &req.Commit, encodeLogBody(req.Commit.Changes, cvs, explicit, refs))
	if err != nil {
		return err
	}
	if req.WriterVersion > 0 {
		chunks[0][lWriter] = N(req.WriterVersion)
	}

	// [0] head, [1] outcome, [2…] log.
	items := make([]txItem, 0, 2+len(chunks)+len(rows))
	items = append(items, txItem{}) // head, filled per attempt
	oitem := outcomeItem(partition, req.Commit.ClientID, req.Commit.ClientCommitID, &req.Outcome)
	if ItemSize(oitem) > itemBudget {
		return fmt.Errorf("dynamostore: outcome of %d bytes: %w", ItemSize(oitem), store.ErrTooLarge)
	}
	notExists := aws.String("attribute_not_exists(pk)")
	items = append(items, txItem{w: types.TransactWriteItem{Put: &types.Put{TableName: s.table, Item: oitem, ConditionExpression: notExists}}, size: ItemSize(oitem)})
	for _, it := range chunks {
		items = append(items, txItem{w: types.TransactWriteItem{Put: &types.Put{TableName: s.table, Item: it, ConditionExpression: notExists}}, size: ItemSize(it)})
	}
	// The log's scope index (logindex.go) lands with the log itself.
	items = append(items, logIndexActions(s.table, partition, seq, req.Commit.Changes)...)
	// A backfill batch moves its checkpoint in the same transaction,
	// conditioned on its owner epoch (store.CommitRequest.Advance).
	advIdx := -1
	if req.Advance != nil {
		advIdx = len(items)
		items = append(items, txItem{size: 200, w: types.TransactWriteItem{Update: s.advanceUpdate(partition, req.Advance, req.Commit.CreatedAtMs)}})
	}
	logBytes := 200 // head
	for _, it := range items[1:] {
		logBytes += it.size
	}
	if len(items) > txMaxActions || logBytes > txMaxBytes {
		return fmt.Errorf("dynamostore: commit of %d bytes in %d log items exceeds one transaction: %w", logBytes, len(chunks), store.ErrTooLarge)
	}
	rowActs := make([]txItem, len(rows))
	rowBytes := 0
	for i := range rows {
		rowActs[i] = rowAction(s.table, partition, seq, &rows[i])
		if rowActs[i].size > itemBudget {
			return fmt.Errorf("dynamostore: row %q of table %q is %d bytes, over the %d-byte item limit: %w",
				rows[i].Row.RowID, rows[i].Table, rowActs[i].size, MaxItemBytes, store.ErrTooLarge)
		}
		rowBytes += rowActs[i].size
	}
	for i := range refs {
		a := refAction(s.table, partition, &refs[i])
		rowActs = append(rowActs, a)
		rowBytes += a.size
	}
	for _, a := range index {
		rowActs = append(rowActs, a)
		rowBytes += a.size
	}
	// Rows read with the head in one batch (store.RowRead) must still be
	// as read: the condition rides on the row's own Put when the commit
	// writes it inline, else a ConditionCheck of the row.
	var checks []txItem
	var allChecks []txItem
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
			allChecks = append(allChecks, c)
			if !written[k] {
				checks = append(checks, c)
				rowBytes += c.size
			}
		}
	}
	inline := len(items)+len(rowActs)+len(checks) <= txMaxActions && logBytes+rowBytes <= txMaxBytes
	update := "SET mx = :n, li = if_not_exists(li, :n)"
	if inline {
		update = "SET mx = :n, ap = :n, li = if_not_exists(li, :n)"
		items = append(items, rowActs...)
		items = append(items, checks...)
	} else if len(allChecks) > 0 {
		if len(items)+len(allChecks) > txMaxActions {
			return fmt.Errorf("dynamostore: %d read-row checks do not fit the log transaction of a large commit", len(allChecks))
		}
		items = append(items, allChecks...)
	}
	cond, vals := commitCondition(req)
	vals[":n"] = N(seq)
	if req.Ticket > 0 {
		// A queued commit (store.CommitQueue) also takes its turn.
		cond += " AND " + turnCondition(req.Ticket-1)
		update += ", tn = :t, tt = :at, tg = :gap"
		vals[":tp"], vals[":t"], vals[":at"], vals[":gap"] = N(req.Ticket-1), N(req.Ticket), N(req.TurnAtUs), N(req.TurnGapUs)
	}
	items[0] = txItem{size: 100, w: types.TransactWriteItem{Update: &types.Update{
		TableName:                           s.table,
		Key:                                 Key(headPK(partition), headSK),
		UpdateExpression:                    aws.String(update),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeValues:           vals,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}}

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
			// materialization if this one fails, so only the hook's error
			// is reported.
			if err := s.materialize(ctx, partition, seq, rows, refs, index); err == nil {
				_ = s.advanceApplied(ctx, partition, seq)
			}
			return nil
		}
		codes, olds := cancelReasons(err)
		if codes == nil {
			return wrap("append commit", err)
		}
		if len(codes) > 1 && codes[1] == "ConditionalCheckFailed" {
			// attribute_not_exists failed: the outcome exists for certain,
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
	if req.CheckGate && token != req.GateToken {
		return store.ErrGateMoved
	}
	return nil
}

// errApplied stops a materialization that another instance finished.
var errApplied = errors.New("dynamostore: commit already materialized")

// materialize writes rows of commit seq in transactions of at most 99
// row actions plus a ConditionCheck that the head's appliedSeq is still
// below seq. The fence makes replays safe: once appliedSeq reached seq a
// later commit may have rewritten or deleted these rows, and no stale
// roller can then write (a per-row commitSeq condition could not stop a
// replayed upsert from resurrecting a row a later commit deleted).
// Within one commit rows are deduplicated, so batches commute.
func (s *Store) materialize(ctx context.Context, p string, seq int64, rows []store.RowWrite, refs []store.RefWrite, index []txItem) error {
	fence := txItem{size: 100, w: types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName:                 s.table,
		Key:                       Key(headPK(p), headSK),
		ConditionExpression:       aws.String("ap < :s"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": N(seq)},
	}}}
	batch := []txItem{fence}
	bytes := fence.size
	flush := func() error {
		if len(batch) == 1 {
			return nil
		}
		err := s.transact(ctx, "materialize rows", batch)
		if codes, _ := cancelReasons(err); len(codes) > 0 && codes[0] == "ConditionalCheckFailed" {
			return errApplied
		}
		batch, bytes = []txItem{fence}, fence.size
		return wrap("materialize rows", err)
	}
	add := func(a txItem) error {
		if len(batch) == txMaxActions || bytes+a.size > txMaxBytes {
			if err := flush(); err != nil {
				return err
			}
		}
		batch = append(batch, a)
		bytes += a.size
		return nil
	}
	for i := range rows {
		if err := add(rowAction(s.table, p, seq, &rows[i])); err != nil {
			return err
		}
	}
	// Index entries are puts and deletes without conditions: replaying
	// them is idempotent, and the fence stops a replay after appliedSeq
	// passed seq, exactly as for rows.
	for i := range refs {
		if err := add(refAction(s.table, p, &refs[i])); err != nil {
			return err
		}
	}
	// Scope copies (scopeindex.go) are unconditional puts and deletes of
	// the commit's final state per copy: idempotent under the same fence.
	for _, a := range index {
		if err := add(a); err != nil {
			return err
		}
	}
	return flush()
}

// advanceApplied moves appliedSeq to seq once its rows are written.
func (s *Store) advanceApplied(ctx context.Context, p string, seq int64) error {
	_, err := s.updateItem(ctx, "advance applied seq", &dynamodb.UpdateItemInput{
		Key:                       Key(headPK(p), headSK),
		UpdateExpression:          aws.String("SET ap = :s"),
		ConditionExpression:       aws.String("ap < :s AND mx >= :s"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": N(seq)},
	})
	if isConditionFailed(err) {
		return nil // another instance got there first
	}
	return err
}

// rollForward finishes every logged but unmaterialized commit of h
// (appliedSeq < seq ≤ maxCommitSeq) from the log, idempotently.
func (s *Store) rollForward(ctx context.Context, p string, h head) error {
	for seq := h.applied + 1; seq <= h.MaxCommitSeq; seq++ {
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
		rows, err := body.materialization(seq)
		if err != nil {
			return fmt.Errorf("dynamostore: log item %d: %w", seq, err)
		}
		err = s.materialize(ctx, p, seq, dedupeRows(rows), body.refs, scopeIndexActions(s.table, p, seq, rows))
		if errors.Is(err, errApplied) {
			continue
		}
		if err != nil {
			return err
		}
		if err := s.advanceApplied(ctx, p, seq); err != nil {
			return err
		}
	}
	return nil
}
