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

// TestGroupCommitRaiseFence: a commit that raises the writer fence
// (store.CommitRequest.RaiseFence) is never folded into a group, whose
// head update could not raise it: as the lead it lands alone and raises
// the fence; as a later member it ends the group before it.
func TestGroupCommitRaiseFence(t *testing.T) {
	c, table := freshTable(t, "groupfence")
	ctx := context.Background()
	s := New(c, table, Options{})
	p := "fenced"
	h, err := s.TouchPartition(ctx, p, 1, "e")
	if err != nil {
		t.Fatal(err)
	}
	var tok int64
	if h.Gate != nil {
		tok = h.Gate.Token
	}
	gated := func(seq int64, raise int64) *store.CommitRequest {
		req := orgCommit(seq, fmt.Sprintf("f%02d", seq), "a")
		req.WriterVersion, req.CheckGate, req.GateToken, req.RaiseFence = 2, true, tok, raise
		return req
	}
	// A member raising the fence ends the group before it.
	n, err := s.CommitGroup(ctx, p, []*store.CommitRequest{gated(1, 0), gated(2, 2), gated(3, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("group with a fence-raising second member landed %d, want 1", n)
	}
	// As the lead, it lands alone and raises the fence.
	n, err = s.CommitGroup(ctx, p, []*store.CommitRequest{gated(2, 2), gated(3, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("group led by a fence-raising commit landed %d, want 1", n)
	}
	after, _, err := s.readHead(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if h := after.Head; h.MaxCommitSeq != 2 || h.Gate == nil || h.Gate.WriterFence != 2 || h.Gate.Token == tok {
		t.Fatalf("after the raising lead: max %d gate %+v, want 2, fence 2 and a new token", h.MaxCommitSeq, h.Gate)
	}
	// The old token no longer passes.
	if _, err := s.CommitGroup(ctx, p, []*store.CommitRequest{gated(3, 0), gated(4, 0)}); err == nil {
		t.Fatal("a group on the token from before the raise landed")
	}
}
