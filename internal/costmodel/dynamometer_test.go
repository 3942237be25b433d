package costmodel_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/costmodel"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// The meter charges DynamoDB Local calls by the AWS capacity rules, for
// items whose billed sizes are set by construction: "pk" + "sk" + "v"
// (5 bytes of names) plus the key values and a string of chosen length.
func TestDynamoMeterRules(t *testing.T) {
	ctx := context.Background()
	base := testenv.DynamoDB(t).Client(t)
	var meter *costmodel.DynamoMeter
	sent := &countingClient{}
	db := dynamodb.New(base.Options(), func(o *dynamodb.Options) {
		sent.inner = o.HTTPClient
		if sent.inner == nil {
			sent.inner = &http.Client{}
		}
		meter = &costmodel.DynamoMeter{Inner: sent, Keys: []string{"pk", "sk"}}
		o.HTTPClient = meter
	})
	table := testenv.UniqueName(t, "meter")
	if _, err := base.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}, {AttributeName: aws.String("sk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}, {AttributeName: aws.String("sk"), KeyType: types.KeyTypeRange}},
	}); err != nil {
		t.Fatal(err)
	}
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	key := func(pk, sk string) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{"pk": s(pk), "sk": s(sk)}
	}
	// item is exactly size bytes: names "pk","sk","v" (5) + "p" + 2-byte sk + the value.
	item := func(sk string, size int) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{"pk": s("p"), "sk": s(sk), "v": s(strings.Repeat("x", size-8))}
	}
	expect := func(what string, rru, wru float64, calls int) {
		t.Helper()
		u := meter.Take()
		if u.RRU != rru || u.WRU != wru || u.Calls != calls {
			t.Errorf("%s: %d calls, %.1f RRU, %.1f WRU; want %d, %.1f, %.1f", what, u.Calls, u.RRU, u.WRU, calls, rru, wru)
		}
	}
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	tn := aws.String(table)

	must(db.PutItem(ctx, &dynamodb.PutItemInput{TableName: tn, Item: item("a1", 1500)}))
	expect("new 1,500-byte item", 0, 2, 1)
	must(db.PutItem(ctx, &dynamodb.PutItemInput{TableName: tn, Item: item("a1", 100)}))
	expect("100 bytes over 1,500 (the larger counts)", 0, 2, 1)
	must(db.PutItem(ctx, &dynamodb.PutItemInput{TableName: tn, Item: item("a1", 1024)}))
	expect("exactly 1 KB", 0, 1, 1)
	must(db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: tn, Key: key("p", "a1"), UpdateExpression: aws.String("SET w = :w"), ExpressionAttributeValues: map[string]types.AttributeValue{":w": s(strings.Repeat("y", 2000))}}))
	expect("update growing 1,024 to 3,025 bytes", 0, 3, 1)
	must(db.GetItem(ctx, &dynamodb.GetItemInput{TableName: tn, Key: key("p", "a1"), ConsistentRead: aws.Bool(true)}))
	expect("consistent read of 3,025 bytes", 1, 0, 1)
	must(db.GetItem(ctx, &dynamodb.GetItemInput{TableName: tn, Key: key("p", "a1"), ProjectionExpression: aws.String("pk")}))
	expect("eventually consistent, projected", 0.5, 0, 1)
	must(db.GetItem(ctx, &dynamodb.GetItemInput{TableName: tn, Key: key("p", "zz"), ConsistentRead: aws.Bool(true)}))
	expect("missing key", 1, 0, 1)
	must(db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: tn, Key: key("p", "a1")}))
	expect("delete of 3,025 bytes", 0, 3, 1)

	for _, sk := range []string{"b1", "b2", "b3"} {
		must(db.PutItem(ctx, &dynamodb.PutItemInput{TableName: tn, Item: item(sk, 2000)}))
	}
	meter.Take()
	must(db.Query(ctx, &dynamodb.QueryInput{TableName: tn, ConsistentRead: aws.Bool(true), KeyConditionExpression: aws.String("pk = :p"),
		ProjectionExpression: aws.String("sk"), ExpressionAttributeValues: map[string]types.AttributeValue{":p": s("p")}}))
	expect("query of 3 × 2,000 bytes, projected", 2, 0, 1)
	must(db.Query(ctx, &dynamodb.QueryInput{TableName: tn, KeyConditionExpression: aws.String("pk = :p"),
		FilterExpression: aws.String("v = :none"), ExpressionAttributeValues: map[string]types.AttributeValue{":p": s("p"), ":none": s("none")}}))
	expect("eventually consistent query filtered to nothing", 1, 0, 1)
	must(db.Query(ctx, &dynamodb.QueryInput{TableName: tn, ConsistentRead: aws.Bool(true), KeyConditionExpression: aws.String("pk = :p"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": s("empty")}}))
	expect("empty consistent query", 1, 0, 1)
	must(db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{table: {
		Keys: []map[string]types.AttributeValue{key("p", "b1"), key("p", "zz")}, ConsistentRead: aws.Bool(true)}}}))
	expect("batch get, one key missing", 2, 0, 1)

	must(db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: tn, Item: item("c1", 100)}},
		{Delete: &types.Delete{TableName: tn, Key: key("p", "b1")}},
		{ConditionCheck: &types.ConditionCheck{TableName: tn, Key: key("p", "b2"), ConditionExpression: aws.String("attribute_exists(pk)")}},
	}}))
	expect("transaction: put 100 B, delete 2,000 B, check", 2, 2*1+2*2, 1)
	_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: tn, Item: item("b2", 100), ConditionExpression: aws.String("attribute_not_exists(pk)")})
	if err == nil {
		t.Fatal("conditional put over an existing item succeeded")
	}
	expect("failed conditional put over 2,000 bytes", 0, 2, 1)

	// Passive: each call goes out once, as the SDK sent it, and is only
	// counted; metered, a write also costs the meter a read of the item
	// it replaces.
	sent.n.Store(0)
	must(db.PutItem(ctx, &dynamodb.PutItemInput{TableName: tn, Item: item("d1", 100)}))
	if n := sent.n.Load(); n < 2 {
		t.Errorf("a metered put sent %d requests; want the put and the meter's read", n)
	}
	meter.Take()
	meter.SetPassive(true)
	sent.n.Store(0)
	must(db.PutItem(ctx, &dynamodb.PutItemInput{TableName: tn, Item: item("d1", 2000)}))
	must(db.GetItem(ctx, &dynamodb.GetItemInput{TableName: tn, Key: key("p", "d1"), ConsistentRead: aws.Bool(true)}))
	expect("passive: put and get counted, not charged", 0, 0, 2)
	if n := sent.n.Load(); n != 2 {
		t.Errorf("passive meter sent %d requests for 2 calls", n)
	}
	meter.SetPassive(false)
	must(db.GetItem(ctx, &dynamodb.GetItemInput{TableName: tn, Key: key("p", "d1"), ConsistentRead: aws.Bool(true)}))
	expect("metered again: the 2,000-byte item the passive put wrote", 1, 0, 1)
}

// countingClient counts the HTTP requests the meter sends.
type countingClient struct {
	inner interface {
		Do(*http.Request) (*http.Response, error)
	}
	n atomic.Int64
}

func (c *countingClient) Do(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.inner.Do(r)
}
