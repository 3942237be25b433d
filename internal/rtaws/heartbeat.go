package rtaws

import (
	"context"
	"errors"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/realtime"
	ds "github.com/skyfold/syncular-lambda/internal/dynamostore"
)

// The connection registry lists every live connection so that the
// heartbeat job reaches them with Queries, never a table Scan:
//
//	item                 pk               sk
//	registry entry       RTR#<shard>      <connectionId>
//
// An entry is written with the connection's index entries on $connect
// and deleted with them (drop); it carries the connection's TTL. The
// shard is a hash of the connection id, spreading the writes of many
// $connects over RegistryShards partitions.
const RegistryShards = 16

func registryPK(shard int) string { return "RTR#" + strconv.Itoa(shard) }

func registryKey(id string) map[string]types.AttributeValue {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return ds.Key(registryPK(int(h.Sum32()%RegistryShards)), id)
}

// HeartbeatResult counts one heartbeat pass.
type HeartbeatResult struct {
	Sent, Gone, Failed int
	// Stopped is set when the pass ended at its deadline before reaching
	// every registered connection.
	Stopped bool
}

// DefaultHeartbeatParallel bounds the concurrent posts of a heartbeat pass.
const DefaultHeartbeatParallel = 32

// heartbeatMargin is left of the invocation's deadline when a pass stops.
const heartbeatMargin = 3 * time.Second

// Heartbeat sends a §8.5 heartbeat to every registered connection, with
// at most parallel posts in flight (≤ 0: DefaultHeartbeatParallel). API
// Gateway closes a WebSocket that is idle for 10 minutes; the heartbeat
// keeps a quiet connection open and lets the client see that the server
// is alive. A connection that answers GoneException is deleted with its
// index entries and presence (drop). The pass stops taking new
// connections heartbeatMargin before ctx's deadline; it starts at a
// random registry shard.
func (s *Service) Heartbeat(ctx context.Context, parallel int) (HeartbeatResult, error) {
	if parallel <= 0 {
		parallel = DefaultHeartbeatParallel
	}
	stopAt := time.Time{}
	if d, ok := ctx.Deadline(); ok {
		stopAt = d.Add(-heartbeatMargin)
	}
	expired := func() bool { return !stopAt.IsZero() && time.Now().After(stopAt) }
	msg := realtime.EncodeHeartbeat(s.Engine.Now())

	var (
		mu  sync.Mutex
		res HeartbeatResult
		wg  sync.WaitGroup
	)
	ids := make(chan string)
	for range parallel {
		wg.Go(func() {
			for id := range ids {
				err := s.Posts.Post(ctx, id, msg)
				if errors.Is(err, ErrGone) {
					if derr := s.dropGone(ctx, id); derr != nil {
						s.log().Warn("realtime: drop gone connection", "connection", id, "error", derr.Error())
					}
				} else if err != nil {
					s.log().Warn("realtime: heartbeat", "connection", id, "error", err.Error())
				}
				mu.Lock()
				switch {
				case errors.Is(err, ErrGone):
					res.Gone++
				case err != nil:
					res.Failed++
				default:
					res.Sent++
				}
				mu.Unlock()
			}
		})
	}
	var qerr error
	// A random first shard: a pass cut short at its deadline does not
	// always leave out the same connections.
	first := rand.IntN(RegistryShards)
shards:
	for i := range RegistryShards {
		shard := (first + i) % RegistryShards
		var start map[string]types.AttributeValue
		for {
			if expired() {
				res.Stopped = true
				break shards
			}
			out, err := s.DB.Query(ctx, &dynamodb.QueryInput{
				TableName: aws.String(s.Table), KeyConditionExpression: aws.String("#pk = :pk"),
				ExpressionAttributeNames:  map[string]string{"#pk": ds.AttrPK, "#sk": ds.AttrSK},
				ExpressionAttributeValues: map[string]types.AttributeValue{":pk": ds.S(registryPK(shard))},
				ExclusiveStartKey:         start, ProjectionExpression: aws.String("#sk"),
			})
			s.read(1)
			if err != nil {
				qerr = err
				break shards
			}
			for _, it := range out.Items {
				v, ok := it[ds.AttrSK].(*types.AttributeValueMemberS)
				if !ok {
					continue
				}
				if expired() {
					res.Stopped = true
					break shards
				}
				select {
				case ids <- v.Value:
				case <-ctx.Done():
					qerr = ctx.Err()
					break shards
				}
			}
			if start = out.LastEvaluatedKey; start == nil {
				break
			}
		}
	}
	close(ids)
	wg.Wait()
	return res, qerr
}

// dropGone deletes a connection that API Gateway reports gone; a
// registry entry whose connection item is already gone is deleted alone.
func (s *Service) dropGone(ctx context.Context, id string) error {
	c, err := s.getConn(ctx, id)
	if err != nil {
		return err
	}
	if c != nil {
		return s.drop(ctx, c)
	}
	_, err = s.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.Table), Key: registryKey(id)})
	return err
}
