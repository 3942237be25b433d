package dynamostore

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// TestScopeIndexBackfill: a partition from before scope-keyed reads (no
// head mark, rows without scope copies) answers ScanScopedRows from its
// row items; BackfillScopeIndex writes the copies, marks the head, and
// from then on a scoped read touches only the requested value's rows.
// Rows written after the upgrade but before the backfill are served
// either way, and a second backfill changes nothing.
func TestScopeIndexBackfill(t *testing.T) {
	c := testenv.DynamoDB(t).Client(t)
	table := testenv.UniqueName(t, "backfill")
	ctx := context.Background()
	if err := CreateTable(ctx, c, table); err != nil {
		t.Fatal(err)
	}
	s := New(c, table, Options{})
	p := "legacy"
	if _, err := s.TouchPartition(ctx, p, 1, "e"); err != nil {
		t.Fatal(err)
	}
	// Turn it into a pre-index partition: no mark, and 200 rows in 20
	// orgs stored as row items only (as the previous version wrote them).
	if _, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table), Key: Key(headPK(p), headSK),
		UpdateExpression: aws.String("REMOVE " + hScoped)}); err != nil {
		t.Fatal(err)
	}
	org := func(i int) string { return fmt.Sprintf("o%02d", i%20) }
	for i := range 200 {
		w := store.RowWrite{Table: "tasks", Row: store.Row{RowID: fmt.Sprintf("r%03d", i), Version: 1, Payload: []byte("p"),
			Scopes: wire.StoredScopes{{Key: "org", Value: org(i)}}}}
		if _, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: rowItem(p, 0, &w)}); err != nil {
			t.Fatal(err)
		}
	}
	// A commit after the upgrade (copies written) that also deletes an
	// old row (its copy delete is a no-op).
	req := &store.CommitRequest{ExpectedMaxSeq: 0,
		Commit: store.Commit{Seq: 1, ClientID: "c", ClientCommitID: "1", Changes: []store.Change{
			{Table: "tasks", RowID: "new", Op: wire.OpUpsert, RowVersion: 1, Row: []byte("n"), Scopes: wire.StoredScopes{{Key: "org", Value: "o03"}}},
			{Table: "tasks", RowID: "r003", Op: wire.OpDelete, Scopes: wire.StoredScopes{{Key: "org", Value: "o03"}}},
		}},
		Outcome: store.Outcome{Applied: true, CommitSeq: 1}}
	req.Rows = []store.RowWrite{
		{Table: "tasks", Row: store.Row{RowID: "new", Version: 1, Payload: []byte("n"), Scopes: wire.StoredScopes{{Key: "org", Value: "o03"}}}},
		{Table: "tasks", Delete: true, Row: store.Row{RowID: "r003", Scopes: wire.StoredScopes{{Key: "org", Value: "o03"}}}},
	}
	if err := s.Commit(ctx, p, req); err != nil {
		t.Fatal(err)
	}
	want := []string{"new", "r023", "r043", "r063", "r083", "r103", "r123", "r143", "r163", "r183"}
	read := func(what string) Usage {
		t.Helper()
		mctx, capacity := WithCapacity(ctx)
		var got []string
		if err := s.ScanScopedRows(mctx, p, "tasks", "org", []string{"o03"}, nil, 0, func(_ string, r *store.Row) bool {
			got = append(got, r.RowID)
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: %v, want %v", what, got, want)
		}
		return capacity.Snapshot()
	}
	before := read("before the backfill")
	rep, err := s.BackfillScopeIndex(ctx, p, []string{"tasks", "notes"})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Marked || rep.Rows != 200 || rep.Written != 200 {
		t.Fatalf("backfill report %+v, want 200 live rows (199 old + new) copied and the head marked", rep)
	}
	after := read("after the backfill")
	t.Logf("scoped read of 10 of 200 rows: before %d trips %.1f RCU, after %d trips %.1f RCU", before.RoundTrips, before.EstRCU, after.RoundTrips, after.EstRCU)
	if after.EstRCU >= before.EstRCU || after.EstRCU > 2 {
		t.Fatalf("after the backfill the read costs %.1f RCU (before %.1f): the copies are not used", after.EstRCU, before.EstRCU)
	}
	if rep, err := s.BackfillScopeIndex(ctx, p, []string{"tasks"}); err != nil || !rep.Marked || rep.Written != 0 {
		t.Fatalf("second backfill: %+v %v", rep, err)
	}
	read("after a second backfill")
}

// TestLogIndexBeforeFirstIndexedCommit: commits logged before the log
// index existed have no entries; a scoped read whose window reaches below
// the head's first indexed commit reads that part from the log itself.
func TestLogIndexBeforeFirstIndexedCommit(t *testing.T) {
	c := testenv.DynamoDB(t).Client(t)
	table := testenv.UniqueName(t, "logidx")
	ctx := context.Background()
	if err := CreateTable(ctx, c, table); err != nil {
		t.Fatal(err)
	}
	s := New(c, table, Options{IndexNewPartitions: true})
	p := "old"
	if _, err := s.TouchPartition(ctx, p, 1, "e"); err != nil {
		t.Fatal(err)
	}
	scopes := func(v string) wire.StoredScopes { return wire.StoredScopes{{Key: "org", Value: v}} }
	for seq := int64(1); seq <= 4; seq++ {
		org := []string{"a", "b", "a", "b"}[seq-1]
		id := fmt.Sprintf("r%d", seq)
		req := &store.CommitRequest{ExpectedMaxSeq: seq - 1,
			Commit: store.Commit{Seq: seq, ClientID: "c", ClientCommitID: id, Changes: []store.Change{
				{Table: "tasks", RowID: id, Op: wire.OpUpsert, RowVersion: 1, Row: []byte("x"), Scopes: scopes(org)}}},
			Rows:    []store.RowWrite{{Table: "tasks", Row: store.Row{RowID: id, Version: 1, Payload: []byte("x"), Scopes: scopes(org)}}},
			Outcome: store.Outcome{Applied: true, CommitSeq: seq}}
		if err := s.Commit(ctx, p, req); err != nil {
			t.Fatal(err)
		}
		if seq <= 2 { // as if logged by the previous version: no entries
			for _, k := range logIndexKeys(p, req.Commit.Changes) {
				if err := s.deleteItem(ctx, "test", Key(k, seqSK(seq)), "", nil); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if _, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table), Key: Key(headPK(p), headSK),
		UpdateExpression: aws.String("SET " + hLogIndexFrom + " = :s"), ExpressionAttributeValues: map[string]types.AttributeValue{":s": N(3)}}); err != nil {
		t.Fatal(err)
	}
	var got []int64
	if _, err := s.ReadLogScoped(ctx, p, "tasks", "org", []string{"a"}, 0, 4, func(c *store.Commit) bool {
		got = append(got, c.Seq)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got, 1) || !slices.Contains(got, 3) || slices.Contains(got, 4) {
		t.Fatalf("commits of org a: %v, want 1 (unindexed, read from the log) and 3 (indexed), not 4", got)
	}
}

// TestPruneDeletesLogIndex: Prune deletes a pruned commit's log-index
// entries with its log items (a delete's commit included), and keeps
// those of the retained commits.
func TestPruneDeletesLogIndex(t *testing.T) {
	c := testenv.DynamoDB(t).Client(t)
	table := testenv.UniqueName(t, "pruneidx")
	ctx := context.Background()
	if err := CreateTable(ctx, c, table); err != nil {
		t.Fatal(err)
	}
	s := New(c, table, Options{IndexNewPartitions: true})
	p := "tenant"
	if _, err := s.TouchPartition(ctx, p, 1, "e"); err != nil {
		t.Fatal(err)
	}
	scopes := wire.StoredScopes{{Key: "org", Value: "a"}}
	var changes [][]store.Change
	for seq := int64(1); seq <= 4; seq++ {
		ch := store.Change{Table: "tasks", RowID: "r", Op: wire.OpUpsert, RowVersion: seq, Row: []byte("x"), Scopes: scopes}
		w := store.RowWrite{Table: "tasks", Row: store.Row{RowID: "r", Version: seq, Payload: []byte("x"), Scopes: scopes}}
		if seq == 3 { // a delete: its tombstone goes with commit 3's log
			ch = store.Change{Table: "tasks", RowID: "r", Op: wire.OpDelete, Scopes: scopes}
			w = store.RowWrite{Table: "tasks", Delete: true, Row: store.Row{RowID: "r", Scopes: scopes}}
		}
		req := &store.CommitRequest{ExpectedMaxSeq: seq - 1,
			Commit:  store.Commit{Seq: seq, ClientID: "c", ClientCommitID: fmt.Sprint("k", seq), Changes: []store.Change{ch}},
			Rows:    []store.RowWrite{w},
			Outcome: store.Outcome{Applied: true, CommitSeq: seq}}
		if err := s.Commit(ctx, p, req); err != nil {
			t.Fatal(err)
		}
		changes = append(changes, req.Commit.Changes)
	}
	exists := func(seq int64) bool {
		keys := logIndexKeys(p, changes[seq-1])
		if len(keys) == 0 {
			t.Fatalf("commit %d has no log-index entries", seq)
		}
		for _, k := range keys {
			it, err := s.getItem(ctx, "test", k, seqSK(seq), nil)
			if err != nil {
				t.Fatal(err)
			}
			if it == nil {
				return false
			}
		}
		return true
	}
	for seq := int64(1); seq <= 4; seq++ {
		if !exists(seq) {
			t.Fatalf("log-index entries of commit %d missing before the prune", seq)
		}
	}
	if _, err := s.Prune(ctx, p, 3); err != nil {
		t.Fatal(err)
	}
	for seq := int64(1); seq <= 4; seq++ {
		if got, want := exists(seq), seq > 3; got != want {
			t.Errorf("log-index entries of commit %d present=%v after Prune(3), want %v", seq, got, want)
		}
	}
}
