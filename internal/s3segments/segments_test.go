package s3segments_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/storetest"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/s3segments"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// env is one S3 server + bucket and one DynamoDB table.
type env struct {
	s3     *s3.Client
	bucket string
	table  string
	segs   *s3segments.Segments
}

func newEnv(t *testing.T, opts s3segments.Options) *env {
	t.Helper()
	srv := testenv.S3(t)
	bucket := testenv.UniqueName(t, "seg")
	srv.CreateBucket(t, bucket)
	return newEnvOn(t, srv.Client(t), bucket, opts)
}

func newEnvOn(t *testing.T, c *s3.Client, bucket string, opts s3segments.Options) *env {
	t.Helper()
	ddb := testenv.DynamoDB(t).Client(t)
	table := testenv.UniqueName(t, "seg")
	if err := dynamostore.CreateTable(context.Background(), ddb, table); err != nil {
		t.Fatal(err)
	}
	return &env{s3: c, bucket: bucket, table: table, segs: s3segments.New(c, bucket, "app/", ddb, table, opts)}
}

func TestContract(t *testing.T) {
	e := newEnv(t, s3segments.Options{})
	storetest.RunSegmentStore(t, func(t *testing.T) store.SegmentStore { return e.segs })
}

func idOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func key(p string, asOf int64) store.SegmentKey {
	return store.SegmentKey{Partition: p, LogEpoch: "e1", Table: "tasks", SchemaVersion: 1, MediaType: wire.MediaRows, ScopeDigest: "d", AsOfCommitSeq: asOf}
}

func readAll(t *testing.T, s store.SegmentStore, id string) []byte {
	t.Helper()
	rc, err := s.Open(context.Background(), id)
	if err != nil {
		t.Fatalf("Open %s: %v", id, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCollisionWithStoredObject: the object under an id holds other
// bytes (corruption, or a writer that did not hash): Put reports
// ErrCollision, records nothing and leaves the object alone.
func TestCollisionWithStoredObject(t *testing.T) {
	e := newEnv(t, s3segments.Options{})
	ctx := context.Background()
	body := []byte("the real segment bytes")
	id := idOf(body)
	k, _ := e.segs.ObjectKey(id)
	if _, err := e.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: &e.bucket, Key: &k, Body: strings.NewReader("other bytes")}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	err := e.segs.Put(ctx, id, body, store.Publication{SegmentKey: key("p", 1), RowCount: 1, CreatedAtMs: now, ExpiresAtMs: now + 60_000}, now)
	if !errors.Is(err, store.ErrCollision) {
		t.Fatalf("Put over different stored bytes: %v, want ErrCollision", err)
	}
	if got := readAll(t, e.segs, id); string(got) != "other bytes" {
		t.Errorf("stored object overwritten: %q", got)
	}
	if _, _, ok, _ := e.segs.Find(ctx, key("p", 1), now); ok {
		t.Errorf("rejected publication is findable")
	}
}

// fakeClock drives both gofakes3 (object Last-Modified) and Segments.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time                  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c *fakeClock) advance(d time.Duration)         { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// sweep plays the bucket's lifecycle rule: objects whose Last-Modified is
// at least lifetime ago are deleted.
func sweep(t *testing.T, c *s3.Client, bucket string, now time.Time, lifetime time.Duration) int {
	t.Helper()
	out, err := c.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: &bucket})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, o := range out.Contents {
		if !aws.ToTime(o.LastModified).Add(lifetime).After(now) {
			if _, err := c.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: &bucket, Key: o.Key}); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	return n
}

// TestLifecycle simulates S3 lifecycle expiration on a fake clock: a
// publication handed out by Find always has its object until after its
// expiry plus the longest URL lifetime, re-publication refreshes an
// aging object, and an object deleted by lifecycle is written again.
func TestLifecycle(t *testing.T) {
	clock := &fakeClock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	fake := gofakes3.New(s3mem.New(s3mem.WithTimeSource(clock)), gofakes3.WithTimeSource(clock), gofakes3.WithTimeSkewLimit(0))
	srv := httptest.NewServer(fake.Server())
	t.Cleanup(srv.Close)
	c := s3.New(s3.Options{Region: testenv.Region, BaseEndpoint: aws.String(srv.URL), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("x", "x", "")})
	bucket := "lifecycle"
	if _, err := c.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatal(err)
	}
	const lifetime = 3 * time.Hour
	e := newEnvOn(t, c, bucket, s3segments.Options{ObjectLifetime: lifetime, Margin: time.Minute, Now: clock.Now})
	ctx := context.Background()
	body := []byte("segment bytes shared by every publication")
	id := idOf(body)
	ms := func() int64 { return clock.Now().UnixMilli() }
	put := func(p string, ttl time.Duration) store.Publication {
		t.Helper()
		pub := store.Publication{SegmentKey: key(p, 1), RowCount: 3, CreatedAtMs: ms(), ExpiresAtMs: ms() + ttl.Milliseconds()}
		if err := e.segs.Put(ctx, id, body, pub, ms()); err != nil {
			t.Fatalf("Put at %v: %v", clock.Now(), err)
		}
		return pub
	}
	// checkInvariant: whatever Find returns has its object now and still
	// has it at expiry + 15 min (the lifecycle sweep then deletes nothing
	// it would need).
	checkInvariant := func(p string) {
		t.Helper()
		_, pub, ok, err := e.segs.Find(ctx, key(p, 1), ms())
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return
		}
		if string(readAll(t, e.segs, id)) != string(body) {
			t.Fatalf("found publication's object unreadable")
		}
		last := time.UnixMilli(pub.ExpiresAtMs).Add(s3segments.MaxURLTTL)
		out, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: aws.String(mustKey(t, e.segs, id))})
		if err != nil {
			t.Fatal(err)
		}
		if !aws.ToTime(out.LastModified).Add(lifetime).After(last) {
			t.Fatalf("object (modified %v) expires before the publication's last URL use %v", out.LastModified, last)
		}
	}

	put("a", time.Hour) // object written at t0
	checkInvariant("a")
	clock.advance(2 * time.Hour)
	if n := sweep(t, c, bucket, clock.Now(), lifetime); n != 0 {
		t.Fatalf("lifecycle deleted %d young objects", n)
	}
	put("b", time.Hour) // would outlive the object: its age is reset
	checkInvariant("b")
	clock.advance(2 * time.Hour) // t0+4h: original write is 4 h old
	if n := sweep(t, c, bucket, clock.Now(), lifetime); n != 0 {
		t.Fatalf("lifecycle deleted the refreshed object")
	}
	if got := readAll(t, e.segs, id); string(got) != string(body) {
		t.Fatal("refreshed object lost")
	}
	// A second partition publishing the same bytes while the object is
	// young enough needs no S3 write.
	refreshedAt := clock.Now().Add(-2 * time.Hour)
	cctx, usage := dynamostore.WithCapacity(ctx)
	pubC := store.Publication{SegmentKey: key("c", 1), RowCount: 3, CreatedAtMs: ms(), ExpiresAtMs: ms() + 30*60_000}
	if err := e.segs.Put(cctx, id, body, pubC, ms()); err != nil {
		t.Fatal(err)
	}
	t.Logf("re-publication by a second partition: %+v", usage.Snapshot())
	checkInvariant("c")
	if out, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: aws.String(mustKey(t, e.segs, id))}); err != nil || !aws.ToTime(out.LastModified).Equal(refreshedAt) {
		t.Errorf("young object was rewritten (Last-Modified %v, want %v): %v", out.LastModified, refreshedAt, err)
	}
	clock.advance(3 * time.Hour) // t0+7h
	if n := sweep(t, c, bucket, clock.Now(), lifetime); n != 1 {
		t.Fatalf("lifecycle deleted %d objects, want the expired one", n)
	}
	for _, p := range []string{"a", "b", "c"} {
		if _, _, ok, _ := e.segs.Find(ctx, key(p, 1), ms()); ok {
			t.Fatalf("Find(%s) returned a publication whose object is gone", p)
		}
	}
	// Re-publication after lifecycle deletion writes the object again.
	put("a", time.Hour)
	checkInvariant("a")
	if got := readAll(t, e.segs, id); string(got) != string(body) {
		t.Fatal("re-published object missing")
	}
}

func mustKey(t *testing.T, s *s3segments.Segments, id string) string {
	k, ok := s.ObjectKey(id)
	if !ok {
		t.Fatalf("bad id %s", id)
	}
	return k
}

// TestPresignedURL fetches the presigned URL with plain net/http.
func TestPresignedURL(t *testing.T) {
	e := newEnv(t, s3segments.Options{})
	ctx := context.Background()
	body := bytes.Repeat([]byte("rows segment "), 1000)
	id := idOf(body)
	now := time.Now().UnixMilli()
	if err := e.segs.Put(ctx, id, body, store.Publication{SegmentKey: key("p", 1), RowCount: 1, CreatedAtMs: now, ExpiresAtMs: now + 3_600_000}, now); err != nil {
		t.Fatal(err)
	}
	u, exp, err := e.segs.PresignGet(ctx, id, now, 5*60_000)
	if err != nil {
		t.Fatal(err)
	}
	if exp > now+5*60_000 || exp < now+5*60_000-2000 {
		t.Errorf("expiry %d, want about now+5 min", exp-now)
	}
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(got, body) {
		t.Fatalf("GET presigned URL: %d, %d bytes", resp.StatusCode, len(got))
	}
}

// TestPresignFields checks the signature fields: X-Amz-Expires never
// over 900 s nor past the credentials' expiry; the key embeds the id.
func TestPresignFields(t *testing.T) {
	id := idOf([]byte("x"))
	for _, tc := range []struct {
		name     string
		ttl      time.Duration
		credLife time.Duration // 0: credentials never expire
		want     int
	}{
		{"short", 2 * time.Minute, 0, 120},
		{"capped at 15 min", time.Hour, 0, 900},
		{"credentials expire first", 15 * time.Minute, 5 * time.Minute, 270},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var prov aws.CredentialsProvider = credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")
			if tc.credLife > 0 {
				exp := time.Now().Add(tc.credLife)
				prov = aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
					return aws.Credentials{AccessKeyID: "AKID", SecretAccessKey: "SECRET", SessionToken: "TOKEN", CanExpire: true, Expires: exp}, nil
				})
			}
			c := s3.New(s3.Options{Region: "eu-west-1", Credentials: prov})
			segs := s3segments.New(c, "bucket", "pre/", nil, "unused", s3segments.Options{})
			now := time.Now().UnixMilli()
			raw, exp, err := segs.PresignGet(context.Background(), id, now, tc.ttl.Milliseconds())
			if err != nil {
				t.Fatal(err)
			}
			u, err := url.Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			q := u.Query()
			sec, _ := strconv.Atoi(q.Get("X-Amz-Expires"))
			if sec > 900 || sec < tc.want-2 || sec > tc.want {
				t.Errorf("X-Amz-Expires %d, want %d (≤ 900)", sec, tc.want)
			}
			if exp > now+tc.ttl.Milliseconds() || exp > now+int64(sec)*1000+1000 {
				t.Errorf("returned expiry %d ms after now exceeds ttl or signature", exp-now)
			}
			if !strings.Contains(u.Path, "/pre/segments/"+strings.TrimPrefix(id, "sha256:")) {
				t.Errorf("object key %q does not embed the segment id", u.Path)
			}
			if q.Get("X-Amz-Signature") == "" || q.Get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256" || !strings.HasPrefix(q.Get("X-Amz-Credential"), "AKID/") {
				t.Errorf("signature fields missing: %v", q)
			}
		})
	}
}

// TestFindCostFlat (issue 11 item 5): a pull reusing a page pays
// FindSized, one Query of its own partition's lookup items, whose cost
// does not grow with the publications other partitions hold on the same
// bytes (an empty or identical page is shared by every tenant); so does
// Lookup (see TestLookupCostFlat).
func TestFindCostFlat(t *testing.T) {
	e := newEnv(t, s3segments.Options{})
	ctx := context.Background()
	body := []byte(strings.Repeat("identical page bytes ", 100))
	sum := sha256.Sum256(body)
	id := "sha256:" + hex.EncodeToString(sum[:])
	now := time.Now().UnixMilli()
	key := func(p string) store.SegmentKey {
		return store.SegmentKey{Partition: p, LogEpoch: "e", Table: "tasks", SchemaVersion: 1, MediaType: wire.MediaRows, ScopeDigest: "d", AsOfCommitSeq: 7}
	}
	published := 0
	var first float64
	for _, n := range []int{1, 30, 150} {
		for ; published < n; published++ {
			pub := store.Publication{SegmentKey: key("tenant-" + strconv.Itoa(published)), RowCount: 0, CreatedAtMs: now, ExpiresAtMs: now + time.Hour.Milliseconds()}
			if err := e.segs.Put(ctx, id, body, pub, now); err != nil {
				t.Fatal(err)
			}
		}
		mctx, c := dynamostore.WithCapacity(ctx)
		gotID, _, size, ok, err := e.segs.FindSized(mctx, key("tenant-0"), now)
		if err != nil || !ok || gotID != id || size != int64(len(body)) {
			t.Fatalf("FindSized: %s %d %v %v", gotID, size, ok, err)
		}
		find := c.Snapshot()
		lctx, lc := dynamostore.WithCapacity(ctx)
		if _, err := e.segs.Lookup(lctx, id, store.FilterOf(key("tenant-0"))); err != nil {
			t.Fatal(err)
		}
		look := lc.Snapshot()
		t.Logf("%4d publications of the same bytes: FindSized %d round trip(s) %.1f RCU; Lookup %d round trip(s) %.1f RCU", n, find.RoundTrips, find.EstRCU, look.RoundTrips, look.EstRCU)
		if n == 1 {
			first = find.EstRCU
		} else if find.EstRCU != first || find.RoundTrips != 1 {
			t.Errorf("%d publications: FindSized costs %.1f RCU in %d round trips, with 1 it cost %.1f in 1", n, find.EstRCU, find.RoundTrips, first)
		}
		if look.EstRCU != 1 || look.RoundTrips != 1 {
			t.Errorf("%d publications: Lookup costs %.1f RCU in %d round trips, want 1 in 1", n, look.EstRCU, look.RoundTrips)
		}
	}
}

// TestPublicationCostFlat (issue 11 item 5): with 1, 100 and 1,000
// publications of identical bytes — by other tenants, and by this
// tenant's context at ever later pins — the reuse lookup (FindLatest)
// and the write of one more publication (Put) cost the same RCU and
// round trips: Put reads only its own partition's publications, and
// re-publications of one context are bounded per segment.
func TestPublicationCostFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 publications")
	}
	e := newEnv(t, s3segments.Options{})
	ctx := context.Background()
	body := []byte(strings.Repeat("identical page bytes ", 100))
	sum := sha256.Sum256(body)
	id := "sha256:" + hex.EncodeToString(sum[:])
	now := time.Now().UnixMilli()
	key := func(p string, pin int64) store.SegmentKey {
		return store.SegmentKey{Partition: p, LogEpoch: "e", Table: "tasks", SchemaVersion: 1, MediaType: wire.MediaRows, ScopeDigest: "d", AsOfCommitSeq: pin}
	}
	pub := func(k store.SegmentKey) store.Publication {
		return store.Publication{SegmentKey: k, CreatedAtMs: now, ExpiresAtMs: now + time.Hour.Milliseconds()}
	}
	measure := func(f func(context.Context) error) dynamostore.Usage {
		mctx, c := dynamostore.WithCapacity(ctx)
		if err := f(mctx); err != nil {
			t.Fatal(err)
		}
		return c.Snapshot()
	}
	type cost struct {
		findRT, putRT   int
		findRCU, putRCU float64
	}
	var base cost
	tenants, pins := 0, int64(0)
	for _, n := range []int{1, 100, 1000} {
		for ; tenants < n; tenants++ {
			if err := e.segs.Put(ctx, id, body, pub(key("other-"+strconv.Itoa(tenants), 1)), now); err != nil {
				t.Fatal(err)
			}
		}
		for ; pins < int64(n); pins++ {
			if err := e.segs.Put(ctx, id, body, pub(key("mine", pins+1)), now); err != nil {
				t.Fatal(err)
			}
		}
		find := measure(func(ctx context.Context) error {
			gotID, p, size, ok, err := e.segs.FindLatest(ctx, key("mine", 0), 0, pins, now)
			if err == nil && (!ok || gotID != id || p.AsOfCommitSeq != pins || size != int64(len(body))) {
				t.Fatalf("FindLatest: %s pin %d size %d ok %v", gotID, p.AsOfCommitSeq, size, ok)
			}
			return err
		})
		put := measure(func(ctx context.Context) error {
			return e.segs.Put(ctx, id, body, pub(key("mine", pins)), now) // a merge: same context
		})
		c := cost{find.RoundTrips, put.RoundTrips, find.EstRCU, put.EstRCU}
		t.Logf("%4d publications by other tenants + %4d re-publications of this context: FindLatest %d round trip(s) %.1f RCU; Put %d round trip(s) %.1f RCU",
			n, n, c.findRT, c.findRCU, c.putRT, c.putRCU)
		if n == 1 {
			base = c
		} else if c != base {
			t.Errorf("%d publications: %+v, with 1: %+v", n, c, base)
		}
	}
}

// seed runs put(0..n-1) on 8 goroutines.
func seed(t *testing.T, n int, put func(i int) error) {
	t.Helper()
	var (
		wg   sync.WaitGroup
		next atomic.Int64
		errs = make(chan error, 8)
	)
	for range 8 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if err := put(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
