package stack

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	st "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// streamPollInterval is how often each shard is read: Lambda's event
// source mapping polls a DynamoDB stream shard about four times a second.
const streamPollInterval = 250 * time.Millisecond

// StreamStats counts what the stream consumer did since the stack started.
type StreamStats struct {
	Records   int64 // stream records read
	Filtered  int64 // records the mapping's filters dropped
	Batches   int64 // invocations of the function (retries included)
	Failures  int64 // invocations that failed (function error or no answer)
	Bisects   int64 // failed batches split in two
	Discarded int64 // records given up on (retries exhausted or too old): the on-failure destination
}

// consumer plays the event source mapping: it reads every shard of the
// table's stream in order, drops what the filters do not pass, and invokes
// the function with batches of the template's size, retrying a failed
// batch as many times as the template allows, bisecting it when the
// template says so, and giving up on records past the retries or the
// maximum record age (logged as what would go to the on-failure
// destination). A shard's later records wait until its batch is settled,
// as Lambda keeps a shard's order.
type consumer struct {
	streams *dynamodbstreams.Client
	arn     string
	region  string
	m       *mapping
	invoke  func(ctx context.Context, payload []byte) (resp []byte, fnErr bool, err error)
	log     *slog.Logger
	iters   map[string]*string
	done    map[string]bool // closed shards read to their end
	// failing, when set, makes every invocation fail as a function error
	// (a fault the tests inject: the retries, bisect and give-up run as
	// for a real failure).
	failing atomic.Bool

	records, filtered, batches, failures, bisects, discarded atomic.Int64
}

func (c *consumer) Stats() StreamStats {
	return StreamStats{
		Records: c.records.Load(), Filtered: c.filtered.Load(), Batches: c.batches.Load(),
		Failures: c.failures.Load(), Bisects: c.bisects.Load(), Discarded: c.discarded.Load(),
	}
}

// run polls until ctx ends.
func (c *consumer) run(ctx context.Context) {
	c.iters, c.done = map[string]*string{}, map[string]bool{}
	t := time.NewTicker(streamPollInterval)
	defer t.Stop()
	for {
		if err := c.poll(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("stream consumer: poll", "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// poll reads every shard from where the last poll stopped (TRIM_HORIZON
// the first time: the table is created by the stack, so nothing of the
// stream predates it) and delivers what it read.
func (c *consumer) poll(ctx context.Context) error {
	d, err := c.streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(c.arn)})
	if err != nil {
		return fmt.Errorf("describe stream: %w", err)
	}
	for _, sh := range d.StreamDescription.Shards {
		id := aws.ToString(sh.ShardId)
		if c.done[id] {
			continue
		}
		if p := aws.ToString(sh.ParentShardId); p != "" && c.iters[p] != nil && !c.done[p] {
			continue // a child waits for its parent, as Lambda orders them
		}
		it := c.iters[id]
		if it == nil {
			out, err := c.streams.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{
				StreamArn: aws.String(c.arn), ShardId: sh.ShardId, ShardIteratorType: st.ShardIteratorTypeTrimHorizon,
			})
			if err != nil {
				return fmt.Errorf("shard iterator %s: %w", id, err)
			}
			it = out.ShardIterator
		}
		for it != nil {
			out, err := c.streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: it})
			if err != nil {
				return fmt.Errorf("get records %s: %w", id, err)
			}
			c.deliver(ctx, out.Records)
			c.iters[id] = out.NextShardIterator
			if out.NextShardIterator == nil {
				c.done[id] = true
			}
			if len(out.Records) == 0 {
				break
			}
			it = out.NextShardIterator
		}
	}
	return nil
}

// deliver filters records and hands them on in batches, in order.
func (c *consumer) deliver(ctx context.Context, recs []st.Record) {
	var pass []map[string]any
	for _, r := range recs {
		c.records.Add(1)
		doc := c.lambdaRecord(r)
		if !matchesAny(c.m.Filters, doc) {
			c.filtered.Add(1)
			continue
		}
		pass = append(pass, doc)
	}
	for len(pass) > 0 && ctx.Err() == nil {
		n := min(len(pass), max(c.m.BatchSize, 1))
		c.settle(ctx, pass[:n], c.m.MaxRetries, 0)
		pass = pass[n:]
	}
}

// settle invokes the function with batch until it succeeds, the retries
// run out or the records are too old. retries < 0 retries without end.
func (c *consumer) settle(ctx context.Context, batch []map[string]any, retries, attempt int) {
	for ctx.Err() == nil {
		if old := c.tooOld(batch); old > 0 {
			c.giveUp(batch[:old], "record age")
			batch = batch[old:]
			if len(batch) == 0 {
				return
			}
		}
		failedFrom, ok := c.invokeBatch(ctx, batch)
		if ok {
			return
		}
		batch = batch[failedFrom:] // reported item failures: retry from the first
		if c.m.Bisect && len(batch) > 1 {
			// A split is not a retry (Lambda's retry count starts anew for
			// each half).
			c.bisects.Add(1)
			half := len(batch) / 2
			c.settle(ctx, batch[:half], retries, attempt)
			c.settle(ctx, batch[half:], retries, attempt)
			return
		}
		if retries == 0 {
			c.giveUp(batch, "retries exhausted")
			return
		}
		retries--
		attempt++
		select {
		case <-ctx.Done():
		case <-time.After(min(time.Duration(1<<min(attempt, 5))*50*time.Millisecond, 2*time.Second)):
		}
	}
}

// invokeBatch sends one DynamoDBEvent. On failure it returns the index of
// the first record to retry (0 unless the function reported item
// failures and the mapping lets it).
func (c *consumer) invokeBatch(ctx context.Context, batch []map[string]any) (int, bool) {
	payload, err := json.Marshal(map[string]any{"Records": batch})
	if err != nil {
		c.log.Error("stream consumer: encode event", "error", err.Error())
		return 0, false
	}
	c.batches.Add(1)
	if c.failing.Load() {
		c.failures.Add(1)
		return 0, false
	}
	resp, fnErr, err := c.invoke(ctx, payload)
	if err != nil || fnErr {
		c.failures.Add(1)
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		c.log.Warn("stream consumer: batch failed", "records", len(batch), "functionError", fnErr, "error", msg)
		return 0, false
	}
	if !c.m.ReportFailures {
		return 0, true
	}
	var r struct {
		BatchItemFailures []struct {
			ItemIdentifier string `json:"itemIdentifier"`
		} `json:"batchItemFailures"`
	}
	if json.Unmarshal(resp, &r) != nil || len(r.BatchItemFailures) == 0 {
		return 0, true
	}
	c.failures.Add(1)
	first := len(batch)
	for _, f := range r.BatchItemFailures {
		for i, rec := range batch {
			if seqOf(rec) == f.ItemIdentifier && i < first {
				first = i
			}
		}
	}
	if first == len(batch) {
		return 0, false // an identifier that names no record fails the whole batch, as Lambda does
	}
	return first, false
}

// tooOld counts the leading records older than the maximum record age.
func (c *consumer) tooOld(batch []map[string]any) int {
	if c.m.MaxRecordAge < 0 {
		return 0
	}
	limit := float64(time.Now().Add(-time.Duration(c.m.MaxRecordAge) * time.Second).Unix())
	n := 0
	for _, r := range batch {
		ts, _ := r["dynamodb"].(map[string]any)["ApproximateCreationDateTime"].(float64)
		if ts >= limit {
			break
		}
		n++
	}
	return n
}

// giveUp is the on-failure destination: the records' keys are logged.
func (c *consumer) giveUp(batch []map[string]any, why string) {
	c.discarded.Add(int64(len(batch)))
	seqs := make([]string, 0, len(batch))
	for _, r := range batch {
		seqs = append(seqs, seqOf(r))
	}
	sort.Strings(seqs)
	c.log.Error("stream consumer: records dropped to the on-failure destination", "reason", why, "records", len(batch),
		"firstSequence", seqs[0], "lastSequence", seqs[len(seqs)-1], "destinationDeclared", c.m.OnFailure)
}

func seqOf(rec map[string]any) string {
	s, _ := rec["dynamodb"].(map[string]any)["SequenceNumber"].(string)
	return s
}

// lambdaRecord is the record as Lambda passes it to the function (and as
// filter patterns see it).
func (c *consumer) lambdaRecord(r st.Record) map[string]any {
	ddb := map[string]any{}
	if d := r.Dynamodb; d != nil {
		if d.ApproximateCreationDateTime != nil {
			ddb["ApproximateCreationDateTime"] = float64(d.ApproximateCreationDateTime.Unix())
		}
		ddb["Keys"] = attrMap(d.Keys)
		if d.NewImage != nil {
			ddb["NewImage"] = attrMap(d.NewImage)
		}
		if d.OldImage != nil {
			ddb["OldImage"] = attrMap(d.OldImage)
		}
		ddb["SequenceNumber"] = aws.ToString(d.SequenceNumber)
		ddb["SizeBytes"] = aws.ToInt64(d.SizeBytes)
		ddb["StreamViewType"] = string(d.StreamViewType)
	}
	return map[string]any{
		"eventID": aws.ToString(r.EventID), "eventName": string(r.EventName), "eventVersion": aws.ToString(r.EventVersion),
		"eventSource": "aws:dynamodb", "awsRegion": c.region, "eventSourceARN": c.arn, "dynamodb": ddb,
	}
}

func attrMap(m map[string]st.AttributeValue) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = attrJSON(v)
	}
	return out
}

// attrJSON renders an attribute value in the stream's JSON form.
func attrJSON(v st.AttributeValue) map[string]any {
	switch v := v.(type) {
	case *st.AttributeValueMemberS:
		return map[string]any{"S": v.Value}
	case *st.AttributeValueMemberN:
		return map[string]any{"N": v.Value}
	case *st.AttributeValueMemberB:
		return map[string]any{"B": v.Value}
	case *st.AttributeValueMemberBOOL:
		return map[string]any{"BOOL": v.Value}
	case *st.AttributeValueMemberNULL:
		return map[string]any{"NULL": v.Value}
	case *st.AttributeValueMemberSS:
		return map[string]any{"SS": v.Value}
	case *st.AttributeValueMemberNS:
		return map[string]any{"NS": v.Value}
	case *st.AttributeValueMemberBS:
		return map[string]any{"BS": v.Value}
	case *st.AttributeValueMemberM:
		return map[string]any{"M": attrMap(v.Value)}
	case *st.AttributeValueMemberL:
		l := make([]any, len(v.Value))
		for i, e := range v.Value {
			l[i] = attrJSON(e)
		}
		return map[string]any{"L": l}
	}
	return map[string]any{"NULL": true}
}
