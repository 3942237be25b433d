package syncular

import (
	"context"
	"errors"
	"os"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/core/crdt"
	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/reactions"
	"github.com/skyfold/syncular-lambda/internal/localrun"
	"github.com/skyfold/syncular-lambda/internal/rttier"
	"github.com/skyfold/syncular-lambda/internal/wiring"
)

// App is an app's configuration of the server: every field is optional;
// an empty App is the stock server, configured by environment only.
type App struct {
	// Scopes resolves an actor's allowed scopes (§3.2), replacing the
	// SYNC_SCOPES_MODE resolver.
	Scopes ScopeResolver
	// PlanReactions plans durable reactions for every accepted commit
	// (§6.9). It must not cause side effects: it runs inside the push,
	// and may run again for the same commit after a failure.
	PlanReactions ReactionPlanner
	// ReactionHandlers run the reactions, by type, in the reactions
	// function (and in RunLocal), at least once each.
	ReactionHandlers map[string]ReactionHandler
	// Validators check each operation on their table (§6.7), and
	// CommitValidator whole commits (§6.8). An app that sets either
	// cannot also deploy declarative rules (validators.json).
	Validators      map[string]RowValidator
	CommitValidator CommitValidator
	// Mergers merge crdt columns of the crdtType they are registered
	// under (§5.10.2), beside the built-in "yjs-doc".
	Mergers map[string]Merger
}

// Merger merges a pushed CRDT value into the stored one (stored is nil
// for a new row or a NULL column) and returns the column's new value. It
// must be commutative, associative and idempotent; an error rejects the
// operation with sync.crdt_merge_failed and nothing is written.
type Merger func(stored, incoming []byte) ([]byte, error)

// Function names one Lambda function of the deployed stack.
type Function int

// The request-serving functions (the template's PushFunction,
// PullFunction, SegmentFunction and BlobFunction).
const (
	Push Function = iota + 1
	Pull
	Segment
	Blob
)

func (f Function) internal() (app.Function, error) {
	switch f {
	case Push:
		return app.Push, nil
	case Pull:
		return app.Pull, nil
	case Segment:
		return app.Segment, nil
	case Blob:
		return app.Blob, nil
	}
	return app.Function{}, errors.New("syncular: unknown function")
}

// hooks converts the App to the engine's hooks.
func (a *App) hooks() wiring.Hooks {
	var h wiring.Hooks
	if a == nil {
		return h
	}
	if a.Scopes != nil {
		h.Resolver = resolverAdapter{a.Scopes}
	}
	if a.PlanReactions != nil {
		h.Reactions = plannerAdapter{a.PlanReactions}
	}
	h.Validators = a.validators()
	if len(a.Mergers) > 0 {
		h.Mergers = crdt.Registry{}
		for name, m := range a.Mergers {
			h.Mergers[name] = crdt.MergeFunc(m)
		}
	}
	return h
}

func (a *App) handlers() map[string]reactions.Handler {
	if a == nil || len(a.ReactionHandlers) == 0 {
		return nil
	}
	out := make(map[string]reactions.Handler, len(a.ReactionHandlers))
	for t, h := range a.ReactionHandlers {
		out[t] = handlerAdapter{h}
	}
	return out
}

// LambdaMain is the whole main of one request-serving function: it
// builds the function from the environment the template sets, with the
// app's hooks, and serves Lambda invocations. It does not return.
func (a *App) LambdaMain(fn Function) {
	f, err := fn.internal()
	if err != nil {
		panic(err)
	}
	app.MainWith(f, a.hooks())
}

// ReactionsMain is the whole main of the reactions function (template
// parameter ReactionsEnabled): it delivers the app's reactions, woken by
// the table's stream and by its schedule. It does not return.
func (a *App) ReactionsMain() {
	app.ReactionsMain(a.handlers())
}

// RealtimeMain is the whole main of the app's realtime tier (the ECS
// service; `make realtime-image REALTIME_MAIN=./path/to/main`), so pushes
// over the socket run the app's validators and reaction planning as HTTP
// pushes do. It returns only on a failed start (exit status 1).
func (a *App) RealtimeMain() {
	rttier.Main(a.hooks())
}

// RunLocal runs every function on one local HTTP server over an
// in-memory store, as `make run` does, with the app's hooks; args are the
// runner's flags (-h lists them). It returns when ctx is cancelled.
func (a *App) RunLocal(ctx context.Context, args []string) error {
	return localrun.Run(ctx, args, os.Stdout, os.Stderr, localrun.Extensions{Hooks: a.hooks(), ReactionHandlers: a.handlers()})
}

// ErrResolverUnavailable is what a ScopeResolver returns (wrapped) when
// its authority cannot be reached: the request fails retryably and
// nothing is revoked. Any other error fails closed, like no grant.
var ErrResolverUnavailable = engine.ErrResolverUnavailable
