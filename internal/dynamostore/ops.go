package dynamostore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// The thin wrappers below give every call the same treatment: bounded
// retries (call), ReturnConsumedCapacity TOTAL with the result recorded
// on the context, strongly consistent reads, and an estimate of the
// capacity from item sizes.

var total = types.ReturnConsumedCapacityTotal

func isConditionFailed(err error) bool {
	var cf *types.ConditionalCheckFailedException
	return errors.As(err, &cf)
}

// conditionItem returns the item a failed condition saw, when the
// request asked for it (ReturnValuesOnConditionCheckFailure ALL_OLD).
func conditionItem(err error) map[string]types.AttributeValue {
	var cf *types.ConditionalCheckFailedException
	if errors.As(err, &cf) {
		return cf.Item
	}
	return nil
}

func (s *Store) getItem(ctx context.Context, op, pk, sk string, projection *string) (map[string]types.AttributeValue, error) {
	var out *dynamodb.GetItemOutput
	err := call(ctx, s.retry, op, func(ctx context.Context) error {
		o, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
			TableName:              s.table,
			Key:                    Key(pk, sk),
			ConsistentRead:         aws.Bool(true),
			ProjectionExpression:   projection,
			ReturnConsumedCapacity: total,
		}, NoSDKRetry)
		if o != nil && o.ConsumedCapacity != nil {
			RecordConsumed(ctx, false, *o.ConsumedCapacity)
		}
		out = o
		return err
	})
	if err != nil {
		return nil, wrap(op, err)
	}
	RecordEstimate(ctx, readUnits(ItemSize(out.Item)), 0)
	return out.Item, nil
}

// putItem writes item, conditioned on cond when non-empty. A failed
// condition is returned unwrapped-compatible (isConditionFailed).
func (s *Store) putItem(ctx context.Context, op string, item map[string]types.AttributeValue, cond string, values map[string]types.AttributeValue) error {
	return s.putItemNamed(ctx, op, item, cond, nil, values)
}

// putItemNamed is putItem with attribute names for the condition.
func (s *Store) putItemNamed(ctx context.Context, op string, item map[string]types.AttributeValue, cond string, names map[string]string, values map[string]types.AttributeValue) error {
	in := &dynamodb.PutItemInput{
		TableName:                 s.table,
		Item:                      item,
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
		ReturnConsumedCapacity:    total,
	}
	if cond != "" {
		in.ConditionExpression = aws.String(cond)
	}
	err := call(ctx, s.retry, op, func(ctx context.Context) error {
		o, err := s.db.PutItem(ctx, in, NoSDKRetry)
		if o != nil && o.ConsumedCapacity != nil {
			RecordConsumed(ctx, true, *o.ConsumedCapacity)
		}
		return err
	})
	s.wroteItem(item)
	if err == nil || isConditionFailed(err) {
		RecordEstimate(ctx, 0, units(ItemSize(item), writeUnit))
	}
	return wrap(op, err)
}

// deleteItem deletes the item at key, conditioned on cond when non-empty.
// The estimate charges one write unit: callers delete small items only.
func (s *Store) deleteItem(ctx context.Context, op string, key map[string]types.AttributeValue, cond string, values map[string]types.AttributeValue) error {
	in := &dynamodb.DeleteItemInput{
		TableName:                 s.table,
		Key:                       key,
		ExpressionAttributeValues: values,
		ReturnConsumedCapacity:    total,
	}
	if cond != "" {
		in.ConditionExpression = aws.String(cond)
	}
	err := call(ctx, s.retry, op, func(ctx context.Context) error {
		o, err := s.db.DeleteItem(ctx, in, NoSDKRetry)
		if o != nil && o.ConsumedCapacity != nil {
			RecordConsumed(ctx, true, *o.ConsumedCapacity)
		}
		return err
	})
	s.wroteItem(key)
	if err == nil || isConditionFailed(err) {
		RecordEstimate(ctx, 0, 1)
	}
	return wrap(op, err)
}

// updateItem runs in (TableName, capacity and the ALL_OLD condition
// failure item filled in) and returns the ReturnValues attributes.
func (s *Store) updateItem(ctx context.Context, op string, in *dynamodb.UpdateItemInput) (map[string]types.AttributeValue, error) {
	in.TableName = s.table
	in.ReturnConsumedCapacity = total
	if in.ConditionExpression != nil {
		in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	}
	var out *dynamodb.UpdateItemOutput
	err := call(ctx, s.retry, op, func(ctx context.Context) error {
		o, err := s.db.UpdateItem(ctx, in, NoSDKRetry)
		if o != nil && o.ConsumedCapacity != nil {
			RecordConsumed(ctx, true, *o.ConsumedCapacity)
		}
		out = o
		return err
	})
	s.wroteItem(in.Key)
	if err == nil || isConditionFailed(err) {
		RecordEstimate(ctx, 0, 1) // updates here touch only the small head item
	}
	if err != nil {
		return nil, wrap(op, err)
	}
	return out.Attributes, nil
}

// query runs a consistent, paginated Query, calling page for each page
// until it returns false or the results end.
func (s *Store) query(ctx context.Context, op string, in *dynamodb.QueryInput, page func([]map[string]types.AttributeValue) bool) error {
	in.TableName = s.table
	if in.ConsistentRead == nil { // consistent unless asked otherwise
		in.ConsistentRead = aws.Bool(true)
	}
	in.ReturnConsumedCapacity = total
	for {
		var out *dynamodb.QueryOutput
		err := call(ctx, s.retry, op, func(ctx context.Context) error {
			o, err := s.db.Query(ctx, in, NoSDKRetry)
			if o != nil && o.ConsumedCapacity != nil {
				RecordConsumed(ctx, false, *o.ConsumedCapacity)
			}
			out = o
			return err
		})
		if err != nil {
			return wrap(op, err)
		}
		ru := queryUnits(out.Items)
		if !*in.ConsistentRead {
			ru /= 2
		}
		RecordEstimate(ctx, ru, 0)
		if len(out.Items) > 0 && !page(out.Items) {
			return nil
		}
		if len(out.LastEvaluatedKey) == 0 {
			return nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// batchGet reads keys (at most 100, distinct) consistently, retrying
// unprocessed keys with backoff.
func (s *Store) batchGet(ctx context.Context, op string, keys []map[string]types.AttributeValue) ([]map[string]types.AttributeValue, error) {
	return s.batchGetAt(ctx, op, keys, true)
}

// batchGetAt is batchGet, eventually consistent unless consistent (half
// the units; a miss costs half a unit).
func (s *Store) batchGetAt(ctx context.Context, op string, keys []map[string]types.AttributeValue, consistent bool) ([]map[string]types.AttributeValue, error) {
	var items []map[string]types.AttributeValue
	pending := keys
	for attempt := 1; len(pending) > 0; attempt++ {
		var out *dynamodb.BatchGetItemOutput
		err := call(ctx, s.retry, op, func(ctx context.Context) error {
			o, err := s.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{
				RequestItems:           map[string]types.KeysAndAttributes{*s.table: {Keys: pending, ConsistentRead: aws.Bool(consistent)}},
				ReturnConsumedCapacity: total,
			}, NoSDKRetry)
			if o != nil {
				RecordConsumed(ctx, false, o.ConsumedCapacity...)
			}
			out = o
			return err
		})
		if err != nil {
			return nil, wrap(op, err)
		}
		got := out.Responses[*s.table]
		items = append(items, got...)
		est := 0.0
		for _, it := range got {
			est += readUnits(ItemSize(it))
		}
		unp := out.UnprocessedKeys[*s.table].Keys
		est += float64(len(pending) - len(got) - len(unp)) // misses cost one unit each
		if !consistent {
			est /= 2
		}
		RecordEstimate(ctx, est, 0)
		pending = unp
		if len(pending) == 0 {
			break
		}
		if attempt >= s.retry.MaxAttempts {
			return nil, wrap(op, rateLimited(op, attempt))
		}
		if err := s.retry.backoff(ctx, attempt); err != nil {
			return nil, err
		}
	}
	return items, nil
}

// batchDelete deletes keys in BatchWriteItem requests of 25, retrying
// unprocessed items with backoff. Deletes are unconditional: callers use
// it only for items that may go regardless (pruned log, client records).
func (s *Store) batchDelete(ctx context.Context, op string, keys []map[string]types.AttributeValue) error {
	for len(keys) > 0 {
		n := min(len(keys), 25)
		reqs := make([]types.WriteRequest, n)
		for i, k := range keys[:n] {
			reqs[i] = types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: Key(k[AttrPK].(*types.AttributeValueMemberS).Value, k[AttrSK].(*types.AttributeValueMemberS).Value)}}
		}
		keys = keys[n:]
		for attempt := 1; len(reqs) > 0; attempt++ {
			var out *dynamodb.BatchWriteItemOutput
			err := call(ctx, s.retry, op, func(ctx context.Context) error {
				o, err := s.db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{
					RequestItems:           map[string][]types.WriteRequest{*s.table: reqs},
					ReturnConsumedCapacity: total,
				}, NoSDKRetry)
				if o != nil {
					RecordConsumed(ctx, true, o.ConsumedCapacity...)
				}
				out = o
				return err
			})
			if err != nil {
				return wrap(op, err)
			}
			unp := out.UnprocessedItems[*s.table]
			RecordEstimate(ctx, 0, float64(len(reqs)-len(unp)))
			reqs = unp
			if len(reqs) == 0 {
				break
			}
			if attempt >= s.retry.MaxAttempts {
				return wrap(op, rateLimited(op, attempt))
			}
			if err := s.retry.backoff(ctx, attempt); err != nil {
				return err
			}
		}
	}
	return nil
}

// txItem is one action of a write transaction with its item size.
type txItem struct {
	w    types.TransactWriteItem
	size int
}

// transact runs one TransactWriteItems. The client request token is kept
// across retries of an attempt whose result is unknown (network error,
// 5xx), so a transaction that landed but lost its response is not
// applied twice; it is renewed after a definitive cancellation.
func (s *Store) transact(ctx context.Context, op string, items []txItem) error {
	ws := make([]types.TransactWriteItem, len(items))
	est := 0.0
	for i := range items {
		ws[i] = items[i].w
		est += 2 * units(items[i].size, writeUnit)
	}
	token := newToken()
	err := call(ctx, s.retry, op, func(ctx context.Context) error {
		o, err := s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
			TransactItems:          ws,
			ClientRequestToken:     aws.String(token),
			ReturnConsumedCapacity: total,
		}, NoSDKRetry)
		if o != nil {
			RecordConsumed(ctx, true, o.ConsumedCapacity...)
		}
		var tc *types.TransactionCanceledException
		if errors.As(err, &tc) {
			token = newToken()
		}
		return err
	})
	for _, w := range ws {
		switch {
		case w.Update != nil:
			s.wroteItem(w.Update.Key)
		case w.Put != nil:
			s.wroteItem(w.Put.Item)
		case w.Delete != nil:
			s.wroteItem(w.Delete.Key)
		}
	}
	RecordEstimate(ctx, 0, est)
	return err
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// cancelReasons returns the per-item cancellation codes of a cancelled
// transaction (nil for any other error) and the items the failed
// conditions saw.
func cancelReasons(err error) ([]string, []map[string]types.AttributeValue) {
	var tc *types.TransactionCanceledException
	if !errors.As(err, &tc) {
		return nil, nil
	}
	codes := make([]string, len(tc.CancellationReasons))
	items := make([]map[string]types.AttributeValue, len(tc.CancellationReasons))
	for i, r := range tc.CancellationReasons {
		codes[i] = aws.ToString(r.Code)
		items[i] = r.Item
	}
	return codes, items
}

func rateLimited(op string, attempts int) error {
	return syncerr.New(syncerr.RateLimited, "storage is busy (%s: items still unprocessed after %d attempts)", op, attempts)
}

// fanOut calls fn for each of xs, at most n at a time, and returns the
// first error any call returned (every call runs).
func fanOut[T any](n int, xs []T, fn func(T) error) error {
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for _, x := range xs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := fn(x); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return first
}
