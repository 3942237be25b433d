package dynamostore

import (
	"context"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Readers that roll out on their own (issue 20): the realtime tier.
//
// The post-traffic hook runs once the push function's traffic has
// shifted, but the realtime tier's ECS tasks read the log too (deltas,
// catch-up, finishing a pending commit) and are replaced on their own
// schedule. An old task still serving when the level rises would fail on
// a log body it cannot decode and, below levelSmallCommits, finish a
// pending small commit in the old order.
//
// So every tier instance's registry item (pk TierRegistryPK, written by
// rtfanout.Registry every rtfanout.RefreshInterval) carries the level
// its build reads in TierAttrFormatLevel; an item of a build from before
// that attribute has none, which counts as level 0. RaiseFormatLevel
// raises the table's level only up to the lowest level of the live
// entries (exp still ahead); with no live entry there is no limit. A
// raise held back this way is reported (migrate.FormatRaise), and the
// next step (a later hook run, syncular-admin migrate) raises it further
// once the old tasks are gone: their entries leave at drain, or lapse
// rtfanout.Lifetime after the last refresh of a task that died.

// Registry item layout of the realtime tier (rtfanout.Registry): pk
// TierRegistryPK, sk the instance id.
const (
	TierRegistryPK = "RTI"
	// TierAttrExp is when the entry lapses unless refreshed (epoch
	// seconds).
	TierAttrExp = "exp"
	// TierAttrFormatLevel is the store-format level the instance's build
	// reads (FormatLevel); absent: 0.
	TierAttrFormatLevel = "fl"
)

// tierReadLevel reads the instance registry (one consistent Query, never
// a Scan) and returns the lowest store-format level of its live entries
// and how many there are; limit is meaningless when live is 0.
func (s *Store) tierReadLevel(ctx context.Context) (limit int64, live int, err error) {
	now := time.Now().Unix()
	err = s.query(ctx, "read realtime tier registry", &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("#pk = :pk"),
		ProjectionExpression:      aws.String("#e, #f"),
		ExpressionAttributeNames:  map[string]string{"#pk": AttrPK, "#e": TierAttrExp, "#f": TierAttrFormatLevel},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": S(TierRegistryPK)},
	}, func(items []map[string]types.AttributeValue) bool {
		for _, it := range items {
			// An entry without a readable exp is one no reader counts
			// live (rtfanout.Registry.Live); one past it has lapsed.
			exp, ok := it[TierAttrExp].(*types.AttributeValueMemberN)
			if !ok {
				continue
			}
			if e, perr := strconv.ParseInt(exp.Value, 10, 64); perr != nil || e <= now {
				continue
			}
			l, _ := getN(it, TierAttrFormatLevel) // absent: a build from before it, 0
			if live == 0 || l < limit {
				limit = l
			}
			live++
		}
		return true
	})
	return limit, live, err
}
