package migrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// ParseDeclarations reads SYNC_CHECKPOINTS: comma-separated
// name=table+table entries ("" declares nothing).
func ParseDeclarations(s string) ([]Declaration, error) {
	var out []Declaration
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, tables, ok := strings.Cut(part, "=")
		if !ok || name == "" || tables == "" {
			return nil, fmt.Errorf("checkpoint %q: want name=table[+table...]", part)
		}
		if strings.Contains(name, "/") {
			// Backfill commits' idempotency keys are "backfill/<name>/…".
			return nil, fmt.Errorf("checkpoint %q: a name has no '/'", part)
		}
		out = append(out, Declaration{Name: name, Sources: strings.Split(tables, "+")})
	}
	return out, nil
}

// Names returns the declared checkpoint names (engine.Config.Checkpoints).
func Names(ds []Declaration) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Name
	}
	return out
}

// RunOptions configure Run.
type RunOptions struct {
	Backfill  bool
	BatchRows int
	// Timeout stops the backfills between batches (0: none): a Lambda
	// hook passes its remaining time; a later run resumes.
	Timeout time.Duration
	// Transform is used for declarations without their own; nil (and
	// no Declaration.Transform) verifies only: the backfill scans and
	// advances the watermark, writes no rows.
	Transform Transform
}

// Run is the operator path: Step, then (with Backfill) the backfill walk
// over p.Partitions, up to p.Parallel partitions at once: each partition
// materialises the declaration (one read when it already has, which
// makes a re-run cheap) and runs the backfill of every declared
// checkpoint still pending there, writing one progress line per
// (partition, checkpoint) to out (may be nil). A run stopped by the
// timeout is resumed by the next one.
func Run(ctx context.Context, b Backend, p Plan, o RunOptions, out io.Writer) (Progress, error) {
	pr, err := Step(ctx, b, p)
	if err != nil || !o.Backfill || len(p.Checkpoints) == 0 {
		return pr, err
	}
	deadline := func() bool { return false }
	if o.Timeout > 0 {
		end := time.Now().Add(o.Timeout)
		deadline = func() bool { return time.Now().After(end) }
	}
	if out != nil {
		fmt.Fprintln(out, "partition\tcheckpoint\tstate\twatermark\tobservedRows")
	}
	var (
		mu   sync.Mutex
		errs []error
	)
	err = eachPartition(ctx, p.Partitions, p.Parallel, func(part string) bool {
		if deadline() {
			mu.Lock()
			pr.TimedOutNow = true
			mu.Unlock()
			return false
		}
		h, err := b.MaterializeCheckpoints(ctx, part, p.Now())
		mu.Lock()
		pr.Partitions++
		if err == nil && h.Gate.Unmaterialized == 0 {
			pr.Fenced++
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("partition %q: %w", part, err))
		}
		mu.Unlock()
		if err != nil {
			return false
		}
		for i, d := range p.Checkpoints {
			bo := BackfillOptions{BatchRows: o.BatchRows, Deadline: deadline, Now: p.Now}
			if i == 0 {
				bo.head = &h // later: an earlier backfill may have committed, read it again
			}
			bp, line, err := runCheckpoint(ctx, b, part, d, &h, bo, o.Transform, out != nil)
			mu.Lock()
			pr.Batches += bp.Batches
			pr.Rows += bp.Rows
			if bp.Activated > 0 {
				pr.Activated++
			} else {
				pr.Incomplete++
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("partition %q checkpoint %s: %w", part, d.Name, err))
			}
			if line != "" {
				io.WriteString(out, line)
			}
			if bp.TimedOutNow {
				pr.TimedOutNow = true
			}
			mu.Unlock()
			if bp.TimedOutNow {
				return false
			}
		}
		return ctx.Err() == nil
	})
	return pr, errors.Join(append(errs, err, ctx.Err())...)
}

// runCheckpoint backfills checkpoint d in part when h, the head
// MaterializeCheckpoints left, lists it pending, else counts it activated
// (it was here already, or the partition was created after the
// declaration: nothing to backfill). With report, line is its
// checkpoint's row of Run's table.
func runCheckpoint(ctx context.Context, b Backend, part string, d Declaration, h *store.Head, bo BackfillOptions, transform Transform, report bool) (bp Progress, line string, err error) {
	if slices.ContainsFunc(h.Gate.Pending, func(pc store.PendingCheckpoint) bool { return pc.Name == d.Name }) {
		if d.Transform == nil {
			d.Transform = transform
		}
		bp, err = RunBackfill(ctx, b, part, d, bo)
	} else {
		bp.Activated = 1
	}
	if report {
		if c, gerr := b.GetCheckpoint(ctx, part, d.Name); gerr == nil && c != nil {
			line = fmt.Sprintf("%q\t%s\t%s\t%d\t%d\n", part, c.Name, c.State, c.Watermark, c.ObservedRows)
		}
	}
	return bp, line, err
}
