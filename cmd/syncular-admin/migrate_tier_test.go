package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/rtfanout"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// TestMigrateHeldByTier: with a realtime tier task of an older build
// live (a registry entry without the level its build reads), migrate
// leaves the store-format level at 0, says so, and exits 0; once the
// task has left the registry, the next migrate raises the level to this
// build's.
func TestMigrateHeldByTier(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	c := testenv.DynamoDB(t).Client(t)
	exp := time.Now().Add(rtfanout.Lifetime).Unix()
	if _, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: map[string]types.AttributeValue{
		dynamostore.AttrPK: dynamostore.S(rtfanout.RegistryPK), dynamostore.AttrSK: dynamostore.S("old-task"),
		"addr": dynamostore.S("http://127.0.0.1:1"), "exp": dynamostore.N(exp), dynamostore.TTLAttribute: dynamostore.N(exp),
	}}); err != nil {
		t.Fatal(err)
	}
	r := f.run("migrate")
	if r.code != exitOK || !strings.Contains(r.stderr, "store-format level held at 0") {
		t.Fatalf("migrate with an old tier task live: exit %d, %q", r.code, r.stderr)
	}
	if l, err := f.store.StoredFormatLevel(ctx); err != nil || l != 0 {
		t.Fatalf("level %d (%v), want 0", l, err)
	}
	if err := (&rtfanout.Registry{DB: c, Table: f.table}).Deregister(ctx, "old-task"); err != nil {
		t.Fatal(err)
	}
	r = f.run("migrate")
	if r.code != exitOK || strings.Contains(r.stderr, "held at") {
		t.Fatalf("migrate after the task left: exit %d, %q", r.code, r.stderr)
	}
	if l, err := f.store.StoredFormatLevel(ctx); err != nil || l != dynamostore.FormatLevel {
		t.Fatalf("level %d (%v), want %d", l, err, dynamostore.FormatLevel)
	}
}
