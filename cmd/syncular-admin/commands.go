package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
)

// admin holds what the commands share. Results go to out as one
// tab-separated line per partition under a header; progress notes and
// errors go to errw.
type admin struct {
	cfg     *config.Config
	clients *app.AWSClients
	store   *dynamostore.Store
	out     io.Writer
	errw    io.Writer
}

func (a *admin) fail(format string, args ...any) {
	fmt.Fprintf(a.errw, "syncular-admin: "+format+"\n", args...)
}

// interrupted reports (once) that ctx ended, so a loop over partitions
// stops instead of failing every remaining one.
func (a *admin) interrupted(ctx context.Context) bool {
	if ctx.Err() == nil {
		return false
	}
	a.fail("interrupted: %v", context.Cause(ctx))
	return true
}

func msTime(ms int64) string {
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}

// head reads a partition head, reporting an unknown partition as an error.
func (a *admin) head(ctx context.Context, p string) (store.Head, error) {
	h, ok, err := a.store.Head(ctx, p)
	if err == nil && !ok {
		err = fmt.Errorf("unknown partition (no head item in table %s)", a.cfg.TableName)
	}
	return h, err
}

// revokeLease revokes one auth lease (§7.3.4). The lease id is the
// client's revocation handle, not a credential; it is printed.
func (a *admin) revokeLease(ctx context.Context, partition, leaseID string) int {
	ok, err := engine.RevokeLease(ctx, a.store, partition, leaseID)
	if err != nil {
		a.fail("revoke-lease: %v", err)
		return exitFailure
	}
	if !ok {
		a.fail("revoke-lease: partition %q holds no lease %q", partition, leaseID)
		return exitFailure
	}
	fmt.Fprintf(a.out, "revoked lease %q of partition %q\n", leaseID, partition)
	return exitOK
}

// partitions prints every partition's head.
func (a *admin) partitions(ctx context.Context) int {
	ps, err := a.allPartitions(ctx)
	if err != nil {
		a.fail("%v", err)
		return exitFailure
	}
	fmt.Fprintln(a.out, "partition\tepoch\tepochRequired\tmaxCommitSeq\thorizonSeq\tlastSeen")
	code := exitOK
	for _, p := range ps {
		if a.interrupted(ctx) {
			code = exitFailure
			break
		}
		h, ok, err := a.store.Head(ctx, p)
		if err == nil && !ok {
			continue // registered, but its head was never written (a crash in between)
		}
		if err != nil {
			a.fail("partition %s: %v", quote(p), err)
			code = exitFailure
			continue
		}
		fmt.Fprintf(a.out, "%s\t%s\t%t\t%d\t%d\t%s\n",
			quote(p), h.LogEpoch, h.EpochRequired, h.MaxCommitSeq, h.HorizonSeq, msTime(h.LastSeenAtMs))
	}
	fmt.Fprintf(a.errw, "%d partition(s) in table %s\n", len(ps), a.cfg.TableName)
	return code
}

// rotateEpoch installs a fresh epoch in each selected partition (§2.1
// restore rule). Without yes it only reports what it would rotate and
// returns exitFailure, so a forgotten -yes never passes for success.
func (a *admin) rotateEpoch(ctx context.Context, sel selection, yes bool) int {
	ps, err := a.targets(ctx, sel)
	if err != nil {
		a.fail("%v", err)
		return exitFailure
	}
	code := exitOK
	if !yes {
		fmt.Fprintln(a.out, "partition\tepoch\tepochRequired\tclients")
		n := 0
		for _, p := range ps {
			if a.interrupted(ctx) {
				code = exitFailure
				break
			}
			h, err := a.head(ctx, p)
			clients := 0
			if err == nil {
				err = a.store.ListClients(ctx, p, func(*store.Client) bool { clients++; return true })
			}
			if err != nil {
				a.fail("partition %s: %v", quote(p), err)
				code = exitFailure
				continue
			}
			n++
			fmt.Fprintf(a.out, "%s\t%s\t%t\t%d\n", quote(p), h.LogEpoch, h.EpochRequired, clients)
		}
		fmt.Fprintf(a.errw, "dry run: would rotate the log epoch of %d partition(s) in table %s; "+
			"every client of them must then reset and re-bootstrap. Nothing was changed; re-run with -yes.\n",
			n, a.cfg.TableName)
		return exitFailure
	}
	fmt.Fprintln(a.out, "partition\toldEpoch\tnewEpoch")
	done := 0
	for _, p := range ps {
		if a.interrupted(ctx) {
			code = exitFailure
			break
		}
		h, err := a.head(ctx, p)
		next := engine.RandomEpoch()
		if err == nil {
			err = a.store.RotateEpoch(ctx, p, next, time.Now().UnixMilli())
		}
		if err != nil {
			a.fail("partition %s: rotate epoch: %v", quote(p), err)
			code = exitFailure
			continue
		}
		done++
		fmt.Fprintf(a.out, "%s\t%s\t%s\n", quote(p), h.LogEpoch, next)
	}
	fmt.Fprintf(a.errw, "rotated the log epoch of %d of %d partition(s) in table %s\n", done, len(ps), a.cfg.TableName)
	return code
}

// prune runs Engine.Prune with the default (normative) retention floors.
func (a *admin) prune(ctx context.Context, sel selection) int {
	eng, err := a.engine()
	if err != nil {
		a.fail("%v", err)
		return exitUsage
	}
	ps, err := a.targets(ctx, sel)
	if err != nil {
		a.fail("%v", err)
		return exitFailure
	}
	fmt.Fprintln(a.out, "partition\toldHorizon\tnewHorizon\tremoved")
	code := exitOK
	removed, done := 0, 0
	for _, p := range ps {
		if a.interrupted(ctx) {
			code = exitFailure
			break
		}
		// Engine.Prune treats an unknown partition as empty; a name typed
		// by an operator is more likely a typo, so say so.
		if sel.one {
			if _, err := a.head(ctx, p); err != nil {
				a.fail("partition %s: %v", quote(p), err)
				code = exitFailure
				continue
			}
		}
		rep, err := eng.Prune(ctx, p, nil)
		if err != nil {
			a.fail("partition %s: prune: %v", quote(p), err)
			code = exitFailure
			continue
		}
		done++
		removed += rep.Removed
		fmt.Fprintf(a.out, "%s\t%d\t%d\t%d\n", quote(p), rep.OldHorizon, rep.NewHorizon, rep.Removed)
	}
	fmt.Fprintf(a.errw, "pruned %d of %d partition(s) in table %s, removed %d commit(s)\n", done, len(ps), a.cfg.TableName, removed)
	return code
}

// backfillScopes writes the scope copies of partitions created before
// scope-keyed reads (dynamostore.BackfillScopeIndex) for every table of
// the schema's latest version.
func (a *admin) backfillScopes(ctx context.Context, sel selection) int {
	sch, err := schema.ReadFile(a.cfg.SchemaFile())
	if err != nil {
		a.fail("load schema %s (SYNC_SCHEMA_PATH): %v", a.cfg.SchemaFile(), err)
		return exitUsage
	}
	tables := app.LatestTables(sch)
	ps, err := a.targets(ctx, sel)
	if err != nil {
		a.fail("%v", err)
		return exitFailure
	}
	fmt.Fprintln(a.out, "partition\trows\twritten\tskipped\tmarked")
	code := exitOK
	done := 0
	for _, p := range ps {
		if a.interrupted(ctx) {
			code = exitFailure
			break
		}
		rep, err := a.store.BackfillScopeIndex(ctx, p, tables)
		if err != nil {
			a.fail("partition %s: backfill: %v", quote(p), err)
			code = exitFailure
			continue
		}
		done++
		fmt.Fprintf(a.out, "%s\t%d\t%d\t%d\t%t\n", quote(p), rep.Rows, rep.Written, rep.Skipped, rep.Marked)
	}
	fmt.Fprintf(a.errw, "backfilled %d of %d partition(s) in table %s\n", done, len(ps), a.cfg.TableName)
	return code
}

// engine builds the maintenance engine the prune function uses (§4.6
// defaults, no scopes, no signed URLs).
func (a *admin) engine() (*engine.Engine, error) {
	return app.PruneEngine(a.cfg, a.clients, a.store)
}

// registerPartitions backfills the partition registry from a Scan of the
// head items (tables written before the registry existed). Registering is
// idempotent, so running it again is harmless.
func (a *admin) registerPartitions(ctx context.Context) int {
	var ps []string
	if err := a.store.ListPartitions(ctx, func(p string) bool { ps = append(ps, p); return true }); err != nil {
		a.fail("scan partitions: %v", err)
		return exitFailure
	}
	fmt.Fprintln(a.out, "partition")
	code, done := exitOK, 0
	for _, p := range ps {
		if a.interrupted(ctx) {
			code = exitFailure
			break
		}
		if err := a.store.RegisterPartition(ctx, p); err != nil {
			a.fail("partition %s: register: %v", quote(p), err)
			code = exitFailure
			continue
		}
		done++
		fmt.Fprintln(a.out, quote(p))
	}
	fmt.Fprintf(a.errw, "registered %d of %d partition(s) in table %s\n", done, len(ps), a.cfg.TableName)
	return code
}

// sweepBlobs runs the §5.9.2 orphan sweep over the bucket.
func (a *admin) sweepBlobs(ctx context.Context) int {
	eng, err := a.engine()
	if err != nil {
		a.fail("%v", err)
		return exitUsage
	}
	n, err := eng.SweepBlobs(ctx)
	fmt.Fprintf(a.errw, "deleted %d orphaned blob object(s) in bucket %s\n", n, a.cfg.Bucket)
	if err != nil {
		a.fail("sweep: %v", err)
		return exitFailure
	}
	return exitOK
}
