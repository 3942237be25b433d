package dynamostore

import (
	"context"
	"fmt"

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

// ListChildren implements store.Store: the head check (rolling an
// unmaterialized commit forward, as every row reader does), then one
// consistent Query of the parent's index partition, limited to limit
// items.
func (s *Store) ListChildren(ctx context.Context, partition, childTable, column, parentID string, limit int) ([]string, error) {
	if err := checkPartition(partition); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, nil
	}
	pk := refPK(partition, childTable, column, parentID)
	if !validKeyPart(childTable) || !validKeyPart(column) || !validKeyPart(parentID) || len(pk) > maxPKBytes {
		return nil, nil // a key no commit could have written
	}
	if err := s.ensureApplied(ctx, partition); err != nil {
		return nil, err
	}
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
