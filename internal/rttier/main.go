// Package rttier is the realtime tier (docs/REALTIME.md; the main is
// cmd/syncular-realtime, or an app's own through the public package
// syncular, so socket pushes run the app's hooks too): the
// §8 WebSocket endpoint stock clients sync over, run as a long-lived
// service (ECS Fargate behind a Network Load Balancer) over the
// deployment's DynamoDB table and S3 bucket, with the same engine and
// hub as every other host. It reads the functions' SYNC_* configuration
// (docs/CONFIG.md) plus the tier's own: SYNC_REALTIME_ADDR serves
// <mount>/realtime and GET /healthz (over TLS with SYNC_TLS_CERT_REF),
// SYNC_HINT_ADDR serves the hints of the fanout function and the
// presence of peer instances.
//
// It never links the Lambda runtime (internal/wiring, not internal/app).
package rttier

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/metrics"
	"github.com/skyfold/syncular-lambda/internal/wiring"
)

// Main is the whole main of a tier with an app's hooks.
func Main(hooks wiring.Hooks) {
	level := slog.LevelInfo
	_ = level.UnmarshalText([]byte(os.Getenv("SYNC_LOG_LEVEL")))
	logger := slog.New(metrics.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: level})).With("function", "realtime")
	if err := run(logger, hooks); err != nil {
		logger.Error("realtime tier failed", "error", err.Error())
		os.Exit(1)
	}
}

func run(logger *slog.Logger, hooks wiring.Hooks) error {
	cfg, err := config.FromEnv()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	initCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	clients, err := wiring.NewAWSClients(initCtx, cfg)
	if err != nil {
		return err
	}
	// The certificate first: without it the task must not start (its
	// health check then fails and the deployment rolls back).
	rtLn, err := ListenRealtime(ctx, initCtx, cfg, clients.Config, logger)
	if err != nil {
		return err
	}
	advertise, err := Advertise(initCtx, cfg, os.Getenv, &http.Client{Timeout: 2 * time.Second})
	if err != nil {
		return err
	}
	t, err := NewWith(initCtx, cfg, clients, logger, advertise, hooks)
	if err != nil {
		return err
	}
	hintLn, err := net.Listen("tcp", cfg.HintAddr)
	if err != nil {
		return err
	}
	return Serve(ctx, t, rtLn, hintLn, cfg.RealtimeDrainDelay)
}

// Serve runs t on its two listeners until ctx ends (SIGTERM), then
// drains and returns nil.
func Serve(ctx context.Context, t *Tier, rtLn, hintLn net.Listener, drain time.Duration) error {
	// The server's own errors (failed TLS handshakes of port scanners,
	// malformed requests) go to the JSON log at debug level.
	rtSrv := &http.Server{Handler: t.RealtimeHandler, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(t.log.Handler(), slog.LevelDebug)}
	hintSrv := &http.Server{Handler: t.HintHandler, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second}
	errs := make(chan error, 2)
	go func() { errs <- rtSrv.Serve(rtLn) }()
	go func() { errs <- hintSrv.Serve(hintLn) }()
	hubCtx, stopHub := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHub()
	go t.hub.Run(hubCtx)
	runCtx, stopRun := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { t.Run(runCtx); close(done) }()
	t.log.Info("realtime tier serving", "instance", t.ID(), "realtime", rtLn.Addr().String(), "hints", hintLn.Addr().String(), "advertise", t.advertise)
	var err error
	select {
	case <-ctx.Done():
	case err = <-errs:
	}
	stopRun()
	<-done
	t.Drain(context.Background(), drain)
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = hintSrv.Shutdown(sctx)
	_ = rtSrv.Shutdown(sctx)
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	t.log.Info("realtime tier stopped", "instance", t.ID())
	return nil
}
