package metrics

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"
)

// NewJSONHandler is slog.NewJSONHandler for the functions' log lines, with
// two differences: the EMF directive a request line carries (RequestLine,
// Annotate) is written as the JSON it already is, and such a line has no
// "time" member (the directive's Timestamp carries it) and no "level"
// (always INFO). Both are bytes CloudWatch Logs bills on every request.
// The standard handler passes every json.Marshaler's output through
// encoding/json's validating compaction, which on a request line is close
// to half of the line's cost — billed Lambda time on every request.
//
// The directive is spliced in as the record's last member, where Annotate
// puts it; a record whose directive sits under a group, or a handler with
// a ReplaceAttr option, goes through the standard path unchanged. Records
// are written one at a time (a function instance serves one request at a
// time, so the lock is uncontended there).
func NewJSONHandler(w io.Writer, opts *slog.HandlerOptions) slog.Handler {
	sw := &splicer{out: w}
	h := &emfHandler{inner: slog.NewJSONHandler(sw, opts), w: sw, mu: new(sync.Mutex)}
	if opts != nil && opts.ReplaceAttr != nil {
		h.plain = true
	} else {
		// A line with a directive is written without "level" (it is
		// always INFO: the request line and the job run lines).
		var o slog.HandlerOptions
		if opts != nil {
			o = *opts
		}
		o.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.LevelKey {
				return slog.Attr{}
			}
			return a
		}
		h.metric = slog.NewJSONHandler(sw, &o)
	}
	return h
}

type emfHandler struct {
	inner slog.Handler
	// metric writes the lines with a directive (nil when plain).
	metric slog.Handler
	w      *splicer
	mu     *sync.Mutex
	// plain: never splice (a group is open, or attributes are rewritten).
	plain bool
}

func (h *emfHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.inner.Enabled(ctx, l) }

func (h *emfHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.inner = h.inner.WithAttrs(as)
	if h.metric != nil {
		c.metric = h.metric.WithAttrs(as)
	}
	return &c
}

func (h *emfHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.inner = h.inner.WithGroup(name)
	c.plain = h.plain || name != ""
	if c.plain {
		c.metric = nil
	} else if h.metric != nil {
		c.metric = h.metric.WithGroup(name)
	}
	return &c
}

func (h *emfHandler) Handle(ctx context.Context, r slog.Record) error {
	var d directive
	found := false
	if !h.plain {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "_aws" && a.Value.Kind() == slog.KindAny {
				d, found = a.Value.Any().(directive)
			}
			return true
		})
	}
	if !found {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.inner.Handle(ctx, r)
	}
	// No "time" member: the directive's Timestamp is the line's time
	// (CloudWatch Logs also stamps every event on ingestion), and the
	// request line is written on every request, billed per byte.
	rest := slog.NewRecord(time.Time{}, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != "_aws" {
			rest.AddAttrs(a)
		}
		return true
	})
	raw, _ := d.MarshalJSON() // never fails
	h.mu.Lock()
	defer h.mu.Unlock()
	h.w.pending = raw
	err := h.metric.Handle(ctx, rest)
	h.w.pending = nil
	return err
}

// splicer receives each record from the JSON handler in one Write (as
// slog's handlers write) and adds the pending "_aws" member before the
// closing brace.
type splicer struct {
	out     io.Writer
	pending []byte
	buf     []byte
}

func (s *splicer) Write(p []byte) (int, error) {
	n := len(p)
	if s.pending == nil || n < 2 || p[n-2] != '}' || p[n-1] != '\n' {
		return s.out.Write(p)
	}
	b := append(s.buf[:0], p[:n-2]...)
	if n > 3 { // not an empty object
		b = append(b, ',')
	}
	b = append(b, `"_aws":`...)
	b = append(b, s.pending...)
	b = append(b, '}', '\n')
	if cap(b) <= 64<<10 {
		s.buf = b
	}
	if _, err := s.out.Write(b); err != nil {
		return 0, err
	}
	return n, nil
}
