// Package s3segments is the AWS implementation of store.SegmentStore and
// store.Presigner: segment bytes live in S3 under their content address,
// written once; publications (who may see them, until when) live in the
// DynamoDB table of package dynamostore (SPEC §5.1, §5.4, §5.5).
//
// # Object lifetime
//
// Objects are never deleted by this package. The bucket carries an S3
// lifecycle rule that expires objects under <prefix>segments/ after
// ObjectLifetime (for example 2 days with publications of at most 24 h:
// S3 expires an object no earlier than creation + N days). Every object
// write records, in a per-segment OBJ item, the time until which the
// object is guaranteed to exist (write time + ObjectLifetime). A
// publication is recorded only when that guarantee covers its expiry
// plus MaxURLTTL (a presigned URL minted just before expiry must still
// work) plus Margin (clock skew, lifecycle timing); when it does not —
// the object is old, or was re-published after its age ran down — the
// object's age is reset first: a self-copy (CopyObject with REPLACE
// metadata) creates it anew, so lifecycle counts from then. Find only
// returns publications whose recorded guarantee covers them, hence a
// returned publication's object outlives it.
package s3segments

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	stypes "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/s3errs"
)

// Defaults; see Options.
const (
	DefaultObjectLifetime = 48 * time.Hour
	DefaultMargin         = time.Hour
	DefaultTTLGrace       = 24 * time.Hour
	// MaxURLTTL is the §5.4 ceiling of a presigned URL's lifetime.
	MaxURLTTL = 15 * time.Minute
)

// Options configures Segments.
type Options struct {
	// ObjectLifetime must equal (or be shorter than) the bucket's lifecycle
	// expiration of segment objects (default 2 days). It must exceed the
	// longest publication lifetime + MaxURLTTL + Margin.
	ObjectLifetime time.Duration
	// Margin is added to every object-lifetime requirement (default 1 h).
	Margin time.Duration
	// TTLGrace keeps expired publication items this long past their
	// expiry before DynamoDB TTL may delete them (default 24 h), so a
	// download in that window answers sync.segment_expired rather than
	// sync.not_found (§5.5).
	TTLGrace time.Duration
	// Retry bounds DynamoDB retries (zero: dynamostore.DefaultRetryPolicy).
	Retry dynamostore.RetryPolicy
	// Now is the wall clock object ages are measured with (S3 lifecycle
	// runs on real time; tests substitute a fake one). Default time.Now.
	Now func() time.Time
}

// Segments implements store.SegmentStore and store.Presigner.
type Segments struct {
	s3     *s3.Client
	bucket string
	prefix string
	ddb    *dynamodb.Client
	table  *string
	opts   Options
}

var (
	_ store.SegmentStore = (*Segments)(nil)
	_ store.Presigner    = (*Segments)(nil)
)

// New returns Segments over bucket (object keys start with prefix) and
// the dynamostore table.
func New(s3Client *s3.Client, bucket, prefix string, ddb *dynamodb.Client, table string, opts Options) *Segments {
	if opts.ObjectLifetime <= 0 {
		opts.ObjectLifetime = DefaultObjectLifetime
	}
	if opts.Margin <= 0 {
		opts.Margin = DefaultMargin
	}
	if opts.TTLGrace <= 0 {
		opts.TTLGrace = DefaultTTLGrace
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Segments{s3: s3Client, bucket: bucket, prefix: prefix, ddb: ddb, table: aws.String(table), opts: opts}
}

// ObjectKey is the S3 key of a segment: it embeds the content address,
// as §5.4 requires of presigned delivery.
func (s *Segments) ObjectKey(segmentID string) (string, bool) {
	h, ok := hexOf(segmentID)
	if !ok {
		return "", false
	}
	return s.prefix + "segments/" + h, true
}

// hexOf returns the hex digest of a well-formed "sha256:<64 hex>" id.
func hexOf(segmentID string) (string, bool) {
	h, ok := strings.CutPrefix(segmentID, "sha256:")
	if !ok || len(h) != 64 {
		return "", false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", false
		}
	}
	return h, true
}

// DynamoDB items (see dynamostore's key table):
//
//	SEG#<hex>   OBJ                 bl byteLength, gu object-guaranteed-until ms, ttl
//	SEG#<hex>   PUB#<part hash>#<epoch hash>#<digest hash>#<ctx hash>   one publication (all SegmentKey fields, nc, rn, cr, ex, bl), ttl
//	P#<p>#SF    <unpinned key hash>#<pin, 19 digits>#<hex>#<ctx hash>   the Find index of that publication, + gu, bl, ly, ttl
//
// A segment's publications are grouped by partition, log epoch and scope
// digest: exactly what a download can use (a token binds all three, §5.4;
// a direct download knows its partition and epoch and re-derives the
// digest, §5.5). Lookup reads only that group, Put reads and prunes only
// its own group, so neither grows with the publications of other tenants
// (identical bytes, such as an empty page, share one address across all
// of them), of other scopes or of earlier epochs. A group holds at most
// store.MaxPubsPerContext publications per context (table, schema, media
// type, row cursor, page cut), so it stays a few items. The Find index
// orders a context's publications by pin so FindLatest reads the newest
// first.
//
// Measured on DynamoDB Local (TestLookupLoad, make load-dynamodb: the
// engine over dynamostore and this package; RCU estimated from item sizes
// and as DynamoDB Local reports it, equal here), for one segment whose
// bytes N other tenants also published under the same scope digest and
// the downloading tenant under N other digests:
//
//	N       publications   Lookup            token download    direct download
//	0       1              1 trip, 1 RCU     2 trips, 2 RCU    2 trips, 2 RCU
//	100     201            1 trip, 1 RCU     2 trips, 2 RCU    2 trips, 2 RCU
//	1,000   2,001          1 trip, 1 RCU     2 trips, 2 RCU    2 trips, 2 RCU
//	3,000   6,001          1 trip, 1 RCU     2 trips, 2 RCU    2 trips, 2 RCU
//
// (a download is the Lookup plus the partition head read). A Lookup for a
// digest the partition never published under costs 2 trips and 2 RCU at
// any N (TestLookupCostFlat): the extra Limit-1 read tells sync.forbidden
// from sync.not_found. Before this layout one Lookup read every
// publication of the segment: 1 / 7 / 69 / 205 RCU (one page) with 1 /
// 100 / 1,000 / 3,000 publications by other tenants, measured the same
// way.
//
// # Earlier layout
//
// Publications written by earlier releases (sort key PUB#<part hash>#<ctx
// hash>: one level shorter, so no prefix read here matches it; Find
// index items without ly) are not read: Lookup does not see them and
// Find skips their index items, so a pull rebuilds and re-publishes such
// a page in this layout (same bytes, same object) instead of handing out
// an id no download could authorize. They carry a TTL (expiry +
// TTLGrace) and DynamoDB deletes them; no migration is needed. The other
// way round, an earlier release reads every PUB# item of a segment, this
// layout's included, so while two releases serve (a canary) each finds
// the other's publications or rebuilds them.
//
// The publication context (SegmentKey + NextRowCursor + RowCount) is
// hashed into the sort keys: its fields are unbounded (partition names,
// row cursors), sort keys are limited to 1024 bytes, and the fields are
// stored in full beside the hash and compared on read.
const (
	aLen     = "bl"
	aGuard   = "gu"
	aPart    = "p"
	aEpoch   = "ep"
	aTable   = "tb"
	aSchema  = "sv"
	aMedia   = "mt"
	aDigest  = "sd"
	aAsOf    = "as"
	aCursor  = "rc" // present iff RowCursor.Present
	aNext    = "nc" // present iff NextRowCursor.Present
	aRows    = "rn"
	aCreated = "cr"
	aExpires = "ex"
	aSeg     = "sg"
	aLayout  = "ly" // on Find index items of this layout (see Earlier layout)
)

// layoutVersion is the value of aLayout.
const layoutVersion = 2

func segPK(h string) string { return "SEG#" + h }

const objSK = "OBJ"

func findPK(partition string) string { return dynamostore.PartitionPK(partition) + "#SF" }

// fieldHash hashes length-prefixed fields: injective input, fixed-size
// output for sort keys.
func fieldHash(fields ...string) string {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	for _, f := range fields {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(f)))])
		h.Write([]byte(f))
	}
	return hex.EncodeToString(h.Sum(nil))
}

func optField(o wire.Opt[string]) string {
	if !o.Present {
		return "-"
	}
	return "+" + o.Value
}

func keyHash(k *store.SegmentKey) string {
	return fieldHash(k.Partition, k.LogEpoch, k.Table, strconv.Itoa(int(k.SchemaVersion)),
		strconv.Itoa(int(k.MediaType)), k.ScopeDigest, strconv.FormatInt(k.AsOfCommitSeq, 10), optField(k.RowCursor))
}

// unpinnedHash is keyHash without the pin: the context FindLatest and
// the per-context bound group by.
func unpinnedHash(k *store.SegmentKey) string {
	return fieldHash(k.Partition, k.LogEpoch, k.Table, strconv.Itoa(int(k.SchemaVersion)),
		strconv.Itoa(int(k.MediaType)), k.ScopeDigest, optField(k.RowCursor))
}

// pinField renders a pin so sort keys order by it (pins are ≥ 0).
func pinField(asOf int64) string { return fmt.Sprintf("%019d", max(asOf, 0)) }

// findPrefix is the Find index prefix of key's context at one pin.
func findPrefix(k *store.SegmentKey, asOf int64) string {
	return unpinnedHash(k) + "#" + pinField(asOf) + "#"
}

// epochPrefix is the sort key prefix of a partition's publications of a
// segment in one log epoch; groupPrefix narrows it to one scope digest.
func epochPrefix(partition, epoch string) string {
	return "PUB#" + fieldHash(partition) + "#" + fieldHash(epoch) + "#"
}

func groupPrefix(f store.PublicationFilter) string {
	return epochPrefix(f.Partition, f.LogEpoch) + fieldHash(f.ScopeDigest) + "#"
}

// ctxHash identifies a publication context: the build-once key plus how
// the page was cut (§5.1); equal contexts merge lifetimes.
func ctxHash(p *store.Publication) string {
	return fieldHash(keyHash(&p.SegmentKey), optField(p.NextRowCursor), strconv.FormatInt(p.RowCount, 10))
}

func pubSK(p *store.Publication) string {
	return groupPrefix(store.FilterOf(p.SegmentKey)) + ctxHash(p)
}

func findSK(h string, p *store.Publication) string {
	return findPrefix(&p.SegmentKey, p.AsOfCommitSeq) + h + "#" + ctxHash(p)
}

func pubAttrs(item map[string]dtypes.AttributeValue, p *store.Publication) {
	item[aPart], item[aEpoch], item[aTable] = dynamostore.S(p.Partition), dynamostore.S(p.LogEpoch), dynamostore.S(p.Table)
	item[aSchema], item[aMedia] = dynamostore.N(int64(p.SchemaVersion)), dynamostore.N(int64(p.MediaType))
	item[aDigest], item[aAsOf] = dynamostore.S(p.ScopeDigest), dynamostore.N(p.AsOfCommitSeq)
	if p.RowCursor.Present {
		item[aCursor] = dynamostore.S(p.RowCursor.Value)
	}
	if p.NextRowCursor.Present {
		item[aNext] = dynamostore.S(p.NextRowCursor.Value)
	}
	item[aRows], item[aCreated], item[aExpires] = dynamostore.N(p.RowCount), dynamostore.N(p.CreatedAtMs), dynamostore.N(p.ExpiresAtMs)
}

func parsePub(item map[string]dtypes.AttributeValue) (store.Publication, bool) {
	var p store.Publication
	var ok [10]bool
	var sv, mt int64
	p.Partition, ok[0] = str(item, aPart)
	p.LogEpoch, ok[1] = str(item, aEpoch)
	p.Table, ok[2] = str(item, aTable)
	sv, ok[3] = num(item, aSchema)
	mt, ok[4] = num(item, aMedia)
	p.ScopeDigest, ok[5] = str(item, aDigest)
	p.AsOfCommitSeq, ok[6] = num(item, aAsOf)
	p.RowCount, ok[7] = num(item, aRows)
	p.CreatedAtMs, ok[8] = num(item, aCreated)
	p.ExpiresAtMs, ok[9] = num(item, aExpires)
	for _, v := range ok {
		if !v {
			return p, false
		}
	}
	p.SchemaVersion, p.MediaType = int32(sv), wire.MediaType(mt)
	if v, ok := str(item, aCursor); ok {
		p.RowCursor = wire.Some(v)
	}
	if v, ok := str(item, aNext); ok {
		p.NextRowCursor = wire.Some(v)
	}
	return p, true
}

func str(item map[string]dtypes.AttributeValue, name string) (string, bool) {
	v, ok := item[name].(*dtypes.AttributeValueMemberS)
	if !ok {
		return "", false
	}
	return v.Value, true
}

func num(item map[string]dtypes.AttributeValue, name string) (int64, bool) {
	v, ok := item[name].(*dtypes.AttributeValueMemberN)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	return n, err == nil
}

func ttlSeconds(ms int64, grace time.Duration) int64 {
	return (ms+grace.Milliseconds())/1000 + 1
}

// segState is what the table knows about one segment.
type segState struct {
	hasObj     bool
	byteLength int64
	guardMs    int64 // object guaranteed to exist until then (wall clock)
	pubs       map[string]store.Publication
}

// readSegment reads the segment's OBJ item and the publications of pub's
// group (partition, epoch, scope digest): what a Put merges into and
// prunes. Other groups' publications are never read.
func (s *Segments) readSegment(ctx context.Context, h string, f store.PublicationFilter) (*segState, error) {
	st := &segState{pubs: map[string]store.Publication{}}
	if err := s.readObj(ctx, h, st); err != nil {
		return nil, err
	}
	items, err := s.queryPubs(ctx, h, groupPrefix(f), 0)
	if err != nil {
		return nil, err
	}
	for _, it := range items {
		sk, _ := str(it, dynamostore.AttrSK)
		if p, ok := parsePub(it); ok {
			st.pubs[sk] = p
		}
	}
	return st, nil
}

// queryPubs reads the segment's publication items whose sort key starts
// with prefix: all of them, or with limit > 0 at most that many.
func (s *Segments) queryPubs(ctx context.Context, h, prefix string, limit int32) ([]map[string]dtypes.AttributeValue, error) {
	in := &dynamodb.QueryInput{
		TableName:              s.table,
		KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :sk)"),
		ExpressionAttributeValues: map[string]dtypes.AttributeValue{
			":pk": dynamostore.S(segPK(h)), ":sk": dynamostore.S(prefix),
		},
		ConsistentRead:         aws.Bool(true),
		ReturnConsumedCapacity: dtypes.ReturnConsumedCapacityTotal,
	}
	if limit > 0 {
		in.Limit = aws.Int32(limit)
	}
	var items []map[string]dtypes.AttributeValue
	for {
		var out *dynamodb.QueryOutput
		err := dynamostore.Call(ctx, s.opts.Retry, "read segment publications", func(ctx context.Context) error {
			o, err := s.ddb.Query(ctx, in, dynamostore.NoSDKRetry)
			if o != nil && o.ConsumedCapacity != nil {
				dynamostore.RecordConsumed(ctx, false, *o.ConsumedCapacity)
			}
			out = o
			return err
		})
		if err != nil {
			return nil, err
		}
		size := 0
		for _, it := range out.Items {
			size += dynamostore.ItemSize(it)
		}
		items = append(items, out.Items...)
		dynamostore.RecordEstimate(ctx, float64(max(1, (size+4095)/4096)), 0)
		if len(out.LastEvaluatedKey) == 0 || (limit > 0 && len(items) >= int(limit)) {
			return items, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// readObj reads the OBJ item into st (absent: st unchanged).
func (s *Segments) readObj(ctx context.Context, h string, st *segState) error {
	var out *dynamodb.GetItemOutput
	err := dynamostore.Call(ctx, s.opts.Retry, "read segment object", func(ctx context.Context) error {
		o, err := s.ddb.GetItem(ctx, &dynamodb.GetItemInput{
			TableName:              s.table,
			Key:                    dynamostore.Key(segPK(h), objSK),
			ConsistentRead:         aws.Bool(true),
			ReturnConsumedCapacity: dtypes.ReturnConsumedCapacityTotal,
		}, dynamostore.NoSDKRetry)
		if o != nil && o.ConsumedCapacity != nil {
			dynamostore.RecordConsumed(ctx, false, *o.ConsumedCapacity)
		}
		out = o
		return err
	})
	if err != nil {
		return err
	}
	dynamostore.RecordEstimate(ctx, 1, 0)
	if len(out.Item) > 0 {
		st.hasObj = true
		st.byteLength, _ = num(out.Item, aLen)
		st.guardMs, _ = num(out.Item, aGuard)
	}
	return nil
}

// Put implements store.SegmentStore.
func (s *Segments) Put(ctx context.Context, segmentID string, body []byte, pub store.Publication, nowMs int64) error {
	h, ok := hexOf(segmentID)
	if !ok {
		return fmt.Errorf("s3segments: malformed segment id %q", segmentID)
	}
	if sum := sha256.Sum256(body); hex.EncodeToString(sum[:]) != h {
		// The id is the content address (§5.1): other bytes under it are
		// a collision by definition, and are never written.
		return store.ErrCollision
	}
	need := pub.ExpiresAtMs + MaxURLTTL.Milliseconds() + s.opts.Margin.Milliseconds()
	for attempt := 0; ; attempt++ {
		st, err := s.readSegment(ctx, h, store.FilterOf(pub.SegmentKey))
		if err != nil {
			return err
		}
		if !st.hasObj || st.guardMs < need {
			if err = s.ensureObject(ctx, h, body, need, st); err != nil {
				return err
			}
		}
		err = s.recordPublication(ctx, h, st, pub, nowMs)
		if err == nil || !errors.Is(err, errRace) || attempt >= 4 {
			return err
		}
	}
}

var errRace = errors.New("s3segments: publication changed concurrently")

// ensureObject makes the object exist with a guarantee of at least
// needMs, writing it once (If-None-Match: *) or resetting its age with a
// self-copy, and records the guarantee in the OBJ item and in st.
func (s *Segments) ensureObject(ctx context.Context, h string, body []byte, needMs int64, st *segState) error {
	key := s.prefix + "segments/" + h
	for range 3 {
		start := s.opts.Now()
		_, err := s.s3.PutObject(ctx, &s3.PutObjectInput{
			Bucket:        aws.String(s.bucket),
			Key:           aws.String(key),
			Body:          bytes.NewReader(body),
			ContentLength: aws.Int64(int64(len(body))),
			ContentType:   aws.String("application/octet-stream"),
			IfNoneMatch:   aws.String("*"),
		})
		if err != nil && !s3errs.IsStatus(err, http.StatusPreconditionFailed, "PreconditionFailed") {
			return s3Err("write segment object", err)
		}
		if err != nil {
			// The object exists: it must hold exactly these bytes (§5.1),
			// and its lifecycle age restarts from a self-copy.
			same, err := s.sameObject(ctx, key, h, int64(len(body)))
			if errors.Is(err, store.ErrNotFound) {
				continue // expired between the two requests: write it again
			}
			if err != nil {
				return err
			}
			if !same {
				return store.ErrCollision
			}
			start = s.opts.Now()
			_, err = s.s3.CopyObject(ctx, &s3.CopyObjectInput{
				Bucket:            aws.String(s.bucket),
				Key:               aws.String(key),
				CopySource:        aws.String(s.bucket + "/" + key),
				MetadataDirective: stypes.MetadataDirectiveReplace,
				ContentType:       aws.String("application/octet-stream"),
				Metadata:          map[string]string{"refreshed-at": strconv.FormatInt(start.UnixMilli(), 10)},
			})
			if s3errs.IsStatus(err, http.StatusNotFound, "NoSuchKey") {
				continue
			}
			if err != nil {
				return s3Err("refresh segment object", err)
			}
		}
		guard := start.Add(s.opts.ObjectLifetime).UnixMilli()
		if guard < needMs {
			return fmt.Errorf("s3segments: publication until %d needs the object until %d, but the lifecycle keeps it only until %d: raise ObjectLifetime (and the bucket rule) or shorten SegmentTTL", needMs-MaxURLTTL.Milliseconds()-s.opts.Margin.Milliseconds(), needMs, guard)
		}
		if err := s.recordObject(ctx, h, int64(len(body)), guard); err != nil {
			return err
		}
		st.hasObj, st.byteLength, st.guardMs = true, int64(len(body)), max(st.guardMs, guard)
		return nil
	}
	return fmt.Errorf("s3segments: segment object %s kept disappearing while being written", h)
}

// sameObject streams the stored object through SHA-256.
func (s *Segments) sameObject(ctx context.Context, key, h string, n int64) (bool, error) {
	out, err := s.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if s3errs.IsStatus(err, http.StatusNotFound, "NoSuchKey") {
		return false, store.ErrNotFound
	}
	if err != nil {
		return false, s3Err("read segment object", err)
	}
	defer out.Body.Close()
	sum := sha256.New()
	m, err := io.Copy(sum, out.Body)
	if err != nil {
		return false, s3Err("read segment object", err)
	}
	return m == n && hex.EncodeToString(sum.Sum(nil)) == h, nil
}

// recordObject raises the OBJ item's guarantee (never lowers it).
func (s *Segments) recordObject(ctx context.Context, h string, n, guard int64) error {
	err := dynamostore.Call(ctx, s.opts.Retry, "record segment object", func(ctx context.Context) error {
		o, err := s.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:           s.table,
			Key:                 dynamostore.Key(segPK(h), objSK),
			UpdateExpression:    aws.String("SET bl = :bl, gu = :gu, #ttl = :ttl"),
			ConditionExpression: aws.String("attribute_not_exists(gu) OR gu < :gu"),
			ExpressionAttributeNames: map[string]string{
				"#ttl": dynamostore.TTLAttribute,
			},
			ExpressionAttributeValues: map[string]dtypes.AttributeValue{
				":bl": dynamostore.N(n), ":gu": dynamostore.N(guard), ":ttl": dynamostore.N(ttlSeconds(guard, s.opts.TTLGrace)),
			},
			ReturnConsumedCapacity: dtypes.ReturnConsumedCapacityTotal,
		}, dynamostore.NoSDKRetry)
		if o != nil && o.ConsumedCapacity != nil {
			dynamostore.RecordConsumed(ctx, true, *o.ConsumedCapacity)
		}
		return err
	})
	dynamostore.RecordEstimate(ctx, 0, 1)
	var cf *dtypes.ConditionalCheckFailedException
	if errors.As(err, &cf) {
		return nil // a later write already recorded a longer guarantee
	}
	return err
}

// recordPublication merges pub into its context (earliest creation,
// latest expiry) and prunes publications expired at nowMs, in one
// transaction conditioned on the publication items it read, so
// concurrent Puts never lose a merge (errRace makes Put re-read).
func (s *Segments) recordPublication(ctx context.Context, h string, st *segState, pub store.Publication, nowMs int64) error {
	sk := pubSK(&pub)
	merged := pub
	old, had := st.pubs[sk]
	if had {
		merged.CreatedAtMs = min(old.CreatedAtMs, pub.CreatedAtMs)
		merged.ExpiresAtMs = max(old.ExpiresAtMs, pub.ExpiresAtMs)
	}
	var acts []dtypes.TransactWriteItem
	est := 0.0
	add := func(w dtypes.TransactWriteItem, item map[string]dtypes.AttributeValue) {
		acts = append(acts, w)
		est += 2 * float64(max(1, (dynamostore.ItemSize(item)+1023)/1024))
	}
	live := merged.ExpiresAtMs > nowMs
	if live {
		if merged.ExpiresAtMs+MaxURLTTL.Milliseconds() > st.guardMs {
			return fmt.Errorf("s3segments: object guarantee %d does not cover publication expiry %d", st.guardMs, merged.ExpiresAtMs)
		}
		item := dynamostore.Key(segPK(h), sk)
		pubAttrs(item, &merged)
		item[aLen] = dynamostore.N(st.byteLength)
		// DynamoDB TTL deletes on the wall clock: never schedule deletion
		// before now + grace, even for a publication whose (engine-clock)
		// expiry already passed, so it still answers segment_expired.
		item[dynamostore.TTLAttribute] = dynamostore.N(ttlSeconds(max(merged.ExpiresAtMs, s.opts.Now().UnixMilli()), s.opts.TTLGrace))
		put := &dtypes.Put{TableName: s.table, Item: item, ConditionExpression: aws.String("attribute_not_exists(pk)")}
		if had {
			put.ConditionExpression = aws.String("cr = :cr AND ex = :ex")
			put.ExpressionAttributeValues = map[string]dtypes.AttributeValue{":cr": dynamostore.N(old.CreatedAtMs), ":ex": dynamostore.N(old.ExpiresAtMs)}
		}
		add(dtypes.TransactWriteItem{Put: put}, item)
		fitem := dynamostore.Key(findPK(merged.Partition), findSK(h, &merged))
		pubAttrs(fitem, &merged)
		fitem[aSeg], fitem[aGuard] = dynamostore.S(h), dynamostore.N(st.guardMs)
		fitem[aLen] = dynamostore.N(st.byteLength) // FindSized: reuse without a Lookup
		fitem[aLayout] = dynamostore.N(layoutVersion)
		fitem[dynamostore.TTLAttribute] = item[dynamostore.TTLAttribute]
		add(dtypes.TransactWriteItem{Put: &dtypes.Put{TableName: s.table, Item: fitem}}, fitem)
	}
	// Prune what expired (§5.1 "pruned on write") and, per context apart
	// from the pin, all but the store.MaxPubsPerContext newest (counting
	// the one just written), within the 100-action transaction limit; the
	// rest goes with a later Put.
	keep := map[string]bool{}
	if live {
		keep[sk] = true
	}
	byCtx := map[string][]string{}
	for osk, p := range st.pubs {
		if p.ExpiresAtMs > nowMs && osk != sk {
			u := unpinnedHash(&p.SegmentKey)
			byCtx[u] = append(byCtx[u], osk)
		}
	}
	for u, sks := range byCtx {
		slices.SortFunc(sks, func(a, b string) int {
			pa, pb := st.pubs[a], st.pubs[b]
			if c := cmp.Compare(pb.AsOfCommitSeq, pa.AsOfCommitSeq); c != 0 {
				return c
			}
			if c := cmp.Compare(pb.ExpiresAtMs, pa.ExpiresAtMs); c != 0 {
				return c
			}
			return strings.Compare(a, b)
		})
		room := store.MaxPubsPerContext
		if live && u == unpinnedHash(&merged.SegmentKey) {
			room-- // the publication just written is the newest write
		}
		for i, osk := range sks {
			if i < room {
				keep[osk] = true
			}
		}
	}
	for osk, p := range st.pubs {
		if keep[osk] || len(acts) >= 98 {
			continue
		}
		k := dynamostore.Key(segPK(h), osk)
		add(dtypes.TransactWriteItem{Delete: &dtypes.Delete{
			TableName: s.table, Key: k,
			ConditionExpression:       aws.String("attribute_not_exists(pk) OR ex = :ex"),
			ExpressionAttributeValues: map[string]dtypes.AttributeValue{":ex": dynamostore.N(p.ExpiresAtMs)},
		}}, k)
		fk := dynamostore.Key(findPK(p.Partition), findSK(h, &p))
		add(dtypes.TransactWriteItem{Delete: &dtypes.Delete{TableName: s.table, Key: fk}}, fk)
	}
	if len(acts) == 0 {
		return nil
	}
	err := dynamostore.Call(ctx, s.opts.Retry, "record segment publication", func(ctx context.Context) error {
		o, err := s.ddb.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
			TransactItems:          acts,
			ReturnConsumedCapacity: dtypes.ReturnConsumedCapacityTotal,
		}, dynamostore.NoSDKRetry)
		if o != nil {
			dynamostore.RecordConsumed(ctx, true, o.ConsumedCapacity...)
		}
		return err
	})
	dynamostore.RecordEstimate(ctx, 0, est)
	var tc *dtypes.TransactionCanceledException
	if errors.As(err, &tc) {
		for _, r := range tc.CancellationReasons {
			if aws.ToString(r.Code) == "ConditionalCheckFailed" {
				return errRace
			}
		}
	}
	return err
}

// Find implements store.SegmentStore: one consistent Query of the
// partition's lookup items for the key at its pin. Among live
// publications it returns the one expiring last.
func (s *Segments) Find(ctx context.Context, key store.SegmentKey, nowMs int64) (string, store.Publication, bool, error) {
	id, pub, _, ok, err := s.FindSized(ctx, key, nowMs)
	return id, pub, ok, err
}

// FindSized implements store.SizedFinder: Find, with the byte length the
// lookup item records, so a pull reusing a page reads nothing whose cost
// grows with the segment's publications in other partitions.
func (s *Segments) FindSized(ctx context.Context, key store.SegmentKey, nowMs int64) (string, store.Publication, int64, bool, error) {
	return s.find(ctx, key, key.AsOfCommitSeq, key.AsOfCommitSeq, nowMs)
}

var _ store.LatestFinder = (*Segments)(nil)

// FindLatest implements store.LatestFinder: one Query of the context's
// lookup items in the pin range, newest pin first; it stops at the first
// page holding a live publication. Puts keep at most
// store.MaxPubsPerContext per context and segment, so the pages read do
// not grow with how often the context was re-published.
func (s *Segments) FindLatest(ctx context.Context, key store.SegmentKey, minAsOf, maxAsOf, nowMs int64) (string, store.Publication, int64, bool, error) {
	return s.find(ctx, key, minAsOf, maxAsOf, nowMs)
}

func (s *Segments) find(ctx context.Context, key store.SegmentKey, minAsOf, maxAsOf, nowMs int64) (string, store.Publication, int64, bool, error) {
	if minAsOf > maxAsOf {
		return "", store.Publication{}, 0, false, nil
	}
	in := &dynamodb.QueryInput{
		TableName:              s.table,
		KeyConditionExpression: aws.String("pk = :pk AND sk BETWEEN :lo AND :hi"),
		ExpressionAttributeValues: map[string]dtypes.AttributeValue{
			":pk": dynamostore.S(findPK(key.Partition)),
			":lo": dynamostore.S(findPrefix(&key, minAsOf)),
			// '~' sorts after every hex digit and '#'.
			":hi": dynamostore.S(findPrefix(&key, maxAsOf) + "~"),
		},
		ScanIndexForward:       aws.Bool(false),
		ConsistentRead:         aws.Bool(true),
		ReturnConsumedCapacity: dtypes.ReturnConsumedCapacityTotal,
	}
	var (
		bestID  string
		best    store.Publication
		bestLen int64
		matched bool
	)
	u := unpinnedHash(&key)
	for {
		var out *dynamodb.QueryOutput
		err := dynamostore.Call(ctx, s.opts.Retry, "find segment", func(ctx context.Context) error {
			o, err := s.ddb.Query(ctx, in, dynamostore.NoSDKRetry)
			if o != nil && o.ConsumedCapacity != nil {
				dynamostore.RecordConsumed(ctx, false, *o.ConsumedCapacity)
			}
			out = o
			return err
		})
		if err != nil {
			return "", store.Publication{}, 0, false, err
		}
		size := 0
		for _, it := range out.Items {
			size += dynamostore.ItemSize(it)
			p, ok := parsePub(it)
			h, okh := str(it, aSeg)
			guard, okg := num(it, aGuard)
			_, okl := num(it, aLayout) // an earlier layout's publication: Lookup cannot see it
			if !ok || !okh || !okg || !okl || unpinnedHash(&p.SegmentKey) != u || p.AsOfCommitSeq < minAsOf || p.AsOfCommitSeq > maxAsOf || p.ExpiresAtMs <= nowMs {
				continue
			}
			if p.ExpiresAtMs+MaxURLTTL.Milliseconds() > guard {
				continue // the object is not known to outlive it
			}
			q := p.SegmentKey
			q.AsOfCommitSeq = key.AsOfCommitSeq
			if q != key {
				continue // a hash collision in the sort key: never serve it
			}
			id := "sha256:" + h
			if !matched || p.AsOfCommitSeq > best.AsOfCommitSeq ||
				(p.AsOfCommitSeq == best.AsOfCommitSeq && (p.ExpiresAtMs > best.ExpiresAtMs || (p.ExpiresAtMs == best.ExpiresAtMs && id < bestID))) {
				bestID, best, matched = id, p, true
				bestLen, _ = num(it, aLen)
			}
		}
		dynamostore.RecordEstimate(ctx, float64(max(1, (size+4095)/4096)), 0)
		if matched || len(out.LastEvaluatedKey) == 0 {
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	return bestID, best, bestLen, matched, nil
}

// Lookup implements store.SegmentStore: one consistent Query of f's
// group (a few items whatever the segment's other publications); when the
// group is empty, one more Query reads at most one item of the
// partition's epoch to tell "other scopes" from "not published here".
func (s *Segments) Lookup(ctx context.Context, segmentID string, f store.PublicationFilter) (*store.Segment, error) {
	h, ok := hexOf(segmentID)
	if !ok {
		return nil, store.ErrNotFound
	}
	items, err := s.queryPubs(ctx, h, groupPrefix(f), 0)
	if err != nil {
		return nil, err
	}
	seg := &store.Segment{SegmentID: segmentID, Publications: []store.Publication{}}
	found := false
	for _, it := range items {
		// The fields are compared, not only their hashes in the key.
		if p, ok := parsePub(it); ok && f.Matches(&p) {
			seg.Publications = append(seg.Publications, p)
			seg.ByteLength, _ = num(it, aLen)
			found = true
		}
	}
	if !found {
		if items, err = s.queryPubs(ctx, h, epochPrefix(f.Partition, f.LogEpoch), 1); err != nil {
			return nil, err
		}
		for _, it := range items {
			if p, ok := parsePub(it); ok && p.Partition == f.Partition && p.LogEpoch == f.LogEpoch {
				seg.ByteLength, _ = num(it, aLen)
				found = true
			}
		}
	}
	if !found {
		return nil, store.ErrNotFound
	}
	return seg, nil
}

// Open implements store.SegmentStore: the GetObject body, streamed.
func (s *Segments) Open(ctx context.Context, segmentID string) (io.ReadCloser, error) {
	key, ok := s.ObjectKey(segmentID)
	if !ok {
		return nil, store.ErrNotFound
	}
	out, err := s.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if s3errs.IsStatus(err, http.StatusNotFound, "NoSuchKey") {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, s3Err("open segment object", err)
	}
	return out.Body, nil
}

// s3Err maps throttling and 5xx (after the SDK's bounded retries) to
// sync.rate_limited and names the operation on anything else.
func s3Err(op string, err error) error {
	if s3errs.Busy(err) {
		return syncerr.Wrap(err, syncerr.RateLimited, "object storage is busy (%s)", op)
	}
	return fmt.Errorf("s3segments: %s: %w", op, err)
}

// LifecycleRule is the bucket rule this package's guarantees assume:
// objects under <prefix>segments/ expire after lifetime rounded up to
// whole days (S3 expires no earlier than creation + N days). Pass the
// same lifetime as Options.ObjectLifetime; template.yaml mirrors it.
func LifecycleRule(prefix string, lifetime time.Duration) stypes.LifecycleRule {
	days := int32((lifetime + 24*time.Hour - 1) / (24 * time.Hour))
	return stypes.LifecycleRule{
		ID:         aws.String("expire-segments"),
		Status:     stypes.ExpirationStatusEnabled,
		Filter:     &stypes.LifecycleRuleFilter{Prefix: aws.String(prefix + "segments/")},
		Expiration: &stypes.LifecycleExpiration{Days: aws.Int32(days)},
	}
}
