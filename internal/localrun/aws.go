package localrun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/memstore"
	"github.com/skyfold/syncular-lambda/internal/s3blobs"
)

// awsDeps points the runner at real DynamoDB and/or S3 endpoints (DynamoDB
// Local, a local S3 server, or AWS itself). Whichever is not given stays in
// memory.
//
// The returned tableStream is the table's DynamoDB stream when it has
// one (-create enables it, KEYS_ONLY as in template.yaml): the runner's
// realtime fanout then reads it as the deployed fanout function does.
func awsDeps(ctx context.Context, cfg *config.Config, o options, sch *schema.Schema, logger *slog.Logger) (app.Deps, *tableStream, error) {
	var opts []func(*awsconfig.LoadOptions) error
	if os.Getenv("AWS_ACCESS_KEY_ID") == "" && os.Getenv("AWS_PROFILE") == "" {
		// Local emulators accept any credentials; skip the slow IMDS probe.
		opts = append(opts, awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("local", "local", "")))
	}
	if os.Getenv("AWS_REGION") == "" && os.Getenv("AWS_DEFAULT_REGION") == "" {
		opts = append(opts, awsconfig.WithRegion("us-east-1"))
	}
	clients, err := app.NewAWSClients(ctx, cfg, opts...)
	if err != nil {
		return app.Deps{}, nil, err
	}
	d := app.Deps{Schema: sch, Logger: logger, Store: memstore.New(memstore.WithOutcomeTTL(cfg.OutcomeTTL)), Segments: memstore.NewSegments()}
	var stream *tableStream
	if o.dynamoEndpoint != "" {
		if o.create {
			if err := dynamostore.CreateTable(ctx, clients.DynamoDB, cfg.TableName); err != nil {
				return app.Deps{}, nil, err
			}
		}
		arn, err := streamARN(ctx, clients.DynamoDB, cfg.TableName, o.create)
		if err != nil {
			return app.Deps{}, nil, err
		}
		if arn != "" {
			stream = &tableStream{arn: arn, client: dynamodbstreams.NewFromConfig(clients.Config, func(so *dynamodbstreams.Options) {
				so.BaseEndpoint = aws.String(cfg.DynamoDBEndpoint)
			})}
		}
		d.Store = dynamostore.New(clients.DynamoDB, cfg.TableName, dynamostore.Options{OutcomeTTL: cfg.OutcomeTTL, TransactionalCommits: !cfg.SmallCommits})
		d.Grants, d.PKAttr, d.SKAttr = clients.DynamoDB, dynamostore.AttrPK, dynamostore.AttrSK
		d.Meter = app.DynamoMeter
	}
	if o.s3Endpoint != "" {
		if o.create {
			if err := createBucket(ctx, clients.S3, cfg.Bucket); err != nil {
				return app.Deps{}, nil, err
			}
		}
		segs := app.NewS3Segments(clients, cfg)
		d.Segments, d.Presigner = segs, segs
		bs := s3blobs.New(clients.S3, cfg.Bucket, "")
		d.Blobs, d.BlobPresigner = bs, bs
	}
	return d, stream, nil
}

// tableStream is a table's DynamoDB stream.
type tableStream struct {
	arn    string
	client *dynamodbstreams.Client
}

// streamARN returns the table's stream ARN, "" when it has no stream.
// With enable (-create), a table without a stream gets the template's
// StreamSpecification (KEYS_ONLY: keys are all the fanout reads).
func streamARN(ctx context.Context, db *dynamodb.Client, table string, enable bool) (string, error) {
	d, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		return "", fmt.Errorf("describe table %s: %w", table, err)
	}
	if sp := d.Table.StreamSpecification; sp != nil && aws.ToBool(sp.StreamEnabled) {
		return aws.ToString(d.Table.LatestStreamArn), nil
	}
	if !enable {
		return "", nil
	}
	out, err := db.UpdateTable(ctx, &dynamodb.UpdateTableInput{TableName: aws.String(table), StreamSpecification: &ddbtypes.StreamSpecification{
		StreamEnabled: aws.Bool(true), StreamViewType: ddbtypes.StreamViewTypeKeysOnly,
	}})
	if err != nil {
		return "", fmt.Errorf("enable the stream of table %s: %w", table, err)
	}
	return aws.ToString(out.TableDescription.LatestStreamArn), nil
}

// createBucket creates the segment bucket unless it exists.
func createBucket(ctx context.Context, c *s3.Client, bucket string) error {
	_, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)})
	var owned *types.BucketAlreadyOwnedByYou
	var exists *types.BucketAlreadyExists
	if err != nil && !errors.As(err, &owned) && !errors.As(err, &exists) {
		return fmt.Errorf("create bucket %s: %w", bucket, err)
	}
	return nil
}
