package engine

import (
	"context"
	"math"

	"github.com/skyfold/syncular-lambda/internal/core/reactions"
	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// PruneReport says what one maintenance pass did.
type PruneReport struct {
	Partition  string
	OldHorizon int64
	NewHorizon int64
	Removed    int
}

// RetentionOverride lets a host or test driver tighten retention below
// the §4.6 defaults for one pass (only where it may: the 1000-commit floor
// and active window are normative minimums for production hosts, so
// overrides exist for drivers that simulate time).
type RetentionOverride struct {
	ActiveWindowMs     *int64
	AgeForceMs         *int64
	MinRetainedCommits *int64
}

// Prune advances the partition's horizon as far as §4.6 allows and deletes
// the commits below it:
//   - never past the newest MinRetainedCommits commits;
//   - never past the lowest cursor of a client active within ActiveWindow;
//   - except that commits older than AgeForce go regardless of laggards.
func (e *Engine) Prune(ctx context.Context, partition string, o *RetentionOverride) (PruneReport, error) {
	rep := PruneReport{Partition: partition}
	head, ok, err := e.store.Head(ctx, partition)
	if err != nil {
		return rep, storeErr(err, "read partition head")
	}
	if !ok {
		return rep, nil // a partition never seen has no log to prune
	}
	rep.OldHorizon, rep.NewHorizon = head.HorizonSeq, head.HorizonSeq
	now := e.now()
	active := e.limits.ActiveWindow.Milliseconds()
	force := e.limits.AgeForce.Milliseconds()
	minKeep := e.limits.MinRetainedCommits
	if o != nil {
		if o.ActiveWindowMs != nil {
			active = *o.ActiveWindowMs
		}
		if o.AgeForceMs != nil {
			force = *o.AgeForceMs
		}
		if o.MinRetainedCommits != nil {
			minKeep = *o.MinRetainedCommits
		}
	}
	limit := head.MaxCommitSeq - minKeep // retention floor
	if limit <= head.HorizonSeq {
		return rep, nil
	}
	watermark := int64(math.MaxInt64)
	err = e.store.ListClients(ctx, partition, func(c *store.Client) bool {
		if now-c.UpdatedAtMs <= active && c.Cursor >= 0 && c.Cursor < watermark {
			watermark = c.Cursor
		}
		return true
	})
	if err != nil {
		return rep, storeErr(err, "list client records")
	}
	target := min(limit, watermark)
	// Age force: commits created before now-force may go past laggards.
	var forced int64
	err = e.store.CommitTimes(ctx, partition, head.HorizonSeq, func(seq, created int64) bool {
		if seq > limit || now-created <= force {
			return false
		}
		forced = seq
		return true
	})
	if err != nil {
		return rep, storeErr(err, "read commit times")
	}
	target = max(target, forced)
	if target <= head.HorizonSeq {
		return rep, nil
	}
	if rxs, ok := e.store.(store.ReactionStore); ok && !e.cfg.NoReactions {
		// §6.9: a pruned commit's reactions must outlive its log entry,
		// so they are enqueued first (a no-op for what the runner did).
		// A deployment without reactions (Config.NoReactions) has none
		// in its log and skips the reads and the cursor write.
		if _, err := reactions.Enqueue(ctx, e.store, rxs, partition, target, now); err != nil {
			return rep, storeErr(err, "enqueue reactions before pruning")
		}
	}
	n, err := e.store.Prune(ctx, partition, target)
	if err != nil {
		return rep, storeErr(err, "prune log")
	}
	rep.NewHorizon, rep.Removed = target, n
	return rep, nil
}
