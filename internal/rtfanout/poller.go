package rtfanout

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	st "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// Poller reads a table's stream the way Lambda's event source mapping
// does (every shard, in order) and hands each batch to Handle. The local
// runner and the tests use it against DynamoDB Local.
type Poller struct {
	Streams   *dynamodbstreams.Client
	StreamARN string
	Handle    func(ctx context.Context, recs []Record) error
	iters     map[string]*string
}

// Poll reads every shard once from where the previous Poll stopped
// (TRIM_HORIZON the first time) and returns the records handled.
func (p *Poller) Poll(ctx context.Context) (int, error) {
	if p.iters == nil {
		p.iters = map[string]*string{}
	}
	d, err := p.Streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(p.StreamARN)})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, sh := range d.StreamDescription.Shards {
		id := aws.ToString(sh.ShardId)
		it, seen := p.iters[id]
		if !seen {
			out, err := p.Streams.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{
				StreamArn: aws.String(p.StreamARN), ShardId: sh.ShardId, ShardIteratorType: st.ShardIteratorTypeTrimHorizon,
			})
			if err != nil {
				return n, err
			}
			it = out.ShardIterator
		}
		for it != nil {
			out, err := p.Streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: it})
			if err != nil {
				return n, err
			}
			recs := make([]Record, 0, len(out.Records))
			for _, r := range out.Records {
				if r.Dynamodb == nil {
					continue
				}
				pk, _ := r.Dynamodb.Keys["pk"].(*st.AttributeValueMemberS)
				sk, _ := r.Dynamodb.Keys["sk"].(*st.AttributeValueMemberS)
				if pk == nil || sk == nil {
					continue
				}
				recs = append(recs, Record{Event: string(r.EventName), PK: pk.Value, SK: sk.Value})
			}
			if len(recs) > 0 {
				if err := p.Handle(ctx, recs); err != nil {
					return n, err
				}
				n += len(recs)
			}
			p.iters[id] = out.NextShardIterator
			if len(out.Records) == 0 {
				break
			}
			it = out.NextShardIterator
		}
	}
	return n, nil
}

// Run polls every interval until ctx ends.
func (p *Poller) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := p.Poll(ctx); err != nil && ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
