package rttier

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/rtfanout"
	"github.com/skyfold/syncular-lambda/internal/wiring"
)

// TestTierHoldsFormatLevel: a tier instance's registry entry says which
// store-format level its build reads, and the post-traffic hook raises
// the table's level no higher than every live instance reads. An old
// tier task (an entry without the level, as builds before it wrote)
// holds the level at 0 and the hook says so (result and a warn line);
// once it has drained, the next hook run raises the level to this
// build's, which this build's instance reads.
func TestTierHoldsFormatLevel(t *testing.T) {
	st := newStack(t)
	ctx := context.Background()
	table := st.env["SYNC_TABLE_NAME"]
	db := st.clients.DynamoDB
	exp := time.Now().Add(rtfanout.Lifetime).Unix()
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]ddbtypes.AttributeValue{
		dynamostore.AttrPK: dynamostore.S(rtfanout.RegistryPK), dynamostore.AttrSK: dynamostore.S("inst-old"),
		"addr": dynamostore.S("http://127.0.0.1:1"), "exp": dynamostore.N(exp), dynamostore.TTLAttribute: dynamostore.N(exp),
	}}); err != nil {
		t.Fatal(err)
	}

	st.start("inst-new")
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: dynamostore.Key(rtfanout.RegistryPK, "inst-new"), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if fl, ok := out.Item["fl"].(*ddbtypes.AttributeValueMemberN); !ok || fl.Value != strconv.FormatInt(dynamostore.FormatLevel, 10) {
		t.Fatalf("the instance's registry entry %v does not carry its build's store-format level %d", out.Item, dynamostore.FormatLevel)
	}

	sch, err := wiring.LoadSchema(st.config(nil))
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	hook := &app.MigrateHook{
		Store:   dynamostore.New(db, table, dynamostore.Options{}),
		Version: int64(sch.Latest),
		Logger:  slog.New(slog.NewJSONHandler(&logs, nil)),
	}
	run := func() (app.HookResult, map[string]any) {
		t.Helper()
		logs.Reset()
		hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		res, err := hook.Run(hctx, app.HookEvent{}) // a manual run: nothing reported
		if err != nil || res.Error != "" || res.Status != "Succeeded" {
			t.Fatalf("hook: %+v, %v", res, err)
		}
		var line map[string]any
		if err := json.Unmarshal(logs.Bytes(), &line); err != nil {
			t.Fatalf("hook log %q: %v", logs.String(), err)
		}
		return res, line
	}

	res, line := run()
	if res.FormatLevel != 0 || !res.FormatHeldBack || res.FormatTarget != dynamostore.FormatLevel || res.FormatReaders != 2 || res.FormatLimit != 0 {
		t.Fatalf("with an old tier task live the hook raised: %+v", res)
	}
	if line["level"] != "WARN" || line["formatHeldBack"] != true || line["formatLevel"] != float64(0) {
		t.Fatalf("hook line %v: want a warn line saying the level was held at 0", line)
	}
	if l, err := hook.Store.StoredFormatLevel(ctx); err != nil || l != 0 {
		t.Fatalf("stored level %d (%v), want 0", l, err)
	}

	// The old task drains (its entry goes, as its SIGTERM path does).
	if err := (&rtfanout.Registry{DB: db, Table: table}).Deregister(ctx, "inst-old"); err != nil {
		t.Fatal(err)
	}
	res, line = run()
	if res.FormatLevel != dynamostore.FormatLevel || res.FormatHeldBack || res.FormatReaders != 1 {
		t.Fatalf("with only this build's instance live the hook reached %+v, want level %d", res, dynamostore.FormatLevel)
	}
	if line["level"] != "INFO" || line["formatHeldBack"] != false {
		t.Fatalf("hook line %v", line)
	}
	if l, err := hook.Store.StoredFormatLevel(ctx); err != nil || l != dynamostore.FormatLevel {
		t.Fatalf("stored level %d (%v), want %d", l, err, dynamostore.FormatLevel)
	}
}
