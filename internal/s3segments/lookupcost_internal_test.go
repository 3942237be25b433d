package s3segments

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// newInternal is a store on a fresh bucket and table, with the DynamoDB
// client and table name for tests that write its items directly.
func newInternal(t *testing.T, name string) (*Segments, *dynamodb.Client, string) {
	t.Helper()
	srv := testenv.S3(t)
	bucket := testenv.UniqueName(t, name)
	srv.CreateBucket(t, bucket)
	ddb := testenv.DynamoDB(t).Client(t)
	table := testenv.UniqueName(t, name)
	if err := dynamostore.CreateTable(context.Background(), ddb, table); err != nil {
		t.Fatal(err)
	}
	return New(srv.Client(t), bucket, "app/", ddb, table, Options{}), ddb, table
}

// TestLookupCostFlat (issue 11 item 5): a download's Lookup reads only
// the publications of its partition, epoch and scope digest. With 1 and
// with 6,001 publications of identical bytes — 3,000 by other tenants
// under the same digest, 3,000 by the same tenant under other digests —
// the Lookup a token or direct download makes (its own group) costs the
// same capacity and round trips, and so does one for a digest the tenant
// never published under (the forbidden case). Before, Lookup read every
// publication of the segment: 205 RCU at 3,000 (11 at 150). The 6,000
// are written as a Put writes its publication item, in batches, to keep
// the test fast; TestLookupLoad publishes them with Put.
func TestLookupCostFlat(t *testing.T) {
	ctx := context.Background()
	s, ddb, table := newInternal(t, "lookcost")
	body := []byte(strings.Repeat("an empty page shared by every tenant ", 20))
	sum := sha256.Sum256(body)
	h := hex.EncodeToString(sum[:])
	id := "sha256:" + h
	now := time.Now().UnixMilli()
	k := func(p, d string) store.SegmentKey {
		return store.SegmentKey{Partition: p, LogEpoch: "e1", Table: "tasks", SchemaVersion: 1, MediaType: wire.MediaRows, ScopeDigest: d, AsOfCommitSeq: 7}
	}
	pub := func(k store.SegmentKey) store.Publication {
		return store.Publication{SegmentKey: k, RowCount: 0, CreatedAtMs: now, ExpiresAtMs: now + time.Hour.Milliseconds()}
	}
	mine := k("mine", "d-own")
	if err := s.Put(ctx, id, body, pub(mine), now); err != nil {
		t.Fatal(err)
	}
	type cost struct {
		rt  int
		rcu float64
		n   int
	}
	measure := func(f store.PublicationFilter) cost {
		mctx, c := dynamostore.WithCapacity(ctx)
		seg, err := s.Lookup(mctx, id, f)
		if err != nil {
			t.Fatal(err)
		}
		if seg.ByteLength != int64(len(body)) {
			t.Fatalf("ByteLength %d", seg.ByteLength)
		}
		u := c.Snapshot()
		return cost{u.RoundTrips, u.EstRCU, len(seg.Publications)}
	}
	own, miss := store.FilterOf(mine), store.FilterOf(k("mine", "d-never"))
	baseOwn, baseMiss := measure(own), measure(miss)
	if baseOwn.n != 1 || baseMiss.n != 0 {
		t.Fatalf("own group %d publications, other digest %d", baseOwn.n, baseMiss.n)
	}
	var batch []dtypes.WriteRequest
	flush := func() {
		for len(batch) > 0 {
			out, err := ddb.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]dtypes.WriteRequest{table: batch}})
			if err != nil {
				t.Fatal(err)
			}
			batch = out.UnprocessedItems[table]
		}
	}
	for i := range 3000 {
		for _, p := range []store.Publication{pub(k("other-"+strconv.Itoa(i), "d-own")), pub(k("mine", "d-"+strconv.Itoa(i)))} {
			item := dynamostore.Key(segPK(h), pubSK(&p))
			pubAttrs(item, &p)
			item[aLen] = dynamostore.N(int64(len(body)))
			item[dynamostore.TTLAttribute] = dynamostore.N(ttlSeconds(p.ExpiresAtMs, time.Hour))
			batch = append(batch, dtypes.WriteRequest{PutRequest: &dtypes.PutRequest{Item: item}})
			if len(batch) == 25 {
				flush()
			}
		}
	}
	flush()
	// All 6,001 are there: a read of the whole segment sees them.
	var all int32
	in := &dynamodb.QueryInput{TableName: aws.String(table), KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :p)"),
		ExpressionAttributeValues: map[string]dtypes.AttributeValue{":pk": dynamostore.S(segPK(h)), ":p": dynamostore.S("PUB#")}, Select: dtypes.SelectCount}
	for {
		out, err := ddb.Query(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		all += out.Count
		if len(out.LastEvaluatedKey) == 0 {
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	if all != 6001 {
		t.Fatalf("%d publications stored, want 6,001", all)
	}
	gotOwn, gotMiss := measure(own), measure(miss)
	t.Logf("own group: %+v with 1 publication, %+v with 6,001; other digest: %+v, %+v", baseOwn, gotOwn, baseMiss, gotMiss)
	if gotOwn != baseOwn || baseOwn.rt != 1 || baseOwn.rcu != 1 {
		t.Errorf("own group's Lookup: %+v with 6,001 publications, %+v with 1; want 1 round trip, 1 RCU", gotOwn, baseOwn)
	}
	if gotMiss != baseMiss || baseMiss.rt != 2 {
		t.Errorf("other digest's Lookup: %+v with 6,001 publications, %+v with 1; want 2 round trips", gotMiss, baseMiss)
	}
}
