package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/codedeploy"
	cdtypes "github.com/aws/aws-sdk-go-v2/service/codedeploy/types"

	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/core/migrate"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
)

// MigrateHookJob is the CodeDeploy pre-traffic hook of the sync functions
// (template.yaml MigrateHookFunction): it runs the rolling-upgrade
// migration step before CodeDeploy shifts traffic to a new version.
var MigrateHookJob = Function{Name: "migratehook", LogicalID: "MigrateHookFunction", Dir: "functions/migratehook"}

// HookEvent is what CodeDeploy sends a lifecycle hook of a Lambda
// deployment. Both fields empty: a manual invocation (a bounded migrate
// run), nothing is reported.
type HookEvent struct {
	DeploymentID                  string `json:"DeploymentId"`
	LifecycleEventHookExecutionID string `json:"LifecycleEventHookExecutionId"`
	// BudgetMs, when positive, bounds the backfills below the remaining
	// time (manual bounded runs; tests simulate a timeout with it).
	// CodeDeploy never sends it.
	BudgetMs int64 `json:"budgetMs,omitempty"`
}

// HookResult is what one invocation did.
type HookResult struct {
	// Status is the lifecycle status reported (or, for a manual run, the
	// one that would be): Succeeded or Failed.
	Status     string `json:"status"`
	Reported   bool   `json:"reported"`
	Marker     int64  `json:"marker"`
	Partitions int    `json:"partitions"`
	Fenced     int    `json:"fenced"`
	Activated  int    `json:"activated"`
	Incomplete int    `json:"incomplete"`
	TimedOut   bool   `json:"timedOut"`
	Error      string `json:"error,omitempty"`
}

// HookReporter is the CodeDeploy call the hook makes.
type HookReporter interface {
	PutLifecycleEventHookExecutionStatus(ctx context.Context, in *codedeploy.PutLifecycleEventHookExecutionStatusInput, opts ...func(*codedeploy.Options)) (*codedeploy.PutLifecycleEventHookExecutionStatusOutput, error)
}

// MigrateHook runs migrate.Run (marker, writer fences over the partition
// registry, SYNC_CHECKPOINTS declarations, then the backfills bounded by
// the invocation's remaining time) and reports the lifecycle status.
//
// Succeeded only when the step completed and every declared checkpoint is
// activated on every partition; Failed otherwise, including a backfill
// that ran out of time. The new version would serve while its own
// checkpoints backfill, but nothing would then finish them: a Failed hook
// makes the deploy loud, every step is idempotent and resumable, and the
// next run (syncular-admin migrate -backfill, or the redeploy's hook)
// continues from the stored cursors. docs/OPERATIONS.md "Deploying with
// the pre-traffic hook" has the consequences for the old version.
type MigrateHook struct {
	Store       *dynamostore.Store
	Reporter    HookReporter
	Version     int64
	Checkpoints []migrate.Declaration
	Logger      *slog.Logger
	// Margin is kept free before the invocation deadline for the report
	// (default 15 s).
	Margin    time.Duration
	BatchRows int
	// Parallel is how many partitions are migrated at once (0:
	// migrate.DefaultParallel).
	Parallel int
}

// Run is one invocation.
func (h *MigrateHook) Run(ctx context.Context, ev HookEvent) (HookResult, error) {
	margin := h.Margin
	if margin <= 0 {
		margin = 15 * time.Second
	}
	work := ctx
	timeout := time.Duration(0)
	if dl, ok := ctx.Deadline(); ok {
		end := dl.Add(-margin)
		timeout = max(time.Until(end), time.Millisecond)
		// The migration's own calls stop at end too, so a hung request
		// cannot eat the time the report needs.
		var cancel context.CancelFunc
		work, cancel = context.WithDeadline(ctx, end)
		defer cancel()
	}
	if b := time.Duration(ev.BudgetMs) * time.Millisecond; b > 0 && (timeout == 0 || b < timeout) {
		timeout = b
	}
	pr, err := migrate.Run(work, h.Store, migrate.Plan{
		Version:     h.Version,
		Checkpoints: h.Checkpoints,
		// The registry lists every partition TouchPartition has seen
		// (register-partitions backfills older tables): Queries, no Scan.
		Partitions: h.Store.EachRegisteredPartition,
		Now:        func() int64 { return time.Now().UnixMilli() },
		Parallel:   h.Parallel,
	}, migrate.RunOptions{Backfill: true, BatchRows: h.BatchRows, Timeout: timeout}, nil)
	res := HookResult{
		Marker: pr.Marker, Partitions: pr.Partitions, Fenced: pr.Fenced,
		Activated: pr.Activated, Incomplete: pr.Incomplete, TimedOut: pr.TimedOutNow,
	}
	status := cdtypes.LifecycleEventStatusSucceeded
	switch {
	case err != nil:
		res.Error = err.Error()
		status = cdtypes.LifecycleEventStatusFailed
	case pr.Incomplete > 0 || pr.TimedOutNow || pr.Fenced != pr.Partitions:
		status = cdtypes.LifecycleEventStatusFailed
	}
	res.Status = string(status)
	level := slog.LevelInfo
	if status != cdtypes.LifecycleEventStatusSucceeded {
		level = slog.LevelError
	}
	h.Logger.LogAttrs(ctx, level, "migrate hook",
		slog.String("deploymentId", ev.DeploymentID), slog.String("status", res.Status),
		slog.Int64("marker", res.Marker), slog.Int("partitions", res.Partitions), slog.Int("fenced", res.Fenced),
		slog.Int("activated", res.Activated), slog.Int("incomplete", res.Incomplete), slog.Bool("timedOut", res.TimedOut),
		slog.String("error", res.Error))
	if ev.DeploymentID == "" && ev.LifecycleEventHookExecutionID == "" {
		return res, nil
	}
	if ev.DeploymentID == "" || ev.LifecycleEventHookExecutionID == "" {
		return res, errors.New("migrate hook: event needs both DeploymentId and LifecycleEventHookExecutionId")
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(margin-time.Second, time.Second))
	defer cancel()
	if _, err := h.Reporter.PutLifecycleEventHookExecutionStatus(rctx, &codedeploy.PutLifecycleEventHookExecutionStatusInput{
		DeploymentId:                  aws.String(ev.DeploymentID),
		LifecycleEventHookExecutionId: aws.String(ev.LifecycleEventHookExecutionID),
		Status:                        status,
	}); err != nil {
		// An error result makes Lambda retry the asynchronous invocation:
		// the migration is idempotent and the report is tried again.
		return res, fmt.Errorf("migrate hook: report %s to CodeDeploy: %w", status, err)
	}
	res.Reported = true
	return res, nil
}

// MigrateHookMain is the whole main of the hook function.
func MigrateHookMain() {
	runJob(MigrateHookJob, func(l *slog.Logger) (any, error) {
		h, err := newMigrateHook(l, nil)
		if err != nil {
			return nil, err
		}
		return h.Run, nil
	})
}

// newMigrateHook builds the hook from the environment; hooks are the
// host's Go backfills (migrate.Declarations), nil for the stock build.
func newMigrateHook(logger *slog.Logger, hooks migrate.Hooks) (*MigrateHook, error) {
	cfg, err := config.FromEnv()
	if err != nil {
		return nil, err
	}
	sch, err := loadSchema(cfg)
	if err != nil {
		return nil, err
	}
	// The schema's backfills and SYNC_CHECKPOINTS, with their transforms.
	decls, err := migrate.Declarations(sch, cfg.Checkpoints, hooks)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	clients, err := NewAWSClients(ctx, cfg)
	if err != nil {
		return nil, err
	}
	// The SDK honours AWS_ENDPOINT_URL_CODEDEPLOY (tests point it at a
	// local server speaking the CodeDeploy JSON protocol).
	cd := codedeploy.NewFromConfig(clients.Config)
	return &MigrateHook{
		Store:       dynamostore.New(clients.DynamoDB, cfg.TableName, dynamostore.Options{OutcomeTTL: cfg.OutcomeTTL}),
		Reporter:    cd,
		Version:     int64(sch.Latest),
		Checkpoints: decls,
		Logger:      logger,
	}, nil
}
