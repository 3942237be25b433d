package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/skyfold/syncular-lambda/internal/core/blobs"
	"github.com/skyfold/syncular-lambda/internal/s3blobs"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// skewedClock is an S3 server clock the test moves back, so objects can
// be written "25 hours ago".
type skewedClock struct{ offset atomic.Int64 }

func (c *skewedClock) Now() time.Time                  { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *skewedClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// sweep-blobs deletes an orphan past the grace period and keeps a fresh
// one (§5.9.2); the sample schema has no blob_ref column, so no blob is
// referenced (the referenced case is covered by the engine suite).
func TestSweepBlobs(t *testing.T) {
	f := newFixture(t)
	clock := &skewedClock{}
	fake := gofakes3.New(s3mem.New(s3mem.WithTimeSource(clock)))
	srv := httptest.NewServer(fake.Server())
	t.Cleanup(srv.Close)
	c := s3.New(s3.Options{Region: testenv.Region, BaseEndpoint: aws.String(srv.URL), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("testenv", "testenv", "")})
	ctx := context.Background()
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("blobs-bucket")}); err != nil {
		t.Fatal(err)
	}
	old, fresh := []byte("old orphan"), []byte("fresh orphan")
	clock.offset.Store(int64(-25 * time.Hour))
	bs := s3blobs.New(c, "blobs-bucket", "").WithClock(func() int64 { return clock.Now().UnixMilli() })
	if err := bs.Put(ctx, "default", blobs.IDOfBytes(old), "dev-user", bytes.NewReader(old), 1<<20); err != nil {
		t.Fatal(err)
	}
	clock.offset.Store(0)
	if err := bs.Put(ctx, "default", blobs.IDOfBytes(fresh), "dev-user", bytes.NewReader(fresh), 1<<20); err != nil {
		t.Fatal(err)
	}
	f.env["SYNC_BUCKET"], f.env["SYNC_S3_ENDPOINT"], f.env["SYNC_S3_PATH_STYLE"] = "blobs-bucket", srv.URL, "true"
	r := f.run("sweep-blobs")
	if r.code != exitOK || !strings.Contains(r.stderr, "deleted 1 orphaned blob") {
		t.Fatalf("sweep-blobs: %+v", r)
	}
	for _, b := range [][]byte{old, fresh} {
		st, err := bs.Lookup(ctx, "default", blobs.IDOfBytes(b), "", 1<<20)
		if err != nil || st.Present != bytes.Equal(b, fresh) {
			t.Fatalf("%q after the sweep: %+v %v", b, st, err)
		}
	}
}
