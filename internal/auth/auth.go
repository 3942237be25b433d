// Package auth is the host side of SSP2 authentication (SPEC §1.1: the
// protocol carries no credentials; the host's authenticate(request)
// supplies actorId and partition) and of scope resolution (§3.2 rule 3).
//
// Two authenticators share one claim mapping: claims already verified by
// API Gateway's JWT authorizer, and HS256 bearer tokens verified in-process
// for local runs and tests. Two resolvers read allowed scopes from a claim
// or from grant items in the DynamoDB table. Every failure is fail-closed,
// and no error message or log line carries a token.
package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
)

// Claims are the verified claims of one request.
type Claims map[string]any

// ErrNoCredentials reports a request without any credentials.
var ErrNoCredentials = errors.New("no credentials: send an Authorization: Bearer token")

// Credentials are what a request presents.
type Credentials struct {
	// Authorization is the Authorization header value.
	Authorization string
	// AuthorizerClaims are the claims API Gateway's authorizer verified;
	// nil when the request passed no authorizer.
	AuthorizerClaims Claims
}

// Authenticator turns credentials into the engine's Auth. The returned
// claims travel to the scope resolver through the context (WithClaims).
type Authenticator interface {
	Authenticate(ctx context.Context, cr Credentials) (engine.Auth, Claims, error)
}

// Mapping names the claims that become actorId and partition.
type Mapping struct {
	ActorClaim string
	// PartitionClaim, when set, must be present: a token without it is
	// rejected rather than landing in a shared partition.
	PartitionClaim string
	// DefaultPartition is every request's partition when PartitionClaim
	// is empty.
	DefaultPartition string
}

// maxIDBytes bounds actor and partition ids: they become DynamoDB key parts.
const maxIDBytes = 512

// Map applies the mapping to verified claims.
func (m Mapping) Map(c Claims) (engine.Auth, error) {
	actorClaim := m.ActorClaim
	if actorClaim == "" {
		actorClaim = "sub"
	}
	actor, err := claimID(c, actorClaim)
	if err != nil {
		return engine.Auth{}, err
	}
	partition := m.DefaultPartition
	if m.PartitionClaim != "" {
		if partition, err = claimID(c, m.PartitionClaim); err != nil {
			return engine.Auth{}, err
		}
	}
	if partition == "" {
		return engine.Auth{}, errors.New("no partition: set a partition claim or a default partition")
	}
	return engine.Auth{Partition: partition, ActorID: actor}, nil
}

// claimID reads a claim as a non-empty identifier. Actor and partition
// claims must be JSON strings: a numeric claim is rejected, never turned
// into its decimal text, so the number 42 and the string "42" can never
// name the same actor or partition by accident (RFC 7519 makes sub a
// string anyway). Behind API Gateway's JWT authorizer every claim arrives
// as text (the authorizer renders numbers as strings before this code
// sees them), so there a numeric sub is indistinguishable from its
// string form: issue string subjects from the identity provider.
func claimID(c Claims, name string) (string, error) {
	v, ok := c[name]
	if !ok || v == nil {
		return "", fmt.Errorf("claim %q is missing", name)
	}
	var s string
	switch t := v.(type) {
	case string:
		s = t
	case json.Number, float64, int64, int:
		return "", fmt.Errorf("claim %q is a number; actor and partition claims must be JSON strings", name)
	default:
		return "", fmt.Errorf("claim %q is not a string", name)
	}
	if s == "" || len(s) > maxIDBytes || !utf8.ValidString(s) || strings.ContainsFunc(s, isControl) {
		return "", fmt.Errorf("claim %q is empty, too long or not printable text", name)
	}
	return s, nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// AuthorizerClaims trusts the claims API Gateway's JWT authorizer verified
// (requestContext.authorizer.jwt.claims). A request that reached the
// function without them (no authorizer on the route, or a misconfigured
// API) is rejected.
type AuthorizerClaims struct {
	Mapping Mapping
}

// Authenticate maps the authorizer's claims.
func (a *AuthorizerClaims) Authenticate(_ context.Context, cr Credentials) (engine.Auth, Claims, error) {
	if len(cr.AuthorizerClaims) == 0 {
		return engine.Auth{}, nil, errors.New("no authorizer claims: the route must use the API's JWT authorizer")
	}
	au, err := a.Mapping.Map(cr.AuthorizerClaims)
	if err != nil {
		return engine.Auth{}, nil, err
	}
	return au, cr.AuthorizerClaims, nil
}

type claimsKey struct{}

// WithClaims returns ctx carrying the request's verified claims, for the
// claim scope resolver.
func WithClaims(ctx context.Context, c Claims) context.Context {
	return context.WithValue(ctx, claimsKey{}, c)
}

// ClaimsFrom returns the claims WithClaims stored, or nil.
func ClaimsFrom(ctx context.Context) Claims {
	c, _ := ctx.Value(claimsKey{}).(Claims)
	return c
}

// bearer extracts the token of an Authorization: Bearer header.
func bearer(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}
