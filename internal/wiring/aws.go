package wiring

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/s3blobs"
)

// AWSClients are the SDK clients of a deployment, with endpoint overrides
// applied (DynamoDB Local and a local S3 server for sam local and tests).
type AWSClients struct {
	Config   aws.Config
	DynamoDB *dynamodb.Client
	S3       *s3.Client
}

// NewAWSClients loads the SDK configuration from the environment (the
// Lambda role's credentials in AWS) and builds the clients. opts are
// appended to the load options (the local runner adds static credentials).
func NewAWSClients(ctx context.Context, cfg *config.Config, opts ...func(*awsconfig.LoadOptions) error) (*AWSClients, error) {
	opts = append([]func(*awsconfig.LoadOptions) error{awsconfig.WithHTTPClient(awshttp.NewBuildableClient().WithTimeout(25 * time.Second))}, opts...)
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("load AWS configuration: %w", err)
	}
	c := &AWSClients{Config: awsCfg}
	c.DynamoDB = dynamodb.NewFromConfig(awsCfg, func(o *dynamodb.Options) {
		if cfg.DynamoDBEndpoint != "" {
			o.BaseEndpoint = aws.String(cfg.DynamoDBEndpoint)
			// DynamoDB Local omits X-Amz-Crc32 on error responses; with
			// validation on, a conditional-check failure would surface as
			// a checksum error instead.
			o.DisableValidateResponseChecksum = true
		}
	})
	c.S3 = s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.S3Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.S3Endpoint)
		}
		o.UsePathStyle = cfg.S3PathStyle
	})
	return c, nil
}

// NewAWS resolves cfg's secret references and returns the deployed
// dependencies: the schema file, DynamoDB store, S3 segment store and
// presigner, and the grant reader.
func NewAWS(ctx context.Context, cfg *config.Config, logger *slog.Logger) (Deps, error) {
	sch, err := LoadSchema(cfg)
	if err != nil {
		return Deps{}, err
	}
	clients, err := NewAWSClients(ctx, cfg)
	if err != nil {
		return Deps{}, err
	}
	return AWSDeps(ctx, cfg, logger, sch, clients)
}

// LoadSchema reads the deployment's schema file (SYNC_SCHEMA_PATH).
func LoadSchema(cfg *config.Config) (*schema.Schema, error) {
	sch, err := schema.ReadFile(cfg.SchemaFile())
	if err != nil {
		return nil, fmt.Errorf("load schema %s (SYNC_SCHEMA_PATH): %w", cfg.SchemaFile(), err)
	}
	return sch, nil
}

// AWSDeps is NewAWS over clients already built (the realtime tier shares
// them with its instance registry).
func AWSDeps(ctx context.Context, cfg *config.Config, logger *slog.Logger, sch *schema.Schema, clients *AWSClients) (Deps, error) {
	if err := ResolveKeys(ctx, clients.Config, cfg); err != nil {
		return Deps{}, err
	}
	segs := NewS3Segments(clients, cfg)
	bs := s3blobs.New(clients.S3, cfg.Bucket, "")
	return Deps{
		Blobs:         bs,
		BlobPresigner: bs,
		Schema:        sch,
		Store:         dynamostore.New(clients.DynamoDB, cfg.TableName, dynamostore.Options{OutcomeTTL: cfg.OutcomeTTL, TransactionalCommits: !cfg.SmallCommits}),
		Segments:      segs,
		Presigner:     segs,
		Grants:        clients.DynamoDB,
		PKAttr:        dynamostore.AttrPK,
		SKAttr:        dynamostore.AttrSK,
		Logger:        logger,
		Meter:         DynamoMeter,
	}, nil
}

// DynamoMeter accumulates a request's DynamoDB cost (round trips and the
// capacity DynamoDB reports) for its log line.
func DynamoMeter(ctx context.Context) (context.Context, func() []slog.Attr) {
	ctx, c := dynamostore.WithCapacity(ctx)
	return ctx, func() []slog.Attr {
		u := c.Snapshot()
		return []slog.Attr{slog.Int("ddbRoundTrips", u.RoundTrips), slog.Float64("rcu", u.RCU), slog.Float64("wcu", u.WCU)}
	}
}
