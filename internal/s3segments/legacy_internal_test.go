package s3segments

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
)

// A publication in the earlier layout (sort key PUB#<part hash>#<ctx
// hash>, Find index item without ly), as the previous release wrote it,
// is neither returned by Lookup nor by Find, so a pull re-publishes the
// page instead of handing out an id no download could authorize; after
// that Put both answer from the current layout.
func TestEarlierLayoutIgnored(t *testing.T) {
	ctx := context.Background()
	s, ddb, table := newInternal(t, "legacy")
	body := []byte("a page published by the previous release")
	sum := sha256.Sum256(body)
	h := hex.EncodeToString(sum[:])
	id := "sha256:" + h
	now := time.Now().UnixMilli()
	k := store.SegmentKey{Partition: "tenant", LogEpoch: "e1", Table: "tasks", SchemaVersion: 1, MediaType: wire.MediaRows, ScopeDigest: "d", AsOfCommitSeq: 3}
	pub := store.Publication{SegmentKey: k, RowCount: 1, CreatedAtMs: now, ExpiresAtMs: now + time.Hour.Milliseconds()}
	// The object and its OBJ item exist (another tenant's Put made them).
	other := pub
	other.Partition = "other"
	if err := s.Put(ctx, id, body, other, now); err != nil {
		t.Fatal(err)
	}
	// The previous release's items for "tenant".
	item := dynamostore.Key(segPK(h), "PUB#"+fieldHash(k.Partition)+"#"+ctxHash(&pub))
	pubAttrs(item, &pub)
	item[aLen] = dynamostore.N(int64(len(body)))
	fitem := dynamostore.Key(findPK(k.Partition), findSK(h, &pub))
	pubAttrs(fitem, &pub)
	fitem[aSeg], fitem[aGuard], fitem[aLen] = dynamostore.S(h), dynamostore.N(now+48*time.Hour.Milliseconds()), dynamostore.N(int64(len(body)))
	for _, it := range []map[string]dtypes.AttributeValue{item, fitem} {
		if _, err := ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: it}); err != nil {
			t.Fatal(err)
		}
	}
	if seg, err := s.Lookup(ctx, id, store.FilterOf(k)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Lookup sees the earlier layout: %+v %v", seg, err)
	}
	if gotID, _, _, ok, err := s.FindSized(ctx, k, now); err != nil || ok {
		t.Errorf("FindSized returns the earlier layout's publication: %s %v %v", gotID, ok, err)
	}
	if err := s.Put(ctx, id, body, pub, now); err != nil {
		t.Fatal(err)
	}
	seg, err := s.Lookup(ctx, id, store.FilterOf(k))
	if err != nil || len(seg.Publications) != 1 || seg.Publications[0] != pub || seg.ByteLength != int64(len(body)) {
		t.Fatalf("after re-publishing: %+v %v", seg, err)
	}
	if gotID, got, n, ok, err := s.FindSized(ctx, k, now); err != nil || !ok || gotID != id || got != pub || n != int64(len(body)) {
		t.Errorf("FindSized after re-publishing: %s %+v %d %v %v", gotID, got, n, ok, err)
	}
}
