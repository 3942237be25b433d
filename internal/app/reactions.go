package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/core/reactions"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/wiring"
)

// ReactionsJob delivers §6.9 reactions: woken by the table's stream for
// new commits and by a schedule for retries, missed wakes and retention
// (docs/REACTIONS.md). Its binary is the app's own (it links the app's
// handlers), so the template builds it only when reactions are enabled.
var ReactionsJob = Function{Name: "reactions", LogicalID: "ReactionsFunction", Dir: "functions/reactions"}

// Retention of finished reactions (§6.9 "Terminal retention" defaults).
const (
	ReactionsCompletedRetention = 30 * 24 * time.Hour
	ReactionsDeadRetention      = 90 * 24 * time.Hour
	reactionsPrunePerPartition  = 1000
)

// ReactionsEvent is the scheduled event's detail: Retention asks for a
// retention pass over every registered partition instead of a sweep.
type ReactionsEvent struct {
	Retention bool `json:"retention"`
}

// Walker lists the registered partitions (the retention pass).
type Walker interface {
	EachRegisteredPartition(ctx context.Context, fn func(partition string) bool) error
}

// HandleReactions is the reactions function's handler. A stream batch
// runs the partitions of its commits' log items (a failure fails the
// batch, which the mapping retries and finally sends to its on-failure
// queue; the schedule's sweep and prune's enqueue cover what is lost);
// a scheduled event sweeps the partitions with live reactions, or with
// {"retention": true} deletes finished reactions past their retention.
func HandleReactions(r *reactions.Runner, walk Walker, logger *slog.Logger) func(ctx context.Context, raw json.RawMessage) error {
	return func(ctx context.Context, raw json.RawMessage) error {
		var probe struct {
			Records []json.RawMessage `json:"Records"`
			Detail  ReactionsEvent    `json:"detail"`
		}
		if err := json.Unmarshal(raw, &probe); err != nil {
			return fmt.Errorf("reactions: event is not JSON: %w", err)
		}
		start := time.Now()
		if len(probe.Records) > 0 {
			var ev events.DynamoDBEvent
			if err := json.Unmarshal(raw, &ev); err != nil {
				return fmt.Errorf("reactions: stream event: %w", err)
			}
			return runStreamBatch(ctx, r, ev, logger, start)
		}
		if probe.Detail.Retention {
			return pruneFinishedReactions(ctx, r, walk, logger, start)
		}
		st, err := r.Sweep(ctx)
		logger.Info("reactions sweep", "completed", st.Completed, "retried", st.Retried, "deadLettered", st.DeadLettered, "enqueued", st.Enqueued, "ms", time.Since(start).Milliseconds())
		return err
	}
}

func runStreamBatch(ctx context.Context, r *reactions.Runner, ev events.DynamoDBEvent, logger *slog.Logger, start time.Time) error {
	seen := map[string]bool{}
	var parts []string
	for _, rec := range ev.Records {
		pk, sk := rec.Change.Keys["pk"], rec.Change.Keys["sk"]
		if pk.DataType() != events.DataTypeString || sk.DataType() != events.DataTypeString {
			continue
		}
		if p, _, ok := dynamostore.ParseCommitKey(pk.String(), sk.String()); ok && !seen[p] {
			seen[p] = true
			parts = append(parts, p)
		}
	}
	var total reactions.Stats
	var errs []error
	for _, p := range parts {
		st, err := r.RunPartition(ctx, p)
		total.Enqueued += st.Enqueued
		total.Completed += st.Completed
		total.Retried += st.Retried
		total.DeadLettered += st.DeadLettered
		if err != nil {
			errs = append(errs, err)
		}
	}
	logger.Info("reactions stream batch", "records", len(ev.Records), "partitions", len(parts), "enqueued", total.Enqueued,
		"completed", total.Completed, "retried", total.Retried, "deadLettered", total.DeadLettered, "ms", time.Since(start).Milliseconds())
	return errors.Join(errs...)
}

func pruneFinishedReactions(ctx context.Context, r *reactions.Runner, walk Walker, logger *slog.Logger, start time.Time) error {
	if walk == nil {
		return errors.New("reactions: no partition registry to walk")
	}
	now := r.Now
	if now == nil {
		now = time.Now
	}
	t := now()
	doneCut, deadCut := t.Add(-ReactionsCompletedRetention).UnixMilli(), t.Add(-ReactionsDeadRetention).UnixMilli()
	completed, dead := 0, 0
	var errs []error
	err := walk.EachRegisteredPartition(ctx, func(p string) bool {
		for ctx.Err() == nil {
			c, d, more, err := r.Store.PruneReactions(ctx, p, doneCut, deadCut, reactionsPrunePerPartition)
			completed, dead = completed+c, dead+d
			if err != nil {
				errs = append(errs, err)
				return true
			}
			if !more {
				break
			}
		}
		return ctx.Err() == nil
	})
	logger.Info("reactions retention", "completedRemoved", completed, "deadRemoved", dead, "ms", time.Since(start).Milliseconds())
	return errors.Join(append(errs, err)...)
}

// ReactionsMain is the whole main of an app's reactions function: the
// runner over the table in SYNC_TABLE_NAME with the app's handlers.
func ReactionsMain(handlers map[string]reactions.Handler) {
	runJob(ReactionsJob, func(logger *slog.Logger) (any, error) {
		cfg, err := config.FromEnv()
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		defer cancel()
		clients, err := wiring.NewAWSClients(ctx, cfg)
		if err != nil {
			return nil, err
		}
		st := dynamostore.New(clients.DynamoDB, cfg.TableName, dynamostore.Options{OutcomeTTL: cfg.OutcomeTTL, TransactionalCommits: !cfg.SmallCommits})
		r := &reactions.Runner{Log: st, Store: st, Handlers: handlers, Logger: logger}
		return HandleReactions(r, st, logger), nil
	})
}
