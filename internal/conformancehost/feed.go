package conformancehost

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/realtime"
	"github.com/skyfold/syncular-lambda/internal/rtfanout"
)

// streamFeed feeds an instance's hub the way the deployed realtime tier is
// fed: the table's stream (read by rtfanout.Poller, as Lambda's event
// source mapping reads it) → rtfanout.Forwarder (the fanout function's
// work) → HTTP POST /internal/hints on the instance's own hint port →
// rtfanout.Handler → the hub. On this host every /sync request is served
// by the "functions" engine, which has no path to the hub but this one.
type streamFeed struct {
	poller *rtfanout.Poller
	fwd    *rtfanout.Forwarder
	hints  *http.Server
	every  time.Duration
	log    *slog.Logger
	stop   context.CancelFunc
	done   chan struct{}
}

// oneInstance is the registry of a one-instance tier: the instance's hint
// port.
type oneInstance rtfanout.Instance

func (o oneInstance) Live(context.Context) ([]rtfanout.Instance, error) {
	return []rtfanout.Instance{rtfanout.Instance(o)}, nil
}

func startStreamFeed(ps *prodStorage, hub *realtime.Hub, id string, log *slog.Logger) (*streamFeed, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("hint port: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &streamFeed{every: ps.cfg.StreamPoll, log: log, stop: cancel, done: make(chan struct{})}
	f.hints = &http.Server{
		Handler:           &rtfanout.Handler{Hints: hub, Logger: log},
		ReadHeaderTimeout: 5 * time.Second,
	}
	go func() { _ = f.hints.Serve(ln) }()
	f.fwd = &rtfanout.Forwarder{
		Registry: oneInstance{ID: id, Addr: "http://" + ln.Addr().String()},
		Client:   ps.cfg.HTTPClient,
		Logger:   log,
	}
	f.poller = &rtfanout.Poller{Streams: ps.cfg.streams(), StreamARN: ps.stream, Handle: func(ctx context.Context, recs []rtfanout.Record) error {
		_, err := f.fwd.Forward(ctx, recs)
		return err // only a registry failure; the batch is read again
	}}
	go f.run(ctx)
	return f, nil
}

func (f *streamFeed) run(ctx context.Context) {
	defer close(f.done)
	t := time.NewTicker(f.every)
	defer t.Stop()
	for {
		if _, err := f.poller.Poll(ctx); err != nil && ctx.Err() == nil && f.log != nil {
			f.log.Warn("conformance: read table stream", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Close stops the feed, waits for its last poll and closes the hint port.
func (f *streamFeed) Close() {
	f.stop()
	<-f.done
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.hints.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) && f.log != nil {
		f.log.Warn("conformance: close hint port", "err", err)
	}
}
