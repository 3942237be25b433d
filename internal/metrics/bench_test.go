package metrics

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
)

// requestAttrs are the attributes httpapi logs for a push+pull round.
func requestAttrs() []slog.Attr {
	return []slog.Attr{
		slog.String("requestId", "0123456789abcdef"), slog.String("method", "POST"), slog.String("path", "/sync"),
		slog.String("route", "sync"), slog.Int("status", 200), slog.String("partition", "default"), slog.String("actor", "load"),
		slog.Float64("durationMs", 0.412), slog.String("clientId", "load-17"), slog.Int("wireVersion", 2),
		slog.Int("pushCommits", 1), slog.Int("applied", 1), slog.Int("cached", 0), slog.Int("rejected", 0), slog.Int("deferred", 0),
		slog.Int("subscriptions", 1), slog.Int("commitsSent", 1), slog.Int("segmentsSent", 0), slog.Int64("bytesOut", 412),
		slog.Int("commitRacesLost", 0), slog.Int("segmentsBuilt", 0), slog.Int("segmentsReused", 0), slog.Int("rowsScanned", 0),
		slog.Int("rowsDelivered", 0), slog.String("outcome", "ok"),
	}
}

// BenchmarkRequestLine is one request line as the Lambda functions write
// it: the EMF directive added, then the JSON handler.
func BenchmarkRequestLine(b *testing.B) {
	e := &EMF{Namespace: DefaultNamespace, Fixed: map[string]string{DimFunction: "push"}}
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil)).With("function", "push")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		logger.LogAttrs(ctx, slog.LevelInfo, "request", e.RequestLine(requestAttrs())...)
	}
}

// In a text log (the local runner) the directive is the declared metric
// names, a bare token the handler does not quote.
func TestRequestLineText(t *testing.T) {
	var buf bytes.Buffer
	e := &EMF{Namespace: "N", Fixed: map[string]string{DimFunction: "pull"}}
	slog.New(slog.NewTextHandler(&buf, nil)).LogAttrs(context.Background(), slog.LevelInfo, "request", e.RequestLine(requestAttrs())...)
	line := buf.String()
	if !strings.Contains(line, " _aws=requests,durationMs,") || strings.Contains(line, "CloudWatchMetrics") {
		t.Fatalf("text line: %s", line)
	}
}
