package dynamostore_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/storetest"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
)

// TestOutcomesExpire runs the idempotency-window contract on DynamoDB
// Local (default window and 1 h), then checks what DynamoDB itself needs:
// every outcome item carries the table's TTL attribute at the second its
// window ends, and an item TTL has deleted behaves like an expired one.
// (DynamoDB Local's TTL sweeper runs on wall time, so the deletion is
// done here the way TTL does it: a plain DeleteItem.)
func TestOutcomesExpire(t *testing.T) {
	c := ddbClient(t)
	for _, w := range []time.Duration{store.DefaultOutcomeWindow, time.Hour} {
		t.Run(w.String(), func(t *testing.T) {
			table := newTable(t, c)
			opts := dynamostore.Options{OutcomeTTL: w}
			storetest.RunOutcomeExpiry(t, w, func(*testing.T) store.Store { return dynamostore.New(c, table, opts) })
		})
	}
	t.Run("TTLAttribute", func(t *testing.T) {
		ctx := context.Background()
		table := newTable(t, c)
		s := dynamostore.New(c, table, dynamostore.Options{OutcomeTTL: time.Hour})
		if _, err := s.TouchPartition(ctx, "p", baseMs, "e1"); err != nil {
			t.Fatal(err)
		}
		// Recorded at a whole second of wall time + 123 ms: DynamoDB
		// Local's TTL sweeper deletes items whose TTL is past on its clock.
		sec := time.Now().Unix()
		at := sec*1000 + 123
		req := commitAt(0, "c1", at)
		if err := s.Commit(ctx, "p", req); err != nil {
			t.Fatal(err)
		}
		rej := store.Outcome{Result: []byte("no"), RecordedAtMs: at + 2000}
		if err := s.PutRejection(ctx, "p", "client", "r1", rej, store.WriterCheck{}); err != nil {
			t.Fatal(err)
		}
		// sec s + 123 ms + 1 h: the first whole second at or after it is
		// sec + 3601; the rejection, 2 s later, sec + 3603.
		wantTTL(t, c, table, "c1", strconv.FormatInt(sec+3601, 10))
		wantTTL(t, c, table, "r1", strconv.FormatInt(sec+3603, 10))

		// TTL deletes the item: the key is free, as when read past the window.
		if _, err := c.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: outcomeKey("c1")}); err != nil {
			t.Fatal(err)
		}
		if o, err := s.GetOutcome(ctx, "p", "client", "c1", at); err != nil || o != nil {
			t.Fatalf("GetOutcome after the TTL deletion: %+v, %v; want absent", o, err)
		}
		again := commitAt(1, "c1", at+3_600_000)
		if err := s.Commit(ctx, "p", again); err != nil {
			t.Fatalf("Commit after the TTL deletion: %v", err)
		}
		// Expiry off (the zero Options): no TTL attribute, the outcome stays.
		forever := dynamostore.New(c, table, dynamostore.Options{})
		if err := forever.Commit(ctx, "p", commitAt(2, "c3", at)); err != nil {
			t.Fatal(err)
		}
		wantTTL(t, c, table, "c3", "")
		if err := forever.Commit(ctx, "p", commitAt(3, "c3", at+1000*3_600_000)); !errors.Is(err, store.ErrOutcomeExists) {
			t.Fatalf("Commit with expiry off: %v, want ErrOutcomeExists", err)
		}
	})
}

// outcomeKey is the key of client "client"'s outcome of id in partition
// "p" (the layout of keys.go: P#<p>#O#<clientId>, O<clientCommitId>).
func outcomeKey(id string) map[string]types.AttributeValue {
	return dynamostore.Key(dynamostore.PartitionPK("p")+"#O#client", "O"+id)
}

func wantTTL(t *testing.T, c *dynamodb.Client, table, id, want string) {
	t.Helper()
	out, err := c.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(table), Key: outcomeKey(id), ConsistentRead: aws.Bool(true)})
	if err != nil || out.Item == nil {
		t.Fatalf("outcome item %s: %v (found %v)", id, err, out != nil && out.Item != nil)
	}
	got := ""
	if n, ok := out.Item[dynamostore.TTLAttribute].(*types.AttributeValueMemberN); ok {
		got = n.Value
	}
	if got != want {
		t.Fatalf("outcome %s: %s = %q, want %q", id, dynamostore.TTLAttribute, got, want)
	}
}

// commitAt is a one-row commit of client "client" after expected,
// recorded at ms.
func commitAt(expected int64, id string, ms int64) *store.CommitRequest {
	seq := expected + 1
	return &store.CommitRequest{
		ExpectedMaxSeq: expected,
		Commit:         store.Commit{Seq: seq, CreatedAtMs: ms, ClientID: "client", ClientCommitID: id},
		Rows:           []store.RowWrite{{Table: "tasks", Row: store.Row{RowID: id, Version: 1, Payload: []byte(id), CommitSeq: seq}}},
		Outcome:        store.Outcome{Applied: true, CommitSeq: seq, Result: []byte(id), RecordedAtMs: ms},
	}
}
