package localrun

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/auth"
	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/core/httpapi"
	"github.com/skyfold/syncular-lambda/internal/core/limits"
	"github.com/skyfold/syncular-lambda/internal/core/realtime"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/lambdahttp"
	"github.com/skyfold/syncular-lambda/internal/memblobs"
	"github.com/skyfold/syncular-lambda/internal/memstore"
	"github.com/skyfold/syncular-lambda/internal/rtfanout"
	"github.com/skyfold/syncular-lambda/internal/wsrealtime"
)

// options are the runner's flags.
type options struct {
	addr       string
	schemaPath string
	secret     string
	scopes     string
	actor      string
	partition  string
	mount      string
	signedURLs string
	// publicURL is the base of native signed URLs; empty means this
	// runner's own listen address (see setPublicURL).
	publicURL string
	logLevel  string

	dynamoEndpoint string
	s3Endpoint     string
	table          string
	bucket         string
	create         bool
	corsOrigins    []string
	jsonEvents     bool
	// ext is the app's own code (Extensions).
	ext Extensions
}

// corsAllows reports whether origin may call the runner ("*" allows all).
func (rn *runner) corsAllows(origin string) bool {
	for _, o := range rn.corsOrigins {
		if o == "*" || o == origin {
			return true
		}
	}
	return false
}

// runner serves every route over net/http by turning each request into the
// API Gateway v2 event the deployed API would send and invoking the same
// handler the matching Lambda function runs.
type runner struct {
	cfg      *config.Config
	schema   *schema.Schema
	handlers map[string]*lambdahttp.Handler
	key      []byte
	logger   *slog.Logger
	backend  string
	// corsOrigins are the browser origins allowed to call the runner.
	corsOrigins []string
	// hub serves <mount>/realtime (§8) through rt, which authenticates
	// the upgrade with authn.
	hub   *realtime.Hub
	rt    *wsrealtime.Handler
	authn auth.Authenticator
	// poller, with a DynamoDB table that has a stream, feeds the hub from
	// the stream instead of in-process commits (see stream.go).
	poller *rtfanout.Poller
	// memBlobs is the in-memory blob store whose URLs point at the runner.
	memBlobs *memblobs.Store
	// jsonEvents sends every request through Invoke as the JSON document
	// the Lambda runtime delivers (-json-events) instead of InvokeHTTP.
	jsonEvents bool
}

// maxRequestBytes is the largest body the deployed function can receive
// (Lambda's 6 MiB event holds it base64 encoded); a larger one never
// reaches it, so the runner refuses it the same way.
const maxRequestBytes = limits.MaxRequestBodyBytes

func newRunner(ctx context.Context, o options, logger *slog.Logger) (*runner, error) {
	sch, err := schema.ReadFile(o.schemaPath)
	if err != nil {
		return nil, fmt.Errorf("schema %s: %w (pass -schema path/to/schema.json)", o.schemaPath, err)
	}
	secret := []byte(o.secret)
	if len(secret) == 0 {
		var b [32]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		secret = []byte(hex.EncodeToString(b[:]))
	}
	if len(secret) < config.MinKeyBytes {
		return nil, fmt.Errorf("-secret must be at least %d bytes", config.MinKeyBytes)
	}
	// Separate keys per purpose: a bearer token must never verify as a
	// segment token or the other way round.
	signing := derive(secret, "syncular-local segment urls")
	// Native segment URLs are built from configuration only, never from a
	// request's Host header: -public-url, else the listen address (main
	// replaces it with the bound address once listening).
	publicURL := strings.TrimRight(o.publicURL, "/")
	if publicURL == "" {
		addr := o.addr
		if addr == "" || strings.HasPrefix(addr, ":") {
			addr = "127.0.0.1" + addr
		}
		publicURL = "http://" + addr
	}
	overrides := map[string]string{
		"SYNC_TABLE_NAME":        o.table,
		"SYNC_BUCKET":            o.bucket,
		"SYNC_SCHEMA_PATH":       o.schemaPath,
		"SYNC_MOUNT":             o.mount,
		"SYNC_AUTH_MODE":         config.AuthHS256,
		"SYNC_HS256_SECRET":      string(secret),
		"SYNC_HS256_SECRET_REF":  "",
		"SYNC_DEFAULT_PARTITION": o.partition,
		"SYNC_PARTITION_CLAIM":   "",
		"SYNC_ACTOR_CLAIM":       "sub",
		"SYNC_SCOPES_MODE":       config.ScopesClaim,
		"SYNC_SCOPES_CLAIM":      "syncular_scopes",
		"SYNC_SIGNED_URLS":       o.signedURLs,
		"SYNC_PUBLIC_URL":        publicURL,
		"SYNC_SIGNING_KEY":       "",
		"SYNC_SIGNING_KEY_REF":   "",
		"SYNC_LOG_LEVEL":         o.logLevel,
	}
	if o.signedURLs == config.SignedNative {
		overrides["SYNC_SIGNING_KEY"] = hex.EncodeToString(signing)
	}
	cfg, err := config.Load(func(k string) string {
		if v, ok := overrides[k]; ok {
			return v
		}
		return os.Getenv(k) // limits and endpoints may come from the environment
	})
	if err != nil {
		return nil, err
	}
	if o.dynamoEndpoint != "" {
		cfg.DynamoDBEndpoint = o.dynamoEndpoint
	}
	if o.s3Endpoint != "" {
		cfg.S3Endpoint, cfg.S3PathStyle = o.s3Endpoint, true
	}
	deps := app.Deps{Schema: sch, Logger: logger}
	backend := "in-memory store and segments"
	var stream *tableStream
	if o.dynamoEndpoint != "" || o.s3Endpoint != "" {
		if deps, stream, err = awsDeps(ctx, cfg, o, sch, logger); err != nil {
			return nil, err
		}
		backend = "DynamoDB " + cfg.DynamoDBEndpoint + " table " + cfg.TableName + ", S3 " + cfg.S3Endpoint + " bucket " + cfg.Bucket
	} else {
		if cfg.SignedURLs == config.SignedPresign {
			return nil, errors.New("-signed-urls presign needs -s3-endpoint")
		}
		deps.Store, deps.Segments = memstore.New(memstore.WithOutcomeTTL(cfg.OutcomeTTL)), memstore.NewSegments()
	}
	var memBlobs *memblobs.Store
	if deps.Blobs == nil {
		// §5.9 over memory: native presigned URLs served on the blob
		// route itself (setPublicURL points them at this runner).
		memBlobs = memblobs.New(memblobs.Options{Key: derive(secret, "blob-urls")})
		deps.Blobs, deps.BlobPresigner, deps.BlobURLs = memBlobs, memBlobs, memBlobs
	}
	rn := &runner{cfg: cfg, schema: sch, handlers: map[string]*lambdahttp.Handler{}, key: secret, logger: logger, backend: backend, corsOrigins: o.corsOrigins, memBlobs: memBlobs, jsonEvents: o.jsonEvents}
	// §8: without a table stream, every function's engine hints its
	// commits to the realtime hub in-process (the hub reads them from the
	// log), so connected sockets get deltas without polling. With one,
	// the stream's hints drive the hub as they drive the deployed tier.
	if stream == nil {
		deps.OnCommit = func(p string, c *store.Commit) { rn.hub.Hint(p, c.Seq) }
	}
	deps.Hooks = o.ext.Hooks
	if o.ext.Hooks.Reactions != nil {
		if deps.OnCommit, err = rn.startReactions(ctx, deps, o.ext.ReactionHandlers, deps.OnCommit); err != nil {
			return nil, err
		}
	}
	rtDeps := deps
	rtDeps.Logger = logger.With("function", "realtime")
	rtEngine, err := app.NewEngine(cfg, rtDeps)
	if err != nil {
		return nil, fmt.Errorf("realtime: %w", err)
	}
	rn.hub = realtime.NewHub(rtEngine, realtime.Options{Logger: rtDeps.Logger})
	if stream != nil {
		if err := rn.followStream(ctx, stream); err != nil {
			return nil, fmt.Errorf("realtime: table stream: %w", err)
		}
		rn.backend += ", realtime fanout from the table stream"
	}
	if rn.authn, err = app.Authenticator(cfg); err != nil {
		return nil, err
	}
	rtOpts := wsrealtime.Options{OriginPatterns: o.corsOrigins}
	for _, origin := range o.corsOrigins {
		if origin == "*" {
			rtOpts.InsecureSkipVerify = true
		}
	}
	rn.rt = &wsrealtime.Handler{Hub: rn.hub, Auth: rn.authn, Options: rtOpts, Logger: logger, WriteError: writeErr}
	for _, fn := range app.Functions {
		d := deps
		d.Logger = logger.With("function", fn.Name)
		h, err := app.Build(cfg, fn, d)
		if err != nil {
			return nil, fmt.Errorf("%s function: %w", fn.Name, err)
		}
		rn.handlers[fn.Name] = h
	}
	return rn, nil
}

// setPublicURL points native signed URLs at base (scheme://host[/base]).
// Call it before serving.
func (rn *runner) setPublicURL(base string) {
	rn.cfg.PublicURL = strings.TrimRight(base, "/")
	if rn.memBlobs != nil {
		rn.memBlobs.SetBaseURL(rn.cfg.PublicURL + rn.cfg.Mount + "/blobs")
	}
	for _, h := range rn.handlers {
		h.PublicURL = rn.cfg.PublicURL
	}
}

func derive(secret []byte, purpose string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(purpose))
	return m.Sum(nil)
}

// ServeHTTP routes like API Gateway (unknown route → 404), then invokes the
// function's handler with the request the API Gateway v2 event converts
// to (InvokeHTTP), or with -json-events with the event's JSON document
// exactly as the Lambda runtime hands it over (Invoke).
func (rn *runner) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// CORS like the deployed HTTP API's CorsConfiguration (template.yaml),
	// so a browser client on another local origin can sync.
	if origin := r.Header.Get("Origin"); origin != "" && rn.corsAllows(origin) {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
		h.Set("Access-Control-Expose-Headers", "etag, content-encoding")
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, OPTIONS")
			h.Set("Access-Control-Allow-Headers", "authorization, content-type, content-encoding, x-syncular-scopes, if-none-match")
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	if r.Method == http.MethodGet && r.URL.Path == rn.cfg.Mount+"/realtime" {
		// §8.1: GET <mount>/realtime?clientId=… over a real WebSocket,
		// authenticated like /sync (Bearer header, or the token /
		// access_token query parameter browsers must use).
		rn.rt.ServeHTTP(w, r)
		return
	}
	reqID := newRequestID()
	body, err := readBody(r)
	if err != nil {
		writeErr(w, syncerr.New(syncerr.InvalidRequest, "read body: %v", err))
		return
	}
	fn, ok := app.Match(rn.cfg.Mount, r.Method, r.URL.EscapedPath())
	if !ok {
		writeErr(w, syncerr.New(syncerr.NotFound, "no route for %s %s", r.Method, r.URL.EscapedPath()).WithStatus(http.StatusNotFound))
		return
	}
	if len(body) > maxRequestBytes {
		// Lambda could not carry it, and API Gateway would answer 413
		// without running a function. Here the route's handler answers
		// the §10 error, logs the clientId and counts it (httpapi).
		_ = lambdahttp.WriteResponse(w, rn.handlers[fn.Name].RefuseHTTP(r.Context(), r, body, r.ContentLength, reqID))
		return
	}
	if !rn.jsonEvents {
		// The request the event would convert to, straight from net/http
		// (lambdahttp holds the two conversions equal), through the same
		// handler; the event and response documents are skipped.
		_ = lambdahttp.WriteResponse(w, rn.handlers[fn.Name].InvokeHTTP(r.Context(), r, body, reqID))
		return
	}
	ev := lambdahttp.EventFromHTTP(r, body, r.Method+" "+r.URL.Path, reqID)
	payload, err := json.Marshal(ev)
	if err != nil {
		writeErr(w, syncerr.Internal(err))
		return
	}
	out, err := rn.handlers[fn.Name].Invoke(r.Context(), payload)
	if err != nil {
		http.Error(w, "function error: "+err.Error(), http.StatusBadGateway)
		return
	}
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		http.Error(w, "bad function response", http.StatusBadGateway)
		return
	}
	_ = lambdahttp.WriteV2Response(w, &resp)
}

// readBody reads at most maxRequestBytes+1 bytes of the body: a declared
// length within the limit into a buffer of exactly that size (net/http
// ends such a body at its length), anything else through a growing one.
func readBody(r *http.Request) ([]byte, error) {
	if n := r.ContentLength; n > 0 && n <= maxRequestBytes {
		b := make([]byte, n)
		if _, err := io.ReadFull(r.Body, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	var b bytes.Buffer
	_, err := b.ReadFrom(io.LimitReader(r.Body, maxRequestBytes+1))
	return b.Bytes(), err
}

func writeErr(w http.ResponseWriter, err error) {
	resp := httpapi.ErrorResponse(err)
	for k, vs := range resp.Header {
		if k != "X-Syncular-Error" {
			w.Header()[k] = vs
		}
	}
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// devScopes is the dev token's scopes claim: the -scopes JSON, or every
// scope variable of the schema allowed "*".
func devScopes(sch *schema.Schema, flag string) (map[string]any, error) {
	if flag != "" {
		var m map[string]any
		if err := json.Unmarshal([]byte(flag), &m); err != nil {
			return nil, fmt.Errorf("-scopes: %w", err)
		}
		return m, nil
	}
	m := map[string]any{}
	for _, v := range sch.Versions[sch.Latest].Variables() {
		m[v] = []any{"*"}
	}
	return m, nil
}

// devToken mints the printed token, valid 24 h.
func (rn *runner) devToken(actor string, scopes map[string]any) (string, error) {
	return auth.MintHS256(rn.key, auth.Claims{"sub": actor, "syncular_scopes": scopes}, 24*time.Hour, time.Now())
}

// pullBody is a minimal pull request: wire version 1 (no log epoch to
// acquire first), one subscription bootstrapping the first scoped table
// for a value the dev token allows.
func pullBody(sch *schema.Schema, scopes map[string]any) ([]byte, error) {
	v := sch.Versions[sch.Latest]
	for _, t := range v.Tables {
		vars := t.ScopeVariables()
		if len(vars) == 0 {
			continue
		}
		req := wire.ScopeMap{}
		for _, name := range vars {
			req = append(req, wire.ScopeEntry{Key: name, Values: []string{sampleValue(scopes[name])}})
		}
		return wire.Encode(&wire.Message{WireVersion: wire.Version1, Kind: wire.KindRequest, Frames: []wire.Frame{
			&wire.ReqHeader{ClientID: "curl-demo", SchemaVersion: sch.Latest},
			&wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows},
			&wire.Subscription{ID: "demo-" + t.Name, Table: t.Name, Scopes: req, Cursor: -1},
		}})
	}
	return nil, errors.New("the schema has no scoped table to subscribe to")
}

func sampleValue(allowed any) string {
	if l, ok := allowed.([]any); ok {
		for _, v := range l {
			if s, ok := v.(string); ok && s != "*" {
				return s
			}
		}
	}
	return "demo"
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
