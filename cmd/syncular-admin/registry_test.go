package main

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// -all and partitions read the partition registry: a head written before
// the registry existed (put directly, as an old deployment left it) is
// not listed until register-partitions backfills it from its one Scan.
func TestRegisterPartitionsBackfillsLegacyHeads(t *testing.T) {
	f := newFixture(t)
	f.touch("new")
	// A legacy head: the item TouchPartition writes, without the registry item.
	legacy := dynamostore.Key(dynamostore.PartitionPK("old#1"), "HEAD")
	for k, v := range map[string]int64{"mx": 0, "ap": 0, "hz": 0, "ls": 1} {
		legacy[k] = dynamostore.N(v)
	}
	legacy["ep"], legacy["er"] = dynamostore.S("e-old"), dynamostore.BOOL(false)
	c := testenv.DynamoDB(t).Client(t)
	if _, err := c.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: legacy}); err != nil {
		t.Fatal(err)
	}
	header := "partition\tepoch\tepochRequired\tmaxCommitSeq\thorizonSeq\tlastSeen"
	if got := f.rows(f.run("partitions"), header); len(got) != 1 || got["new"] == nil {
		t.Fatalf("before backfill: %q, want only \"new\"", got)
	}
	r := f.run("register-partitions")
	if r.code != exitOK || !strings.Contains(r.stderr, "registered 2 of 2") {
		t.Fatalf("register-partitions: exit %d", r.code)
	}
	got := f.rows(f.run("partitions"), header)
	if len(got) != 2 || got["old#1"] == nil || got["old#1"][0] != "e-old" {
		t.Fatalf("after backfill: %q", got)
	}
	// Idempotent.
	if r := f.run("register-partitions"); r.code != exitOK {
		t.Fatalf("second register-partitions: exit %d", r.code)
	}
	if got := f.rows(f.run("partitions"), header); len(got) != 2 {
		t.Fatalf("after a second backfill: %q", got)
	}
}
