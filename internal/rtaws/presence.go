package rtaws

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/realtime"
	ds "github.com/skyfold/syncular-lambda/internal/dynamostore"
)

// Presence on AWS (§8.6). Without a resident process the registry lives
// in the table, beside the connection items:
//
//	item              pk                       sk
//	presence          P#<p>#PR#<scope key>     <connectionId>   actor, client, doc, ttl
//
// and the connection item's "pres" string set names the keys the
// connection has a document on, so $disconnect (or a GoneException) can
// take them back and fan the leaves. Events go to the connections indexed
// under the scope key (P#<p>#RK#<key>), the same scope-mates the local hub
// reaches (§8.6.3), through the same management API client as deltas.
// Presence items carry the connection's TTL: a connection whose
// $disconnect never ran loses its documents when its items expire.
const aPres, aDoc = "pres", "doc"

func presencePK(partition, key string) string {
	return ds.PartitionPK(partition) + "#PR#" + ds.Esc(key)
}

func (s *Service) maxPresence() int {
	if s.MaxPresenceBytes <= 0 {
		return realtime.DefaultMaxPresenceBytes
	}
	return s.MaxPresenceBytes
}

// publish handles a §8.6.2 publish: a key the connection is not
// registered on is forbidden, a document over the cap is too large (both
// answered to the publisher only), a null doc leaves, anything else joins
// (first document on the key) or updates.
func (s *Service) publish(ctx context.Context, c *conn, p *realtime.PresencePublish) error {
	now := s.Engine.Now()
	if !slices.Contains(c.keys, p.ScopeKey) {
		return s.post(ctx, c, realtime.EncodePresenceError(p.ScopeKey, realtime.PresenceForbidden, now))
	}
	if p.Doc == nil {
		return s.leave(ctx, c, p.ScopeKey, true)
	}
	if len(p.Doc) > s.maxPresence() {
		return s.post(ctx, c, realtime.EncodePresenceError(p.ScopeKey, realtime.PresenceTooLarge, now))
	}
	// The connection records the key first, conditionally on still
	// existing: a publish racing $disconnect leaves no document behind
	// that the disconnect could not see (short of the TTL).
	_, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.Table), Key: ds.Key(connPK(c.id), connSK),
		UpdateExpression:          aws.String("ADD #pres :k"),
		ConditionExpression:       aws.String("attribute_exists(#pk)"),
		ExpressionAttributeNames:  map[string]string{"#pres": aPres, "#pk": ds.AttrPK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":k": &types.AttributeValueMemberSS{Value: []string{p.ScopeKey}}},
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return nil // disconnected meanwhile
	}
	if err != nil {
		return err
	}
	item := ds.Key(presencePK(c.partition, p.ScopeKey), c.id)
	item[aActor], item[aClient], item[aDoc] = ds.S(c.actor), ds.S(c.client), ds.S(string(p.Doc))
	item[ds.TTLAttribute] = ds.N(time.Now().Add(ConnectionTTL).Unix())
	out, err := s.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.Table), Item: item, ReturnValues: types.ReturnValueAllOld})
	if err != nil {
		return err
	}
	kind := realtime.KindUpdate
	if len(out.Attributes) == 0 {
		kind = realtime.KindJoin
	}
	return s.fanPresence(ctx, c.partition, c.id, realtime.PresenceFanout{
		ScopeKey: p.ScopeKey, Kind: kind, ActorID: c.actor, ClientID: c.client, Doc: json.RawMessage(p.Doc), Timestamp: now,
	})
}

// leave removes c's document on key and fans a leave (§8.6.4) when there
// was one. updateConn also drops the key from the connection item (not
// needed when the connection item is being deleted).
func (s *Service) leave(ctx context.Context, c *conn, key string, updateConn bool) error {
	out, err := s.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(s.Table), Key: ds.Key(presencePK(c.partition, key), c.id), ReturnValues: types.ReturnValueAllOld,
	})
	if err != nil {
		return err
	}
	if updateConn {
		_, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(s.Table), Key: ds.Key(connPK(c.id), connSK),
			UpdateExpression:          aws.String("DELETE #pres :k"),
			ConditionExpression:       aws.String("attribute_exists(#pk)"),
			ExpressionAttributeNames:  map[string]string{"#pres": aPres, "#pk": ds.AttrPK},
			ExpressionAttributeValues: map[string]types.AttributeValue{":k": &types.AttributeValueMemberSS{Value: []string{key}}},
		})
		var ccf *types.ConditionalCheckFailedException
		if err != nil && !errors.As(err, &ccf) {
			return err
		}
	}
	if len(out.Attributes) == 0 {
		return nil // no document there: nothing to announce
	}
	return s.fanPresence(ctx, c.partition, c.id, realtime.PresenceFanout{
		ScopeKey: key, Kind: realtime.KindLeave, ActorID: c.actor, ClientID: c.client, Timestamp: s.Engine.Now(),
	})
}

// fanPresence posts ev to every connection indexed under its scope key
// except from. A gone connection is disconnected (its own documents leave
// in turn); another failed post affects only its connection.
func (s *Service) fanPresence(ctx context.Context, partition, from string, ev realtime.PresenceFanout) error {
	ids, err := s.querySKs(ctx, indexPK(partition, ev.ScopeKey))
	if err != nil {
		return err
	}
	msg := realtime.EncodePresence(ev)
	for _, id := range ids {
		if id == from {
			continue
		}
		err := s.Posts.Post(ctx, id, msg)
		switch {
		case errors.Is(err, ErrGone):
			if err := s.Disconnect(ctx, id); err != nil {
				s.log().Warn("realtime: drop gone connection", "connection", id, "error", err.Error())
			}
		case err != nil:
			s.log().Warn("realtime: presence post", "connection", id, "error", err.Error())
		}
	}
	return nil
}

// joinBurst sends a new connection the documents already present on its
// keys as joins (§8.6.3 snapshot), after its hello.
func (s *Service) joinBurst(ctx context.Context, c *conn) error {
	now := s.Engine.Now()
	for _, k := range c.keys {
		var start map[string]types.AttributeValue
		for {
			out, err := s.DB.Query(ctx, &dynamodb.QueryInput{
				TableName: aws.String(s.Table), KeyConditionExpression: aws.String("#pk = :pk"),
				ExpressionAttributeNames:  map[string]string{"#pk": ds.AttrPK},
				ExpressionAttributeValues: map[string]types.AttributeValue{":pk": ds.S(presencePK(c.partition, k))},
				ExclusiveStartKey:         start, ConsistentRead: aws.Bool(true),
			})
			if err != nil {
				return err
			}
			s.read(1)
			for _, it := range out.Items {
				str := func(a string) string {
					v, _ := it[a].(*types.AttributeValueMemberS)
					if v == nil {
						return ""
					}
					return v.Value
				}
				if str(ds.AttrSK) == c.id {
					continue
				}
				ev := realtime.PresenceFanout{ScopeKey: k, Kind: realtime.KindJoin, ActorID: str(aActor), ClientID: str(aClient), Doc: json.RawMessage(str(aDoc)), Timestamp: now}
				if err := s.post(ctx, c, realtime.EncodePresence(ev)); err != nil {
					return err
				}
			}
			if start = out.LastEvaluatedKey; start == nil {
				break
			}
		}
	}
	return nil
}

// querySKs returns the sort keys of one item collection.
func (s *Service) querySKs(ctx context.Context, pk string) ([]string, error) {
	var ids []string
	var start map[string]types.AttributeValue
	for {
		out, err := s.DB.Query(ctx, &dynamodb.QueryInput{
			TableName: aws.String(s.Table), KeyConditionExpression: aws.String("#pk = :pk"),
			ExpressionAttributeNames:  map[string]string{"#pk": ds.AttrPK, "#sk": ds.AttrSK},
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": ds.S(pk)},
			ExclusiveStartKey:         start, ProjectionExpression: aws.String("#sk"),
		})
		if err != nil {
			return nil, err
		}
		s.read(1)
		for _, it := range out.Items {
			if v, ok := it[ds.AttrSK].(*types.AttributeValueMemberS); ok {
				ids = append(ids, v.Value)
			}
		}
		if start = out.LastEvaluatedKey; start == nil {
			return ids, nil
		}
	}
}
