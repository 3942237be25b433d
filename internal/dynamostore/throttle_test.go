package dynamostore_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// faultProxy sits between the SDK and DynamoDB Local and answers the
// next n requests of one operation with an error, the way DynamoDB does
// under throttling or transaction conflicts. Everything else is
// forwarded unchanged.
type faultProxy struct {
	mu     sync.Mutex
	op     string // X-Amz-Target suffix, e.g. "GetItem"
	n      int    // remaining faults (-1: forever)
	body   string // error body (JSON 1.0 error shape)
	status int
	seen   int
}

func (f *faultProxy) set(op string, n, status int, body string) {
	f.mu.Lock()
	f.op, f.n, f.status, f.body, f.seen = op, n, status, body, 0
	f.mu.Unlock()
}

func newFaultClient(t *testing.T) (*dynamodb.Client, *faultProxy) {
	target, _ := url.Parse(testenv.DynamoDB(t).Endpoint)
	rp := httputil.NewSingleHostReverseProxy(target)
	f := &faultProxy{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		fault := f.op != "" && strings.HasSuffix(r.Header.Get("X-Amz-Target"), "."+f.op) && f.n != 0
		if fault {
			f.seen++
			if f.n > 0 {
				f.n--
			}
		}
		status, body := f.status, f.body
		f.mu.Unlock()
		if fault {
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			w.WriteHeader(status)
			_, _ = w.Write([]byte(body))
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return dynamodb.New(dynamodb.Options{
		Region: testenv.Region, BaseEndpoint: aws.String(srv.URL),
		Credentials:                     credentials.NewStaticCredentialsProvider("x", "x", ""),
		DisableValidateResponseChecksum: true,
	}), f
}

const (
	throttled = `{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"injected throttle"}`
	conflict  = `{"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException","message":"Transaction cancelled","CancellationReasons":[{"Code":"TransactionConflict","Message":"conflict"},{"Code":"None"},{"Code":"None"},{"Code":"None"}]}`
	internal  = `{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"injected 500"}`
)

func TestRetriesThenRateLimited(t *testing.T) {
	c, f := newFaultClient(t)
	table := newTable(t, ddbClient(t))
	policy := dynamostore.RetryPolicy{MaxAttempts: 4, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}
	s := dynamostore.New(c, table, dynamostore.Options{Retry: policy, TransactionalCommits: true}) // the transaction's conflicts
	ctx := context.Background()
	p := "throttle"

	// Transient faults below the budget are absorbed.
	f.set("BatchGetItem", 3, 400, throttled)
	cctx, usage := dynamostore.WithCapacity(ctx)
	if _, err := s.TouchPartition(cctx, p, baseMs, "e"); err != nil {
		t.Fatalf("TouchPartition through 3 throttles: %v", err)
	}
	if u := usage.Snapshot(); u.RoundTrips != 6 { // 3 throttled + BatchGetItem (head and marker) + registry PutItem + head PutItem
		t.Errorf("round trips %d, want 6", u.RoundTrips)
	}
	f.set("TransactWriteItems", 2, 400, conflict)
	if err := s.Commit(ctx, p, commitOf(0, "c1", up("a", 1, []byte("x")))); err != nil {
		t.Fatalf("Commit through 2 transaction conflicts: %v", err)
	}
	f.set("BatchGetItem", 1, 500, internal)
	if m, err := s.GetRows(ctx, p, "tasks", []string{"a"}); err != nil || len(m) != 1 {
		t.Fatalf("GetRows through a 500: %v %v", m, err)
	}

	// Persistent faults end as sync.rate_limited after exactly
	// MaxAttempts requests: never a raw AWS error, never unbounded.
	for _, tc := range []struct {
		name, op, body string
		status         int
		run            func() error
	}{
		{"throttle", "GetItem", throttled, 400, func() error { _, _, err := s.Head(ctx, p); return err }},
		{"conflict", "TransactWriteItems", conflict, 400, func() error {
			return s.Commit(ctx, p, commitOf(1, "c2", up("b", 1, []byte("y"))))
		}},
		{"5xx", "Query", internal, 500, func() error {
			return s.ScanRows(ctx, p, "tasks", "", false, func(*store.Row) bool { return true })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.set(tc.op, -1, tc.status, tc.body)
			defer f.set("", 0, 0, "")
			err := tc.run()
			var se *syncerr.Error
			if !errors.As(err, &se) || se.Code != syncerr.RateLimited {
				t.Fatalf("error %v, want *syncerr.Error %s", err, syncerr.RateLimited)
			}
			f.mu.Lock()
			seen := f.seen
			f.mu.Unlock()
			if seen != policy.MaxAttempts {
				t.Errorf("%d attempts, want %d", seen, policy.MaxAttempts)
			}
		})
	}
	// The refused commit did not land.
	if h, _, err := s.Head(ctx, p); err != nil || h.MaxCommitSeq != 1 {
		t.Errorf("head after faults: %+v %v", h, err)
	}
}
