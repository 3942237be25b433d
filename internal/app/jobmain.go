package app

import (
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
)

// runJob is the whole main of a function without HTTP routes: a JSON
// logger at SYNC_LOG_LEVEL, then initHandler builds the Lambda handler.
// A failed init writes one "init failed" line and exits 1, which the
// Lambda runtime reports as Runtime.ExitError; no invocation is served.
// A debug "init done" line carries the init time, as Main's does.
func runJob(fn Function, initHandler func(*slog.Logger) (any, error)) {
	start := time.Now()
	level := slog.LevelInfo
	_ = level.UnmarshalText([]byte(os.Getenv("SYNC_LOG_LEVEL")))
	logger := NewLogger(os.Stdout, level, fn)
	h, err := initHandler(logger)
	if err != nil {
		logger.Error("init failed", "error", err.Error())
		os.Exit(1)
	}
	logger.Debug("init done", "initMs", float64(time.Since(start).Microseconds())/1000)
	lambda.Start(h)
}
