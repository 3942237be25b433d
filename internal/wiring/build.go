package wiring

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/skyfold/syncular-lambda/internal/auth"
	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/core/blobs"
	"github.com/skyfold/syncular-lambda/internal/core/crdt"
	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/httpapi"
	"github.com/skyfold/syncular-lambda/internal/core/migrate"
	"github.com/skyfold/syncular-lambda/internal/core/reactions"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/validate"
)

// Deps are what a handler serves over, built by NewAWS for Lambda or by
// the local runner from in-memory stores.
type Deps struct {
	Schema    *schema.Schema
	Store     store.Store
	Segments  store.SegmentStore
	Presigner store.Presigner // required when SYNC_SIGNED_URLS=presign
	// Blobs stores §5.9 blob bytes (shared by every function: the push
	// function checks existence, the blob function serves the routes);
	// BlobPresigner mints upload grants and download URLs; BlobURLs
	// serves native blob URLs on the blob route (in-memory runs).
	Blobs         blobs.Store
	BlobPresigner blobs.Presigner
	BlobURLs      httpapi.BlobURLHost
	// Grants is the DynamoDB client of the table scope resolver, with the
	// table's key attribute names.
	Grants         auth.GetItemAPI
	PKAttr, SKAttr string
	Logger         *slog.Logger
	// Clock overrides the engine clock (tests).
	Clock func() int64
	// Meter adds per-request storage cost to the log line (DynamoMeter).
	Meter func(ctx context.Context) (context.Context, func() []slog.Attr)
	// OnCommit receives every commit the engine appends (the local
	// runner's in-process realtime fanout, §8.2).
	OnCommit func(partition string, c *store.Commit)
	// Hooks are the app's own code (the public package syncular).
	Hooks Hooks
	// Forward answers requests the serve gate refused through a newer
	// build (internal/app's Forwarder); nil refuses them.
	Forward httpapi.Forwarder
}

// Hooks are what an app adds to the engine through the public API: each
// is optional.
type Hooks struct {
	// Resolver replaces the SYNC_SCOPES_MODE resolver.
	Resolver engine.ScopeResolver
	// Reactions plans §6.9 durable reactions.
	Reactions reactions.Planner
	// Validators are the app's Go validators (§6.7, §6.8); declarative
	// rules (LoadValidators) cannot be deployed beside them.
	Validators *validate.Hooks
	// Mergers are the app's CRDT mergers by crdtType (§5.10.2), beside
	// the built-in yjs-doc (which an app may not replace).
	Mergers crdt.Registry
}

// mergers is the built-in registry plus the app's own.
func mergers(app crdt.Registry) crdt.Registry {
	r := crdt.Default()
	for name, m := range app {
		if _, builtin := r[name]; !builtin {
			r[name] = m
		}
	}
	return r
}

// NewEngine builds the engine every function serves over: the configured
// scope resolver, limits and signed-URL mode.
func NewEngine(cfg *config.Config, d Deps) (*engine.Engine, error) {
	if d.Schema == nil || d.Store == nil || d.Segments == nil {
		return nil, errors.New("app: schema, store and segment store are required")
	}
	logger := d.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var resolver engine.ScopeResolver
	switch cfg.ScopesMode {
	case config.ScopesClaim:
		resolver = &auth.ClaimResolver{Claim: cfg.ScopesClaim}
	case config.ScopesTable:
		if d.Grants == nil {
			return nil, errors.New("app: SYNC_SCOPES_MODE=table needs a DynamoDB table")
		}
		resolver = &auth.TableResolver{Client: d.Grants, Table: cfg.TableName, PKAttr: d.PKAttr, SKAttr: d.SKAttr}
	default:
		return nil, fmt.Errorf("app: unknown scopes mode %q", cfg.ScopesMode)
	}
	if d.Hooks.Resolver != nil {
		resolver = d.Hooks.Resolver
	}
	hooks, err := LoadValidators(cfg, d.Schema)
	if err != nil {
		return nil, err
	}
	if d.Hooks.Validators != nil {
		if hooks != nil {
			return nil, errors.New("app: the app's Go validators and declarative validator rules are both present; keep one")
		}
		hooks = d.Hooks.Validators
	}
	// The build declares (and serves while they backfill) the schema's
	// backfills and SYNC_CHECKPOINTS: the names the hook declares.
	decls, err := migrate.Declarations(d.Schema, cfg.Checkpoints, nil)
	if err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	ec := engine.Config{
		Checkpoints: migrate.Names(decls),
		Schema:      d.Schema,
		Store:       d.Store,
		Segments:    d.Segments,
		Resolver:    resolver,
		Presigner:   d.Presigner,
		Limits: engine.Limits{
			MaxOperations:         cfg.MaxOperations,
			ResponseBudgetBytes:   cfg.ResponseBudgetBytes,
			InlineSegmentMaxBytes: cfg.InlineSegmentMaxBytes,
			SegmentMaxBytes:       cfg.SegmentMaxBytes,
			SegmentTTL:            cfg.SegmentTTL,
			SignedURLTTL:          cfg.SignedURLTTL,
			MaxBlobBytes:          cfg.BlobMaxBytes,
		},
		Blobs:         d.Blobs,
		BlobPresigner: d.BlobPresigner,
		Clock:         d.Clock,
		Logger:        logger,
		OnCommit:      d.OnCommit,
		Validators:    hooks,
		Reactions:     d.Hooks.Reactions,
		NoReactions:   !cfg.Reactions,
		CRDTMergers:   mergers(d.Hooks.Mergers),
	}
	if cfg.AuthLeases {
		// §7.3: leases live beside the commit log, in the same store.
		ls, ok := d.Store.(store.LeaseStore)
		if !ok {
			return nil, fmt.Errorf("app: SYNC_AUTH_LEASES=on needs a store that keeps leases; %T does not", d.Store)
		}
		ec.Leases, ec.LeaseTTL = ls, cfg.AuthLeaseTTL
	}
	switch cfg.SignedURLs {
	case config.SignedNative:
		ec.SignedURLs, ec.SigningKey = engine.SignedURLsNative, cfg.SigningKey
	case config.SignedPresign:
		if d.Presigner == nil {
			return nil, errors.New("app: SYNC_SIGNED_URLS=presign needs the S3 presigner")
		}
		ec.SignedURLs = engine.SignedURLsPresign
	default:
		ec.SignedURLs = engine.SignedURLsOff
	}
	eng, err := engine.New(ec)
	if err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	return eng, nil
}

// LoadValidators reads and compiles the declarative validators
// (validate.RuleFile) against the schema's served tables: the document at
// SYNC_VALIDATORS_PATH, else validators.json beside the binary when
// present, else the "validators" and "commitValidators" members of the
// schema file itself. nil when there are none. A named document that
// cannot be read, rules that do not compile, or rules in both a document
// and the schema file are errors.
func LoadValidators(cfg *config.Config, sch *schema.Schema) (*validate.Hooks, error) {
	path, required := cfg.ValidatorsFile()
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !required {
		data, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("app: read validators %s (SYNC_VALIDATORS_PATH): %w", path, err)
	}
	inSchema, err := schemaRules(cfg.SchemaFile())
	if err != nil {
		return nil, err
	}
	switch {
	case data != nil && inSchema != nil:
		return nil, fmt.Errorf("app: validators are declared both in %s and in the schema file %s; keep one", path, cfg.SchemaFile())
	case data == nil && inSchema == nil:
		return nil, nil
	case data == nil:
		data, path = inSchema, cfg.SchemaFile()
	}
	h, err := validate.ParseRules(data, engine.TableColumns(sch))
	if err != nil {
		return nil, fmt.Errorf("app: %s (SYNC_VALIDATORS_PATH): %w", path, err)
	}
	return h, nil
}

// schemaRules returns the validate.RuleFile members of the schema
// document at path as a document of their own, nil when it has none (or
// there is no file there).
func schemaRules(path string) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // the host handed the schema over another way
	}
	if err != nil {
		return nil, fmt.Errorf("app: read schema %s: %w", path, err)
	}
	var doc struct {
		Validators       json.RawMessage `json:"validators"`
		CommitValidators json.RawMessage `json:"commitValidators"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("app: schema %s: %w", path, err)
	}
	if doc.Validators == nil && doc.CommitValidators == nil {
		return nil, nil
	}
	return json.Marshal(doc)
}

// Authenticator builds the configured authenticator.
func Authenticator(cfg *config.Config) (auth.Authenticator, error) {
	m := auth.Mapping{ActorClaim: cfg.ActorClaim, PartitionClaim: cfg.PartitionClaim, DefaultPartition: cfg.DefaultPartition}
	switch cfg.AuthMode {
	case config.AuthJWTAuthorizer:
		return &auth.AuthorizerClaims{Mapping: m}, nil
	case config.AuthHS256:
		if len(cfg.HS256Secret) < config.MinKeyBytes {
			return nil, fmt.Errorf("app: hs256 auth needs a key of at least %d bytes", config.MinKeyBytes)
		}
		return &auth.HS256{Key: cfg.HS256Secret, Mapping: m, Issuer: cfg.JWTIssuer, Audience: cfg.JWTAudience, Leeway: 30 * time.Second}, nil
	}
	return nil, fmt.Errorf("app: unknown auth mode %q", cfg.AuthMode)
}

// RealtimeAuthenticator authenticates a realtime socket's upgrade. No API
// Gateway authorizer stands in front of the realtime tier, so in
// jwt-authorizer mode the tier verifies the token itself with the HTTP API authorizer's rules
// (auth.OIDC: SYNC_JWT_ISSUER, SYNC_JWT_AUDIENCE as a comma list, keys by
// OIDC discovery). Claims of a Lambda authorizer an operator attached to
// the route still take precedence. Without an issuer and audience it
// accepts only such authorizer claims (fail closed).
func RealtimeAuthenticator(cfg *config.Config) (auth.Authenticator, error) {
	a, err := Authenticator(cfg)
	if err != nil || cfg.AuthMode != config.AuthJWTAuthorizer {
		return a, err
	}
	var auds []string
	for _, s := range strings.Split(cfg.JWTAudience, ",") {
		if s = strings.TrimSpace(s); s != "" {
			auds = append(auds, s)
		}
	}
	if cfg.JWTIssuer == "" || len(auds) == 0 {
		return a, nil
	}
	m := auth.Mapping{ActorClaim: cfg.ActorClaim, PartitionClaim: cfg.PartitionClaim, DefaultPartition: cfg.DefaultPartition}
	return &auth.FirstOf{
		Authorizer: &auth.AuthorizerClaims{Mapping: m},
		Token:      &auth.OIDC{Issuer: cfg.JWTIssuer, Audiences: auds, Mapping: m, Leeway: 30 * time.Second},
	}, nil
}
