package dynamostore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// Commit queue (store.CommitQueue, issue 11). The ticket counter is its
// own item beside the head: a single-item write on the head would fail
// with a transaction conflict whenever a commit transaction holds it, and
// under contention one always does. The turn lives on the head, so a
// queued commit checks and moves it in the head update it makes anyway.
const (
	queueSK  = "QUEUE" // ticket item, pk = the head's
	qTickets = "tk"    // N last ticket handed out

	qWaitPfx = "w" // w<ticket>: N the turn its holder saw while waiting

	hTurn     = "tn" // N last ticket that committed, passed or was skipped
	hTurnAt   = "tt" // N when tn last moved, µs since the Unix epoch
	hTurnGap  = "tg" // N smoothed µs between moves of tn
	hDeadFrom = "df" // N, with dm: tickets above tn a skip found dead
	hDeadMask = "dm" // N (store.Head.Dead)
)

var _ store.CommitQueue = (*Store)(nil)

// TakeTicket implements store.CommitQueue: one UpdateItem ADD on the
// ticket item (1 WCU, no condition).
func (s *Store) TakeTicket(ctx context.Context, partition string) (int64, error) {
	if err := checkPartition(partition); err != nil {
		return 0, err
	}
	item, err := s.updateItem(ctx, "take commit ticket", &dynamodb.UpdateItemInput{
		Key:                       Key(headPK(partition), queueSK),
		UpdateExpression:          aws.String("ADD tk :one"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": N(1)},
		ReturnValues:              types.ReturnValueUpdatedNew,
	})
	if err != nil {
		return 0, err
	}
	t, ok := getN(item, qTickets)
	if !ok || t < 1 {
		return 0, fmt.Errorf("dynamostore: commit ticket item is malformed: %w", errCorrupt)
	}
	return t, nil
}

// turnCondition is the head condition "the turn is t" (absent counts
// as 0).
func turnCondition(t int64) string {
	if t == 0 {
		return "(attribute_not_exists(tn) OR tn = :tp)"
	}
	return "tn = :tp"
}

// moveTurn sets the head's turn from `from` to `to` if it is still
// `from`; false when it had moved. The head must exist.
// A non-empty dead replaces the head's record of dead tickets.
func (s *Store) moveTurn(ctx context.Context, op, partition string, from, to, nowUs int64, dead store.DeadTickets) (bool, error) {
	if err := checkPartition(partition); err != nil {
		return false, err
	}
	update := "SET tn = :t, tt = :at"
	vals := map[string]types.AttributeValue{":tp": N(from), ":t": N(to), ":at": N(nowUs)}
	if dead.Mask != 0 {
		update += ", df = :df, dm = :dm"
		vals[":df"], vals[":dm"] = N(dead.From), N(dead.Mask)
	}
	_, err := s.updateItem(ctx, op, &dynamodb.UpdateItemInput{
		Key:                       Key(headPK(partition), headSK),
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String("attribute_exists(pk) AND " + turnCondition(from)),
		ExpressionAttributeValues: vals,
	})
	if isConditionFailed(err) {
		return false, nil
	}
	return err == nil, err
}

// PassTurn implements store.CommitQueue.
func (s *Store) PassTurn(ctx context.Context, partition string, ticket, nowUs int64) error {
	_, err := s.moveTurn(ctx, "pass commit turn", partition, ticket-1, ticket, nowUs, store.DeadTickets{})
	return err
}

// SkipTurn implements store.CommitQueue.
func (s *Store) SkipTurn(ctx context.Context, partition string, from, to, nowUs int64, dead store.DeadTickets) (bool, error) {
	return s.moveTurn(ctx, "skip stalled commit turn", partition, from, to, nowUs, dead)
}

// MarkWaiting implements store.CommitQueue: one UpdateItem SET on the
// ticket item (1 WCU, no condition), naming the ticket's own attribute
// (w<ticket>), so live waiters never contend with each other or with a
// ticket being taken.
func (s *Store) MarkWaiting(ctx context.Context, partition string, ticket, turn int64) error {
	if err := checkPartition(partition); err != nil {
		return err
	}
	if ticket <= turn+1 {
		return fmt.Errorf("dynamostore: ticket %d is not waiting behind turn %d", ticket, turn)
	}
	_, err := s.updateItem(ctx, "mark commit ticket waiting", &dynamodb.UpdateItemInput{
		Key:                       Key(headPK(partition), queueSK),
		UpdateExpression:          aws.String("SET #w = :turn"),
		ExpressionAttributeNames:  map[string]string{"#w": qWaitPfx + strconv.FormatInt(ticket, 10)},
		ExpressionAttributeValues: map[string]types.AttributeValue{":turn": N(turn)},
	})
	return err
}

// WaitingTickets implements store.CommitQueue: one consistent GetItem of
// the ticket item. Marks of tickets at or below turn belong to holders
// the turn has passed: they are removed (one more UpdateItem, only when
// there are any), which keeps the item as small as the live queue.
func (s *Store) WaitingTickets(ctx context.Context, partition string, turn int64) ([]int64, error) {
	if err := checkPartition(partition); err != nil {
		return nil, err
	}
	item, err := s.getItem(ctx, "read waiting commit tickets", headPK(partition), queueSK, nil)
	if err != nil {
		return nil, err
	}
	var live []int64
	var stale []string
	for name := range item {
		digits, ok := strings.CutPrefix(name, qWaitPfx)
		if !ok {
			continue
		}
		t, perr := strconv.ParseInt(digits, 10, 64)
		seen, nok := getN(item, name)
		if perr != nil || !nok {
			return nil, fmt.Errorf("dynamostore: waiting mark %q is malformed: %w", name, errCorrupt)
		}
		switch {
		case t <= turn:
			stale = append(stale, name)
		case seen == turn:
			live = append(live, t)
		}
	}
	slices.Sort(live)
	if len(stale) > 0 {
		slices.Sort(stale)
		stale = stale[:min(len(stale), 100)] // bounded expression; the rest go next time
		names := make(map[string]string, len(stale))
		refs := make([]string, len(stale))
		for i, n := range stale {
			refs[i] = "#s" + strconv.Itoa(i)
			names[refs[i]] = n
		}
		if _, err := s.updateItem(ctx, "remove passed waiting marks", &dynamodb.UpdateItemInput{
			Key:                      Key(headPK(partition), queueSK),
			UpdateExpression:         aws.String("REMOVE " + strings.Join(refs, ", ")),
			ExpressionAttributeNames: names,
		}); err != nil {
			return nil, err
		}
	}
	return live, nil
}

// readRowChecks returns, per (table, rowId), the condition that keeps a
// row as the evaluation read it (store.CommitRequest.ReadRows). A key no
// item can have (GetRows skips it too) is absent for good: no check.
func readRowChecks(p string, rr []store.RowRead) map[rowKey]store.RowRead {
	m := make(map[rowKey]store.RowRead, len(rr))
	for _, r := range rr {
		if !validKeyPart(r.Table) || !keyableRow(p, r.Table, r.RowID) {
			continue
		}
		m[rowKey{r.Table, r.RowID}] = r
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

// rowReadCondition is the condition expression and values for one read
// row: its commitSeq unchanged, or still absent.
func rowReadCondition(r store.RowRead) (*string, map[string]types.AttributeValue) {
	if !r.Present {
		return aws.String("attribute_not_exists(pk)"), nil
	}
	return aws.String("cs = :rcs"), map[string]types.AttributeValue{":rcs": N(r.CommitSeq)}
}

// rowReadCheck is the ConditionCheck action for a read row the commit
// does not write (or writes only after its log transaction).
func rowReadCheck(table *string, p string, r store.RowRead) txItem {
	cond, vals := rowReadCondition(r)
	return txItem{size: 60 + len(p) + len(r.Table) + len(r.RowID), w: types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName: table, Key: Key(rowPK(p, r.Table), rowSK(r.RowID)),
		ConditionExpression: cond, ExpressionAttributeValues: vals,
	}}}
}
