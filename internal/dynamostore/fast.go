package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// Small commits without a transaction (issue 23; Options.SmallCommits).
//
// A commit is small when its log is one item, it has no reference-index
// writes, moves no backfill checkpoint, raises no writer fence
// (store.CommitRequest.RaiseFence), its rows and scope copies fit one
// materialization batch, its partition's log index is off (logindex.go)
// and the head stays under fastHeadMax bytes with the commit on it. Such
// a commit is written without TransactWriteItems:
//
//  1. a consistent BatchGetItem of the head, the outcome's key and the
//     rows the evaluation read with the head (store.RowRead); it is made
//     after the caller's head read, and the head is where the caller read
//     it with appliedSeq = maxCommitSeq, so every earlier commit's
//     outcome and rows were written before this read (the commit that
//     moved appliedSeq wrote them first). An outcome found is a replay
//     (§2.3, ErrOutcomeExists); a read row that changed is ErrHeadMoved;
//  2. one conditional UpdateItem of the head: the commit condition of the
//     transactional path (maxCommitSeq = appliedSeq = expected, writer
//     fence, gate token, turn, log index off), no pending commit, and the
//     rejection count read in 1 unchanged; it sets maxCommitSeq and
//     carries the commit's log item and outcome item as map attributes
//     (hPendLog, hPendOutcome) with hPendSeq. This is the commit point:
//     the commit is durable, gapless and ordered from here on. No commit
//     lands between 1 and 2 (the condition), so 1's answers still hold;
//  3. plain writes, in parallel: the outcome and the log item (put if
//     absent), the rows and scope copies (conditioned on the stored cs,
//     as a plain batch of a large commit, commit.go);
//  4. advanceApplied: appliedSeq = seq, the pending attributes removed.
//
// Until 4, appliedSeq < maxCommitSeq, and every reader that depends on
// rows or the log finishes the commit first from the head (rollForward:
// completeFast writes 3 again, idempotently, then 4), exactly as it
// finishes a large commit from its log; ReadLog does so when the log
// ends before the window does. So a reader never sees part of the commit
// (§2.1). A writer that stops after 2 leaves the commit to the next
// request; a writer that resumes late only repeats writes that change
// nothing (put-if-absent, cs conditions) and a head update whose
// condition fails.
//
// PutRejection's head action counts rejections and requires no pending
// commit, so a rejection and a commit of one idempotency key cannot both
// land (§2.3): a rejection before 1 is the outcome 1 finds, one between 1
// and 2 moves the count 2 checks, one after 2 waits for 4.
//
// A one-op insert is then 6 WCU (head 1, outcome 1, log 1, row 1, scope
// copy 1, appliedSeq 1) against 10 in the transaction, for 3 more round
// trips (the read in 1, the parallel writes of 3, and 4) and about 2 RCU.

// Head attributes of a small commit being materialized.
const (
	hPendSeq     = "ps" // N the commit
	hPendLog     = "pl" // M its log item without the key
	hPendOutcome = "po" // M its outcome item without the key
	hRejections  = "rj" // N PutRejection's count
)

// fastHeadMax bounds the head with a small commit on it: one write unit
// for the head update and the update that takes the commit off again.
const fastHeadMax = 1000

// errNotFast: the commit goes the transactional way.
var errNotFast = errors.New("dynamostore: not a small commit")

func getM(item map[string]types.AttributeValue, name string) map[string]types.AttributeValue {
	if v, ok := item[name].(*types.AttributeValueMemberM); ok {
		return v.Value
	}
	return nil
}

// withoutKey is item's attributes other than its key.
func withoutKey(item map[string]types.AttributeValue) map[string]types.AttributeValue {
	out := maps.Clone(item)
	delete(out, AttrPK)
	delete(out, AttrSK)
	return out
}

// fastCandidate reports whether pc may take the small-commit path
// (before the head is read).
func (s *Store) fastCandidate(partition string, req *store.CommitRequest, pc *prepared) bool {
	return s.small && len(pc.chunks) == 1 && len(pc.refs) == 0 && req.Advance == nil && req.RaiseFence == 0 &&
		len(pc.rows)+len(pc.index) < txMaxActions && !s.indexOn(partition)
}

// commitFast writes a small commit (steps 1–4 above); errNotFast when the
// head shows it must go the transactional way.
func (s *Store) commitFast(ctx context.Context, partition string, req *store.CommitRequest, pc *prepared) error {
	rr := readRowChecks(partition, req.ReadRows)
	okey := Key(outcomePK(partition, req.Commit.ClientID), outcomeSK(req.Commit.ClientCommitID))
	keys := []map[string]types.AttributeValue{Key(headPK(partition), headSK), okey}
	for _, r := range rr {
		keys = append(keys, Key(rowPK(partition, r.Table), rowSK(r.RowID)))
	}
	if len(keys) > batchGetMax {
		return errNotFast
	}
	items, err := s.batchGet(ctx, "read before a small commit", keys)
	if err != nil {
		return err
	}
	var (
		hitem   map[string]types.AttributeValue
		outcome bool
		read    = map[rowKey]*store.Row{}
	)
	for _, it := range items {
		pk, _ := getS(it, AttrPK)
		sk, _ := getS(it, AttrSK)
		switch {
		case pk == headPK(partition) && sk == headSK:
			hitem = it
		case pk == outcomePK(partition, req.Commit.ClientID):
			// An outcome past its idempotency window is absent
			// (outcomettl.go), as for the transaction's put.
			outcome = outcomeLive(it, req.Outcome.RecordedAtMs)
		default:
			r, err := parseRow(it)
			if err != nil {
				return err
			}
			for k := range rr {
				if rowPK(partition, k.table) == pk && k.id == r.RowID {
					read[k] = r
				}
			}
		}
	}
	if hitem == nil {
		return ErrUnknownPartition
	}
	h, err := parseHead(hitem)
	if err != nil {
		return err
	}
	s.noteIndex(partition, h)
	s.lazyGate(&h)
	if err := gateFailure(h.Gate, req); err != nil {
		return err
	}
	if req.Ticket > 0 && h.Turn != req.Ticket-1 {
		return &store.HeadMovedError{Head: h.Head}
	}
	if h.MaxCommitSeq != req.ExpectedMaxSeq {
		return &store.HeadMovedError{Head: h.Head}
	}
	if outcome {
		return store.ErrOutcomeExists
	}
	if h.applied < h.MaxCommitSeq || h.indexOn() {
		return errNotFast // the transactional path finishes it first, or writes the index
	}
	for k, want := range rr {
		got := read[k]
		if (got != nil) != want.Present || got != nil && got.CommitSeq != want.CommitSeq {
			return store.ErrHeadMoved // read before a commit that wrote it: evaluate again
		}
	}
	logAttrs, outAttrs := withoutKey(pc.chunks[0]), withoutKey(pc.outcome)
	if ItemSize(hitem)+ItemSize(logAttrs)+ItemSize(outAttrs)+3*16 > fastHeadMax {
		return errNotFast
	}

	// 2: the commit point.
	seq := pc.seq
	cond, vals := commitCondition(req)
	cond += " AND " + indexOffCondition + " AND attribute_not_exists(" + hPendSeq + ")"
	if h.rejections == 0 {
		cond += " AND attribute_not_exists(" + hRejections + ")"
	} else {
		cond += " AND " + hRejections + " = :rj"
		vals[":rj"] = N(h.rejections)
	}
	update := "SET mx = :n, " + hPendSeq + " = :n, " + hPendLog + " = :pl, " + hPendOutcome + " = :po"
	vals[":n"], vals[":pl"], vals[":po"] = N(seq), &types.AttributeValueMemberM{Value: logAttrs}, &types.AttributeValueMemberM{Value: outAttrs}
	if req.Ticket > 0 {
		cond += " AND " + turnCondition(req.Ticket-1)
		update += ", tn = :t, tt = :at, tg = :gap"
		vals[":tp"], vals[":t"], vals[":at"], vals[":gap"] = N(req.Ticket-1), N(req.Ticket), N(req.TurnAtUs), N(req.TurnGapUs)
	}
	_, err = s.updateItem(ctx, "small commit", &dynamodb.UpdateItemInput{
		Key:                                 Key(headPK(partition), headSK),
		UpdateExpression:                    aws.String(update),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeValues:           vals,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if isConditionFailed(err) {
		if old := conditionItem(err); old != nil {
			if h2, perr := parseHead(old); perr == nil {
				s.lazyGate(&h2)
				if gerr := gateFailure(h2.Gate, req); gerr != nil {
					return gerr
				}
				return &store.HeadMovedError{Head: h2.Head}
			}
		}
		return store.ErrHeadMoved
	}
	if err != nil {
		return err
	}
	if s.afterLog != nil {
		if err := s.afterLog(); err != nil {
			return err
		}
	}
	// 3 and 4. The commit is durable: a failure here leaves it to the
	// next reader (rollForward), so only the hook's error is reported.
	_ = s.completeFast(ctx, partition, seq, pc.chunks[0], pc.outcome, pc.body)
	return nil
}

// completeFast writes small commit seq's outcome, log item, rows and
// scope copies (each idempotent: put-if-absent, or conditioned on the
// stored cs), then advances appliedSeq and takes the commit off the head.
func (s *Store) completeFast(ctx context.Context, p string, seq int64, logItem, outItem map[string]types.AttributeValue, body []byte) error {
	lb, err := decodeLogBody(body, seq)
	if err != nil {
		return fmt.Errorf("dynamostore: pending commit %d: %w", seq, err)
	}
	acts, err := s.materializationOf(p, seq, lb)
	if err != nil {
		return err
	}
	if !monotonic(acts) {
		return fmt.Errorf("dynamostore: pending commit %d has writes without a commit seq: %w", seq, errCorrupt)
	}
	type write struct {
		item  map[string]types.AttributeValue
		cond  string
		names map[string]string
		vals  map[string]types.AttributeValue
	}
	at, _ := getN(outItem, oAt)
	ocond, onames, ovals := outcomeAbsent(at)
	ws := []write{{outItem, ocond, onames, ovals}, {logItem, "attribute_not_exists(pk)", nil, nil}}
	for _, a := range acts {
		ws = append(ws, write{a.w.Put.Item, "attribute_not_exists(pk) OR cs <= :s", nil, map[string]types.AttributeValue{":s": N(seq)}})
	}
	err = fanOut(plainConcurrency, ws, func(w write) error {
		err := s.putItemNamed(ctx, "materialize small commit", w.item, w.cond, w.names, w.vals)
		if isConditionFailed(err) {
			return nil // written before (this commit's), or a later commit's row
		}
		return err
	})
	if err != nil {
		return err
	}
	return s.advanceApplied(ctx, p, seq)
}

// rollForwardFast finishes the small commit h carries; false when h
// carries none at seq.
func (s *Store) rollForwardFast(ctx context.Context, p string, h *head, seq int64) (bool, error) {
	if h.pendSeq != seq || h.pendLog == nil || h.pendOutcome == nil {
		return false, nil
	}
	logItem := maps.Clone(h.pendLog)
	logItem[AttrPK], logItem[AttrSK] = S(logPK(p)), S(chunkSK(seq, 0))
	client, _ := getS(h.pendLog, lClient)
	commitID, _ := getS(h.pendLog, lCommit)
	outItem := maps.Clone(h.pendOutcome)
	outItem[AttrPK], outItem[AttrSK] = S(outcomePK(p, client)), S(outcomeSK(commitID))
	body, ok := getB(h.pendLog, lData)
	if !ok {
		return false, fmt.Errorf("dynamostore: pending commit %d has no body: %w", seq, errCorrupt)
	}
	return true, s.completeFast(ctx, p, seq, logItem, outItem, body)
}
