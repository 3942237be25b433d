package conformancehost

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skyfold/syncular-lambda/internal/auth"
	"github.com/skyfold/syncular-lambda/internal/core/crdt"
	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/httpapi"
	"github.com/skyfold/syncular-lambda/internal/core/realtime"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/validate"
	"github.com/skyfold/syncular-lambda/internal/wsrealtime"
)

// createOptions is ServerCreateOptions (driver.ts).
type createOptions struct {
	Schema json.RawMessage `json:"schema"`
	// SchemaWindow lists older client schemas the server keeps serving
	// through their own codecs (§9 schema window of the wire-3 spec).
	SchemaWindow []json.RawMessage `json:"schemaWindow"`
	Partition    string            `json:"partition"`
	NowMs        *int64            `json:"nowMs"`
	Limits       *limitOptions     `json:"limits"`
	SignedURLs   *struct {
		TTLSeconds *int64 `json:"ttlSeconds"`
	} `json:"signedUrls"`
	// Leases is ServerLeaseOptions (§7.3); absent turns leases off.
	Leases *struct {
		TTLMs *int64 `json:"ttlMs"`
	} `json:"leases"`
}

// limitOptions is ServerLimitsOptions.
type limitOptions struct {
	MaxOperationsPerRequest *int   `json:"maxOperationsPerRequest"`
	InlineSegmentMaxBytes   *int   `json:"inlineSegmentMaxBytes"`
	MaxDeltaBytes           *int   `json:"maxDeltaBytes"`
	SegmentTTLMs            *int64 `json:"segmentTtlMs"`
	MaxPresenceBytes        *int   `json:"maxPresenceBytes"`
	// MaxCascadeOperationsPerCommit is the §6.11 cascade cap.
	MaxCascadeOperationsPerCommit *int `json:"maxCascadeOperationsPerCommit"`
}

// authRecheck is the hub's authorization re-check interval on this host
// (realtime.Options.AuthInterval; production's default is 30 s): short, so
// a scenario's grant change reaches open sockets within its waits.
const authRecheck = 100 * time.Millisecond

// defaultSignedURLTTLSeconds matches the reference driver's default.
const defaultSignedURLTTLSeconds = 900

// instance is one isolated server under test.
type instance struct {
	id        string
	partition string
	schema    *schema.Schema

	// mu serializes every request and control call: the catalog drives an
	// instance sequentially, and engine knobs (signed URL TTL) are plain
	// fields that must not change under a request in flight.
	mu     sync.Mutex
	clock  atomic.Int64
	grants *grants
	st     storage
	// eng serves /sync, segments and blobs (the deployed stack's
	// functions). rtEng is the realtime tier's engine: on the production
	// stores it is a second engine over the same table, so a commit made
	// over HTTP reaches the hub only through the table's stream (feed);
	// on memstore it is eng, whose commits reach the hub in process.
	eng     *engine.Engine
	rtEng   *engine.Engine
	api     *httpapi.Handler
	hub     *realtime.Hub
	feed    *streamFeed // nil on memstore
	rt      *wsrealtime.Handler
	stop    context.CancelFunc // ends the hub's Run
	signed  bool
	ttlSecs int64
	// rowRules and commitRules are the installed declarative validators
	// (validators.go).
	rowRules    []validate.TableRule
	commitRules []validate.CommitRule
}

func newInstance(ctx context.Context, id string, o *createOptions, log *slog.Logger, prod *Prod) (_ *instance, cerr *controlError) {
	if len(o.Schema) == 0 || string(o.Schema) == "null" {
		return nil, badArgs("schema is required")
	}
	if o.Partition == "" {
		return nil, badArgs("partition is required")
	}
	if o.NowMs == nil || *o.NowMs < 0 {
		return nil, badArgs("nowMs (virtual clock start, epoch ms) is required")
	}
	var leaseTTL time.Duration
	if o.Leases != nil {
		if o.Leases.TTLMs == nil || *o.Leases.TTLMs < 1 {
			return nil, badArgs("leases.ttlMs must be ≥ 1")
		}
		leaseTTL = time.Duration(*o.Leases.TTLMs) * time.Millisecond
	}
	sc, cerr := parseSchemas(o)
	if cerr != nil {
		return nil, cerr
	}
	lim, rlim, cerr := parseLimits(o.Limits)
	if cerr != nil {
		return nil, cerr
	}
	inst := &instance{
		id: id, partition: o.Partition, schema: sc,
		grants: &grants{byActor: map[string]engine.ScopeMap{}},
	}
	inst.clock.Store(*o.NowMs)
	var err error
	var signingKey []byte
	if o.SignedURLs != nil {
		inst.signed = true
		inst.ttlSecs = defaultSignedURLTTLSeconds
		if t := o.SignedURLs.TTLSeconds; t != nil {
			if *t < 0 {
				return nil, badArgs("signedUrls.ttlSeconds must be ≥ 0")
			}
			inst.ttlSecs = *t
		}
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, failed(err)
		}
		signingKey = key
	}
	var ps *prodStorage
	if prod != nil {
		if ps, err = newProdStorage(ctx, prod, id, inst.clock.Load, log); err != nil {
			return nil, failed(fmt.Errorf("production stores: %w", err))
		}
		inst.st = ps
	} else if inst.st, err = newMemStorage(id, inst.clock.Load); err != nil {
		return nil, failed(err)
	}
	defer func() {
		if cerr != nil {
			inst.st.Close()
		}
	}()
	if cerr := inst.buildEngines(sc, lim, signingKey, leaseTTL, ps != nil); cerr != nil {
		return nil, cerr
	}
	// Grant changes (setAllowedScopes) reach open sockets the way they do
	// in production, through the hub's periodic authorization re-check,
	// run here every authRecheck instead of every 30 s.
	inst.hub = realtime.NewHub(inst.rtEng, realtime.Options{Limits: rlim, Logger: log, AuthInterval: authRecheck})
	if ps != nil {
		if inst.feed, err = startStreamFeed(ps, inst.hub, id, log); err != nil {
			return nil, failed(err)
		}
	}
	inst.rt = inst.realtimeHandler(log)
	ctx, cancel := context.WithCancel(context.Background())
	inst.stop = cancel
	go inst.hub.Run(ctx)
	inst.api = &httpapi.Handler{Engine: inst.eng, Mount: "/i/" + id, Routes: httpapi.RouteSync | httpapi.RouteSegments | httpapi.RouteBlobs, Logger: log}
	return inst, nil
}

// buildEngines makes the instance's engines: the functions' engine and,
// on the production stores, the tier's, whose own commits (socket rounds)
// hint the hub in process while other writers reach it through the
// table's stream.
func (inst *instance) buildEngines(sc *schema.Schema, lim engine.Limits, signingKey []byte, leaseTTL time.Duration, prodStores bool) *controlError {
	var err error
	cfg := engine.Config{
		Schema: sc, Store: inst.st.Store(), Segments: inst.st.Segments(), Resolver: inst.grants,
		Limits: lim, Clock: inst.clock.Load, Blobs: inst.st.Blobs(),
		CRDTMergers: crdt.Default(),
	}
	if leaseTTL > 0 {
		// §7.3: both engines keep leases in the instance's store.
		ls, ok := inst.st.Store().(store.LeaseStore)
		if !ok {
			return unsupported("auth leases (§7.3) on this store")
		}
		cfg.Leases, cfg.LeaseTTL = ls, leaseTTL
	}
	if inst.signed {
		cfg.SignedURLs, cfg.SigningKey = engine.SignedURLsNative, signingKey
	}
	// The functions engine: on memstore its commits reach the hub in
	// process (§8.2, as the local runner does); on the production stores
	// only through the table's stream.
	fcfg := cfg
	if !prodStores {
		fcfg.OnCommit = func(p string, c *store.Commit) { inst.hub.Hint(p, c.Seq) }
	}
	if inst.eng, err = engine.New(fcfg); err != nil {
		return badArgs("engine: %v", err)
	}
	inst.rtEng = inst.eng
	if prodStores {
		// The tier's own commits (socket rounds) hint its hub in process.
		cfg.OnCommit = func(p string, c *store.Commit) { inst.hub.Hint(p, c.Seq) }
		if inst.rtEng, err = engine.New(cfg); err != nil {
			return badArgs("engine: %v", err)
		}
	}
	for _, e := range inst.engines() {
		if inst.signed {
			e.SetSignedURLTTL(time.Duration(inst.ttlSecs) * time.Second)
		}
	}
	return nil
}

// parseSchemas is the instance's schema: the current one merged with the
// older versions of its schema window (§7.4).
func parseSchemas(o *createOptions) (*schema.Schema, *controlError) {
	sc, err := schema.Parse(o.Schema)
	if err != nil {
		return nil, badArgs("schema: %v", err)
	}
	if len(o.SchemaWindow) > 0 {
		parts := []*schema.Schema{sc}
		for i, raw := range o.SchemaWindow {
			older, err := schema.Parse(raw)
			if err != nil {
				return nil, badArgs("schemaWindow[%d]: %v", i, err)
			}
			if older.Latest >= sc.Latest {
				return nil, badArgs("schemaWindow[%d]: version %d is not older than the current schema %d", i, older.Latest, sc.Latest)
			}
			parts = append(parts, older)
		}
		if sc, err = schema.Merge(parts...); err != nil {
			return nil, badArgs("schemaWindow: %v", err)
		}
	}
	return sc, nil
}

// parseLimits reads the instance's engine and realtime limits.
func parseLimits(l *limitOptions) (lim engine.Limits, rlim realtime.Limits, _ *controlError) {
	if l != nil {
		if v := l.MaxOperationsPerRequest; v != nil {
			if *v < 1 {
				return lim, rlim, badArgs("limits.maxOperationsPerRequest must be ≥ 1")
			}
			lim.MaxOperations = *v
		}
		if v := l.InlineSegmentMaxBytes; v != nil {
			if *v < 0 {
				return lim, rlim, badArgs("limits.inlineSegmentMaxBytes must be ≥ 0")
			}
			// The engine reads 0 as "default"; every rows segment is longer
			// than one byte, so 1 is the same "never inline" bound.
			lim.InlineSegmentMaxBytes = max(*v, 1)
		}
		if v := l.SegmentTTLMs; v != nil {
			if *v < 1 {
				return lim, rlim, badArgs("limits.segmentTtlMs must be ≥ 1")
			}
			lim.SegmentTTL = time.Duration(*v) * time.Millisecond
		}
		if v := l.MaxCascadeOperationsPerCommit; v != nil {
			if *v < 1 {
				return lim, rlim, badArgs("limits.maxCascadeOperationsPerCommit must be ≥ 1")
			}
			lim.MaxCascadeOperationsPerCommit = *v
		}
		// maxDeltaBytes and maxPresenceBytes bound realtime traffic (§8.2,
		// §8.6.2): the delta limit excludes the channel tag byte.
		if v := l.MaxDeltaBytes; v != nil {
			if *v < 1 {
				return lim, rlim, badArgs("limits.maxDeltaBytes must be ≥ 1")
			}
			rlim.MaxMessageBytes = *v + 1
		}
		if v := l.MaxPresenceBytes; v != nil {
			if *v < 1 {
				return lim, rlim, badArgs("limits.maxPresenceBytes must be ≥ 1")
			}
			rlim.MaxPresenceBytes = *v
		}
	}
	return lim, rlim, nil
}

// realtimeHandler serves the instance's /realtime. The catalog's driver
// has no credentials: the actor travels in the query (or X-Actor) exactly
// as it does for /sync.
func (inst *instance) realtimeHandler(log *slog.Logger) *wsrealtime.Handler {
	return &wsrealtime.Handler{Hub: inst.hub, Options: wsrealtime.Options{InsecureSkipVerify: true}, Logger: log,
		Identify: func(r *http.Request) (engine.Auth, auth.Claims, error) {
			actor := r.URL.Query().Get("actor")
			if actor == "" {
				actor = r.Header.Get("X-Actor")
			}
			if actor == "" {
				return engine.Auth{}, nil, errors.New("realtime needs an actor (query actor or X-Actor)")
			}
			return engine.Auth{Partition: inst.partition, ActorID: actor}, nil, nil
		},
		WriteError: func(w http.ResponseWriter, err error) {
			se := syncerr.As(err)
			if se == nil {
				se = syncerr.Internal(err)
			}
			writeError(w, se.HTTPStatus(), string(se.Code), se.Message)
		},
	}
}

// engines lists the instance's distinct engines (one on memstore, the
// functions' and the tier's on the production stores): engine knobs the
// catalog turns apply to both.
func (in *instance) engines() []*engine.Engine {
	if in.rtEng == in.eng {
		return []*engine.Engine{in.eng}
	}
	return []*engine.Engine{in.eng, in.rtEng}
}

// shutdown closes the instance's sockets, stops its hub and stream feed
// and releases its stores.
func (in *instance) shutdown() {
	in.stop()
	in.hub.Drain("instance closed")
	if in.feed != nil {
		in.feed.Close()
	}
	in.st.Close()
}

// serveHTTP serves /i/{id}/sync and /i/{id}/segments/... through httpapi.
func (in *instance) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.URL.Path, "/realtime") {
		in.rt.ServeHTTP(w, r) // /i/{id}/realtime?clientId=…&actor=… (§8.1)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, httpapi.DefaultMaxBodyBytes+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, codeBadRequest, "read body: "+err.Error())
		return
	}
	req := &httpapi.Request{
		Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.Query(), Header: r.Header,
		Body: body, BaseURL: "http://" + r.Host,
	}
	if actor := r.Header.Get("X-Actor"); actor != "" {
		req.Auth = &engine.Auth{Partition: in.partition, ActorID: actor}
	}
	resp := in.serve(r.Context(), req)
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

func (in *instance) serve(ctx context.Context, req *httpapi.Request) *httpapi.Response {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.api.Serve(ctx, req)
}

// grants is the scriptable scope resolver: actor → allowed scopes, or a
// failing state (setResolverFailing), or an outage (setResolverOutage).
// Unset actors hold nothing.
type grants struct {
	mu      sync.Mutex
	byActor map[string]engine.ScopeMap
	failing bool
	outage  bool
}

// ResolveScopes implements engine.ScopeResolver.
func (g *grants) ResolveScopes(_ context.Context, _, actor, _ string) (engine.ScopeMap, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failing {
		// The catalog's "resolveScopes threw": an ordinary error, which
		// the engine treats as production treats a resolver that throws
		// (a malformed grant or claim): fail loud, §3.2 rule 5 — revoke
		// and forbid. Outages are a different signal
		// (engine.ErrResolverUnavailable) and answer retryably.
		return nil, errors.New("injected: resolveScopes failure")
	}
	if g.outage {
		// §7.3.3: the live authority is unreachable; a valid auth lease
		// authorizes the round instead.
		return nil, fmt.Errorf("injected: scope authority outage: %w", engine.ErrResolverUnavailable)
	}
	m := g.byActor[actor]
	if m == nil {
		return engine.ScopeMap{}, nil
	}
	return m, nil
}
