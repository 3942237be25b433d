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
)

// TestGroupCommitLogIndex: a group commit follows the adaptive log index
// (logindex.go) as a lone commit does. On a partition with the index off
// the group writes no entries and leaves hLogIndexFrom unset; once a
// wide pull has turned the index on (here: hLogIndexOn set on the head
// behind the Store's back, so its memory still says off), the whole
// group lands in one transaction with every member's entries, the first
// member's seq starts the index, and a scoped read across both parts
// returns exactly the value's commits.
func TestGroupCommitLogIndex(t *testing.T) {
	c, table := freshTable(t, "groupidx")
	ctx := context.Background()
	s := New(c, table, Options{})
	p := "grouped"
	if _, err := s.TouchPartition(ctx, p, 1, "e"); err != nil {
		t.Fatal(err)
	}
	group := func(from int64, vals ...string) []*store.CommitRequest {
		t.Helper()
		var reqs []*store.CommitRequest
		for i, v := range vals {
			seq := from + int64(i)
			reqs = append(reqs, orgCommit(seq, fmt.Sprintf("r%02d", seq), v))
		}
		n, err := s.CommitGroup(ctx, p, reqs)
		if err != nil {
			t.Fatal(err)
		}
		if n != len(reqs) {
			t.Fatalf("group of %d from %d landed %d", len(reqs), from, n)
		}
		return reqs
	}

	for _, req := range group(1, "a", "b", "a") {
		if hasEntries(t, s, p, req) {
			t.Fatalf("commit %d of a group on a partition without the index wrote entries", req.Commit.Seq)
		}
	}
	h, _, err := s.readHead(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if h.indexOn() || h.MaxCommitSeq != 3 || h.applied != 3 {
		t.Fatalf("head after the first group: index from %d requested %v, max %d applied %d", h.indexFrom, h.indexRequested, h.MaxCommitSeq, h.applied)
	}

	if _, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table), Key: Key(headPK(p), headSK),
		UpdateExpression:          aws.String("SET " + hLogIndexOn + " = :t"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": &types.AttributeValueMemberBOOL{Value: true}}}); err != nil {
		t.Fatal(err)
	}
	if s.indexOn(p) {
		t.Fatal("the Store already knows the index is on; the test needs its memory behind the head")
	}
	for _, req := range group(4, "c", "a", "b") {
		if !hasEntries(t, s, p, req) {
			t.Fatalf("commit %d of a group after the index turned on has no entries", req.Commit.Seq)
		}
	}
	if h, _, _ = s.readHead(ctx, p); h.indexFrom != 4 || h.MaxCommitSeq != 6 || h.applied != 6 {
		t.Fatalf("head after the indexed group: index from %d, max %d applied %d; want 4, 6, 6", h.indexFrom, h.MaxCommitSeq, h.applied)
	}
	if got, want := scopedSeqs(t, s, p, "a", 0, 6), []int64{1, 3, 5}; !slices.Equal(got, want) {
		t.Fatalf("commits of a across both parts: %v, want %v", got, want)
	}
}
