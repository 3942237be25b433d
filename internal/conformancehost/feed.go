package conformancehost

import (
	"context"
	"log/slog"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/realtime"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/rtaws"
)

// streamFeed feeds an instance's hub from its table's stream, the way the
// deployed realtime tier is fed: a commit's first log item INSERT becomes
// a hint for its partition, whichever engine wrote it (on this host every
// /sync request is served by the "functions" engine, which has no path to
// the hub but the stream).
type streamFeed struct {
	poller *rtaws.Poller
	hub    *realtime.Hub
	st     store.Store
	every  time.Duration
	log    *slog.Logger
	stop   context.CancelFunc
	done   chan struct{}
}

func startStreamFeed(ps *prodStorage, hub *realtime.Hub, log *slog.Logger) *streamFeed {
	ctx, cancel := context.WithCancel(context.Background())
	f := &streamFeed{hub: hub, st: ps.store, every: ps.cfg.StreamPoll, log: log, stop: cancel, done: make(chan struct{})}
	f.poller = &rtaws.Poller{Streams: ps.cfg.streams(), StreamARN: ps.stream, Handle: f.handle}
	go f.run(ctx)
	return f
}

// handle turns each commit INSERT of a batch into a hint.
func (f *streamFeed) handle(ctx context.Context, recs []rtaws.Record) error {
	for _, r := range recs {
		if !r.Insert {
			continue
		}
		if p, seq, ok := dynamostore.ParseCommitKey(r.PK, r.SK); ok {
			if err := f.hint(ctx, p, seq); err != nil {
				return err // the batch is read again on the next poll
			}
		}
	}
	return nil
}

// hint tells the hub that partition's log reached seq.
func (f *streamFeed) hint(ctx context.Context, p string, seq int64) error {
	var c *store.Commit
	if err := f.st.ReadLog(ctx, p, seq-1, seq, func(x *store.Commit) bool { c = x; return false }); err != nil {
		return err
	}
	if c != nil { // nil: pruned before the stream caught up
		f.hub.Notify(p, c)
	}
	return nil
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

// Close stops the feed and waits for its last poll.
func (f *streamFeed) Close() {
	f.stop()
	<-f.done
}
