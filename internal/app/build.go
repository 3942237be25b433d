package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/skyfold/syncular-lambda/internal/auth"
	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/core/blobs"
	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/httpapi"
	"github.com/skyfold/syncular-lambda/internal/core/migrate"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/lambdahttp"
	"github.com/skyfold/syncular-lambda/internal/metrics"
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
}

// Build returns the handler of fn. cfg's keys must be resolved (HS256Secret
// and SigningKey set when their modes need them).
func Build(cfg *config.Config, fn Function, d Deps) (*lambdahttp.Handler, error) {
	if d.Schema == nil || d.Store == nil || d.Segments == nil {
		return nil, errors.New("app: schema, store and segment store are required")
	}
	logger := d.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	authn, err := Authenticator(cfg)
	if err != nil {
		return nil, err
	}
	eng, err := NewEngine(cfg, d)
	if err != nil {
		return nil, err
	}
	return &lambdahttp.Handler{
		API: &httpapi.Handler{
			Engine:       eng,
			Mount:        cfg.Mount,
			Routes:       fn.Routes,
			MaxBodyBytes: cfg.MaxBodyBytes,
			Logger:       logger,
			Meter:        d.Meter,
			// The request line is also the EMF document of the request's
			// metrics (internal/metrics); "function" is on the logger.
			Line: (&metrics.EMF{
				Namespace: cfg.MetricsNamespace,
				Fixed:     map[string]string{metrics.DimFunction: fn.Name},
			}).RequestLine,
			BlobURLs: d.BlobURLs,
		},
		Auth:      authn,
		PublicURL: cfg.PublicURL,
		Logger:    logger,
	}, nil
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
	decls, err := migrate.ParseDeclarations(cfg.Checkpoints)
	if err != nil {
		return nil, fmt.Errorf("app: SYNC_CHECKPOINTS: %w", err)
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

// NewLogger returns the JSON logger of a function (stdout in Lambda, where
// CloudWatch picks every line up); metrics.NewJSONHandler writes the same
// lines as slog's JSON handler, the request line's EMF directive cheaper.
func NewLogger(w io.Writer, level slog.Level, fn Function) *slog.Logger {
	return slog.New(metrics.NewJSONHandler(w, &slog.HandlerOptions{Level: level})).With("function", fn.Name)
}
