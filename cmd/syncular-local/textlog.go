package main

import (
	"context"
	"encoding"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// fastText is the runner's log handler: slog.TextHandler's output, byte
// for byte, at a fraction of its cost on the lines the runner writes — a
// request line of some thirty attributes per request, which under load was
// about a fifth of a quiet pull's CPU. It formats the attribute kinds of
// those lines itself (strings, numbers, booleans, durations and text
// marshalers such as the EMF directive) and hands any other record —
// groups, times, other values — to a slog.TextHandler writing to the same
// writer under the same lock, so the output never depends on which path
// wrote a line. It takes no ReplaceAttr and no AddSource (the runner
// uses neither).
type fastText struct {
	inner slog.Handler // same writer and level: the general path
	w     io.Writer
	mu    *sync.Mutex
	level slog.Leveler
	// pre is the text of the WithAttrs attributes (each " key=value"),
	// valid while slow is false; slow sends every record to inner.
	pre  []byte
	slow bool
}

func newFastText(w io.Writer, level slog.Leveler) *fastText {
	mu := &sync.Mutex{}
	return &fastText{inner: slog.NewTextHandler(sharedWriter{w, mu}, &slog.HandlerOptions{Level: level}), w: w, mu: mu, level: level}
}

// sharedWriter serializes the general path's writes with the fast path's.
type sharedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l sharedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (h *fastText) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.level.Level()
}

func (h *fastText) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.inner = h.inner.WithAttrs(as)
	c.pre = h.pre[:len(h.pre):len(h.pre)]
	for _, a := range as {
		var ok bool
		if c.pre, ok = appendAttr(c.pre, a); !ok {
			c.slow = true
		}
	}
	return &c
}

// WithGroup leaves every record to slog.TextHandler (even for an empty
// name, which it writes as a group of its own).
func (h *fastText) WithGroup(name string) slog.Handler {
	c := *h
	c.inner = h.inner.WithGroup(name)
	c.slow = true
	return &c
}

var textBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

func (h *fastText) Handle(ctx context.Context, r slog.Record) error {
	if h.slow {
		return h.inner.Handle(ctx, r)
	}
	bp := textBufs.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= 16<<10 {
			textBufs.Put(bp)
		}
	}()
	b := (*bp)[:0]
	if !r.Time.IsZero() {
		b = append(b, "time="...)
		b = appendRFC3339Millis(b, r.Time.Round(0))
		b = append(b, ' ')
	}
	b = append(b, "level="...)
	b = appendTextString(b, r.Level.String())
	b = append(b, " msg="...)
	b = appendTextString(b, r.Message)
	b = append(b, h.pre...)
	ok := true
	r.Attrs(func(a slog.Attr) bool {
		b, ok = appendAttr(b, a)
		return ok
	})
	if !ok {
		*bp = b
		return h.inner.Handle(ctx, r)
	}
	b = append(b, '\n')
	*bp = b
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := h.w.Write(b)
	return err
}

// appendAttr appends " key=value" as slog.TextHandler writes it, or
// reports false for an attribute the fast path does not format.
func appendAttr(b []byte, a slog.Attr) ([]byte, bool) {
	v := a.Value.Resolve()
	if a.Key == "" {
		// Elided when empty, else written with a quoted empty key:
		// rare, left to the general path.
		return b, false
	}
	b = append(b, ' ')
	b = appendTextString(b, a.Key)
	b = append(b, '=')
	switch v.Kind() {
	case slog.KindString:
		b = appendTextString(b, v.String())
	case slog.KindInt64:
		b = strconv.AppendInt(b, v.Int64(), 10)
	case slog.KindUint64:
		b = strconv.AppendUint(b, v.Uint64(), 10)
	case slog.KindFloat64:
		b = strconv.AppendFloat(b, v.Float64(), 'g', -1, 64)
	case slog.KindBool:
		b = strconv.AppendBool(b, v.Bool())
	case slog.KindDuration:
		b = append(b, v.Duration().String()...)
	case slog.KindAny:
		tm, ok := v.Any().(encoding.TextMarshaler)
		if !ok {
			return b, false
		}
		text, ok := marshalText(tm)
		if !ok {
			return b, false
		}
		b = appendTextString(b, string(text))
	default:
		return b, false
	}
	return b, true
}

// marshalText calls MarshalText; an error or a panic (a nil pointer)
// leaves the value to the general path, which reports them its way.
func marshalText(tm encoding.TextMarshaler) (text []byte, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	text, err := tm.MarshalText()
	return text, err == nil
}

// appendTextString writes s bare, or Go-quoted when slog.TextHandler
// would quote it: empty, or holding a space, '=', '"', an ASCII control
// character, invalid UTF-8, U+FFFD, a Unicode space or a non-printable
// rune.
func appendTextString(b []byte, s string) []byte {
	if needsQuoting(s) {
		return strconv.AppendQuote(b, s)
	}
	return append(b, s...)
}

func needsQuoting(s string) bool {
	if s == "" {
		return true
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == ' ' || c == '=' || c == '"' {
				return true
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return true
		}
		i += size
	}
	return false
}

// appendRFC3339Millis writes t as RFC 3339 with exactly three fraction
// digits, as slog.TextHandler does.
func appendRFC3339Millis(b []byte, t time.Time) []byte {
	return t.AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
}
