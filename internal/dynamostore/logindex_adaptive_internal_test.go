package dynamostore

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// freshTable creates a table of its own on DynamoDB Local.
func freshTable(t *testing.T, name string) (*dynamodb.Client, string) {
	t.Helper()
	c := testenv.DynamoDB(t).Client(t)
	table := testenv.UniqueName(t, name)
	if err := CreateTable(context.Background(), c, table); err != nil {
		t.Fatal(err)
	}
	return c, table
}

// orgCommit is commit seq upserting row id under scope org = v.
func orgCommit(seq int64, id, v string) *store.CommitRequest {
	sc := wire.StoredScopes{{Key: "org", Value: v}}
	return &store.CommitRequest{ExpectedMaxSeq: seq - 1,
		Commit: store.Commit{Seq: seq, ClientID: "c", ClientCommitID: id, Changes: []store.Change{
			{Table: "tasks", RowID: id, Op: wire.OpUpsert, RowVersion: 1, Row: []byte("x"), Scopes: sc}}},
		Rows:    []store.RowWrite{{Table: "tasks", Row: store.Row{RowID: id, Version: 1, Payload: []byte("x"), Scopes: sc}}},
		Outcome: store.Outcome{Applied: true, CommitSeq: seq}}
}

// hasEntries reports whether commit seq of req has every log-index entry.
func hasEntries(t *testing.T, s *Store, p string, req *store.CommitRequest) bool {
	t.Helper()
	for _, k := range logIndexKeys(p, req.Commit.Changes) {
		it, err := s.getItem(context.Background(), "test", k, seqSK(req.Commit.Seq), nil)
		if err != nil {
			t.Fatal(err)
		}
		if it == nil {
			return false
		}
	}
	return true
}

func scopedSeqs(t *testing.T, s *Store, p, org string, after, through int64) []int64 {
	t.Helper()
	var got []int64
	if _, err := s.ReadLogScoped(context.Background(), p, "tasks", "org", []string{org}, after, through, func(c *store.Commit) bool {
		got = append(got, c.Seq)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestLogIndexTurnsOnWhenWide (issue 23): a new partition's commits write
// no log-index entry; a scoped pull that reads a wide window from the log
// (64 commits, 1 in 16 of its value) turns the index on; the next commit
// writes its entries and starts hLogIndexFrom, including one from a Store
// whose memory of the head says the index is off (its commit is refused
// and written again with the entries); a scoped read across both parts
// returns exactly the value's commits.
func TestLogIndexTurnsOnWhenWide(t *testing.T) {
	c, table := freshTable(t, "adaptidx")
	ctx := context.Background()
	s := New(c, table, Options{})
	other := New(c, table, Options{}) // another instance
	p := "wide"
	if _, err := s.TouchPartition(ctx, p, 1, "e"); err != nil {
		t.Fatal(err)
	}
	if _, err := other.TouchPartition(ctx, p, 1, "e"); err != nil {
		t.Fatal(err) // other now remembers the index off
	}
	var want []int64
	seq := int64(0)
	commit := func(st *Store, v string) *store.CommitRequest {
		seq++
		req := orgCommit(seq, fmt.Sprintf("r%03d", seq), v)
		if err := st.Commit(ctx, p, req); err != nil {
			t.Fatalf("commit %d: %v", seq, err)
		}
		if v == "a" {
			want = append(want, seq)
		}
		return req
	}
	for i := range 64 {
		v := fmt.Sprintf("o%d", i%16)
		if i%16 == 0 {
			v = "a"
		}
		if req := commit(s, v); hasEntries(t, s, p, req) {
			t.Fatalf("commit %d of a new partition wrote log-index entries", seq)
		}
	}
	h, _, err := s.readHead(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if h.indexOn() {
		t.Fatal("index on before any pull")
	}
	// A narrow read (few commits) leaves it off.
	scopedSeqs(t, s, p, "a", 60, 64)
	if h, _, _ = s.readHead(ctx, p); h.indexOn() {
		t.Fatal("a 4-commit window turned the index on")
	}
	if got := scopedSeqs(t, s, p, "a", 0, 64); !slices.Equal(got, want) {
		t.Fatalf("commits of a: %v, want %v", got, want)
	}
	if h, _, _ = s.readHead(ctx, p); !h.indexRequested || h.indexFrom != 0 {
		t.Fatalf("head after the wide read: requested %v from %d, want requested and no first commit yet", h.indexRequested, h.indexFrom)
	}
	// other still remembers the index off: its commit is refused by the
	// head condition and written again with its entries.
	first := commit(other, "a")
	if !hasEntries(t, s, p, first) {
		t.Fatalf("commit %d after the index turned on has no entries", seq)
	}
	if h, _, _ = s.readHead(ctx, p); h.indexFrom != first.Commit.Seq {
		t.Fatalf("first indexed commit %d, want %d", h.indexFrom, first.Commit.Seq)
	}
	for _, v := range []string{"b", "a", "c"} {
		if req := commit(s, v); !hasEntries(t, s, p, req) {
			t.Fatalf("commit %d has no entries", seq)
		}
	}
	if got := scopedSeqs(t, s, p, "a", 0, seq); !slices.Equal(got, want) {
		t.Fatalf("commits of a across both parts: %v, want %v", got, want)
	}
	if got, w := scopedSeqs(t, s, p, "a", first.Commit.Seq, seq), want[len(want)-1:]; !slices.Equal(got, w) {
		t.Fatalf("commits of a in the indexed part: %v, want %v", got, w)
	}
	// Prune deletes the entries of indexed commits only, and all of them.
	if _, err := s.Prune(ctx, p, seq); err != nil {
		t.Fatal(err)
	}
	if hasEntries(t, s, p, first) {
		t.Fatalf("entries of pruned commit %d remain", first.Commit.Seq)
	}
}

// TestLogIndexOfOlderPartition (issue 23): a partition whose head the
// previous layout wrote (hLogIndexFrom set by its first commit, no
// hLogIndexOn) keeps its index: a fresh Store's commits write entries,
// and a scoped read finds old and new commits.
func TestLogIndexOfOlderPartition(t *testing.T) {
	c, table := freshTable(t, "oldidx")
	ctx := context.Background()
	p := "old"
	// The previous layout's head and commit 1: a Store with the index on
	// writes the same items the previous layout wrote (log item, outcome,
	// row, scope copy, log-index entry; li = 1 on the head), and the
	// head's hLogIndexOn, which the previous layout did not have, is
	// removed.
	writer := New(c, table, Options{IndexNewPartitions: true})
	if _, err := writer.TouchPartition(ctx, p, 1, "e"); err != nil {
		t.Fatal(err)
	}
	old := orgCommit(1, "r1", "a")
	if err := writer.Commit(ctx, p, old); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table), Key: Key(headPK(p), headSK),
		UpdateExpression: aws.String("REMOVE " + hLogIndexOn)}); err != nil {
		t.Fatal(err)
	}
	it, err := writer.getItem(ctx, "test", headPK(p), headSK, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, on := it[hLogIndexOn]; on || it[hLogIndexFrom] == nil {
		t.Fatalf("head is not the previous layout's: %v", it)
	}
	if !hasEntries(t, writer, p, old) {
		t.Fatal("the previous layout's commit has no entries")
	}

	s := New(c, table, Options{}) // the new build, no memory of p
	if _, err := s.TouchPartition(ctx, p, 2, "e"); err != nil {
		t.Fatal(err)
	}
	for seq, v := range []string{"b", "a"} {
		req := orgCommit(int64(seq)+2, fmt.Sprint("n", seq), v)
		if err := s.Commit(ctx, p, req); err != nil {
			t.Fatal(err)
		}
		if !hasEntries(t, s, p, req) {
			t.Fatalf("commit %d on a partition with the index has no entries", req.Commit.Seq)
		}
	}
	if got := scopedSeqs(t, s, p, "a", 0, 3); !slices.Equal(got, []int64{1, 3}) {
		t.Fatalf("commits of a: %v, want [1 3] (both indexed)", got)
	}
}
