package httpapi_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/httpapi"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/metrics"
)

// BenchmarkServeSync measures one /sync request through Serve (engine
// included; no log line but in the logged variant): a bootstrap pull of an empty project (a few
// hundred bytes, below MinCompressBytes) and of 20 rows (above it), as a
// zstd-accepting client sends them.
func BenchmarkServeSync(b *testing.B) {
	for _, rows := range []int{0, 20} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			f := newFixture(b, engine.Limits{})
			serveSync(b, f, rows)
		})
	}
	// The same empty pull with the functions' request line: JSON handler
	// and EMF directive.
	b.Run("rows=0/logged", func(b *testing.B) {
		f := newFixture(b, engine.Limits{})
		f.api.Logger = slog.New(slog.NewJSONHandler(io.Discard, nil)).With("function", "sync")
		f.api.Line = (&metrics.EMF{Namespace: metrics.DefaultNamespace, Fixed: map[string]string{metrics.DimFunction: "sync"}}).RequestLine
		serveSync(b, f, 0)
	})
}

func serveSync(b *testing.B, f *fixture, rows int) {
	for i := 0; i < rows; i++ {
		id := fmt.Sprintf("t%02d", i)
		f.client.Push("c"+id, enginetest.Upsert("tasks", id, f.client.Task(id, "p1", strings.Repeat("a task title ", 8), false), 0))
	}
	body := f.pullBody(b, wire.AcceptInlineRows|wire.AcceptExternalRows)
	hdr := map[string]string{"Content-Type": httpapi.ContentType, "Accept-Encoding": "zstd, gzip"}
	r := f.do("POST", "/api/sync", hdr, body)
	b.ReportMetric(float64(len(r.Body)), "respB")
	b.ReportAllocs()
	for b.Loop() {
		if r := f.do("POST", "/api/sync", hdr, body); r.Status != 200 {
			b.Fatal(r.Status)
		}
	}
}

// BenchmarkEncodeBody is the response coding alone, for a body below and
// above MinCompressBytes.
func BenchmarkEncodeBody(b *testing.B) {
	for _, n := range []int{400, 8 << 10} {
		for _, enc := range []string{"zstd", "gzip"} {
			b.Run(fmt.Sprintf("%s/%dB", enc, n), func(b *testing.B) {
				plain := bytes.Repeat([]byte("row payload 0123456789 "), n/23+1)[:n]
				b.ReportAllocs()
				for b.Loop() {
					httpapi.EncodeBodyForTest(plain, enc)
				}
			})
		}
	}
}

// The request line is built only when the logger takes info lines: with
// the level above info (the runner's -log-level warn or error) neither
// the line nor its metrics directive is made.
func TestRequestLineOnlyWhenEnabled(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelWarn} {
		f := newFixture(t, engine.Limits{})
		var out bytes.Buffer
		f.api.Logger = slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: level}))
		lines := 0
		f.api.Line = func(attrs []slog.Attr) []slog.Attr { lines++; return attrs }
		body := f.pullBody(t, wire.AcceptInlineRows|wire.AcceptExternalRows)
		if r := f.do("POST", "/api/sync", map[string]string{"Content-Type": httpapi.ContentType}, body); r.Status != 200 {
			t.Fatalf("level %v: status %d", level, r.Status)
		}
		want := 0
		if level == slog.LevelInfo {
			want = 1
		}
		if lines != want || strings.Count(out.String(), `"msg":"request"`) != want {
			t.Fatalf("level %v: Line called %d times, %d request lines logged; want %d", level, lines, strings.Count(out.String(), `"msg":"request"`), want)
		}
	}
}
