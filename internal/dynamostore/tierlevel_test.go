package dynamostore_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/migrate"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/rtfanout"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// TestFormatLevelHeldByTier: the realtime tier rolls out on its own, so
// the migration step (the post-traffic hook, syncular-admin migrate)
// raises the store-format level no higher than the lowest level a live
// tier instance's registry entry says its build reads; an entry without
// one is a build from before the field (level 0). Once an old entry is
// gone (drained) or lapsed (a task that died), the next step raises the
// level further; with only this build's instances live it reaches this
// build's level.
func TestFormatLevelHeldByTier(t *testing.T) {
	ctx := context.Background()
	c, table := ddbClient(t), levelZeroTable(t)
	// An instance of a build from before the field registers as that
	// build did: addr and exp, no level.
	oldEntry := func(id string, exp time.Time, level int64) {
		t.Helper()
		item := map[string]types.AttributeValue{
			dynamostore.AttrPK: dynamostore.S(rtfanout.RegistryPK), dynamostore.AttrSK: dynamostore.S(id),
			"addr": dynamostore.S("http://127.0.0.1:1"), "exp": dynamostore.N(exp.Unix()), dynamostore.TTLAttribute: dynamostore.N(exp.Unix()),
		}
		if level > 0 { // a later build below this one
			item["fl"] = dynamostore.N(level)
		}
		if _, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	live := time.Now().Add(rtfanout.Lifetime)
	oldEntry("old-task", live, 0)
	oldEntry("mid-task", live, dynamostore.FormatLevel-1)
	reg := &rtfanout.Registry{DB: c, Table: table}
	if err := reg.Register(ctx, "new-task", "http://127.0.0.1:2"); err != nil {
		t.Fatal(err)
	}

	hook := dynamostore.New(c, table, dynamostore.Options{})
	step := func(wantLevel int64, wantHeld bool, wantReaders int) {
		t.Helper()
		pr, err := migrate.Step(ctx, hook, migrate.Plan{Version: 1})
		if err != nil {
			t.Fatal(err)
		}
		fr := pr.FormatRaise
		if pr.FormatLevel != wantLevel || fr.Level != wantLevel || fr.Target != dynamostore.FormatLevel || fr.HeldBack() != wantHeld || fr.Readers != wantReaders {
			t.Fatalf("step: level %d, raise %+v (held back %v); want level %d of target %d, held back %v, %d live readers",
				pr.FormatLevel, fr, fr.HeldBack(), wantLevel, dynamostore.FormatLevel, wantHeld, wantReaders)
		}
		if l, err := hook.StoredFormatLevel(ctx); err != nil || l != wantLevel {
			t.Fatalf("stored level %d (%v), want %d", l, err, wantLevel)
		}
	}

	// An old tier task still serves: the level stays 0.
	step(0, true, 3)
	// It drains (its entry goes): the step raises as far as the next
	// oldest live instance reads, not further.
	if err := reg.Deregister(ctx, "old-task"); err != nil {
		t.Fatal(err)
	}
	step(dynamostore.FormatLevel-1, true, 2)
	// That one died: its entry lapsed (exp passed, not yet removed by
	// the table's TTL). Only this build's instance is live: the level
	// reaches this build's.
	oldEntry("mid-task", time.Now().Add(-time.Second), dynamostore.FormatLevel-1)
	step(dynamostore.FormatLevel, false, 1)
	// The level never drops, whatever registers later.
	oldEntry("old-task", live, 0)
	step(dynamostore.FormatLevel, false, 2)
}

// TestFormatLevelNoTier: with no live tier instance (no tier, or only
// lapsed entries) the step raises the level to this build's at once.
func TestFormatLevelNoTier(t *testing.T) {
	ctx := context.Background()
	c, table := ddbClient(t), levelZeroTable(t)
	// A task of this build that died long ago: its entry lapsed.
	dead := &rtfanout.Registry{DB: c, Table: table, Now: func() time.Time { return time.Now().Add(-2 * rtfanout.Lifetime) }}
	if err := dead.Register(ctx, "dead-task", "http://127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	pr, err := migrate.Step(ctx, dynamostore.New(c, table, dynamostore.Options{}), migrate.Plan{Version: 1})
	if err != nil || pr.FormatLevel != dynamostore.FormatLevel || pr.FormatRaise.HeldBack() || pr.FormatRaise.Readers != 0 {
		t.Fatalf("step: %+v, %v; want level %d, nothing held back", pr.FormatRaise, err, dynamostore.FormatLevel)
	}
}

// levelZeroTable is a fresh table as the stack's first deploy creates
// it: store-format level 0, no step has run.
func levelZeroTable(t *testing.T) string {
	t.Helper()
	table := testenv.UniqueName(t, "tierfl")
	if err := dynamostore.CreateTable(context.Background(), ddbClient(t), table); err != nil {
		t.Fatal(err)
	}
	return table
}
