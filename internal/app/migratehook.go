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

// MigrateHookJob is the CodeDeploy post-traffic hook of the push
// function (template.yaml MigrateHookFunction): once traffic has shifted
// to the new version it reports the deploy and then runs the
// rolling-upgrade migration step and the backfills.
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
	// one that would be): Succeeded, or Failed when the table's schema
	// marker is newer than this build (a downgrade) or unreadable, or
	// the store-format level is above what this build reads.
	Status   string `json:"status"`
	Reported bool   `json:"reported"`
	Marker   int64  `json:"marker"`
	// FormatLevel is the table's store-format level after the run
	// (dynamostore formats.go): the step raises it towards this build's
	// (FormatTarget), so writers may use the formats this build reads.
	FormatLevel  int64 `json:"formatLevel"`
	FormatTarget int64 `json:"formatTarget"`
	// FormatHeldBack: a live realtime tier instance of an older build
	// (FormatReaders live, the lowest reading FormatLimit) kept the level
	// below FormatTarget (dynamostore tierlevel.go). Not a failure: the
	// tier rolls out on its own; the next hook run or syncular-admin
	// migrate raises it further once those tasks are gone.
	FormatHeldBack bool   `json:"formatHeldBack,omitempty"`
	FormatReaders  int    `json:"formatReaders,omitempty"`
	FormatLimit    int64  `json:"formatLimit,omitempty"`
	Partitions     int    `json:"partitions"`
	Fenced         int    `json:"fenced"`
	Activated      int    `json:"activated"`
	Incomplete     int    `json:"incomplete"`
	TimedOut       bool   `json:"timedOut"`
	Error          string `json:"error,omitempty"`
}

// HookReporter is the CodeDeploy call the hook makes.
type HookReporter interface {
	PutLifecycleEventHookExecutionStatus(ctx context.Context, in *codedeploy.PutLifecycleEventHookExecutionStatusInput, opts ...func(*codedeploy.Options)) (*codedeploy.PutLifecycleEventHookExecutionStatusOutput, error)
}

// MigrateHook is the one lifecycle hook of a deploy (issue 20): the
// PostTraffic hook of the push function's deployment group. Nothing has
// to happen before the new version takes traffic (partitions are fenced
// lazily by its own writes, package migrate), so it runs after the shift
// and holds nothing back:
//
//  1. it reads the schema marker and the store-format level and reports
//     the lifecycle status at once: Succeeded, or Failed when the marker
//     is newer than this build or the level above what it reads (a
//     downgrade past a migration: CodeDeploy rolls back to the newer
//     version) or either cannot be read;
//  2. after a Succeeded report it runs migrate.Run in the invocation's
//     remaining time: the marker bump and the table-wide declaration of
//     the release's checkpoints in one write (O(1) in partitions), the
//     store-format level raised to this build's (from now on writers may
//     use the stored formats only builds like this one read: every
//     request is on it, "read first, write later"), then the walk of the
//     partition registry that materialises the declaration in each
//     partition, backfills and activates. The new version serves
//     meanwhile (it declared those checkpoints), and every partition the
//     walk has not reached is gated as declared. A run
//     that does not finish logs incomplete at error level; the next run
//     (a redeploy's hook, a manual invocation with {}, or syncular-admin
//     migrate -backfill) resumes: a partition done costs one read.
//
// Reporting before the declaration is what keeps a rollback serving: a
// deploy is never rolled back after a declaration gated partitions.
type MigrateHook struct {
	Store       *dynamostore.Store
	Reporter    HookReporter
	Version     int64
	Checkpoints []migrate.Declaration
	Logger      *slog.Logger
	// Margin is kept free before the invocation deadline (default 15 s).
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
		// cannot run into the invocation's deadline.
		var cancel context.CancelFunc
		work, cancel = context.WithDeadline(ctx, end)
		defer cancel()
	}
	if b := time.Duration(ev.BudgetMs) * time.Millisecond; b > 0 && (timeout == 0 || b < timeout) {
		timeout = b
	}
	manual := ev.DeploymentID == "" && ev.LifecycleEventHookExecutionID == ""
	if !manual && (ev.DeploymentID == "" || ev.LifecycleEventHookExecutionID == "") {
		return HookResult{}, errors.New("migrate hook: event needs both DeploymentId and LifecycleEventHookExecutionId")
	}
	res := HookResult{Status: string(cdtypes.LifecycleEventStatusSucceeded)}
	m, err := h.Store.SchemaMarker(work)
	res.Marker, res.Error = m, aboveBuild("schema marker", m, h.Version, err)
	if res.Error == "" {
		fl, err := h.Store.StoredFormatLevel(work)
		res.FormatLevel, res.Error = fl, aboveBuild("store-format level", fl, dynamostore.FormatLevel, err)
	}
	if res.Error != "" {
		res.Status = string(cdtypes.LifecycleEventStatusFailed)
	}
	if !manual {
		if err := h.report(ctx, ev, cdtypes.LifecycleEventStatus(res.Status), margin); err != nil {
			h.log(ctx, ev, res)
			// An error result makes Lambda retry the asynchronous
			// invocation: the migration is idempotent and the report is
			// tried again.
			return res, err
		}
		res.Reported = true
	}
	if res.Error != "" {
		h.log(ctx, ev, res)
		return res, nil
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
	res.Marker, res.Partitions, res.Fenced = pr.Marker, pr.Partitions, pr.Fenced
	res.FormatLevel = max(res.FormatLevel, pr.FormatLevel)
	res.FormatTarget, res.FormatReaders, res.FormatLimit = pr.FormatRaise.Target, pr.FormatRaise.Readers, pr.FormatRaise.Limit
	res.FormatHeldBack = pr.FormatRaise.HeldBack()
	res.Activated, res.Incomplete, res.TimedOut = pr.Activated, pr.Incomplete, pr.TimedOutNow
	if err != nil {
		res.Error = err.Error()
	}
	h.log(ctx, ev, res)
	return res, nil
}

// report sends the lifecycle status, with time of its own when the
// invocation's context is nearly spent.
func (h *MigrateHook) report(ctx context.Context, ev HookEvent, status cdtypes.LifecycleEventStatus, margin time.Duration) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(margin-time.Second, time.Second))
	defer cancel()
	if _, err := h.Reporter.PutLifecycleEventHookExecutionStatus(rctx, &codedeploy.PutLifecycleEventHookExecutionStatusInput{
		DeploymentId:                  aws.String(ev.DeploymentID),
		LifecycleEventHookExecutionId: aws.String(ev.LifecycleEventHookExecutionID),
		Status:                        status,
	}); err != nil {
		return fmt.Errorf("migrate hook: report %s to CodeDeploy: %w", status, err)
	}
	return nil
}

// log writes the run's line: error level when it failed or left
// checkpoints unfinished (finish them: docs/OPERATIONS.md), warn level
// when the realtime tier held the store-format level back (raise it
// later: docs/OPERATIONS.md).
func (h *MigrateHook) log(ctx context.Context, ev HookEvent, res HookResult) {
	level := slog.LevelInfo
	switch {
	case res.Error != "" || res.Incomplete > 0 || res.TimedOut || res.Fenced != res.Partitions:
		level = slog.LevelError
	case res.FormatHeldBack:
		level = slog.LevelWarn
	}
	h.Logger.LogAttrs(ctx, level, "migrate hook",
		slog.String("deploymentId", ev.DeploymentID), slog.String("status", res.Status), slog.Bool("reported", res.Reported),
		slog.Int64("marker", res.Marker), slog.Int64("formatLevel", res.FormatLevel), slog.Int64("formatTarget", res.FormatTarget),
		slog.Bool("formatHeldBack", res.FormatHeldBack), slog.Int("formatReaders", res.FormatReaders), slog.Int64("formatLimit", res.FormatLimit),
		slog.Int("partitions", res.Partitions), slog.Int("fenced", res.Fenced),
		slog.Int("activated", res.Activated), slog.Int("incomplete", res.Incomplete), slog.Bool("timedOut", res.TimedOut),
		slog.String("error", res.Error))
}

// MigrateHookMain is the whole main of the hook function.
func MigrateHookMain() {
	runJob(MigrateHookJob, func(l *slog.Logger) (any, error) {
		h, err := newMigrateHook(l, nil)
		if err != nil {
			return nil, err
		}
		return h.Handle, nil
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
		Store:       dynamostore.New(clients.DynamoDB, cfg.TableName, dynamostore.Options{OutcomeTTL: cfg.OutcomeTTL, TransactionalCommits: !cfg.SmallCommits}),
		Reporter:    cd,
		Version:     int64(sch.Latest),
		Checkpoints: decls,
		Logger:      logger,
	}, nil
}

// aboveBuild is the hook's refusal for a stored value (what: the schema
// marker, the store-format level) read with err: unreadable, or above
// this build's, which only a roll forward may serve; "" when neither.
func aboveBuild(what string, stored, build int64, err error) string {
	switch {
	case err != nil:
		return fmt.Sprintf("read %s: %v", what, err)
	case stored > build:
		return fmt.Sprintf("stored %s %d is newer than this build's %d: roll forward only", what, stored, build)
	}
	return ""
}
