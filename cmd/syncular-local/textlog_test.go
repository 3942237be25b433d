package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

type textish string

func (t textish) MarshalText() ([]byte, error) { return []byte(t), nil }

type badText struct{}

func (badText) MarshalText() ([]byte, error) { return nil, errors.New("no text") }

type nilText struct{ s string }

func (n *nilText) MarshalText() ([]byte, error) { return []byte(n.s), nil }

type valuer struct{ v slog.Value }

func (v valuer) LogValue() slog.Value { return v.v }

var sampleStrings = []string{
	"", "plain", "request", "path/to/x", "a=b", " lead", "trail ", `"q"`, `back\slash`, "\x00", "\x1f", "\x7f",
	"tab\there", "new\nline", "é", "日本語", "\u00a0", "\u2028", "\u200b", "\ufffd", "\xff", "a\xc3", "🙂", "-", "=",
	"requests,serverErrors", "00:01",
}

func randString(r *rand.Rand) string {
	s := sampleStrings[r.IntN(len(sampleStrings))]
	if r.IntN(3) == 0 {
		s += sampleStrings[r.IntN(len(sampleStrings))]
	}
	return s
}

// randValue draws any kind, or with fast only the kinds of the runner's
// own lines (strings, numbers, booleans, durations, text marshalers).
func randValue(r *rand.Rand, depth int, fast bool) slog.Value {
	k := r.IntN(14)
	if fast {
		k = []int{0, 1, 2, 3, 4, 5, 13, 13, 13}[r.IntN(9)]
	}
	switch k {
	case 0:
		return slog.Int64Value(r.Int64() - math.MaxInt64/2)
	case 1:
		return slog.Uint64Value(r.Uint64())
	case 2:
		return slog.Float64Value([]float64{0, math.Copysign(0, -1), 1.5, -2.25e-9, 1e21, math.NaN(), math.Inf(1), math.Inf(-1), 0.1}[r.IntN(9)])
	case 3:
		return slog.BoolValue(r.IntN(2) == 0)
	case 4:
		return slog.DurationValue(time.Duration(r.Int64N(int64(time.Hour))) - time.Minute)
	case 5:
		return slog.AnyValue(textish(randString(r)))
	case 6:
		return slog.AnyValue(badText{})
	case 7:
		return slog.AnyValue((*nilText)(nil))
	case 8:
		return slog.AnyValue(struct{ A int }{r.IntN(9)})
	case 9:
		return slog.TimeValue(time.UnixMilli(r.Int64N(1 << 42)).UTC())
	case 10:
		if depth > 0 {
			return slog.GroupValue(slog.String(randString(r), randString(r)), slog.Attr{Key: "n", Value: randValue(r, depth-1, fast)})
		}
		return slog.StringValue(randString(r))
	case 11:
		return slog.AnyValue(valuer{randValue(r, 0, fast)})
	case 12:
		return slog.AnyValue(nil)
	default:
		return slog.StringValue(randString(r))
	}
}

func randAttrs(r *rand.Rand, n int, fast bool) []slog.Attr {
	as := make([]slog.Attr, n)
	for i := range as {
		key := randString(r)
		if r.IntN(4) != 0 {
			key = fmt.Sprintf("k%d", r.IntN(40)) // mostly plain keys, like the request line's
		}
		as[i] = slog.Attr{Key: key, Value: randValue(r, 1, fast)}
	}
	return as
}

// The runner's handler writes what slog.TextHandler writes, byte for
// byte, for random records over every attribute kind, awkward strings
// (quoting rules), WithAttrs and WithGroup, levels and zero times —
// whichever of its paths formats the record.
func TestFastTextMatchesSlogTextHandler(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	levels := []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn + 2, slog.LevelError - 1, slog.LevelError, slog.LevelError + 4}
	fastLines := 0
	for i := range 4000 {
		fast := i%2 == 0 // half the records only of the request line's kinds
		var got, want bytes.Buffer
		var fh slog.Handler = newFastText(&got, slog.LevelDebug)
		var sh slog.Handler = slog.NewTextHandler(&want, &slog.HandlerOptions{Level: slog.LevelDebug})
		if r.IntN(2) == 0 {
			pre := randAttrs(r, r.IntN(3), fast)
			fh, sh = fh.WithAttrs(pre), sh.WithAttrs(pre)
		}
		if r.IntN(8) == 0 {
			g := randString(r)
			fh, sh = fh.WithGroup(g), sh.WithGroup(g)
			if r.IntN(2) == 0 {
				pre := randAttrs(r, 1, fast)
				fh, sh = fh.WithAttrs(pre), sh.WithAttrs(pre)
			}
		}
		tm := time.Time{}
		if r.IntN(5) != 0 {
			tm = time.UnixMilli(1_700_000_000_000 + r.Int64N(1<<36)).Add(time.Duration(r.IntN(1e6))).In(time.FixedZone("z", 3600*(r.IntN(5)-2)))
		}
		rec := slog.NewRecord(tm, levels[r.IntN(len(levels))], randString(r), 0)
		rec.AddAttrs(randAttrs(r, r.IntN(35), fast)...)
		if err := fh.Handle(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
		if err := sh.Handle(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Fatalf("record %d:\n got %q\nwant %q", i, got.String(), want.String())
		}
		if fh, ok := fh.(*fastText); ok && !fh.slow && fast {
			fastLines++
		}
	}
	if fastLines < 1000 {
		t.Fatalf("only %d records took the fast path", fastLines)
	}
}

// The request line (the runner's per-request record) takes the fast
// path: one allocation-free write, no detour through slog.TextHandler.
func BenchmarkRequestLineText(b *testing.B) {
	for _, name := range []string{"slog", "fast"} {
		b.Run(name, func(b *testing.B) {
			var h slog.Handler = slog.NewTextHandler(discard{}, &slog.HandlerOptions{Level: slog.LevelInfo})
			if name == "fast" {
				h = newFastText(discard{}, slog.LevelInfo)
			}
			l := slog.New(h).With("function", "pull")
			attrs := []slog.Attr{
				slog.String("requestId", "98bafced156cec1c"), slog.String("method", "POST"), slog.String("path", "/sync"),
				slog.String("route", "sync"), slog.Int("status", 200), slog.String("partition", "default"),
				slog.String("actor", "dev-user"), slog.Float64("durationMs", 0.159), slog.String("clientId", "c-1"),
				slog.Int("wireVersion", 2), slog.Int("pushCommits", 0), slog.Int("applied", 0), slog.Int("subscriptions", 1),
				slog.Int("commitsSent", 0), slog.Int("bytesOut", 193), slog.String("outcome", "ok"), slog.Int("requests", 1),
				slog.Any("_aws", textish("requests,serverErrors,rateLimited,softTimeouts,durationMs")),
			}
			b.ReportAllocs()
			for b.Loop() {
				l.LogAttrs(context.Background(), slog.LevelInfo, "request", attrs...)
			}
		})
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
