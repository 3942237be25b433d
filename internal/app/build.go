package app

import (
	"errors"
	"io"
	"log/slog"

	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/core/httpapi"
	"github.com/skyfold/syncular-lambda/internal/lambdahttp"
	"github.com/skyfold/syncular-lambda/internal/metrics"
)

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
			Forward:  d.Forward,
		},
		Auth:      authn,
		PublicURL: cfg.PublicURL,
		Logger:    logger,
	}, nil
}

// NewLogger returns the JSON logger of a function (stdout in Lambda, where
// CloudWatch picks every line up); metrics.NewJSONHandler writes the same
// lines as slog's JSON handler, the request line's EMF directive cheaper.
func NewLogger(w io.Writer, level slog.Level, fn Function) *slog.Logger {
	return slog.New(metrics.NewJSONHandler(w, &slog.HandlerOptions{Level: level})).With("function", fn.Name)
}
