// Package rtfanout carries realtime hints to the instances of the realtime
// tier (docs/REALTIME.md "Fanout"): the instance registry in the table,
// the hint and presence endpoints every instance serves on its hint port,
// the Forwarder the fanout function runs over the table's stream, and a
// stream Poller that reads a DynamoDB stream the way Lambda's event source
// mapping does (the local runner and the tests).
//
// A hint carries no data: it says only "partition P's log reached seq S"
// (or "P's head changed"). The hub reads the log itself, so a lost,
// late, duplicated or reordered hint never makes a gap; the hub's periodic
// reconciliation delivers whatever a lost hint would have.
package rtfanout

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	ds "github.com/skyfold/syncular-lambda/internal/dynamostore"
)

// Registry item layout: pk RegistryPK, sk the instance id. The layout
// the store-format level raise reads (exp, fl) is dynamostore's
// (tierlevel.go).
const (
	RegistryPK      = ds.TierRegistryPK
	attrAddr        = "addr"
	attrExp         = ds.TierAttrExp
	attrFormatLevel = ds.TierAttrFormatLevel
)

// Registry timing: an instance refreshes its item every RefreshInterval
// and the item lives for Lifetime, so two missed refreshes in a row are
// tolerated before readers drop the instance.
const (
	RefreshInterval = 20 * time.Second
	Lifetime        = 3 * RefreshInterval
)

// DynamoAPI is what the registry calls (a *dynamodb.Client).
type DynamoAPI interface {
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

// Instance is one live realtime tier instance.
type Instance struct {
	ID string
	// Addr is the base URL of its hint port (http://10.0.1.23:8081).
	Addr string
	// Exp is when the entry lapses unless refreshed (epoch seconds).
	Exp int64
}

// Registry is the table's list of live tier instances: one item per
// instance under pk RTI, read with one Query (never a Scan). Its exp
// attribute is epoch seconds; the table's TTL attribute (ttl) carries the
// same value so DynamoDB removes entries of instances that died without
// deregistering, and readers ignore an entry past exp before that.
type Registry struct {
	DB    DynamoAPI
	Table string
	// Now is the clock (tests); time.Now when nil.
	Now func() time.Time
}

func (r *Registry) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Register writes (or refreshes) id's entry, valid for Lifetime. The
// entry carries the store-format level this build reads
// (dynamostore.FormatLevel): while it is live, the migration step raises
// the table's level no higher (dynamostore tierlevel.go), so the tier
// never meets a stored format it cannot decode.
func (r *Registry) Register(ctx context.Context, id, addr string) error {
	exp := r.now().Add(Lifetime).Unix()
	_, err := r.DB.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(r.Table),
		Item: map[string]types.AttributeValue{
			ds.AttrPK: ds.S(RegistryPK), ds.AttrSK: ds.S(id),
			attrAddr: ds.S(addr), attrExp: ds.N(exp), ds.TTLAttribute: ds.N(exp),
			attrFormatLevel: ds.N(ds.FormatLevel),
		},
	})
	if err != nil {
		return fmt.Errorf("rtfanout: register instance %s: %w", id, err)
	}
	return nil
}

// Deregister removes id's entry (SIGTERM).
func (r *Registry) Deregister(ctx context.Context, id string) error {
	_, err := r.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(r.Table), Key: ds.Key(RegistryPK, id)})
	if err != nil {
		return fmt.Errorf("rtfanout: deregister instance %s: %w", id, err)
	}
	return nil
}

// Live returns every instance whose entry has not lapsed, in id order.
// The read is strongly consistent, so an instance that just registered is
// in it.
func (r *Registry) Live(ctx context.Context) ([]Instance, error) {
	now := r.now().Unix()
	var out []Instance
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(r.Table),
		KeyConditionExpression:    aws.String("#pk = :pk"),
		ExpressionAttributeNames:  map[string]string{"#pk": ds.AttrPK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": ds.S(RegistryPK)},
		ConsistentRead:            aws.Bool(true),
	}
	for {
		res, err := r.DB.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("rtfanout: read the instance registry: %w", err)
		}
		for _, it := range res.Items {
			var inst Instance
			sk, _ := it[ds.AttrSK].(*types.AttributeValueMemberS)
			addr, _ := it[attrAddr].(*types.AttributeValueMemberS)
			exp, _ := it[attrExp].(*types.AttributeValueMemberN)
			if sk == nil || addr == nil || exp == nil {
				continue
			}
			inst.ID, inst.Addr = sk.Value, addr.Value
			if inst.Exp, err = strconv.ParseInt(exp.Value, 10, 64); err != nil || inst.Exp <= now {
				continue
			}
			out = append(out, inst)
		}
		if len(res.LastEvaluatedKey) == 0 {
			return out, nil
		}
		in.ExclusiveStartKey = res.LastEvaluatedKey
	}
}
