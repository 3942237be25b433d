package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/metrics"
	"github.com/skyfold/syncular-lambda/internal/s3blobs"
)

// PruneJob is the scheduled prune function: no HTTP route, invoked by an
// EventBridge schedule (template.yaml PruneFunction).
var PruneJob = Function{Name: "prune", LogicalID: "PruneFunction", Dir: "functions/prune"}

// Jobs are the functions without routes.
var Jobs = []Function{PruneJob, MigrateHookJob, FanoutJob, ReactionsJob}

// PruneJobName keys the prune job's saved state in the table: one item
// per registry shard (PruneShardJob).
const PruneJobName = "prune"

// PruneShardJob is the job name under which the prune job keeps the
// state of registry shard i in the current pass: "" (not started),
// a registry cursor (resume after it) or pruneShardDone.
func PruneShardJob(i int) string { return fmt.Sprintf("%s#%02d", PruneJobName, i) }

// pruneShardDone marks a shard finished in the current pass; the pass
// ends, and every shard's state is cleared, when all are done.
const pruneShardDone = "done"

// DefaultPruneParallel is how many registry shards one run prunes at
// once: all of them.
const DefaultPruneParallel = dynamostore.RegistryShards

// PruneEvent is the prune function's input (the schedule sends
// {"parallel": PruneParallel}).
type PruneEvent struct {
	// Restart ignores the saved state and starts a new pass.
	Restart bool `json:"restart,omitempty"`
	// MaxPartitions, when positive, stops the run after that many
	// partitions, saving the cursors (bounded runs; tests).
	MaxPartitions int `json:"maxPartitions,omitempty"`
	// Parallel is how many registry shards are pruned at once (1 to
	// RegistryShards; 0: DefaultPruneParallel).
	Parallel int `json:"parallel,omitempty"`
}

// PruneResult is what one run did.
type PruneResult struct {
	Partitions int `json:"partitions"` // pruned without error
	Removed    int `json:"removed"`    // commits deleted
	Failed     int `json:"failed"`     // partitions that failed
	// Done is true when the run finished the pass: every shard reached
	// its end (the saved state is then cleared); false means the next
	// run resumes the shards not finished.
	Done bool `json:"done"`
	// ShardsLeft is how many registry shards the pass has not finished.
	ShardsLeft int `json:"shardsLeft"`
	// BlobsSwept counts orphaned blobs deleted by the sweep that follows
	// a finished pass (§5.9.2; Engine.SweepBlobs).
	BlobsSwept int `json:"blobsSwept"`
	// ScopesBackfilled counts partitions whose scope copies this run
	// completed (dynamostore.BackfillScopeIndex).
	ScopesBackfilled int `json:"scopesBackfilled"`
}

// Pruner runs Engine.Prune with the §4.6 floors over every partition of
// the store's partition registry (Queries, no table Scan). The registry's
// shards are walked in parallel (Parallel at a time), each with its own
// cursor saved in the table every few partitions and when the run stops
// at its soft deadline, so the next run resumes every shard where it
// stopped; a shard finished in the current pass waits for the others.
// It is idempotent (a second pass removes nothing new).
type Pruner struct {
	Engine *engine.Engine
	Store  *dynamostore.Store
	Logger *slog.Logger
	EMF    *metrics.EMF
	// Margin is kept free before the invocation deadline (default 20 s).
	Margin time.Duration
	// SaveEvery is how many partitions of a shard pass between cursor
	// saves (default 20).
	SaveEvery int
	Now       func() time.Time
	// Retention overrides the §4.6 floors for drivers that simulate time
	// or measure (engine.RetentionOverride); nil, the production value,
	// keeps the normative defaults.
	Retention *engine.RetentionOverride
	// Tables are the schema's tables: a partition whose head asks for
	// scope copies not all written yet (a wide bootstrap turned them on,
	// dynamostore.ScopeBackfillDue, known from the head Prune reads
	// anyway) has them backfilled after its prune. Empty: none is.
	Tables []string
}

// errPruneFailures makes the invocation fail (Lambda's Errors metric and
// the prune alarm) when any partition failed.
var errPruneFailures = errors.New("prune: some partitions failed")

// pruneRun is the state the shard walks of one run share.
type pruneRun struct {
	p      *Pruner
	ev     PruneEvent
	now    func() time.Time
	margin time.Duration
	every  int
	taken  atomic.Int64 // partitions started (MaxPartitions)

	mu       sync.Mutex
	res      PruneResult
	finished int   // shards done in this pass
	listErr  error // the first registry or state error
}

// Run is one invocation.
func (p *Pruner) Run(ctx context.Context, ev PruneEvent) (PruneResult, error) {
	r := &pruneRun{p: p, ev: ev, now: p.Now, margin: p.Margin, every: p.SaveEvery}
	if r.now == nil {
		r.now = time.Now
	}
	start := r.now()
	if r.margin <= 0 {
		r.margin = 20 * time.Second
	}
	if r.every <= 0 {
		r.every = 20
	}
	parallel := ev.Parallel
	if parallel <= 0 || parallel > dynamostore.RegistryShards {
		parallel = DefaultPruneParallel
	}
	shards := make(chan int, dynamostore.RegistryShards)
	for i := range dynamostore.RegistryShards {
		shards <- i
	}
	close(shards)
	var wg sync.WaitGroup
	for range parallel {
		wg.Go(func() {
			for i := range shards {
				r.shard(ctx, i)
			}
		})
	}
	wg.Wait()
	res := r.res
	res.ShardsLeft = dynamostore.RegistryShards - r.finished
	res.Done = r.listErr == nil && res.ShardsLeft == 0
	if res.Done {
		// A new pass starts with the next run.
		for i := range dynamostore.RegistryShards {
			r.save(context.WithoutCancel(ctx), i, "")
		}
	}
	// A finished pass is followed by the §5.9.2 orphan sweep, so blobs are
	// collected on the same schedule (never a referenced or recently
	// touched blob; see Engine.SweepBlobs). It is idempotent: a sweep cut
	// short by the deadline is simply done again after the next pass.
	var sweepErr error
	if res.Done {
		sweepCtx := ctx
		if dl, ok := ctx.Deadline(); ok {
			var cancel context.CancelFunc
			sweepCtx, cancel = context.WithDeadline(ctx, dl.Add(-r.margin/2))
			defer cancel()
		}
		res.BlobsSwept, sweepErr = p.Engine.SweepBlobs(sweepCtx)
		if sweepErr != nil {
			p.Logger.ErrorContext(ctx, "blob sweep failed", "error", sweepErr.Error())
		}
	}
	listErr := r.listErr
	failures := res.Failed
	if listErr != nil {
		failures++
	}
	if sweepErr != nil {
		failures++
	}
	attrs := []slog.Attr{
		slog.Float64(metrics.Duration.Name, float64(r.now().Sub(start).Microseconds())/1000),
		slog.Int(metrics.PrunedPartitions.Name, res.Partitions),
		slog.Int(metrics.PrunedCommits.Name, res.Removed),
		slog.Int(metrics.PruneFailures.Name, failures),
		slog.Int(metrics.PruneIncomplete.Name, b2i(!res.Done)),
		slog.Int(metrics.BlobsSwept.Name, res.BlobsSwept),
		slog.Bool("done", res.Done),
		slog.Int("shardsLeft", res.ShardsLeft),
		slog.Int("parallel", parallel),
	}
	if listErr != nil {
		attrs = append(attrs, slog.String("error", listErr.Error()))
	}
	if p.EMF != nil {
		attrs = p.EMF.Annotate(attrs)
	}
	p.Logger.LogAttrs(ctx, slog.LevelInfo, "prune run", attrs...)
	switch {
	case listErr != nil:
		return res, fmt.Errorf("prune: list partitions: %w", listErr)
	case res.Failed > 0:
		return res, errPruneFailures
	case sweepErr != nil:
		return res, fmt.Errorf("prune: blob sweep: %w", sweepErr)
	}
	return res, nil
}

// shard walks registry shard i from its saved state, pruning each
// partition, until the shard ends, the run's deadline margin is reached
// or MaxPartitions partitions were started; it saves where it stopped.
func (r *pruneRun) shard(ctx context.Context, i int) {
	cursor := ""
	if !r.ev.Restart {
		c, err := r.p.Store.JobCursor(ctx, PruneShardJob(i))
		if err != nil {
			r.fail(fmt.Errorf("read saved cursor of shard %d: %w", i, err))
			return
		}
		cursor = c
	}
	if cursor == pruneShardDone {
		r.done()
		return
	}
	resumedFrom, stopped, sinceSave := cursor, false, 0
	err := r.p.Store.ListRegistryShard(ctx, i, cursor, func(part, next string) bool {
		if dl, ok := ctx.Deadline(); ok && r.now().After(dl.Add(-r.margin)) {
			stopped = true
			return false
		}
		if r.ev.MaxPartitions > 0 && r.taken.Add(1) > int64(r.ev.MaxPartitions) {
			stopped = true
			return false
		}
		r.prune(ctx, part)
		cursor = next
		if sinceSave++; sinceSave >= r.every {
			sinceSave = 0
			r.save(ctx, i, cursor)
		}
		return true
	})
	if err != nil {
		r.fail(fmt.Errorf("shard %d: %w", i, err))
	}
	switch {
	case err == nil && !stopped:
		r.save(context.WithoutCancel(ctx), i, pruneShardDone)
		r.done()
	case cursor != resumedFrom:
		r.save(context.WithoutCancel(ctx), i, cursor)
	}
}

// prune runs Engine.Prune on one partition, then the scope-copy
// backfill when its head asks for one, and counts the outcome.
func (r *pruneRun) prune(ctx context.Context, part string) {
	rep, err := r.p.Engine.Prune(ctx, part, r.p.Retention)
	if err != nil {
		r.p.Logger.ErrorContext(ctx, "prune failed", "partition", part, "error", err.Error())
	} else if rep.Removed > 0 {
		r.p.Logger.InfoContext(ctx, "pruned", "partition", part, "oldHorizon", rep.OldHorizon, "newHorizon", rep.NewHorizon, "removed", rep.Removed)
	}
	backfilled := false
	if err == nil && len(r.p.Tables) > 0 && r.p.Store.ScopeBackfillDue(part) {
		backfilled, err = r.backfill(ctx, part)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.res.Failed++
		return
	}
	r.res.Partitions++
	r.res.Removed += rep.Removed
	if backfilled {
		r.res.ScopesBackfilled++
	}
}

// backfill writes the scope copies of part (dynamostore.
// BackfillScopeIndex) until the run's deadline margin: a partition too
// large for one run records its progress on its head and is resumed by
// the next run, which is not a failure.
func (r *pruneRun) backfill(ctx context.Context, part string) (bool, error) {
	bctx := ctx
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		bctx, cancel = context.WithDeadline(ctx, dl.Add(-r.margin))
		defer cancel()
	}
	rep, err := r.p.Store.BackfillScopeIndex(bctx, part, r.p.Tables)
	switch {
	case err != nil && bctx.Err() != nil && ctx.Err() == nil:
		r.p.Logger.InfoContext(ctx, "scope backfill continues next run", "partition", part, "rows", rep.Rows, "written", rep.Written)
		return false, nil
	case err != nil:
		r.p.Logger.ErrorContext(ctx, "scope backfill failed", "partition", part, "error", err.Error())
		return false, err
	}
	r.p.Logger.InfoContext(ctx, "scope copies backfilled", "partition", part, "rows", rep.Rows, "written", rep.Written, "skipped", rep.Skipped)
	return rep.Marked, nil
}

func (r *pruneRun) save(ctx context.Context, i int, cursor string) {
	if err := r.p.Store.SetJobCursor(ctx, PruneShardJob(i), cursor, r.now().UnixMilli()); err != nil {
		r.p.Logger.WarnContext(ctx, "saving the prune cursor failed", "shard", i, "error", err.Error())
	}
}

func (r *pruneRun) done() {
	r.mu.Lock()
	r.finished++
	r.mu.Unlock()
}

func (r *pruneRun) fail(err error) {
	r.mu.Lock()
	if r.listErr == nil {
		r.listErr = err
	}
	r.mu.Unlock()
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// PruneEngine builds an engine for maintenance only: it serves no
// request, so scopes resolve to nothing and signed URLs are off; limits
// stay zero, i.e. the normative §4.6 defaults.
func PruneEngine(cfg *config.Config, clients *AWSClients, st *dynamostore.Store) (*engine.Engine, error) {
	sch, err := loadSchema(cfg)
	if err != nil {
		return nil, err
	}
	return engine.New(engine.Config{
		Schema:   sch,
		Store:    st,
		Segments: NewS3Segments(clients, cfg),
		Resolver: engine.ResolverFunc(func(context.Context, string, string, string) (engine.ScopeMap, error) {
			return nil, nil
		}),
		SignedURLs: engine.SignedURLsOff,
		// SYNC_REACTIONS_ENABLED=false: no commit carries reactions to enqueue.
		NoReactions: !cfg.Reactions,
		// The blob sweep (syncular-admin sweep-blobs) runs on this engine.
		Blobs: s3blobs.New(clients.S3, cfg.Bucket, ""),
	})
}

// LatestTables names the tables of the schema's latest version (the
// scope-copy backfill's tables).
func LatestTables(sch *schema.Schema) []string {
	var tables []string
	for _, t := range sch.Versions[sch.Latest].Tables {
		tables = append(tables, t.Name)
	}
	return tables
}

// PruneMain is the whole main of the prune function.
func PruneMain() {
	runJob(PruneJob, func(l *slog.Logger) (any, error) {
		p, err := newPruner(l)
		if err != nil {
			return nil, err
		}
		return p.Run, nil
	})
}

func newPruner(logger *slog.Logger) (*Pruner, error) {
	cfg, err := config.FromEnv()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	clients, err := NewAWSClients(ctx, cfg)
	if err != nil {
		return nil, err
	}
	st := dynamostore.New(clients.DynamoDB, cfg.TableName, dynamostore.Options{OutcomeTTL: cfg.OutcomeTTL, TransactionalCommits: !cfg.SmallCommits})
	eng, err := PruneEngine(cfg, clients, st)
	if err != nil {
		return nil, err
	}
	sch, err := loadSchema(cfg)
	if err != nil {
		return nil, err
	}
	return &Pruner{
		Engine: eng,
		Store:  st,
		Tables: LatestTables(sch),
		Logger: logger,
		EMF:    &metrics.EMF{Namespace: cfg.MetricsNamespace, Fixed: map[string]string{metrics.DimFunction: PruneJob.Name}},
	}, nil
}
