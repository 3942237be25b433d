package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/canonjson"
	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
)

// ClaimResolver reads the allowed scopes (§3.2 rule 3) from a claim of the
// request's verified token: a JSON object of variable → list of values, or
// a JSON string holding one (API Gateway's JWT authorizer passes claims as
// strings; Cognito custom attributes are strings). A token without the
// claim holds no grant (engine.ErrNoGrant: subscriptions revoke, writes
// are forbidden), the way identity providers omit an attribute that has
// no value. A malformed claim is a resolver that throws (§3.2 rule 5): it
// fails loud, revoking and forbidding like "no grant", so a broken
// authorization setup fences instead of leaking; the engine logs it as an
// error.
type ClaimResolver struct {
	Claim string

	memo claimMemo
}

// claimMemo remembers the scope maps of claim values already converted:
// a cached token's claims (tokenCache) are the same map on every request
// of its client, and API Gateway's string claims the same text, so each
// is converted once instead of per request. Keys cannot mix up two
// grants: a string claim is keyed by its whole text (equal text, equal
// map), an object claim by the identity of its map, which the entry
// keeps alive, so no other map can take its address while the entry
// exists; claim maps are read only once verified (tokenCache shares
// them). The returned maps are shared between requests, which the
// engine only reads (engine.ScopeResolver). Bounded: when full it is
// emptied.
type claimMemo struct {
	mu   sync.Mutex
	strs map[string]engine.ScopeMap
	objs map[*byte]claimMemoObj // key: the claim map's pointer (see objKey)
}

type claimMemoObj struct {
	claim map[string]any // keeps the keyed map alive
	m     engine.ScopeMap
}

const maxClaimMemo = 512

// objKey is the identity of a claim map (nil for a nil map).
func objKey(m map[string]any) *byte {
	return (*byte)(reflect.ValueOf(m).UnsafePointer())
}

func (c *claimMemo) get(v any) (engine.ScopeMap, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch t := v.(type) {
	case string:
		m, ok := c.strs[t]
		return m, ok
	case map[string]any:
		e, ok := c.objs[objKey(t)]
		return e.m, ok
	}
	return nil, false
}

func (c *claimMemo) put(v any, m engine.ScopeMap) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.strs)+len(c.objs) >= maxClaimMemo {
		c.strs, c.objs = nil, nil
	}
	switch t := v.(type) {
	case string:
		if len(t) > maxCachedTokenBytes {
			return
		}
		if c.strs == nil {
			c.strs = make(map[string]engine.ScopeMap)
		}
		c.strs[t] = m
	case map[string]any:
		if c.objs == nil {
			c.objs = make(map[*byte]claimMemoObj)
		}
		c.objs[objKey(t)] = claimMemoObj{claim: t, m: m}
	}
}

// ResolveScopes implements engine.ScopeResolver.
func (r *ClaimResolver) ResolveScopes(ctx context.Context, _, _, _ string) (engine.ScopeMap, error) {
	c := ClaimsFrom(ctx)
	if c == nil {
		return nil, errors.New("claim resolver: request carries no claims")
	}
	v, ok := c[r.Claim]
	if !ok || v == nil {
		return nil, fmt.Errorf("claim resolver: claim %q is absent: %w", r.Claim, engine.ErrNoGrant)
	}
	if m, ok := r.memo.get(v); ok {
		return m, nil
	}
	m, err := scopeMapFromAny(v)
	if err != nil {
		return nil, fmt.Errorf("claim resolver: claim %q: %w", r.Claim, err)
	}
	r.memo.put(v, m)
	return m, nil
}

// scopeMapFromAny accepts a decoded JSON object or a JSON string of one.
func scopeMapFromAny(v any) (engine.ScopeMap, error) {
	switch t := v.(type) {
	case string:
		m, err := canonjson.ParseScopeMap([]byte(t))
		if err != nil {
			return nil, errors.New("not a JSON scope map")
		}
		return engine.ScopeMap(m), nil
	case map[string]any:
		out := make(engine.ScopeMap, len(t))
		for k, raw := range t {
			list, ok := raw.([]any)
			if !ok {
				return nil, fmt.Errorf("value of %q is not a list of strings", k)
			}
			vals := make([]string, 0, len(list))
			for _, e := range list {
				s, ok := e.(string)
				if !ok {
					return nil, fmt.Errorf("value of %q is not a list of strings", k)
				}
				vals = append(vals, s)
			}
			out[k] = vals
		}
		return out, nil
	}
	return nil, errors.New("not a JSON scope map")
}

// GetItemAPI is the one DynamoDB call the table resolver makes.
type GetItemAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

// Grant item layout in the sync table. The "GRANT#" prefix keeps grants
// apart from every engine item (those start with "P#" or "SEG#").
const (
	GrantPKPrefix   = "GRANT#"
	GrantScopesAttr = "scopes"
)

// GrantKey returns the (pk, sk) values of the grant item of an actor.
func GrantKey(partition, actorID string) (string, string) {
	return GrantPKPrefix + partition, actorID
}

// TableResolver reads allowed scopes from the grant item
// (pk "GRANT#<partition>", sk "<actorId>") with a consistent GetItem, so a
// revocation is seen by the next request. The item's "scopes" attribute is
// a map of variable → list or string set of values, or a string holding
// the JSON scope map. A missing item grants nothing (an empty map: the
// actor's subscriptions revoke). A failed read is an outage
// (engine.ErrResolverUnavailable, or sync.rate_limited for a throttle): the
// engine answers it with a retryable request error and never with a
// revocation. A malformed item is a resolver that throws: it fails loud
// (§3.2 rule 5), like a missing grant.
//
// The read goes through the store's call path: the same bounded, jittered
// retries on throttling and 5xx (the SDK retryer is off, so attempts do
// not multiply), capacity recorded on the request's context, and a
// throttle still present after the last attempt is sync.rate_limited.
type TableResolver struct {
	Client GetItemAPI
	Table  string
	// PKAttr and SKAttr are the table's key attribute names.
	PKAttr, SKAttr string
	// Retry bounds the grant read (zero fields: dynamostore's defaults).
	Retry dynamostore.RetryPolicy
}

// ResolveScopes implements engine.ScopeResolver.
func (r *TableResolver) ResolveScopes(ctx context.Context, partition, actorID, _ string) (engine.ScopeMap, error) {
	pk, sk := GrantKey(partition, actorID)
	in := &dynamodb.GetItemInput{
		TableName:            aws.String(r.Table),
		ConsistentRead:       aws.Bool(true),
		ProjectionExpression: aws.String("#s"),
		ExpressionAttributeNames: map[string]string{
			"#s": GrantScopesAttr,
		},
		Key: map[string]types.AttributeValue{
			r.PKAttr: &types.AttributeValueMemberS{Value: pk},
			r.SKAttr: &types.AttributeValueMemberS{Value: sk},
		},
		ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
	}
	var out *dynamodb.GetItemOutput
	err := dynamostore.Call(ctx, r.Retry, "read scope grant", func(ctx context.Context) error {
		o, err := r.Client.GetItem(ctx, in, dynamostore.NoSDKRetry)
		if o != nil && o.ConsumedCapacity != nil {
			dynamostore.RecordConsumed(ctx, false, *o.ConsumedCapacity)
		}
		out = o
		return err
	})
	if err != nil {
		if syncerr.As(err) != nil {
			return nil, fmt.Errorf("table resolver: read grant: %w", err) // a throttle keeps its retryable code
		}
		// The grant could not be read (a timeout, a 5xx, a broken
		// connection): an outage, answered retryably, never a revocation.
		return nil, fmt.Errorf("table resolver: read grant: %w: %w", engine.ErrResolverUnavailable, err)
	}
	// A consistent read costs one unit per started 4 KB (a miss costs one).
	dynamostore.RecordEstimate(ctx, float64(max(1, (dynamostore.ItemSize(out.Item)+4095)/4096)), 0)
	if len(out.Item) == 0 {
		return engine.ScopeMap{}, nil
	}
	av, ok := out.Item[GrantScopesAttr]
	if !ok {
		return nil, errors.New("table resolver: grant item has no scopes attribute")
	}
	m, err := scopeMapFromAttr(av)
	if err != nil {
		return nil, fmt.Errorf("table resolver: grant item: %w", err)
	}
	return m, nil
}

func scopeMapFromAttr(av types.AttributeValue) (engine.ScopeMap, error) {
	switch t := av.(type) {
	case *types.AttributeValueMemberS:
		return scopeMapFromAny(t.Value)
	case *types.AttributeValueMemberM:
		out := make(engine.ScopeMap, len(t.Value))
		for k, v := range t.Value {
			switch vv := v.(type) {
			case *types.AttributeValueMemberSS:
				out[k] = append([]string(nil), vv.Value...)
			case *types.AttributeValueMemberL:
				vals := make([]string, 0, len(vv.Value))
				for _, e := range vv.Value {
					s, ok := e.(*types.AttributeValueMemberS)
					if !ok {
						return nil, fmt.Errorf("scopes.%s is not a list of strings", k)
					}
					vals = append(vals, s.Value)
				}
				out[k] = vals
			default:
				return nil, fmt.Errorf("scopes.%s is not a list or string set", k)
			}
		}
		return out, nil
	}
	return nil, errors.New("scopes is neither a map nor a JSON string")
}

// GrantItem builds a grant item for tests, tools and the local runner's
// -create flag.
func GrantItem(pkAttr, skAttr, partition, actorID string, scopes engine.ScopeMap) map[string]types.AttributeValue {
	pk, sk := GrantKey(partition, actorID)
	b, _ := json.Marshal(scopes) // map[string][]string cannot fail
	return map[string]types.AttributeValue{
		pkAttr:          &types.AttributeValueMemberS{Value: pk},
		skAttr:          &types.AttributeValueMemberS{Value: sk},
		GrantScopesAttr: &types.AttributeValueMemberS{Value: string(b)},
	}
}
