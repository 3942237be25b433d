package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The table's physical schema, defined once here: template.yaml must
// declare exactly these (a test compares them). There is no GSI: every
// correctness read is a strongly consistent GetItem/Query on the base
// table (GSIs are eventually consistent).
const (
	// AttrPK and AttrSK are the partition and sort key attribute names,
	// both of type S.
	AttrPK = "pk"
	AttrSK = "sk"
	// TTLAttribute holds an epoch-seconds expiry on items that may be
	// garbage-collected by DynamoDB TTL: segment publications and their
	// lookup items, and push outcomes past their idempotency window
	// (outcomettl.go; the store treats those as absent before TTL
	// deletes them).
	TTLAttribute = "ttl"
)

// StreamViewType is the table stream the realtime fanout reads (new log
// items and epoch events; keys are all it needs). template.yaml declares
// it on SyncTable, and `syncular-admin restore-prepare` enables it on a
// restored table, which DynamoDB creates without a stream.
const StreamViewType = types.StreamViewTypeKeysOnly

// KeySchema is the table's primary key: pk (HASH) + sk (RANGE).
var KeySchema = []types.KeySchemaElement{
	{AttributeName: aws.String(AttrPK), KeyType: types.KeyTypeHash},
	{AttributeName: aws.String(AttrSK), KeyType: types.KeyTypeRange},
}

// AttributeDefinitions declares the key attributes' types (both S).
var AttributeDefinitions = []types.AttributeDefinition{
	{AttributeName: aws.String(AttrPK), AttributeType: types.ScalarAttributeTypeS},
	{AttributeName: aws.String(AttrSK), AttributeType: types.ScalarAttributeTypeS},
}

// TableDefinition returns the CreateTable input for a table named name:
// on-demand billing, the key schema above, no secondary index.
func TableDefinition(name string) *dynamodb.CreateTableInput {
	return &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		KeySchema:            append([]types.KeySchemaElement(nil), KeySchema...),
		AttributeDefinitions: append([]types.AttributeDefinition(nil), AttributeDefinitions...),
		BillingMode:          types.BillingModePayPerRequest,
	}
}

// CreateTable creates the table (tests and the local runner), waits until
// it is active and enables TTL on TTLAttribute. An existing table with
// the same name is accepted as is.
func CreateTable(ctx context.Context, client *dynamodb.Client, name string) error {
	_, err := client.CreateTable(ctx, TableDefinition(name))
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("dynamostore: create table %s: %w", name, err)
	}
	w := dynamodb.NewTableExistsWaiter(client, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay = 50 * time.Millisecond
		o.MaxDelay = time.Second
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)}, 2*time.Minute); err != nil {
		return fmt.Errorf("dynamostore: wait for table %s: %w", name, err)
	}
	_, err = client.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(name),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(TTLAttribute),
			Enabled:       aws.Bool(true),
		},
	})
	if err != nil {
		// Enabling twice is a ValidationException ("already enabled"):
		// accept it when the current setting is what we want.
		d, derr := client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(name)})
		if derr == nil && d.TimeToLiveDescription != nil &&
			aws.ToString(d.TimeToLiveDescription.AttributeName) == TTLAttribute &&
			(d.TimeToLiveDescription.TimeToLiveStatus == types.TimeToLiveStatusEnabled ||
				d.TimeToLiveDescription.TimeToLiveStatus == types.TimeToLiveStatusEnabling) {
			return nil
		}
		return fmt.Errorf("dynamostore: enable TTL on %s: %w", name, err)
	}
	return nil
}
