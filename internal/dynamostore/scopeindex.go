package dynamostore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// Scope-keyed rows (issue 11). Every live row of a scoped table has, next
// to its row item (pk per table, sk by rowId: what a push reads), one
// copy per stored scope under
//
//	pk P#<p>#V#<table>#<variable>#<value key>   sk R<rowId>
//
// where <value key> is "=" + esc(value), or "H" + hex(sha256(value))
// when that would push the pk past DynamoDB's 2048 bytes (the first
// character keeps the two forms apart; a digest collision is harmless
// because every read compares the row's stored value). A bootstrap page
// then Queries only the pks of the requested values (ScanScopedRows),
// so its cost follows the rows the client may see, not the table.
//
// Scope values are immutable after insert (§3.4), so a copy never moves:
// an upsert Puts each copy with the row, a delete Puts the row's
// tombstone in their place (its RowWrite carries the deleted row's
// scopes, which the tombstone keeps; issue 23), all in the commit's
// transaction or its roll-forward. Bootstrap pages skip copy tombstones
// as ScanRows skips row tombstones; Prune deletes both. Rows of
// tables without scopes have no copies.
//
// A partition created before the index existed has no copies of its old
// rows; its head lacks hScoped until syncular-admin's backfill
// (BackfillScopeIndex) has written them, and ScanScopedRows reads the row
// items (the old cost) until then.

// hScoped on the head marks a partition whose every live row has its
// scope copies (set at creation, or by BackfillScopeIndex).
const hScoped = "sx"

func scopePK(p, table, variable, value string) string {
	base := PartitionPK(p) + "#V#" + esc(table) + "#" + esc(variable) + "#"
	if k := base + "=" + esc(value); len(k) <= maxPKBytes {
		return k
	}
	sum := sha256.Sum256([]byte(value))
	return base + "H" + hex.EncodeToString(sum[:])
}

// scopeIndexActions returns the scope-copy writes of a commit's row
// writes, given in commit order (not deduplicated): per copy key its
// final state, a Put of the row when the last write of that row is an
// upsert with that scope, a Delete otherwise (a delete, or a delete then
// an insert under other scopes within the commit).
func scopeIndexActions(tbl *string, p string, seq int64, writes []store.RowWrite) []txItem {
	type copyKey struct{ pk, rowID string }
	var order []copyKey
	last := map[copyKey]*store.RowWrite{}
	for i := range writes {
		w := &writes[i]
		for _, sc := range w.Row.Scopes {
			k := copyKey{scopePK(p, w.Table, sc.Key, sc.Value), w.Row.RowID}
			if _, seen := last[k]; !seen {
				order = append(order, k)
			}
			last[k] = w
		}
	}
	// An upsert whose row an earlier write of the commit held under other
	// scopes leaves those copies deleted: a key's final state is set by
	// the last write that named it, and a later upsert under other scopes
	// follows a delete (which named it) by the §3.4 rule. A deleted copy
	// is a tombstone (the row's own tombstone under the copy's key), not
	// a DeleteItem: a roll-forward's plain write conditioned on the
	// stored cs then cannot bring a copy back that a later commit deleted
	// (commit.go, plain materialization); Prune deletes it with the row's.
	out := make([]txItem, 0, len(order))
	for _, k := range order {
		item := rowItem(p, seq, last[k])
		item[AttrPK] = S(k.pk)
		out = append(out, txItem{size: ItemSize(item), w: types.TransactWriteItem{Put: &types.Put{TableName: tbl, Item: item}}})
	}
	return out
}

// checkScopeKeys refuses a row write whose scope names DynamoDB cannot key.
func checkScopeKeys(w *store.RowWrite) error {
	for _, sc := range w.Row.Scopes {
		if err := checkName("scope variable", sc.Key); err != nil {
			return err
		}
		if err := checkName("scope value", sc.Value); err != nil {
			return err
		}
	}
	return nil
}

// ScanScopedRows implements store.Store: one consistent Query per
// requested value on that value's scope-copy pk, in rowId order, resumed
// strictly after `after`. On a partition whose index is not backfilled
// yet (no hScoped on the head) it reads the table's row items once per
// value and keeps the matching ones.
func (s *Store) ScanScopedRows(ctx context.Context, partition, table, variable string, values []string, after *store.ScopeCursor, want int, fn func(string, *store.Row) bool) error {
	if err := checkPartition(partition); err != nil {
		return err
	}
	if err := checkName("table", table); err != nil {
		return err
	}
	if err := checkName("scope variable", variable); err != nil {
		return err
	}
	h, ok, err := s.readHead(ctx, partition)
	if err != nil || !ok {
		return err
	}
	if err := s.settle(ctx, partition, h); err != nil {
		return err
	}
	vals := slices.Clone(values)
	slices.Sort(vals)
	vals = slices.Compact(vals)
	// limit sizes each Query to the rows the caller may still take: a
	// page of 1,000 rows and its lookahead row cost one 1,001-item Query,
	// not a second full one whose rows are read and dropped (a 1% scope
	// of a 1M-row table read 2.09× its rows' bytes that way).
	limit := func() *int32 {
		if want > 0 {
			return aws.Int32(int32(min(want, int(s.scanPage))))
		}
		return aws.Int32(s.scanPage)
	}
	for _, v := range vals {
		if !validKeyPart(v) {
			continue // no stored row has it
		}
		var from string
		var hasFrom bool
		if after != nil {
			if v < after.Value {
				continue
			}
			if v == after.Value {
				if !validKeyPart(after.RowID) {
					return fmt.Errorf("dynamostore: scan cursor is not valid UTF-8")
				}
				from, hasFrom = after.RowID, true
			}
		}
		pk := rowPK(partition, table)
		if h.scoped {
			pk = scopePK(partition, table, variable, v)
		}
		in := &dynamodb.QueryInput{
			KeyConditionExpression:    aws.String("pk = :pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": S(pk)},
			Limit:                     limit(),
		}
		if hasFrom {
			in.KeyConditionExpression = aws.String("pk = :pk AND sk > :after")
			in.ExpressionAttributeValues[":after"] = S(skLowerBound(rowSK(from)))
		}
		stop := false
		var perr error
		err := s.query(ctx, "scan scoped rows", in, func(items []map[string]types.AttributeValue) bool {
			for _, it := range items {
				r, err := parseRow(it)
				if err != nil {
					perr = err
					return false
				}
				if r.Deleted || hasFrom && r.RowID <= from || !hasScope(r.Scopes, variable, v) {
					continue
				}
				if want > 0 {
					want--
				}
				if !fn(v, r) {
					stop = true
					return false
				}
			}
			in.Limit = limit() // the next page of this Query
			return true
		})
		if err != nil {
			return err
		}
		if perr != nil {
			return perr
		}
		if stop {
			return nil
		}
	}
	return nil
}

func hasScope(s wire.StoredScopes, variable, value string) bool {
	for _, sc := range s {
		if sc.Key == variable {
			return sc.Value == value
		}
	}
	return false
}

// skLowerBound cuts a sort-key bound to the 1024-byte key-condition
// limit at a rune boundary: a lower bound, so no row is skipped; callers
// apply the exact bound to what they read.
func skLowerBound(sk string) string {
	if len(sk) <= maxSKBytes {
		return sk
	}
	cut := maxSKBytes
	for cut > 0 && !utf8.RuneStart(sk[cut]) {
		cut--
	}
	return sk[:cut]
}
