package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/dynamostore"
)

// restorePollInterval is how often restore-prepare re-reads the table
// while it waits for the table and its stream to become active.
const restorePollInterval = 250 * time.Millisecond

// restorePrepare readies a restored table for `sam deploy
// ExistingTableName=…` (docs/OPERATIONS.md, point-in-time restore). A
// restore creates the table without a stream, and the template's fanout
// mapping reads ExistingTableStreamArn, so it enables the stream the
// template declares on its own table (dynamostore.StreamViewType), waits
// until the table is active with it, and prints the stream ARN and the
// deploy line. A stream that is already enabled is kept as it is: every
// view type carries the keys the fanout reads. It changes no item; the
// epoch rotation (SPEC §2.1) is the next, separate step.
func (a *admin) restorePrepare(ctx context.Context, table string, timeout time.Duration) int {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	db := a.clients.DynamoDB
	d, err := waitTableActive(ctx, db, table)
	if err != nil {
		a.fail("%v", err)
		return exitFailure
	}
	if s := d.StreamSpecification; s == nil || !aws.ToBool(s.StreamEnabled) {
		_, err := db.UpdateTable(ctx, &dynamodb.UpdateTableInput{
			TableName: aws.String(table),
			StreamSpecification: &types.StreamSpecification{
				StreamEnabled:  aws.Bool(true),
				StreamViewType: dynamostore.StreamViewType,
			},
		})
		if err != nil {
			a.fail("enable the stream of table %s: %v", table, err)
			return exitFailure
		}
		fmt.Fprintf(a.errw, "enabled a %s stream on table %s\n", dynamostore.StreamViewType, table)
		if d, err = waitTableActive(ctx, db, table); err != nil {
			a.fail("%v", err)
			return exitFailure
		}
	}
	arn := aws.ToString(d.LatestStreamArn)
	if s := d.StreamSpecification; s == nil || !aws.ToBool(s.StreamEnabled) || arn == "" {
		a.fail("table %s reports no enabled stream after enabling it", table)
		return exitFailure
	}
	fmt.Fprintln(a.out, "table\tstreamViewType\tstreamArn")
	fmt.Fprintf(a.out, "%s\t%s\t%s\n", table, d.StreamSpecification.StreamViewType, arn)
	fmt.Fprintf(a.errw, "table %s is ready for the stack; rotate its epochs (rotate-epoch -all -yes), then deploy with "+
		"the traffic-stop overrides kept:\n%s\n", table, deployLine(table, arn))
	return exitOK
}

// deployLine is the parameter part of the deploy that points the stack at
// a restored table and its stream (the template's Rule requires both).
func deployLine(table, streamArn string) string {
	return "sam deploy --parameter-overrides ExistingTableName=" + table + " ExistingTableStreamArn=" + streamArn
}

// waitTableActive re-reads the table until it is ACTIVE (a fresh restore
// or a stream change passes through CREATING/UPDATING) and returns its
// description.
func waitTableActive(ctx context.Context, db *dynamodb.Client, table string) (*types.TableDescription, error) {
	for {
		out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
		if err != nil {
			var nf *types.ResourceNotFoundException
			if errors.As(err, &nf) {
				return nil, fmt.Errorf("table %s does not exist (is the restore still starting?): %w", table, err)
			}
			return nil, fmt.Errorf("describe table %s: %w", table, err)
		}
		if d := out.Table; d != nil && d.TableStatus == types.TableStatusActive {
			return d, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("table %s is not active yet (run the command again): %w", table, context.Cause(ctx))
		case <-time.After(restorePollInterval):
		}
	}
}
