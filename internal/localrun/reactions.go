package localrun

import (
	"context"
	"errors"
	"time"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/core/reactions"
	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// startReactions delivers §6.9 reactions in-process: each commit that
// carries records wakes a run of its partition, and a sweep every second
// takes retries and anything a wake missed, as the deployed function's
// stream mapping and schedule do. It returns the commit hook to install
// (next, when set, still runs first).
func (rn *runner) startReactions(ctx context.Context, deps app.Deps, handlers map[string]reactions.Handler, next func(string, *store.Commit)) (func(string, *store.Commit), error) {
	rs, ok := deps.Store.(store.ReactionStore)
	if !ok {
		return nil, errors.New("reactions need a store with reaction storage")
	}
	r := &reactions.Runner{Log: deps.Store, Store: rs, Handlers: handlers, Logger: rn.logger.With("function", "reactions")}
	wake := make(chan string, 256)
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case p := <-wake:
				if _, err := r.RunPartition(ctx, p); err != nil && ctx.Err() == nil {
					r.Logger.Warn("reactions: run failed; the sweep retries", "partition", p, "error", err.Error())
				}
			case <-tick.C:
				if _, err := r.Sweep(ctx); err != nil && ctx.Err() == nil {
					r.Logger.Warn("reactions: sweep failed", "error", err.Error())
				}
			}
		}
	}()
	return func(p string, c *store.Commit) {
		if next != nil {
			next(p, c)
		}
		if len(c.Reactions) > 0 {
			select {
			case wake <- p:
			default: // the sweep takes it
			}
		}
	}, nil
}
