package app

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/lambdahttp"
	"github.com/skyfold/syncular-lambda/internal/wiring"
)

// FromEnv builds fn's handler from the process environment.
func FromEnv(ctx context.Context, fn Function, logger *slog.Logger) (*lambdahttp.Handler, error) {
	return FromEnvWith(ctx, fn, logger, wiring.Hooks{})
}

// FromEnvWith is FromEnv with an app's hooks.
func FromEnvWith(ctx context.Context, fn Function, logger *slog.Logger, hooks wiring.Hooks) (*lambdahttp.Handler, error) {
	cfg, err := config.FromEnv()
	if err != nil {
		return nil, err
	}
	sch, err := wiring.LoadSchema(cfg)
	if err != nil {
		return nil, err
	}
	clients, err := NewAWSClients(ctx, cfg)
	if err != nil {
		return nil, err
	}
	deps, err := wiring.AWSDeps(ctx, cfg, logger, sch, clients)
	if err != nil {
		return nil, err
	}
	deps.Hooks = hooks
	if fwd := lambdaForwarder(ctx, cfg, fn, deps, clients.Config, logger); fwd != nil {
		deps.Forward = fwd
	}
	return Build(cfg, fn, deps)
}

// Main is the whole main of a Lambda function: build once at init, fail
// fast with one log line on bad configuration (Lambda reports the init
// error and retries on the next invoke), then serve.
func Main(fn Function) { MainWith(fn, wiring.Hooks{}) }

// MainWith is Main with an app's hooks (the public package's entry).
func MainWith(fn Function, hooks wiring.Hooks) {
	start := time.Now()
	limit, gcPercent, tuned := tuneGC(os.Getenv)
	level := slog.LevelInfo
	_ = level.UnmarshalText([]byte(os.Getenv("SYNC_LOG_LEVEL"))) // config validates it properly
	logger := NewLogger(os.Stdout, level, fn)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	h, err := FromEnvWith(ctx, fn, logger, hooks)
	cancel()
	if err != nil {
		logger.Error("init failed", "error", err.Error())
		os.Exit(1)
	}
	logger.Debug("init done", "initMs", float64(time.Since(start).Microseconds())/1000, "gcTuned", tuned, "memoryLimit", limit, "gcPercent", gcPercent)
	lambda.Start(h)
}
