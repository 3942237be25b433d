package dynamostore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
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
// It is an operator path (syncular-admin register-partitions, which
// backfills the registry from it), never a request path: a
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

// The partition registry lets operator jobs (scheduled pruning,
// syncular-admin -all) enumerate partitions with Queries instead of a
// table Scan. TouchPartition writes a partition's registry item once,
// when it creates the head (never on the request path of an existing
// partition), before the head, so the registry is always a superset of
// the heads: a crash between the two leaves a name whose Head reports
// "not found", which the jobs skip.
//
//	registry item   REG#<shard:02d>   P<partition> | H<sha256 hex>   pn = partition
//	job state       JOB#<name>        STATE                          cur = cursor
//
// The shard is FNV-1a of the name modulo RegistryShards, so creations
// spread over a few keys. Names too long for a sort key are keyed by
// their hash; the name itself is always in pn.
const RegistryShards = 16

const (
	regPrefix = "REG#"
	regName   = "pn"
	jobPrefix = "JOB#"
	jobCursor = "cur"
)

func registryShard(p string) int {
	h := fnv.New32a()
	h.Write([]byte(p))
	return int(h.Sum32() % RegistryShards)
}

func registryPK(shard int) string { return fmt.Sprintf("%s%02d", regPrefix, shard) }

func registrySK(p string) string {
	if len(p) <= 1000 {
		return "P" + p
	}
	sum := sha256.Sum256([]byte(p))
	return "H" + hex.EncodeToString(sum[:])
}

// RegisterPartition writes partition's registry item (idempotent: an
// unconditional put of the same item). TouchPartition calls it when it
// creates a partition; syncular-admin register-partitions backfills
// partitions created before the registry existed.
func (s *Store) RegisterPartition(ctx context.Context, partition string) error {
	if err := checkPartition(partition); err != nil {
		return err
	}
	item := Key(registryPK(registryShard(partition)), registrySK(partition))
	item[regName] = S(partition)
	return s.putItem(ctx, "register partition", item, "", nil)
}

// EachRegisteredPartition calls fn with every registered partition
// until fn returns false: ListRegisteredPartitions from the start,
// without the cursors. It is the partition walk of the migration step
// (the pre-traffic hook and syncular-admin migrate walk the same set):
// Queries of the registry, never a Scan.
func (s *Store) EachRegisteredPartition(ctx context.Context, fn func(partition string) bool) error {
	return s.ListRegisteredPartitions(ctx, "", func(p, _ string) bool { return fn(p) })
}

// ListRegisteredPartitions calls fn with every registered partition,
// shard by shard in key order, starting after cursor ("" = from the
// start), until fn returns false. Each call also gets the cursor that
// resumes right after that partition, so a job interrupted at any point
// continues where it stopped. It reads only registry items: about one
// read unit per 4 KB of names (~100 partitions), never the table.
func (s *Store) ListRegisteredPartitions(ctx context.Context, cursor string, fn func(partition, cursor string) bool) error {
	first, _, err := parseRegistryCursor(cursor)
	if err != nil || first >= RegistryShards {
		return err
	}
	for shard := first; shard < RegistryShards; shard++ {
		from := ""
		if shard == first {
			from = cursor
		}
		stop := false
		err := s.ListRegistryShard(ctx, shard, from, func(p, next string) bool {
			stop = !fn(p, next)
			return !stop
		})
		if err != nil || stop {
			return err
		}
	}
	return nil
}

// ListRegistryShard is ListRegisteredPartitions within one registry
// shard (0 ≤ shard < RegistryShards): the partitions of that shard in key
// order, after cursor ("" = from the shard's start; otherwise a cursor
// this shard's walk handed out). Jobs that walk the shards in parallel
// (scheduled pruning) keep one cursor per shard.
func (s *Store) ListRegistryShard(ctx context.Context, shard int, cursor string, fn func(partition, cursor string) bool) error {
	if shard < 0 || shard >= RegistryShards {
		return fmt.Errorf("dynamostore: registry shard %d out of range", shard)
	}
	in := &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": S(registryPK(shard))},
	}
	if cursor != "" {
		cs, after, err := parseRegistryCursor(cursor)
		if err != nil {
			return err
		}
		if cs != shard {
			return fmt.Errorf("dynamostore: registry cursor %q is not of shard %d", cursor, shard)
		}
		if after != "" {
			in.ExclusiveStartKey = Key(registryPK(shard), after)
		}
	}
	var perr error
	err := s.query(ctx, "list partition registry", in, func(items []map[string]types.AttributeValue) bool {
		for _, it := range items {
			p, ok := getS(it, regName)
			sk, _ := getS(it, AttrSK)
			if !ok {
				perr = fmt.Errorf("dynamostore: registry item %q has no partition name: %w", sk, errCorrupt)
				return false
			}
			if !fn(p, fmt.Sprintf("%02d%s", shard, sk)) {
				return false
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	return perr
}

// parseRegistryCursor splits a registry cursor into its shard and the
// sort key to resume after ("" cursor: shard 0 from the start).
func parseRegistryCursor(cursor string) (shard int, after string, err error) {
	if cursor == "" {
		return 0, "", nil
	}
	if len(cursor) < 3 || cursor[0] < '0' || cursor[0] > '9' || cursor[1] < '0' || cursor[1] > '9' {
		return 0, "", fmt.Errorf("dynamostore: malformed partition registry cursor %q", cursor)
	}
	return int(cursor[0]-'0')*10 + int(cursor[1]-'0'), cursor[2:], nil
}

// JobCursor returns the saved cursor of an operator job ("" when none).
func (s *Store) JobCursor(ctx context.Context, job string) (string, error) {
	item, err := s.getItem(ctx, "read job state", jobPrefix+esc(job), "STATE", nil)
	if err != nil || item == nil {
		return "", err
	}
	c, _ := getS(item, jobCursor)
	return c, nil
}

// SetJobCursor saves an operator job's cursor ("" clears it).
func (s *Store) SetJobCursor(ctx context.Context, job, cursor string, nowMs int64) error {
	item := Key(jobPrefix+esc(job), "STATE")
	item["at"] = N(nowMs)
	if cursor != "" {
		item[jobCursor] = S(cursor)
	}
	return s.putItem(ctx, "save job state", item, "", nil)
}
