package auth

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

func sorted(m engine.ScopeMap) engine.ScopeMap {
	for k := range m {
		slices.Sort(m[k])
	}
	return m
}

func TestClaimResolver(t *testing.T) {
	r := &ClaimResolver{Claim: "syncular_scopes"}
	want := engine.ScopeMap{"project_id": {"p1", "p2"}}
	for name, v := range map[string]any{
		"object":      map[string]any{"project_id": []any{"p1", "p2"}},
		"json string": `{"project_id":["p2","p1"]}`,
	} {
		got, err := r.ResolveScopes(WithClaims(context.Background(), Claims{"syncular_scopes": v}), "p", "a", "c")
		if err != nil || !reflect.DeepEqual(sorted(got), want) {
			t.Fatalf("%s: got %v %v", name, got, err)
		}
	}
}

// Never "allow all": an absent claim is "no grant" (engine.ErrNoGrant:
// revoke and forbid), a malformed one an error (the request fails
// retryably: a configuration fault must not purge every client).
func TestClaimResolverFailsClosed(t *testing.T) {
	r := &ClaimResolver{Claim: "syncular_scopes"}
	if _, err := r.ResolveScopes(context.Background(), "p", "a", "c"); err == nil || errors.Is(err, engine.ErrNoGrant) {
		t.Fatalf("no claims in context: %v; want a non-grant error", err)
	}
	if got, err := r.ResolveScopes(WithClaims(context.Background(), Claims{"sub": "a"}), "p", "a", "c"); !errors.Is(err, engine.ErrNoGrant) {
		t.Fatalf("absent claim: %v %v; want engine.ErrNoGrant", got, err)
	}
	for name, v := range map[string]any{
		"number":          float64(3),
		"list":            []any{"p1"},
		"string not json": "project_id=p1",
		"json list":       `["p1"]`,
		"json dup keys":   `{"a":["x"],"a":["y"]}`,
		"value not list":  map[string]any{"project_id": "p1"},
		"non-string elem": map[string]any{"project_id": []any{1.0}},
		"null json":       `null`,
	} {
		c := Claims{"sub": "a"}
		if v != nil {
			c["syncular_scopes"] = v
		}
		got, err := r.ResolveScopes(WithClaims(context.Background(), c), "p", "a", "c")
		if err == nil || errors.Is(err, engine.ErrNoGrant) {
			t.Errorf("%s: %v %v; want a malformed-claim error", name, got, err)
		}
	}
}

type fakeGetItem struct {
	item map[string]types.AttributeValue
	err  error
	in   *dynamodb.GetItemInput
}

func (f *fakeGetItem) GetItem(_ context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	f.in = in
	if f.err != nil {
		return nil, f.err
	}
	return &dynamodb.GetItemOutput{Item: f.item}, nil
}

func TestTableResolverShapes(t *testing.T) {
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	want := engine.ScopeMap{"project_id": {"p1", "p2"}}
	for name, attr := range map[string]types.AttributeValue{
		"json string": s(`{"project_id":["p1","p2"]}`),
		"map of list": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"project_id": &types.AttributeValueMemberL{Value: []types.AttributeValue{s("p1"), s("p2")}}}},
		"map of set":  &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"project_id": &types.AttributeValueMemberSS{Value: []string{"p2", "p1"}}}},
	} {
		f := &fakeGetItem{item: map[string]types.AttributeValue{"scopes": attr}}
		r := &TableResolver{Client: f, Table: "t", PKAttr: "pk", SKAttr: "sk"}
		got, err := r.ResolveScopes(context.Background(), "acme", "alice", "c")
		if err != nil || !reflect.DeepEqual(sorted(got), want) {
			t.Fatalf("%s: got %v %v", name, got, err)
		}
		if !aws.ToBool(f.in.ConsistentRead) {
			t.Fatal("grant read is not consistent: a revocation could be missed")
		}
		if pk := f.in.Key["pk"].(*types.AttributeValueMemberS).Value; pk != "GRANT#acme" {
			t.Fatalf("pk %q", pk)
		}
	}
}

func TestTableResolverFailsClosed(t *testing.T) {
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	// No item: no scopes (not an error: a user without grants).
	r := &TableResolver{Client: &fakeGetItem{}, Table: "t", PKAttr: "pk", SKAttr: "sk"}
	if got, err := r.ResolveScopes(context.Background(), "p", "a", "c"); err != nil || len(got) != 0 {
		t.Fatalf("missing item: %v %v", got, err)
	}
	for name, f := range map[string]*fakeGetItem{
		"read error":      {err: errors.New("throttled")},
		"no attribute":    {item: map[string]types.AttributeValue{"pk": s("x")}},
		"number":          {item: map[string]types.AttributeValue{"scopes": &types.AttributeValueMemberN{Value: "1"}}},
		"bad json":        {item: map[string]types.AttributeValue{"scopes": s(`{"project_id":`)}},
		"map of string":   {item: map[string]types.AttributeValue{"scopes": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"project_id": s("p1")}}}},
		"list of numbers": {item: map[string]types.AttributeValue{"scopes": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"project_id": &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberN{Value: "1"}}}}}}},
	} {
		r := &TableResolver{Client: f, Table: "t", PKAttr: "pk", SKAttr: "sk"}
		got, err := r.ResolveScopes(context.Background(), "p", "a", "c")
		if err == nil {
			t.Errorf("%s: accepted as %v", name, got)
			continue
		}
		// A read that failed is the outage signal (retryable, nothing
		// revoked); a malformed item is a throw (fails loud, §3.2 rule 5).
		if outage := errors.Is(err, engine.ErrResolverUnavailable); outage != (f.err != nil) {
			t.Errorf("%s: outage signal %v, want %v (%v)", name, outage, f.err != nil, err)
		}
	}
}

// Against DynamoDB Local with the real table definition: a grant written
// with GrantItem is read back, a revoked (deleted) grant yields no scopes,
// and a missing table fails closed.
func TestTableResolverDynamoDBLocal(t *testing.T) {
	ddb := testenv.DynamoDB(t)
	client := ddb.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	table := testenv.UniqueName(t, "grants")
	if err := dynamostore.CreateTable(ctx, client, table); err != nil {
		t.Fatal(err)
	}
	r := &TableResolver{Client: client, Table: table, PKAttr: dynamostore.AttrPK, SKAttr: dynamostore.AttrSK}
	if _, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: GrantItem(dynamostore.AttrPK, dynamostore.AttrSK, "acme", "alice", engine.ScopeMap{"project_id": {"p1"}})}); err != nil {
		t.Fatal(err)
	}
	got, err := r.ResolveScopes(ctx, "acme", "alice", "")
	if err != nil || !reflect.DeepEqual(got, engine.ScopeMap{"project_id": {"p1"}}) {
		t.Fatalf("got %v %v", got, err)
	}
	// Another partition's actor of the same name sees nothing.
	if got, err := r.ResolveScopes(ctx, "other", "alice", ""); err != nil || len(got) != 0 {
		t.Fatalf("other partition: %v %v", got, err)
	}
	pk, sk := GrantKey("acme", "alice")
	if _, err := client.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: map[string]types.AttributeValue{
		dynamostore.AttrPK: &types.AttributeValueMemberS{Value: pk}, dynamostore.AttrSK: &types.AttributeValueMemberS{Value: sk},
	}}); err != nil {
		t.Fatal(err)
	}
	if got, err := r.ResolveScopes(ctx, "acme", "alice", ""); err != nil || len(got) != 0 {
		t.Fatalf("after revocation: %v %v", got, err)
	}
	missing := &TableResolver{Client: client, Table: table + "-missing", PKAttr: dynamostore.AttrPK, SKAttr: dynamostore.AttrSK}
	if _, err := missing.ResolveScopes(ctx, "acme", "alice", ""); err == nil {
		t.Fatal("missing table did not fail closed")
	}
}

// Issue 9 item 3: the table-mode grant read goes through the store's
// bounded retry path. Against DynamoDB Local behind a proxy that
// throttles every GetItem: exactly MaxAttempts requests are sent (the SDK
// retryer does not multiply them), each is metered on the request's
// context, and the result is sync.rate_limited — retryable, so the engine
// answers a retryable request error and never revokes.
func TestTableResolverThrottled(t *testing.T) {
	ddb := testenv.DynamoDB(t)
	target, _ := url.Parse(ddb.Endpoint)
	rp := httputil.NewSingleHostReverseProxy(target)
	var throttled atomic.Int32
	var on atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if on.Load() && strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".GetItem") {
			throttled.Add(1)
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			w.WriteHeader(400)
			_, _ = w.Write([]byte(`{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"injected"}`))
			return
		}
		rp.ServeHTTP(w, r)
	}))
	defer srv.Close()
	client := dynamodb.New(dynamodb.Options{
		Region: testenv.Region, BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("x", "x", ""),
	})
	ctx := context.Background()
	table := testenv.UniqueName(t, "grants")
	if err := dynamostore.CreateTable(ctx, ddb.Client(t), table); err != nil {
		t.Fatal(err)
	}
	r := &TableResolver{Client: client, Table: table, PKAttr: dynamostore.AttrPK, SKAttr: dynamostore.AttrSK,
		Retry: dynamostore.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond}}
	mctx, capacity := dynamostore.WithCapacity(ctx)
	if _, err := r.ResolveScopes(mctx, "acme", "alice", ""); err != nil {
		t.Fatalf("healthy read: %v", err)
	}
	if u := capacity.Snapshot(); u.RoundTrips != 1 || u.EstRCU != 1 {
		t.Fatalf("healthy read metered as %+v; want 1 round trip, 1 RCU", u)
	}
	on.Store(true)
	mctx, capacity = dynamostore.WithCapacity(ctx)
	_, err := r.ResolveScopes(mctx, "acme", "alice", "")
	if se := syncerr.As(err); se == nil || se.Code != syncerr.RateLimited || !se.Entry().Retryable {
		t.Fatalf("throttled grant read: %v; want sync.rate_limited", err)
	}
	if errors.Is(err, engine.ErrNoGrant) {
		t.Fatal("a throttled read was reported as no grant")
	}
	if n := throttled.Load(); n != 3 {
		t.Fatalf("%d GetItem requests sent; want exactly MaxAttempts = 3", n)
	}
	if u := capacity.Snapshot(); u.RoundTrips != 3 {
		t.Fatalf("metered %d round trips; want 3", u.RoundTrips)
	}
}

// The claim resolver converts a claim value once: a cached token's
// claims (one map on every request of its client) and a string claim
// (the same text) cost no allocation after the first request. Two
// tokens' grants never mix, and a malformed claim is refused every time.
func TestClaimResolverMemo(t *testing.T) {
	r := &ClaimResolver{Claim: "syncular_scopes"}
	ctxA := WithClaims(context.Background(), Claims{"syncular_scopes": map[string]any{"project_id": []any{"p1"}}})
	ctxB := WithClaims(context.Background(), Claims{"syncular_scopes": map[string]any{"project_id": []any{"p2"}}})
	ctxS := WithClaims(context.Background(), Claims{"syncular_scopes": `{"project_id":["p3"]}`})
	bad := WithClaims(context.Background(), Claims{"syncular_scopes": map[string]any{"project_id": "p1"}})
	for i := 0; i < 3; i++ {
		for _, c := range []struct {
			ctx  context.Context
			want engine.ScopeMap
		}{{ctxA, engine.ScopeMap{"project_id": {"p1"}}}, {ctxB, engine.ScopeMap{"project_id": {"p2"}}}, {ctxS, engine.ScopeMap{"project_id": {"p3"}}}} {
			if got, err := r.ResolveScopes(c.ctx, "p", "a", "c"); err != nil || !reflect.DeepEqual(got, c.want) {
				t.Fatalf("round %d: got %v %v, want %v", i, got, err, c.want)
			}
		}
		if _, err := r.ResolveScopes(bad, "p", "a", "c"); err == nil {
			t.Fatalf("round %d: a malformed claim was accepted", i)
		}
	}
	for _, ctx := range []context.Context{ctxA, ctxS} {
		if n := testing.AllocsPerRun(100, func() {
			if _, err := r.ResolveScopes(ctx, "p", "a", "c"); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("resolving a known claim allocates %v times; want 0", n)
		}
	}
	// Bounded: a flood of distinct claims never grows it past its cap.
	for i := 0; i < 3*maxClaimMemo; i++ {
		ctx := WithClaims(context.Background(), Claims{"syncular_scopes": map[string]any{"project_id": []any{strings.Repeat("x", i%7+1)}}})
		if _, err := r.ResolveScopes(ctx, "p", "a", "c"); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(r.memo.strs) + len(r.memo.objs); n > maxClaimMemo {
		t.Fatalf("memo holds %d entries; cap %d", n, maxClaimMemo)
	}
}
