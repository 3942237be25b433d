package dynamostore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// TestRollForwardOtherPlanStartsOver: progress recorded on the head by a
// build that cut the commit's batches differently (another plan print)
// must not make a roller skip batches it never wrote: it starts over and
// every row of the commit ends written.
func TestRollForwardOtherPlanStartsOver(t *testing.T) {
	c := testenv.DynamoDB(t).Client(t)
	table := testenv.UniqueName(t, "plan")
	ctx := context.Background()
	if err := CreateTable(ctx, c, table); err != nil {
		t.Fatal(err)
	}
	crash := errors.New("injected crash")
	w := New(c, table, Options{AfterLogWrite: func() error { return crash }})
	p := "plan"
	if _, err := w.TouchPartition(ctx, p, 1, "e"); err != nil {
		t.Fatal(err)
	}
	req := &store.CommitRequest{Commit: store.Commit{Seq: 1, ClientID: "c", ClientCommitID: "1"}, Outcome: store.Outcome{Applied: true, CommitSeq: 1}}
	for i := range 250 {
		id := fmt.Sprintf("r%03d", i)
		req.Commit.Changes = append(req.Commit.Changes, store.Change{Table: "tasks", RowID: id, Op: wire.OpUpsert, RowVersion: 1, Row: []byte(id)})
		req.Rows = append(req.Rows, store.RowWrite{Table: "tasks", Row: store.Row{RowID: id, Version: 1, Payload: []byte(id), CommitSeq: 1}})
	}
	if err := w.Commit(ctx, p, req); !errors.Is(err, crash) {
		t.Fatalf("Commit: %v, want the injected crash", err)
	}
	// Another build's progress: 2 batches of its own plan written (here:
	// none of ours).
	if _, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        aws.String(table),
		Key:              Key(headPK(p), headSK),
		UpdateExpression: aws.String("SET fs = :s, fb = :b, fp = :p"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":s": N(1), ":b": N(2), ":p": S("another-plan"),
		},
	}); err != nil {
		t.Fatal(err)
	}
	s := New(c, table, Options{})
	n := 0
	if err := s.ScanRows(ctx, p, "tasks", "", false, func(r *store.Row) bool {
		if !bytes.Equal(r.Payload, []byte(r.RowID)) || r.CommitSeq != 1 {
			t.Errorf("row %s: %+v", r.RowID, r)
		}
		n++
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if n != 250 {
		t.Fatalf("%d of 250 rows written after the roll-forward", n)
	}
	h, _, err := s.readHead(ctx, p)
	if err != nil || h.applied != 1 || h.rollSeq != 0 || h.rollPlan != "" {
		t.Fatalf("head after the roll-forward: applied %d, progress %d/%d/%q, %v", h.applied, h.rollSeq, h.rollBatches, h.rollPlan, err)
	}
}
