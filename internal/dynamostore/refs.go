package dynamostore

import (
	"context"
	"fmt"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// The §6.11 reference index: one item per (child table, reference column,
// parent id, child row id), keyed so that a parent's children are one
// consistent Query (keys.go). The item carries nothing but its key.

type refItemKey struct{ table, column, parent, child string }

// dedupeRefs keeps the last write of each index item (a transaction may
// not touch an item twice).
func dedupeRefs(refs []store.RefWrite) []store.RefWrite {
	last := make(map[refItemKey]int, len(refs))
	for i := range refs {
		r := &refs[i]
		last[refItemKey{r.ChildTable, r.Column, r.ParentID, r.ChildID}] = i
	}
	if len(last) == len(refs) {
		return refs
	}
	out := make([]store.RefWrite, 0, len(last))
	for i := range refs {
		r := &refs[i]
		if last[refItemKey{r.ChildTable, r.Column, r.ParentID, r.ChildID}] == i {
			out = append(out, *r)
		}
	}
	return out
}

func checkRefKey(p string, r *store.RefWrite) error {
	for _, n := range [...][2]string{{"table", r.ChildTable}, {"column", r.Column}, {"parent id", r.ParentID}, {"rowId", r.ChildID}} {
		if err := checkName(n[0], n[1]); err != nil {
			return err
		}
	}
	if len(refPK(p, r.ChildTable, r.Column, r.ParentID)) > maxPKBytes || len(rowSK(r.ChildID)) > maxSKBytes {
		return fmt.Errorf("dynamostore: reference index key for %s.%s exceeds the key limits: %w", r.ChildTable, r.Column, store.ErrTooLarge)
	}
	return nil
}

// refAction is the transaction action applying r: an unconditional put
// or delete, both idempotent.
func refAction(table *string, p string, r *store.RefWrite) txItem {
	k := Key(refPK(p, r.ChildTable, r.Column, r.ParentID), rowSK(r.ChildID))
	if r.Remove {
		return txItem{w: types.TransactWriteItem{Delete: &types.Delete{TableName: table, Key: k}}, size: ItemSize(k)}
	}
	return txItem{w: types.TransactWriteItem{Put: &types.Put{TableName: table, Item: k}}, size: ItemSize(k)}
}

// listConcurrency bounds the index Queries of one ListChildren call in
// flight.
const listConcurrency = 8

// ListChildren implements store.Store: one head check for the whole call
// (rolling an unmaterialized commit forward, as every row reader does),
// then one consistent Query per parent's index partition, limited to
// limit items, listConcurrency at a time. A cascade level of n parents
// costs 1 + n round trips, and about n/listConcurrency Query latencies.
func (s *Store) ListChildren(ctx context.Context, partition string, qs []store.ChildQuery, limit int) ([][]string, error) {
	if err := checkPartition(partition); err != nil {
		return nil, err
	}
	out := make([][]string, len(qs))
	if limit <= 0 || len(qs) == 0 {
		return out, nil
	}
	if err := s.ensureApplied(ctx, partition); err != nil {
		return nil, err
	}
	sem := make(chan struct{}, listConcurrency)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for i := range qs {
		q := &qs[i]
		pk := refPK(partition, q.ChildTable, q.Column, q.ParentID)
		if !validKeyPart(q.ChildTable) || !validKeyPart(q.Column) || !validKeyPart(q.ParentID) || len(pk) > maxPKBytes {
			continue // a key no commit could have written
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ids, err := s.listChildren(ctx, pk, limit)
			if err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
				return
			}
			out[i] = ids // each goroutine owns its slot
		})
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return out, nil
}

// listChildren is the index Query of one parent.
func (s *Store) listChildren(ctx context.Context, pk string, limit int) ([]string, error) {
	var ids []string
	var perr error
	err := s.query(ctx, "list children", &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": S(pk)},
		Limit:                     aws.Int32(int32(min(limit, 1000))),
		ProjectionExpression:      aws.String("sk"),
	}, func(items []map[string]types.AttributeValue) bool {
		for _, it := range items {
			sk, ok := getS(it, AttrSK)
			if !ok || len(sk) < 1 {
				perr = fmt.Errorf("dynamostore: reference index item is malformed: %w", errCorrupt)
				return false
			}
			ids = append(ids, sk[1:])
			if len(ids) == limit {
				return false
			}
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	return ids, perr
}
