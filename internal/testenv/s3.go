package testenv

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// S3Server is an in-process S3 API (gofakes3 over an in-memory backend)
// private to one test, so tests never see each other's buckets.
//
// Known differences from S3: presigned URL signatures are not verified
// (any signature is accepted), and uploads need seekable bodies. It does
// honor conditional PUT (If-None-Match: * and If-Match) atomically.
type S3Server struct {
	// Endpoint is the base URL, e.g. http://127.0.0.1:38211.
	Endpoint string
	// Fake gives direct access to the server for tests that need it.
	Fake *gofakes3.GoFakeS3
}

// S3 starts a fresh S3 server on 127.0.0.1 that is closed at t.Cleanup.
func S3(t testing.TB) *S3Server {
	t.Helper()
	fake := gofakes3.New(s3mem.New())
	srv := httptest.NewServer(fake.Server())
	t.Cleanup(srv.Close)
	return &S3Server{Endpoint: srv.URL, Fake: fake}
}

// Client returns an SDK client for this server with path-style addressing
// (virtual-host buckets would need DNS for <bucket>.127.0.0.1). Like the
// DynamoDB client it uses explicit options so no real AWS profile leaks in.
func (s *S3Server) Client(t testing.TB) *s3.Client {
	t.Helper()
	return s3.New(s3.Options{
		Region:       Region,
		BaseEndpoint: aws.String(s.Endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("testenv", "testenv", ""),
		HTTPClient:   newHTTPClient(t),
		UsePathStyle: true,
	})
}

// CreateBucket creates a bucket on this server or fails the test.
func (s *S3Server) CreateBucket(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Client(t).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("testenv: creating bucket %q: %v", name, err)
	}
}
