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
// # Adaptive copies (issue 23)
//
// The copies pay off only where a bootstrap reads a small part of a
// table: in a partition whose rows all carry the value its clients pull
// (one project, one user) reading the row items returns exactly the
// visible rows, and the copy is 1 WCU of every 1-op commit's 5 that no
// read uses. So a partition starts without copies (Options.
// ScopeCopiesNewPartitions keeps the old start, sx at creation), and
// ScanScopedRows, reading row items, counts the items it read and those
// matching; when at least scopeWideMin were read and fewer than 1 in
// scopeWideRatio matched, it sets hScopeOn on the head (one conditional
// UpdateItem, once per partition). From then on every commit writes its
// copies, and the scheduled prune run (app.Pruner) backfills the rows
// written before (BackfillScopeIndex), which sets hScoped: reads use the
// copies from then on.
//
// A commit without live copies is conditioned on the head having neither
// hScopeOn nor hScoped (copiesOffCondition), in the same update that
// moves maxCommitSeq, on every commit path (the small commit point, the
// transaction, groups); a commit refused by it is written again with its
// copies (layoutError). So every commit after hScopeOn writes its
// copies, and BackfillScopeIndex, which reads the head after hScopeOn
// and settles every commit up to it before reading rows, leaves no live
// row without them when it sets hScoped (backfill.go has the argument).
// Which way a commit goes is this instance's memory of the head
// (noteIndex), as for the log index; a small commit uses the head its
// first wave reads.
//
// A delete writes its copy tombstones whatever the partition's state.
// Copies can exist in a partition without hScoped: written by an older
// build during a rolling deploy (it writes copies always), by a roller
// of a commit after hScopeOn was set, or by a build from before this
// (partitions created before the index, never backfilled). A copy
// whose row is updated without it only goes stale, and the backfill
// rewrites it from the row; a copy whose row is deleted has no row left
// to rewrite it from, so without its tombstone it would come back as a
// live row once hScoped is set. The tombstone costs 1 WCU per scope of
// a delete (and Prune's DeleteItem of it later), never of an insert or
// update; and since every delete wrote its copy tombstones, Prune's
// DeleteItem of each (tombstoneKeys) finds one, as before.
//
// A partition created before the index existed has no copies of its old
// rows; its head lacks hScoped until the backfill has written them, and
// ScanScopedRows reads the row items (the old cost) until then.

// hScoped on the head marks a partition whose every live row has its
// scope copies (set at creation with Options.ScopeCopiesNewPartitions,
// or by BackfillScopeIndex).
const hScoped = "sx"

const (
	// hScopeOn on the head: commits write scope copies (set by a wide
	// bootstrap or the backfill); hScoped follows once the rows before
	// it are copied.
	hScopeOn = "so"
	// scopeWideMin and scopeWideRatio: a read of row items of at least
	// scopeWideMin items of which fewer than 1 in scopeWideRatio match
	// shows a wide partition.
	scopeWideMin   = 256
	scopeWideRatio = 8
	// copiesOffCondition is the head condition of a commit written
	// without live scope copies.
	copiesOffCondition = "attribute_not_exists(" + hScoped + ") AND attribute_not_exists(" + hScopeOn + ")"
)

// copiesOn reports whether commits on h write their scope copies.
func (h head) copiesOn() bool { return h.scoped || h.copiesRequested }

// layout is what a commit writes beyond its rows, log and outcome: the
// log-index entries (logindex.go) and the live scope copies.
type layout struct{ index, copies bool }

func (h head) layout() layout { return layout{index: h.indexOn(), copies: h.copiesOn()} }

// covers reports whether a commit written with l satisfies a head that
// asks for w.
func (l layout) covers(w layout) bool { return (l.index || !w.index) && (l.copies || !w.copies) }

func (l layout) or(w layout) layout {
	return layout{index: l.index || w.index, copies: l.copies || w.copies}
}

// layoutError: a commit written with less than the head asks for (the
// log index on, or scope copies on) met it; Commit writes it again with
// want.
type layoutError struct{ want layout }

func (e *layoutError) Error() string {
	return fmt.Sprintf("dynamostore: the partition's head asks for log-index entries %t, scope copies %t", e.want.index, e.want.copies)
}

// copyWrites is the scope-copy writes of a commit with or without live
// copies: without, only the copy tombstones of its deletes (above).
func copyWrites(acts []txItem, copies bool) []txItem {
	if copies {
		return acts
	}
	var out []txItem
	for _, a := range acts {
		if a.w.Put != nil && a.w.Put.Item[rDeleted] != nil {
			out = append(out, a)
		}
	}
	return out
}

// turnCopiesOn sets hScopeOn on p's head (once). The commits after it
// write their copies.
func (s *Store) turnCopiesOn(ctx context.Context, p string) error {
	return s.setHeadFlag(ctx, "turn scope copies on", p, hScopeOn)
}

// wideScan reports whether a read of row items (read items, matched of
// them visible under the requested values) shows a wide partition.
func wideScan(read, matched int) bool {
	return read >= scopeWideMin && matched*scopeWideRatio < read
}

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
// strictly after `after`. On a partition whose copies are not all
// written (no hScoped on the head) it reads the table's row items once
// per value and keeps the matching ones; when that read shows the
// partition wide (wideScan) it turns copies on (adaptive, above).
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
	var read, matched int
	err = s.scanScoped(ctx, partition, table, variable, values, after, want, h.scoped, &read, &matched, fn)
	if err == nil && !h.copiesOn() && wideScan(read, matched) {
		// Most of the items read were other values' rows: copy rows
		// from here on; the prune run backfills the rest.
		err = s.turnCopiesOn(ctx, partition)
	}
	return err
}

// scanScoped is ScanScopedRows' reads after the head: from the copies
// when scoped, else from the row items, counting the items read and the
// rows handed to fn (their matches).
func (s *Store) scanScoped(ctx context.Context, partition, table, variable string, values []string, after *store.ScopeCursor, want int, scoped bool, read, matched *int, fn func(string, *store.Row) bool) error {
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
		if scoped {
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
				*read++
				r, err := parseRow(it)
				if err != nil {
					perr = err
					return false
				}
				if r.Deleted || hasFrom && r.RowID <= from || !hasScope(r.Scopes, variable, v) {
					continue
				}
				*matched++
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
