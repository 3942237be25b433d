package app

import (
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
)

// runJob is the whole main of a function without HTTP routes: a JSON
// logger at SYNC_LOG_LEVEL, then initHandler builds the Lambda handler.
// A failed init writes one "init failed" line and exits 1, which the
// Lambda runtime reports as Runtime.ExitError; no invocation is served.
func runJob(fn Function, initHandler func(*slog.Logger) (any, error)) {
	level := slog.LevelInfo
	_ = level.UnmarshalText([]byte(os.Getenv("SYNC_LOG_LEVEL")))
	logger := NewLogger(os.Stdout, level, fn)
	h, err := initHandler(logger)
	if err != nil {
		logger.Error("init failed", "error", err.Error())
		os.Exit(1)
	}
	lambda.Start(h)
}
