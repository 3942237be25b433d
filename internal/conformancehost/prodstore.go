package conformancehost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/skyfold/syncular-lambda/internal/core/blobs"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/s3blobs"
	"github.com/skyfold/syncular-lambda/internal/s3segments"
)

// Prod configures the production-store backend (`conformance-host -store
// dynamodb`): every instance gets its own DynamoDB table (dynamostore and
// the s3segments publication records, as in the deployed stack, which
// shares one table between them) with a KEYS_ONLY stream like the
// template's, and its own in-process S3 API server (gofakes3) holding its
// bucket of segment objects (s3segments) and blobs (s3blobs). Realtime is
// fed from the table's stream, as the deployed tier is (feed.go).
type Prod struct {
	// Endpoint is the DynamoDB endpoint (DynamoDB Local), e.g.
	// http://127.0.0.1:8000.
	Endpoint string
	// Region and the static credentials the clients sign with (DynamoDB
	// Local accepts any; default us-east-1 and "local").
	Region string
	// StreamPoll is how often an instance's table stream is read
	// (default 50 ms; Lambda's event source mapping polls a shard about
	// four times a second).
	StreamPoll time.Duration
	// HTTPClient carries every AWS call (default: a pooled client that
	// ignores proxies).
	HTTPClient *http.Client
}

func (p *Prod) withDefaults() *Prod {
	c := *p
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	if c.StreamPoll <= 0 {
		c.StreamPoll = 50 * time.Millisecond
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Transport: &http.Transport{
			Proxy:               nil, // loopback services only
			MaxIdleConns:        256,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     30 * time.Second,
		}, Timeout: 60 * time.Second}
	}
	return &c
}

// localCreds sign every call (local emulators accept any).
var localCreds = aws.Credentials{AccessKeyID: "local", SecretAccessKey: "local", Source: "conformance-host"}

func (p *Prod) creds() aws.CredentialsProvider {
	return credentials.StaticCredentialsProvider{Value: localCreds}
}

func (p *Prod) dynamo() *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region: p.Region, BaseEndpoint: aws.String(p.Endpoint), Credentials: p.creds(), HTTPClient: p.HTTPClient,
		// DynamoDB Local omits X-Amz-Crc32 on error responses.
		DisableValidateResponseChecksum: true,
	})
}

func (p *Prod) streams() *dynamodbstreams.Client {
	return dynamodbstreams.New(dynamodbstreams.Options{
		Region: p.Region, BaseEndpoint: aws.String(p.Endpoint), Credentials: p.creds(), HTTPClient: p.HTTPClient,
	})
}

// tableSeq numbers the tables of one host process; the process id and a
// start stamp keep two hosts on one DynamoDB Local apart.
var tableSeq atomic.Int64

var hostStamp = fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffffff)

// prodStorage is one instance's production stores.
type prodStorage struct {
	cfg    *Prod
	log    *slog.Logger
	db     *dynamodb.Client
	table  string
	stream string // the table's stream ARN
	store  *faultStore
	segs   *s3segments.Segments
	blobs  *s3blobs.Store
	s3srv  *http.Server
	s3url  string // the S3 server's base URL
	backup []map[string]types.AttributeValue
	taken  bool
}

// newProdStorage creates the instance's table (with its stream) and
// starts its S3 server. now is the instance's virtual clock: the S3
// server stamps objects with it, so object ages (segment lifetimes, blob
// proofs) are measured on the same clock as the engine's.
func newProdStorage(ctx context.Context, cfg *Prod, id string, now func() int64, log *slog.Logger) (_ *prodStorage, err error) {
	ps := &prodStorage{cfg: cfg, log: log, db: cfg.dynamo()}
	ps.table = fmt.Sprintf("conformance-%s-%s-%d", hostStamp, sanitize(id), tableSeq.Add(1))
	defer func() {
		if err != nil {
			ps.Close()
		}
	}()
	in := dynamostore.TableDefinition(ps.table)
	// The template's stream: keys are all the realtime feed reads.
	in.StreamSpecification = &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeKeysOnly}
	out, err := ps.db.CreateTable(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("create table %s: %w", ps.table, err)
	}
	ps.stream = aws.ToString(out.TableDescription.LatestStreamArn)
	// TTL stays off, unlike on a deployed table: DynamoDB Local reaps
	// expired items on the wall clock, and an instance runs on a virtual
	// clock (often years behind), so every segment publication would be
	// reaped as soon as it was written. Readers check expiry themselves on
	// the engine's clock; TTL is only garbage collection.
	w := dynamodb.NewTableExistsWaiter(ps.db, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 20*time.Millisecond, 500*time.Millisecond
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(ps.table)}, time.Minute); err != nil {
		return nil, fmt.Errorf("wait for table %s: %w", ps.table, err)
	}
	ds := dynamostore.New(ps.db, ps.table, dynamostore.Options{})
	// A fresh table, as a new stack's MigrateOnCreate leaves it: at this
	// build's store-format level (small commits, compressed log bodies).
	if _, err := ds.RaiseFormatLevel(ctx); err != nil {
		return nil, fmt.Errorf("raise the store-format level of %s: %w", ps.table, err)
	}
	ps.store = &faultStore{Store: ds}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("S3 server: %w", err)
	}
	fake := gofakes3.New(s3mem.New(s3mem.WithTimeSource(virtualTime(now))), gofakes3.WithAutoBucket(false))
	ps.s3srv = &http.Server{Handler: &presignedS3{next: fake.Server(), creds: localCreds, region: cfg.Region}, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = ps.s3srv.Serve(ln) }()
	ps.s3url = "http://" + ln.Addr().String()
	s3c := s3.New(s3.Options{
		Region: cfg.Region, BaseEndpoint: aws.String(ps.s3url), Credentials: cfg.creds(), HTTPClient: cfg.HTTPClient,
		UsePathStyle: true,
	})
	bucket := "conformance"
	if _, err := s3c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		return nil, fmt.Errorf("create bucket: %w", err)
	}
	ps.segs = s3segments.New(s3c, bucket, "", ps.db, ps.table, s3segments.Options{
		Now: func() time.Time { return time.UnixMilli(now()) },
	})
	ps.blobs = s3blobs.New(s3c, bucket, "").WithClock(now)
	return ps, nil
}

// sanitize keeps [a-z0-9-] of an instance id for a table name.
func sanitize(id string) string {
	return strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-' {
			return r
		}
		return '-'
	}, strings.ToLower(id))
}

// virtualTime is the instance clock as a gofakes3 time source.
type virtualTime func() int64

func (v virtualTime) Now() time.Time                  { return time.UnixMilli(v()) }
func (v virtualTime) Since(t time.Time) time.Duration { return v.Now().Sub(t) }

func (ps *prodStorage) Store() store.Store             { return ps.store }
func (ps *prodStorage) Schema() store.SchemaStore      { return ps.store }
func (ps *prodStorage) Segments() store.SegmentStore   { return ps.segs }
func (ps *prodStorage) Blobs() blobs.Store             { return ps.blobs }
func (ps *prodStorage) BlobPresigner() blobs.Presigner { return ps.blobs }
func (ps *prodStorage) FailNextOutcomeRead()           { ps.store.failGet.Store(true) }

// objectURL checks that a presigned URL names this instance's S3 server,
// which checks its signature and expiry (presigned.go).
func (ps *prodStorage) objectURL(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme+"://"+u.Host != ps.s3url || u.Query().Get("X-Amz-Signature") == "" {
		return "", errors.New("not a presigned URL of this instance's object store")
	}
	return rawURL, nil
}

func (ps *prodStorage) FetchBlobURL(ctx context.Context, rawURL string) ([]byte, error) {
	u, err := ps.objectURL(rawURL)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	return ps.objectCall(req)
}

func (ps *prodStorage) PutBlobURL(ctx context.Context, rawURL string, body []byte) error {
	u, err := ps.objectURL(rawURL)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, strings.NewReader(string(body)))
	if err != nil {
		return err
	}
	req.ContentLength = int64(len(body))
	_, err = ps.objectCall(req)
	return err
}

func (ps *prodStorage) objectCall(req *http.Request) ([]byte, error) {
	resp, err := ps.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("object store answered %d", resp.StatusCode)
	}
	return b, nil
}

// Capture takes a consistent copy of every item of the table: the
// instance's on-demand backup (log, rows, outcomes, clients, segment
// publications: everything a DynamoDB backup holds). S3 objects are not
// part of it, as they are not part of a DynamoDB restore.
func (ps *prodStorage) Capture(ctx context.Context) error {
	items, err := ps.scanAll(ctx)
	if err != nil {
		return err
	}
	ps.backup, ps.taken = items, true
	return nil
}

// Restore puts the table back to the backup: every item not in it is
// deleted and every backed-up item written back. (A DynamoDB restore
// makes a new table that the stack is then pointed at; rewriting this
// one in place keeps the instance's clients and stream.)
func (ps *prodStorage) Restore(ctx context.Context, after func(context.Context, store.Store) error) error {
	if !ps.taken {
		return errNoBackup
	}
	cur, err := ps.scanAll(ctx)
	if err != nil {
		return err
	}
	var writes []types.WriteRequest
	for _, it := range cur {
		writes = append(writes, types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: map[string]types.AttributeValue{
			dynamostore.AttrPK: it[dynamostore.AttrPK], dynamostore.AttrSK: it[dynamostore.AttrSK],
		}}})
	}
	if err := ps.batchWrite(ctx, writes); err != nil {
		return fmt.Errorf("restore: clear table: %w", err)
	}
	writes = writes[:0]
	for _, it := range ps.backup {
		writes = append(writes, types.WriteRequest{PutRequest: &types.PutRequest{Item: it}})
	}
	if err := ps.batchWrite(ctx, writes); err != nil {
		return fmt.Errorf("restore: write backup: %w", err)
	}
	return after(ctx, ps.store)
}

func (ps *prodStorage) scanAll(ctx context.Context) ([]map[string]types.AttributeValue, error) {
	var items []map[string]types.AttributeValue
	p := dynamodb.NewScanPaginator(ps.db, &dynamodb.ScanInput{TableName: aws.String(ps.table), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("scan %s: %w", ps.table, err)
		}
		items = append(items, page.Items...)
	}
	return items, nil
}

// batchWrite runs writes 25 at a time, resending unprocessed items.
func (ps *prodStorage) batchWrite(ctx context.Context, writes []types.WriteRequest) error {
	for len(writes) > 0 {
		n := min(len(writes), 25)
		pending := map[string][]types.WriteRequest{ps.table: writes[:n]}
		for attempt := 0; len(pending) > 0; attempt++ {
			if attempt == 10 {
				return errors.New("batch write: items stayed unprocessed")
			}
			out, err := ps.db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: pending})
			if err != nil {
				return err
			}
			pending = out.UnprocessedItems
		}
		writes = writes[n:]
	}
	return nil
}

// Close deletes the table and stops the S3 server.
func (ps *prodStorage) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if ps.s3srv != nil {
		_ = ps.s3srv.Shutdown(ctx)
	}
	if _, err := ps.db.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(ps.table)}); err != nil && ps.log != nil {
		var nf *types.ResourceNotFoundException
		if !errors.As(err, &nf) {
			ps.log.Warn("conformance: delete table", "table", ps.table, "err", err)
		}
	}
}

// faultStore is dynamostore with the catalog's idempotency fault: when
// armed, the next outcome read — GetOutcome, or the outcome check inside
// Commit and PutRejection — fails as unreadable (store.ErrOutcomeUnreadable,
// what dynamostore answers for a malformed outcome item). Every other
// method, optional extensions included, is dynamostore's own.
type faultStore struct {
	*dynamostore.Store
	failGet atomic.Bool
}

// GetOutcome implements store.Store.
func (f *faultStore) GetOutcome(ctx context.Context, partition, clientID, clientCommitID string, nowMs int64) (*store.Outcome, error) {
	if f.failGet.Swap(false) {
		return nil, store.ErrOutcomeUnreadable
	}
	return f.Store.GetOutcome(ctx, partition, clientID, clientCommitID, nowMs)
}

// PutRejection implements store.Store.
func (f *faultStore) PutRejection(ctx context.Context, partition, clientID, clientCommitID string, o store.Outcome, w store.WriterCheck) error {
	if f.failGet.Swap(false) {
		return store.ErrOutcomeUnreadable
	}
	return f.Store.PutRejection(ctx, partition, clientID, clientCommitID, o, w)
}

// Commit implements store.Store.
func (f *faultStore) Commit(ctx context.Context, partition string, req *store.CommitRequest) error {
	if f.failGet.Swap(false) {
		return store.ErrOutcomeUnreadable
	}
	return f.Store.Commit(ctx, partition, req)
}
