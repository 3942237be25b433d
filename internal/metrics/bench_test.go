package metrics

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
)

// requestAttrs are the attributes httpapi logs at info for a push+pull
// round.
func requestAttrs() []slog.Attr {
	return []slog.Attr{
		slog.Int("status", 200), slog.String("partition", "default"), slog.String("actor", "load"),
		slog.Float64("ms", 0.412), slog.Int("applied", 1), slog.Int("sent", 1),
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
	if !strings.Contains(line, " _aws=ms,applied,sent") || strings.Contains(line, "CloudWatchMetrics") {
		t.Fatalf("text line: %s", line)
	}
}
