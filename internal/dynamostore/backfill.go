package dynamostore

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// BackfillReport is what BackfillScopeIndex did in one partition.
type BackfillReport struct {
	Rows    int  // live scoped rows read
	Written int  // rows whose scope copies were written
	Skipped int  // rows that changed while being copied (their commit wrote the copies)
	Marked  bool // the head now marks the partition indexed
}

// BackfillScopeIndex moves a partition created before scope-keyed reads
// to the new layout online (issue 11 item 7): it writes the scope copies
// (scopeindex.go) of every live row of tables, then marks the head
// (hScoped) so ScanScopedRows reads the copies from then on. tables must
// name every table the partition holds rows of (the schema's tables).
//
// Safe under traffic: each copy is written in a transaction with a
// ConditionCheck that its row item is still the one read (same cs, not a
// tombstone), so a row a concurrent commit rewrote or deleted is skipped
// (that commit wrote or deleted its copies itself). Idempotent and
// resumable: running it again rewrites identical copies, and the head is
// marked only after every table was copied. Every writer must already run
// a version that writes copies: a commit of an older version writes none.
func (s *Store) BackfillScopeIndex(ctx context.Context, partition string, tables []string) (BackfillReport, error) {
	var rep BackfillReport
	if err := checkPartition(partition); err != nil {
		return rep, err
	}
	h, ok, err := s.readHead(ctx, partition)
	if err != nil || !ok {
		if err == nil {
			err = ErrUnknownPartition
		}
		return rep, err
	}
	if h.scoped {
		rep.Marked = true
		return rep, nil
	}
	if h.applied < h.MaxCommitSeq {
		if err := s.rollForward(ctx, partition, h); err != nil {
			return rep, err
		}
	}
	for _, table := range tables {
		if err := checkName("table", table); err != nil {
			return rep, err
		}
		var rows []*store.Row
		flush := func() error {
			for _, r := range rows {
				ok, err := s.copyRow(ctx, partition, table, r)
				if err != nil {
					return err
				}
				if ok {
					rep.Written++
				} else {
					rep.Skipped++
				}
			}
			rows = rows[:0]
			return nil
		}
		var ferr error
		err := s.query(ctx, "backfill: read rows", &dynamodb.QueryInput{
			KeyConditionExpression:    aws.String("pk = :pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": S(rowPK(partition, table))},
			Limit:                     aws.Int32(s.scanPage),
		}, func(items []map[string]types.AttributeValue) bool {
			for _, it := range items {
				r, err := parseRow(it)
				if err != nil {
					ferr = err
					return false
				}
				if r.Deleted || len(r.Scopes) == 0 {
					continue
				}
				rep.Rows++
				rows = append(rows, r)
			}
			ferr = flush()
			return ferr == nil
		})
		if err == nil {
			err = ferr
		}
		if err != nil {
			return rep, fmt.Errorf("dynamostore: backfill %s/%s: %w", partition, table, err)
		}
	}
	_, err = s.updateItem(ctx, "backfill: mark head", &dynamodb.UpdateItemInput{
		Key:                       Key(headPK(partition), headSK),
		UpdateExpression:          aws.String("SET " + hScoped + " = :t"),
		ConditionExpression:       aws.String("attribute_exists(pk)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": BOOL(true)},
	})
	if err != nil {
		return rep, err
	}
	rep.Marked = true
	return rep, nil
}

// copyRow writes r's scope copies if its row item is unchanged; false
// when it changed (or went) meanwhile.
func (s *Store) copyRow(ctx context.Context, p, table string, r *store.Row) (bool, error) {
	w := store.RowWrite{Table: table, Row: *r}
	if err := checkScopeKeys(&w); err != nil {
		return false, err
	}
	items := []txItem{{size: 100, w: types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName:                 s.table,
		Key:                       Key(rowPK(p, table), rowSK(r.RowID)),
		ConditionExpression:       aws.String("cs = :cs AND attribute_not_exists(dl)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":cs": N(r.CommitSeq)},
	}}}}
	items = append(items, scopeIndexActions(s.table, p, r.CommitSeq, []store.RowWrite{w})...)
	err := s.transact(ctx, "backfill: copy row", items)
	if codes, _ := cancelReasons(err); len(codes) > 0 && codes[0] == "ConditionalCheckFailed" {
		return false, nil
	}
	return err == nil, wrap("backfill: copy row", err)
}
