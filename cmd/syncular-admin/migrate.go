package main

import (
	"context"
	"fmt"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/migrate"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
)

type migrateFlags struct {
	backfill bool
	batch    int
	timeout  time.Duration
	parallel int
}

// migrate runs the rolling-upgrade step (migrate.Step) to the schema's
// latest version, then optionally the backfills, and reports progress.
func (a *admin) migrate(ctx context.Context, f migrateFlags, checkpoints string) int {
	sch, err := schema.ReadFile(a.cfg.SchemaFile())
	if err != nil {
		a.fail("load schema %s (SYNC_SCHEMA_PATH): %v", a.cfg.SchemaFile(), err)
		return exitUsage
	}
	// The schema's backfills (with their rules) and SYNC_CHECKPOINTS.
	decls, err := migrate.Declarations(sch, checkpoints, nil)
	if err != nil {
		a.fail("backfills: %v", err)
		return exitUsage
	}
	rep, err := migrate.Run(ctx, a.store, migrate.Plan{
		// The partition registry, as the post-traffic hook walks it, and
		// only for -backfill: both walk the same set (register-partitions
		// adds tables' older partitions first). Queries, never a Scan.
		// The declaration itself is one marker write (migrate.Step).
		Version: int64(sch.Latest), Checkpoints: decls, Partitions: a.store.EachRegisteredPartition,
		Now: func() int64 { return time.Now().UnixMilli() }, Parallel: f.parallel,
	}, migrate.RunOptions{Backfill: f.backfill, BatchRows: f.batch, Timeout: f.timeout}, a.out)
	fmt.Fprintf(a.errw, "schema marker %d; store-format level %d; %d checkpoint(s) declared table-wide; fenced %d of %d partition(s); %d checkpoint(s) activated, %d incomplete\n",
		rep.Marker, rep.FormatLevel, rep.Declared, rep.Fenced, rep.Partitions, rep.Activated, rep.Incomplete)
	if fr := rep.FormatRaise; fr.HeldBack() && err == nil {
		// Not a failure: the tier's old tasks still serve; run again once
		// they are replaced (dynamostore tierlevel.go).
		fmt.Fprintf(a.errw, "store-format level held at %d (this build reads %d): %d live realtime tier instance(s), the oldest reading level %d; run migrate again once the tier's deployment has finished\n",
			fr.Level, fr.Target, fr.Readers, fr.Limit)
	}
	if err != nil {
		a.fail("migrate: %v", err)
		return exitFailure
	}
	if f.backfill && rep.Incomplete > 0 {
		return exitFailure
	}
	return exitOK
}
