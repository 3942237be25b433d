package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/metrics"
	"github.com/skyfold/syncular-lambda/internal/s3blobs"
)

// PruneJob is the scheduled prune function: no HTTP route, invoked by an
// EventBridge schedule (template.yaml PruneFunction).
var PruneJob = Function{Name: "prune", LogicalID: "PruneFunction", Dir: "functions/prune"}

// Jobs are the functions without routes.
var Jobs = []Function{PruneJob, MigrateHookJob, FanoutJob}

// PruneJobName keys the prune job's saved cursor in the table.
const PruneJobName = "prune"

// PruneEvent is the prune function's input (the schedule sends {}).
type PruneEvent struct {
	// Restart ignores a saved cursor and starts a new pass.
	Restart bool `json:"restart,omitempty"`
	// MaxPartitions, when positive, stops the run after that many
	// partitions, saving the cursor (bounded runs; tests).
	MaxPartitions int `json:"maxPartitions,omitempty"`
}

// PruneResult is what one run did.
type PruneResult struct {
	Partitions int `json:"partitions"` // pruned without error
	Removed    int `json:"removed"`    // commits deleted
	Failed     int `json:"failed"`     // partitions that failed
	// Done is true when the run reached the end of the registry (the
	// saved cursor is then cleared); false means the next run resumes.
	Done   bool   `json:"done"`
	Cursor string `json:"cursor,omitempty"`
	// BlobsSwept counts orphaned blobs deleted by the sweep that follows
	// a finished pass (§5.9.2; Engine.SweepBlobs).
	BlobsSwept int `json:"blobsSwept"`
}

// Pruner runs Engine.Prune with the §4.6 floors over every partition of
// the store's partition registry (Queries, no table Scan). It is
// idempotent (a second pass removes nothing new) and resumable: the
// cursor is saved in the table every few partitions and when the run
// stops at its soft deadline, and the next run continues from it.
type Pruner struct {
	Engine *engine.Engine
	Store  *dynamostore.Store
	Logger *slog.Logger
	EMF    *metrics.EMF
	// Margin is kept free before the invocation deadline (default 20 s).
	Margin time.Duration
	// SaveEvery is how many partitions pass between cursor saves (default 20).
	SaveEvery int
	Now       func() time.Time
}

// errPruneFailures makes the invocation fail (Lambda's Errors metric and
// the prune alarm) when any partition failed.
var errPruneFailures = errors.New("prune: some partitions failed")

// Run is one invocation.
func (p *Pruner) Run(ctx context.Context, ev PruneEvent) (PruneResult, error) {
	now := p.Now
	if now == nil {
		now = time.Now
	}
	start := now()
	margin, every := p.Margin, p.SaveEvery
	if margin <= 0 {
		margin = 20 * time.Second
	}
	if every <= 0 {
		every = 20
	}
	var res PruneResult
	var listErr error
	cursor := ""
	if !ev.Restart {
		c, err := p.Store.JobCursor(ctx, PruneJobName)
		if err != nil {
			listErr = fmt.Errorf("read saved cursor: %w", err)
		}
		cursor = c
	}
	resumedFrom := cursor
	stopped := false
	if listErr == nil {
		sinceSave := 0
		listErr = p.Store.ListRegisteredPartitions(ctx, cursor, func(part, next string) bool {
			if dl, ok := ctx.Deadline(); ok && now().After(dl.Add(-margin)) {
				stopped = true
				return false
			}
			rep, err := p.Engine.Prune(ctx, part, nil)
			if err != nil {
				res.Failed++
				p.Logger.ErrorContext(ctx, "prune failed", "partition", part, "error", err.Error())
			} else {
				res.Partitions++
				res.Removed += rep.Removed
				if rep.Removed > 0 {
					p.Logger.InfoContext(ctx, "pruned", "partition", part, "oldHorizon", rep.OldHorizon, "newHorizon", rep.NewHorizon, "removed", rep.Removed)
				}
			}
			cursor = next
			if sinceSave++; sinceSave >= every {
				sinceSave = 0
				if err := p.Store.SetJobCursor(ctx, PruneJobName, cursor, now().UnixMilli()); err != nil {
					p.Logger.WarnContext(ctx, "saving the prune cursor failed", "error", err.Error())
				}
			}
			if ev.MaxPartitions > 0 && res.Partitions+res.Failed >= ev.MaxPartitions {
				stopped = true
				return false
			}
			return true
		})
	}
	res.Done = listErr == nil && !stopped
	saved := cursor
	if res.Done {
		saved = ""
	}
	res.Cursor = saved
	if listErr == nil || cursor != resumedFrom {
		if err := p.Store.SetJobCursor(context.WithoutCancel(ctx), PruneJobName, saved, now().UnixMilli()); err != nil {
			p.Logger.WarnContext(ctx, "saving the prune cursor failed", "error", err.Error())
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
			sweepCtx, cancel = context.WithDeadline(ctx, dl.Add(-margin/2))
			defer cancel()
		}
		res.BlobsSwept, sweepErr = p.Engine.SweepBlobs(sweepCtx)
		if sweepErr != nil {
			p.Logger.ErrorContext(ctx, "blob sweep failed", "error", sweepErr.Error())
		}
	}
	failures := res.Failed
	if listErr != nil {
		failures++
	}
	if sweepErr != nil {
		failures++
	}
	attrs := []slog.Attr{
		slog.Float64(metrics.Duration.Name, float64(now().Sub(start).Microseconds())/1000),
		slog.Int(metrics.PrunedPartitions.Name, res.Partitions),
		slog.Int(metrics.PrunedCommits.Name, res.Removed),
		slog.Int(metrics.PruneFailures.Name, failures),
		slog.Int(metrics.PruneIncomplete.Name, b2i(!res.Done)),
		slog.Int(metrics.BlobsSwept.Name, res.BlobsSwept),
		slog.Bool("done", res.Done),
		slog.String("resumedFrom", resumedFrom),
		slog.String("cursor", res.Cursor),
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
		// The blob sweep (syncular-admin sweep-blobs) runs on this engine.
		Blobs: s3blobs.New(clients.S3, cfg.Bucket, ""),
	})
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
	st := dynamostore.New(clients.DynamoDB, cfg.TableName, dynamostore.Options{OutcomeTTL: cfg.OutcomeTTL})
	eng, err := PruneEngine(cfg, clients, st)
	if err != nil {
		return nil, err
	}
	return &Pruner{
		Engine: eng,
		Store:  st,
		Logger: logger,
		EMF:    &metrics.EMF{Namespace: cfg.MetricsNamespace, Fixed: map[string]string{metrics.DimFunction: PruneJob.Name}},
	}, nil
}
