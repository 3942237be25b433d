package syncular

import (
	"context"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
)

// Scopes maps a scope variable (such as "project_id") to the values an
// actor may read and write; "*" allows every value (§3.2).
type Scopes map[string][]string

// Actor is who a request is for, as the authenticated token says.
type Actor struct {
	Partition string
	ID        string
	ClientID  string
}

// ScopeResolver returns an actor's allowed scopes. An empty map (or nil)
// is no grant: subscriptions revoke and writes are refused. Return an
// error wrapping ErrResolverUnavailable for an outage; any other error
// fails closed.
type ScopeResolver interface {
	ResolveScopes(ctx context.Context, a Actor) (Scopes, error)
}

// ScopeResolverFunc adapts a function to ScopeResolver.
type ScopeResolverFunc func(ctx context.Context, a Actor) (Scopes, error)

// ResolveScopes calls f.
func (f ScopeResolverFunc) ResolveScopes(ctx context.Context, a Actor) (Scopes, error) {
	return f(ctx, a)
}

type resolverAdapter struct{ r ScopeResolver }

func (r resolverAdapter) ResolveScopes(ctx context.Context, partition, actorID, clientID string) (engine.ScopeMap, error) {
	s, err := r.r.ResolveScopes(ctx, Actor{Partition: partition, ID: actorID, ClientID: clientID})
	if err != nil {
		return nil, err
	}
	return engine.ScopeMap(s), nil
}
