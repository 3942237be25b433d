package app

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/rtfanout"
	"github.com/skyfold/syncular-lambda/internal/wiring"
)

// FanoutJob reads the table's stream and hints every live realtime tier
// instance of each batch's commits and epoch events (rtfanout.Forwarder,
// docs/REALTIME.md).
var FanoutJob = Function{Name: "fanout", LogicalID: "FanoutFunction", Dir: "functions/fanout"}

// HandleStream is the fanout function's handler over f. Records other
// than string-keyed ones are skipped (the event source mapping's filter
// passes only commit first items and epoch events). An error — the
// registry could not be read — fails the batch, which the mapping
// retries, bisects and finally sends to its on-failure destination.
func HandleStream(f *rtfanout.Forwarder) func(ctx context.Context, ev events.DynamoDBEvent) error {
	return func(ctx context.Context, ev events.DynamoDBEvent) error {
		recs := make([]rtfanout.Record, 0, len(ev.Records))
		for _, r := range ev.Records {
			pk, sk := r.Change.Keys["pk"], r.Change.Keys["sk"]
			if pk.DataType() != events.DataTypeString || sk.DataType() != events.DataTypeString {
				continue
			}
			recs = append(recs, rtfanout.Record{Event: r.EventName, PK: pk.String(), SK: sk.String()})
		}
		res, err := f.Forward(ctx, recs)
		if f.Logger != nil {
			f.Logger.Info("realtime fanout", "records", len(ev.Records), "hints", res.Hints, "instances", res.Instances, "failed", res.Failed)
		}
		return err
	}
}

// NewForwarder builds the fanout function's forwarder from the
// environment: the registry in SYNC_TABLE_NAME.
func NewForwarder(ctx context.Context, logger *slog.Logger) (*rtfanout.Forwarder, error) {
	cfg, err := config.FromEnv()
	if err != nil {
		return nil, err
	}
	clients, err := wiring.NewAWSClients(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &rtfanout.Forwarder{
		Registry: &rtfanout.Registry{DB: clients.DynamoDB, Table: cfg.TableName},
		Client:   &http.Client{Timeout: rtfanout.DefaultPostTimeout},
		Logger:   logger,
	}, nil
}

// FanoutMain is the whole main of the fanout function.
func FanoutMain() {
	runJob(FanoutJob, func(logger *slog.Logger) (any, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		defer cancel()
		f, err := NewForwarder(ctx, logger)
		if err != nil {
			return nil, err
		}
		return HandleStream(f), nil
	})
}
