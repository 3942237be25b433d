package dynamostore

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"

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

// BackfillScopeIndex writes the scope copies (scopeindex.go) of every
// live row of tables written before the partition's commits wrote them,
// then marks the head (hScoped) so ScanScopedRows reads the copies from
// then on: for a partition whose copies a wide bootstrap turned on
// (hScopeOn; the scheduled prune run calls it, app.Pruner) and for one
// created before scope-keyed reads (issue 11 item 7; syncular-admin
// backfill-scopes), which it first turns on itself. tables must name
// every table the partition holds rows of (the schema's tables).
//
// Why no live row lacks its copies once hScoped is set: the head is read
// after hScopeOn is on it (set by this call, or read with it), at
// maxCommitSeq M. Every commit above M was conditioned on a head with
// hScopeOn (a commit without copies requires it absent,
// copiesOffCondition), so it writes its copies, inline or by whoever
// materializes it (a roller plans them from a head that shows the flag,
// which is never removed). Every commit up to M is materialized before
// the rows are read (rollForward: a pending small commit and a large one
// alike). Each live row read is then copied as read; a row that a commit
// above M rewrote or deleted meanwhile is skipped, as that commit writes
// or tombstones its copies itself.
//
// Safe under traffic: each copy is put only over an older one ("cs <= the
// row's cs"), so a copy of the row as read never replaces one a commit
// above M wrote (copyRow has why that is enough). Rows are copied 16 at
// a time, 1 WCU per copy.
// Idempotent and resumable: the head records the last page copied
// (hScopeFill, 1 WCU per page) and a run cut off by its deadline is
// resumed after it; the head is marked only after every table was
// copied. Rows deleted before have their copy tombstones
// (every delete writes them). A build from before adaptive copies that
// runs this backfill marks hScoped without turning copies on first, so
// copy-less commits of this build landing during its walk would be
// missed: backfill with this build's syncular-admin.
func (s *Store) BackfillScopeIndex(ctx context.Context, partition string, tables []string) (BackfillReport, error) {
	var rep BackfillReport
	if err := checkPartition(partition); err != nil {
		return rep, err
	}
	h, ok, err := s.readHead(ctx, partition)
	if err == nil && ok && !h.scoped && !h.copiesRequested {
		// Commits write copies from here on; the head read next shows it.
		if err = s.turnCopiesOn(ctx, partition); err == nil {
			h, ok, err = s.readHead(ctx, partition)
		}
	}
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
	list := tablesPrint(tables)
	from, after := resumeAt(h.fill, list, tables)
	for ti, table := range tables {
		if err := checkName("table", table); err != nil {
			return rep, err
		}
		if ti < from {
			continue // copied by an earlier run (resumeAt)
		}
		resume := ""
		if ti == from {
			resume = after
		}
		if err := s.copyTable(ctx, partition, table, list, resume, &rep); err != nil {
			return rep, fmt.Errorf("dynamostore: backfill %s/%s: %w", partition, table, err)
		}
	}
	_, err = s.updateItem(ctx, "backfill: mark head", &dynamodb.UpdateItemInput{
		Key:                       Key(headPK(partition), headSK),
		UpdateExpression:          aws.String("SET " + hScoped + " = :t REMOVE " + hScopeFill),
		ConditionExpression:       aws.String("attribute_exists(pk) AND " + hScopeOn + " = :t"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": BOOL(true)},
	})
	if err != nil {
		return rep, err
	}
	rep.Marked = true
	return rep, nil
}

// copyTable writes the scope copies of table's live rows after rowId
// after ("" for all), a page at a time, recording each finished page on
// the head (saveFill under the tables' fingerprint list) so a run cut off
// resumes after it.
func (s *Store) copyTable(ctx context.Context, partition, table, list, after string, rep *BackfillReport) error {
	var last string
	in := &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": S(rowPK(partition, table))},
		Limit:                     aws.Int32(s.scanPage),
	}
	if after != "" {
		in.KeyConditionExpression = aws.String("pk = :pk AND sk > :after")
		in.ExpressionAttributeValues[":after"] = S(skLowerBound(rowSK(after)))
	}
	var ferr error
	err := s.query(ctx, "backfill: read rows", in, func(items []map[string]types.AttributeValue) bool {
		var rows []*store.Row
		for _, it := range items {
			r, err := parseRow(it)
			if err != nil {
				ferr = err
				return false
			}
			if after != "" && r.RowID <= after {
				continue
			}
			last = r.RowID
			if r.Deleted || len(r.Scopes) == 0 {
				continue
			}
			rep.Rows++
			rows = append(rows, r)
		}
		if ferr = s.copyRows(ctx, partition, table, rows, rep); ferr == nil && last != "" {
			ferr = s.saveFill(ctx, partition, list+"\x00"+table+"\x00"+last)
		}
		return ferr == nil
	})
	if err == nil {
		err = ferr
	}
	return err
}

// hScopeFill on the head: where a BackfillScopeIndex cut off (by a
// request's or a prune run's deadline) stopped,
// "<tablesPrint>\x00<table>\x00<rowId>": the last row of the last page
// whose copies were all written. The next run over the same tables
// starts after it: a row before it was copied as it was then, and any
// commit that changed it since wrote its own copies (it came after
// hScopeOn). A run over other tables (a schema that added one) starts
// over, so no table is taken for copied that was not.
const hScopeFill = "sf"

// tablesPrint fingerprints a backfill's table list, in its order.
func tablesPrint(tables []string) string {
	h := fnv.New64a()
	for _, t := range tables {
		fmt.Fprintf(h, "%d:%s", len(t), t)
	}
	return strconv.FormatUint(h.Sum64(), 36)
}

// resumeAt parses a head's hScopeFill for a run over tables (print
// list): the index of the table to resume and the rowId to resume after
// (0, "": from the start).
func resumeAt(fill, list string, tables []string) (int, string) {
	got, rest, ok := strings.Cut(fill, "\x00")
	table, after, ok2 := strings.Cut(rest, "\x00")
	if !ok || !ok2 || got != list {
		return 0, ""
	}
	if i := slices.Index(tables, table); i >= 0 {
		return i, after
	}
	return 0, ""
}

// saveFill records a backfill's progress on the head (hScopeFill), once
// per page of rows: 1 WCU per scanPage rows.
func (s *Store) saveFill(ctx context.Context, p, fill string) error {
	_, err := s.updateItem(ctx, "backfill: progress", &dynamodb.UpdateItemInput{
		Key:                       Key(headPK(p), headSK),
		UpdateExpression:          aws.String("SET " + hScopeFill + " = :f"),
		ConditionExpression:       aws.String("attribute_exists(pk) AND " + hScopeOn + " = :t AND attribute_not_exists(" + hScoped + ")"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":f": S(fill), ":t": BOOL(true)},
	})
	if isConditionFailed(err) {
		return nil // another run marked the partition meanwhile
	}
	return err
}

// copyRows copies rows (one page), plainConcurrency at a time, counting
// them in rep.
func (s *Store) copyRows(ctx context.Context, p, table string, rows []*store.Row, rep *BackfillReport) error {
	var mu sync.Mutex
	return fanOut(plainConcurrency, rows, func(r *store.Row) error {
		ok, err := s.copyRow(ctx, p, table, r)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if ok {
			rep.Written++
		} else {
			rep.Skipped++
		}
		return nil
	})
}

// copyRow writes r's scope copies as read, each one plain PutItem
// conditioned on the stored copy being absent or older ("cs <= the
// row's cs"); false when a copy was refused (a later commit wrote or
// tombstoned it).
//
// No check that the row is still as read is needed: a commit that
// changes the row after the read is one after hScopeOn (the rows were
// read after every earlier commit was materialized), so it writes its
// own copies, or tombstones them for a delete, with its higher cs: if
// they land first this put is refused, if they land after they replace
// it. As for the plain batches of a roll-forward (doc.go), the one
// absent item a late put could fill is a copy tombstone Prune deleted,
// which Prune reaches only past the partition's retention. One write
// unit per copy KB, where a transaction with a check of the row cost 4.
func (s *Store) copyRow(ctx context.Context, p, table string, r *store.Row) (bool, error) {
	w := store.RowWrite{Table: table, Row: *r}
	if err := checkScopeKeys(&w); err != nil {
		return false, err
	}
	ok := true
	for _, a := range scopeIndexActions(s.table, p, r.CommitSeq, []store.RowWrite{w}) {
		err := s.putItem(ctx, "backfill: copy row", a.w.Put.Item, "attribute_not_exists(pk) OR cs <= :cs",
			map[string]types.AttributeValue{":cs": N(r.CommitSeq)})
		if isConditionFailed(err) {
			ok = false
			continue
		}
		if err != nil {
			return false, err
		}
	}
	return ok, nil
}
