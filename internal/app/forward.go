package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/httpapi"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/lambdahttp"
)

// Forwarding during rolling schema upgrades (docs/OPERATIONS.md "Rolling
// schema upgrades"). A release that changes a table's storage layout
// fences a partition from the older build with its first write there;
// from then on the older build's serve gate refuses that partition
// (sync.schema_not_ready, §10.2). While traffic shifts, and after a
// rollback, most requests still reach the older build, so instead of
// refusing it hands the request to the newest build of the same function
// (one synchronous invocation with the client's unchanged event) and
// relays its answer: the client sees what a retry routed there would
// have got, without the retries.
//
// How a build finds the newer one: every build that serves registers
// itself at cold start in the table's build registry (function, schema
// version → function version; store.BuildRegistry), and a refused build
// looks up the newest one past its own schema (cached for
// BuildCacheTTL). Without a registered newer build, or when the
// invocation fails, the refusal stands (retryable, as without
// forwarding). A forwarded event carries a marker only a build sets
// (lambdahttp.MarkForwarded) and is never forwarded again.

// Invoker runs one synchronous invocation of a version of a function
// (the Lambda Invoke API; in tests another build's handler in process).
// functionError is Lambda's X-Amz-Function-Error ("" when the function
// returned normally); err is a failure to invoke.
type Invoker interface {
	Invoke(ctx context.Context, function, version string, payload []byte) (out []byte, functionError string, err error)
}

// BuildCacheTTL is how long a Forwarder keeps what it read of the build
// registry (a newer build, or that there is none).
const BuildCacheTTL = 5 * time.Second

// Forwarder is the httpapi.Forwarder of a Lambda function version.
type Forwarder struct {
	// Function and Version name this build (AWS_LAMBDA_FUNCTION_NAME,
	// AWS_LAMBDA_FUNCTION_VERSION); SchemaVersion is the storage schema
	// it runs (the schema document's latest version).
	Function, Version string
	SchemaVersion     int64
	Builds            store.BuildRegistry
	Invoker           Invoker
	Logger            *slog.Logger
	// Now is the clock of the registry cache (nil: time.Now).
	Now func() time.Time

	mu      sync.Mutex
	target  *store.Build // nil: none registered past this build
	readAt  time.Time
	hasRead bool
}

var _ httpapi.Forwarder = (*Forwarder)(nil)

// ForwardingEnabled reports whether a function version may register and
// forward: an unpublished version ($LATEST, or none outside Lambda) has
// no name another build could invoke.
func ForwardingEnabled(function, version string) bool {
	return function != "" && version != "" && version != "$LATEST"
}

// Register records this build in the build registry (once per cold
// start: a conditional put that writes nothing when already recorded).
func (f *Forwarder) Register(ctx context.Context) error {
	if err := f.Builds.RegisterBuild(ctx, store.Build{Function: f.Function, SchemaVersion: f.SchemaVersion, Version: f.Version}); err != nil {
		return fmt.Errorf("register build %s:%s at schema %d: %w", f.Function, f.Version, f.SchemaVersion, err)
	}
	return nil
}

// Forward implements httpapi.Forwarder.
func (f *Forwarder) Forward(ctx context.Context, r *httpapi.Request) (*httpapi.Response, bool) {
	target, err := f.newer(ctx)
	if err != nil {
		f.warn(ctx, "forward: build registry unreadable; refusing", r, "", err)
		return nil, false
	}
	if target == nil {
		return nil, false // no newer build: the refusal stands
	}
	event, err := lambdahttp.MarkForwarded(r.Event, f.Version)
	if err != nil {
		f.warn(ctx, "forward: not forwardable; refusing", r, target.Version, err)
		return nil, false
	}
	out, fnErr, err := f.Invoker.Invoke(ctx, f.Function, target.Version, event)
	if err == nil && fnErr != "" {
		// The newer build failed the invocation (a crash or timeout, not
		// an HTTP answer): the client retries the refusal, never a 500.
		err = errors.New("function error " + fnErr)
	}
	if err != nil {
		f.warn(ctx, "forward: invocation failed; refusing", r, target.Version, err)
		return nil, false
	}
	resp, err := lambdahttp.RelayedResponse(out)
	if err != nil {
		f.warn(ctx, "forward: answer unusable; refusing", r, target.Version, err)
		return nil, false
	}
	return resp, true
}

// newer is the newest registered build past this one's schema, nil when
// none; the registry is read at most once per BuildCacheTTL.
func (f *Forwarder) newer(ctx context.Context) (*store.Build, error) {
	now := time.Now
	if f.Now != nil {
		now = f.Now
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hasRead && now().Sub(f.readAt) < BuildCacheTTL {
		return f.target, nil
	}
	b, ok, err := f.Builds.NewestBuild(ctx, f.Function, f.SchemaVersion)
	if err != nil {
		return nil, err
	}
	f.target = nil
	if ok && b.Version != f.Version {
		f.target = &b
	}
	f.readAt, f.hasRead = now(), true
	return f.target, nil
}

func (f *Forwarder) warn(ctx context.Context, msg string, r *httpapi.Request, target string, err error) {
	if f.Logger == nil {
		return
	}
	f.Logger.WarnContext(ctx, msg, "requestId", r.RequestID, "targetVersion", target, "error", err.Error())
}
