package dynamostore

import (
	"context"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// partitionScanLimit is the Scan Limit of ListPartitions pages; 0 lets
// DynamoDB fill 1 MB pages. Tests lower it to exercise pagination.
var partitionScanLimit int32

// ListPartitions calls fn with the name of every partition that has a head
// item, in no particular order, until fn returns false.
//
// It is an operator path (syncular-admin), never a request path: a
// paginated, strongly consistent Scan of the whole table filtered to
// sk = HEAD, so it reads (and is billed for) every item in the table,
// about table size / 4 KB read units. The partition names are collected
// from key attributes only.
//
// Only keys the store itself builds for a head are reported: pk "P#"
// followed by an escaped name (see esc). Other items whose sk happens to
// be HEAD (a grant of actor "HEAD", foreign items) are skipped.
func (s *Store) ListPartitions(ctx context.Context, fn func(partition string) bool) error {
	in := &dynamodb.ScanInput{
		TableName:                s.table,
		ConsistentRead:           aws.Bool(true),
		ProjectionExpression:     aws.String("#pk"),
		FilterExpression:         aws.String("#sk = :head AND begins_with(#pk, :prefix)"),
		ExpressionAttributeNames: map[string]string{"#pk": AttrPK, "#sk": AttrSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":head":   S(headSK),
			":prefix": S(PartitionPK("")),
		},
		ReturnConsumedCapacity: total,
	}
	if partitionScanLimit > 0 {
		in.Limit = aws.Int32(partitionScanLimit)
	}
	const op = "list partitions"
	for {
		var out *dynamodb.ScanOutput
		err := call(ctx, s.retry, op, func(ctx context.Context) error {
			o, err := s.db.Scan(ctx, in, NoSDKRetry)
			if o != nil && o.ConsumedCapacity != nil {
				RecordConsumed(ctx, false, *o.ConsumedCapacity)
			}
			out = o
			return err
		})
		if err != nil {
			return wrap(op, err)
		}
		// No RecordEstimate: the Scan is billed on the bytes it read
		// before filtering, which the response does not reveal; the
		// consumed capacity DynamoDB reports is recorded above.
		for _, it := range out.Items {
			pk, _ := getS(it, AttrPK)
			if p, ok := partitionOfHeadPK(pk); ok && !fn(p) {
				return nil
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// partitionOfHeadPK inverts headPK: it strips "P#" and percent-decodes
// exactly the two escapes esc writes. ok is false for a pk that headPK
// cannot produce (another '#', another escape, a stray '%').
func partitionOfHeadPK(pk string) (string, bool) {
	rest, found := strings.CutPrefix(pk, PartitionPK(""))
	if !found || strings.Contains(rest, "#") {
		return "", false
	}
	if !strings.Contains(rest, "%") {
		return rest, true
	}
	var b strings.Builder
	b.Grow(len(rest))
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		switch {
		case strings.HasPrefix(rest[i:], "%25"):
			b.WriteByte('%')
		case strings.HasPrefix(rest[i:], "%23"):
			b.WriteByte('#')
		default:
			return "", false
		}
		i += 2
	}
	return b.String(), true
}
