package rtaws

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/realtime"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	ds "github.com/skyfold/syncular-lambda/internal/dynamostore"
)

// Item layout, beside dynamostore's (same table, same key attributes):
//
//	item              pk                       sk
//	connection        RTC#<connectionId>       C
//	scope-key index   P#<p>#RK#<scope key>     <connectionId>
//	registry entry    RTR#<shard>              <connectionId>  (heartbeat.go)
//
// The index is what makes the fanout's reads independent of unrelated
// connections: a commit reads exactly the index partitions of the scope
// keys it touches, then the connections found there (BatchGetItem).
// Both carry the table's TTL attribute, so connections whose $disconnect
// never ran (API Gateway does not guarantee it) expire.
const (
	connSK = "C"

	aPart, aActor, aClient = "part", "actor", "client"
	aVer, aSV, aEpoch      = "ver", "sv", "epoch"
	aRegs, aKeys           = "regs", "keys"
	aSeq, aSup             = "seq", "sup" // last delivered commit seq; suppressed (§8.2)
	aCursor, aLatest       = "cursor", "latest"
)

// ConnectionTTL bounds a connection item's life: API Gateway closes a
// WebSocket after 2 hours at most.
const ConnectionTTL = 2*time.Hour + 10*time.Minute

func connPK(id string) string { return "RTC#" + id }

func indexPK(partition, key string) string {
	return ds.PartitionPK(partition) + "#RK#" + ds.Esc(key)
}

// Service handles the realtime routes and the fanout.
type Service struct {
	DB     *dynamodb.Client
	Table  string
	Engine *engine.Engine
	Store  store.Store
	Posts  Poster
	// MaxMessageBytes is API Gateway's message limit (128 KiB): a larger
	// delta becomes a delta-too-large wake-up (§8.3), never a truncation.
	MaxMessageBytes int
	// MaxPresenceBytes caps a published presence document (§8.6.2;
	// default realtime.DefaultMaxPresenceBytes).
	MaxPresenceBytes int
	Logger           *slog.Logger
	// Reads counts DynamoDB read calls on the fanout path (tests, notes).
	Reads func(n int)
}

func (s *Service) log() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

func (s *Service) read(n int) {
	if s.Reads != nil {
		s.Reads(n)
	}
}

func (s *Service) maxMsg() int {
	if s.MaxMessageBytes <= 0 {
		return realtime.DefaultMaxMessageBytes
	}
	return s.MaxMessageBytes
}

// conn is a connection item.
type conn struct {
	id, partition, actor, client, epoch string
	version                             uint16
	schemaVersion                       int32
	regs                                []engine.Registration
	keys                                []string
	pres                                []string // keys with a presence document
	seq, cursor, latest                 int64
	suppressed                          bool
	regsRaw                             string
}

// Connect registers a connection (§8.1): the engine attaches the client
// (actor binding, registrations of its last pull), and the connection and
// its index entries are written. The hello goes out from the stream
// (HandleStream) once API Gateway has established the connection — a
// $connect integration cannot post to its own connection.
func (s *Service) Connect(ctx context.Context, id string, auth engine.Auth, clientID string) error {
	a, err := s.Engine.Attach(ctx, auth, clientID)
	if err != nil {
		return err
	}
	cursor := int64(-1)
	if a.Client != nil {
		cursor = a.Client.Cursor
	}
	latest := a.Head.MaxCommitSeq
	requiresSync := a.Client == nil || a.Client.Registration == "" || cursor < latest
	regs, err := json.Marshal(a.Registrations)
	if err != nil {
		return err
	}
	keys := s.Engine.ScopeKeys(a.SchemaVersion, a.Registrations)
	// DynamoDB TTL and API Gateway's connection limit run on wall time,
	// not on the engine's clock (which tests and replays may set).
	ttl := ds.N(time.Now().Add(ConnectionTTL).Unix())
	item := ds.Key(connPK(id), connSK)
	item[aPart], item[aActor], item[aClient] = ds.S(auth.Partition), ds.S(auth.ActorID), ds.S(clientID)
	item[aVer], item[aSV], item[aEpoch] = ds.N(int64(a.WireVersion)), ds.N(int64(a.SchemaVersion)), ds.S(a.Head.LogEpoch)
	item[aRegs], item[aSeq], item[aSup] = ds.B(regs), ds.N(latest), ds.BOOL(requiresSync)
	item[aCursor], item[aLatest] = ds.N(cursor), ds.N(latest)
	item[ds.TTLAttribute] = ttl
	if len(keys) > 0 {
		l := make([]types.AttributeValue, len(keys))
		for i, k := range keys {
			l[i] = ds.S(k)
		}
		item[aKeys] = &types.AttributeValueMemberL{Value: l}
	}
	// Index entries first: a connection item is the stream's cue to
	// send hello, and by then the fanout must already find it.
	var reqs []types.WriteRequest
	for _, k := range keys {
		it := ds.Key(indexPK(auth.Partition, k), id)
		it[ds.TTLAttribute] = ttl
		reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: it}})
	}
	reg := registryKey(id) // heartbeat.go
	reg[ds.TTLAttribute] = ttl
	reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: reg}})
	if err := s.batchWrite(ctx, reqs); err != nil {
		return err
	}
	_, err = s.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.Table), Item: item})
	return err
}

func (s *Service) batchWrite(ctx context.Context, reqs []types.WriteRequest) error {
	for len(reqs) > 0 {
		n := min(len(reqs), 25)
		batch := map[string][]types.WriteRequest{s.Table: reqs[:n]}
		reqs = reqs[n:]
		for tries := 0; len(batch) > 0; tries++ {
			out, err := s.DB.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: batch})
			if err != nil {
				return err
			}
			if batch = out.UnprocessedItems; len(batch) > 0 {
				if tries > 8 {
					return errors.New("rtaws: batch write kept unprocessed items")
				}
				time.Sleep(time.Duration(10<<tries) * time.Millisecond)
			}
		}
	}
	return nil
}

func (s *Service) getConn(ctx context.Context, id string) (*conn, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.Table), Key: ds.Key(connPK(id), connSK), ConsistentRead: aws.Bool(true)})
	s.read(1)
	if err != nil || out.Item == nil {
		return nil, err
	}
	return parseConn(id, out.Item)
}

func parseConn(id string, it map[string]types.AttributeValue) (*conn, error) {
	c := &conn{id: id}
	str := func(k string) string {
		if v, ok := it[k].(*types.AttributeValueMemberS); ok {
			return v.Value
		}
		return ""
	}
	num := func(k string) int64 {
		if v, ok := it[k].(*types.AttributeValueMemberN); ok {
			n, _ := strconv.ParseInt(v.Value, 10, 64)
			return n
		}
		return 0
	}
	c.partition, c.actor, c.client, c.epoch = str(aPart), str(aActor), str(aClient), str(aEpoch)
	c.version, c.schemaVersion = uint16(num(aVer)), int32(num(aSV))
	c.seq, c.cursor, c.latest = num(aSeq), num(aCursor), num(aLatest)
	if v, ok := it[aSup].(*types.AttributeValueMemberBOOL); ok {
		c.suppressed = v.Value
	}
	if v, ok := it[aRegs].(*types.AttributeValueMemberB); ok {
		c.regsRaw = string(v.Value)
		if err := json.Unmarshal(v.Value, &c.regs); err != nil {
			return nil, fmt.Errorf("rtaws: connection %s registrations: %w", id, err)
		}
	}
	if v, ok := it[aPres].(*types.AttributeValueMemberSS); ok {
		c.pres = v.Value
	}
	if v, ok := it[aKeys].(*types.AttributeValueMemberL); ok {
		for _, k := range v.Value {
			if s, ok := k.(*types.AttributeValueMemberS); ok {
				c.keys = append(c.keys, s.Value)
			}
		}
	}
	return c, nil
}

// Disconnect removes the connection, its index entries and its presence
// documents, whose leaves go to the scope-mates (§8.6.1) ($disconnect, or
// a GoneException on a post).
func (s *Service) Disconnect(ctx context.Context, id string) error {
	c, err := s.getConn(ctx, id)
	if err != nil || c == nil {
		return err
	}
	return s.drop(ctx, c)
}

func (s *Service) drop(ctx context.Context, c *conn) error {
	reqs := []types.WriteRequest{
		{DeleteRequest: &types.DeleteRequest{Key: ds.Key(connPK(c.id), connSK)}},
		{DeleteRequest: &types.DeleteRequest{Key: registryKey(c.id)}},
	}
	for _, k := range c.keys {
		reqs = append(reqs, types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: ds.Key(indexPK(c.partition, k), c.id)}})
	}
	if err := s.batchWrite(ctx, reqs); err != nil {
		return err
	}
	for _, k := range c.pres {
		if err := s.leave(ctx, c, k, false); err != nil {
			s.log().Warn("realtime: presence leave", "connection", c.id, "error", err.Error())
		}
	}
	return nil
}

// Hello sends the §8.1 hello of a newly registered connection, then the
// presence documents already on its keys (§8.6.3).
func (s *Service) Hello(ctx context.Context, id string) error {
	c, err := s.getConn(ctx, id)
	if err != nil || c == nil {
		return err
	}
	msg := realtime.EncodeHello(realtime.Hello{
		ProtocolVersion: 1, SessionID: id, ActorID: c.actor, ClientID: c.client,
		Cursor: c.cursor, LatestCursor: c.latest, RequiresSync: c.suppressed, Timestamp: s.Engine.Now(),
	})
	if err := s.post(ctx, c, msg); err != nil {
		return err
	}
	return s.joinBurst(ctx, c)
}

// post sends msg; a gone connection is dropped.
func (s *Service) post(ctx context.Context, c *conn, msg []byte) error {
	err := s.Posts.Post(ctx, c.id, msg)
	if errors.Is(err, ErrGone) {
		if derr := s.drop(ctx, c); derr != nil {
			s.log().Warn("realtime: drop gone connection", "connection", c.id, "error", derr.Error())
		}
		return nil
	}
	return err
}

// Message handles one client→server text message on $default: an ack
// (§8.2) persists the cursor and, reaching everything delivered, lifts
// suppression; a presence publish joins, updates or leaves (§8.6,
// presence.go). Unknown JSON is tolerated (§8.1).
func (s *Service) Message(ctx context.Context, id string, body []byte) error {
	m, err := realtime.Parse(body)
	if err != nil {
		return nil
	}
	c, err := s.getConn(ctx, id)
	if err != nil || c == nil {
		return err
	}
	switch m := m.(type) {
	case *realtime.Ack:
		if _, err := s.Engine.Ack(ctx, engine.Auth{Partition: c.partition, ActorID: c.actor}, c.client, c.epoch, m.Cursor); err != nil {
			return err
		}
		if m.Cursor >= c.seq && c.suppressed {
			_, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName: aws.String(s.Table), Key: ds.Key(connPK(id), connSK),
				UpdateExpression:          aws.String("SET #sup = :f"),
				ConditionExpression:       aws.String("attribute_exists(#sup) AND #seq <= :c"),
				ExpressionAttributeNames:  map[string]string{"#sup": aSup, "#seq": aSeq},
				ExpressionAttributeValues: map[string]types.AttributeValue{":f": ds.BOOL(false), ":c": ds.N(m.Cursor)},
			})
			var ccf *types.ConditionalCheckFailedException
			if err != nil && !errors.As(err, &ccf) {
				return err
			}
		}
	case *realtime.PresencePublish:
		return s.publish(ctx, c, m)
	}
	return nil
}

// Fanout delivers the commit (partition, seq) to the connections whose
// registered scope keys it touches (§8.2). Per connection, the
// last-delivered seq advances conditionally, so a stream record that is
// delivered twice posts the delta once; a commit older than what was
// delivered (reordering) becomes a catchup-required wake-up. A delta over
// the message limit becomes a delta-too-large wake-up (§8.3). A failed
// post affects only its connection. It returns the number of posts.
func (s *Service) Fanout(ctx context.Context, partition string, seq int64) (int, error) {
	var c *store.Commit
	err := s.Store.ReadLog(ctx, partition, seq-1, seq, func(x *store.Commit) bool { c = x; return false })
	s.read(1)
	if err != nil {
		return 0, err
	}
	if c == nil {
		return 0, nil // pruned before the stream caught up
	}
	ids := map[string]bool{}
	for _, k := range s.Engine.CommitScopeKeys(c) {
		var start map[string]types.AttributeValue
		for {
			out, err := s.DB.Query(ctx, &dynamodb.QueryInput{
				TableName: aws.String(s.Table), KeyConditionExpression: aws.String("#pk = :pk"),
				ExpressionAttributeNames:  map[string]string{"#pk": ds.AttrPK, "#sk": ds.AttrSK},
				ExpressionAttributeValues: map[string]types.AttributeValue{":pk": ds.S(indexPK(partition, k))},
				ExclusiveStartKey:         start, ProjectionExpression: aws.String("#sk"),
			})
			if err != nil {
				return 0, err
			}
			s.read(1)
			for _, it := range out.Items {
				if v, ok := it[ds.AttrSK].(*types.AttributeValueMemberS); ok {
					ids[v.Value] = true
				}
			}
			if start = out.LastEvaluatedKey; start == nil {
				break
			}
		}
	}
	conns, err := s.batchGet(ctx, ids)
	if err != nil {
		return 0, err
	}
	deltas := map[string][]byte{}
	posts := 0
	now := s.Engine.Now()
	for _, cn := range conns {
		if cn.partition != partition {
			continue
		}
		fp := strconv.Itoa(int(cn.version)) + "/" + strconv.Itoa(int(cn.schemaVersion)) + "/" + cn.epoch + "/" + cn.regsRaw
		msg, ok := deltas[fp]
		if !ok {
			d, err := s.Engine.EncodeDelta(cn.version, cn.schemaVersion, cn.epoch, cn.regs, c)
			switch {
			case err != nil:
				s.log().Error("realtime: encode delta", "partition", partition, "seq", seq, "error", err.Error())
				msg = []byte{}
			case d != nil:
				msg = append([]byte{realtime.TagDelta}, d...)
			}
			deltas[fp] = msg
		}
		if msg == nil {
			continue // overlapping keys, but no registration matches all its scopes
		}
		first, older, err := s.advance(ctx, cn.id, seq, len(msg) == 0 || cn.suppressed || len(msg) > s.maxMsg())
		if err != nil {
			s.log().Warn("realtime: advance connection", "connection", cn.id, "error", err.Error())
			continue
		}
		var out []byte
		switch {
		case !first && !older:
			continue // a replayed stream record: already delivered
		case older || len(msg) == 0 || cn.suppressed:
			out = realtime.EncodeWake(seq, realtime.ReasonCatchupRequired, now)
		case len(msg) > s.maxMsg():
			out = realtime.EncodeWake(seq, realtime.ReasonDeltaTooLarge, now)
		default:
			out = msg
		}
		if err := s.post(ctx, cn, out); err != nil {
			s.log().Warn("realtime: post", "connection", cn.id, "error", err.Error())
			continue
		}
		posts++
	}
	return posts, nil
}

// advance moves the connection's last-delivered seq to seq when it is
// below it (first delivery), setting suppression when suppress. It
// reports older when the connection already got a later commit.
func (s *Service) advance(ctx context.Context, id string, seq int64, suppress bool) (first, older bool, err error) {
	upd := "SET #seq = :s"
	vals := map[string]types.AttributeValue{":s": ds.N(seq)}
	if suppress {
		upd += ", #sup = :t"
		vals[":t"] = ds.BOOL(true)
	}
	names := map[string]string{"#seq": aSeq}
	if suppress {
		names["#sup"] = aSup
	}
	_, err = s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.Table), Key: ds.Key(connPK(id), connSK),
		UpdateExpression: aws.String(upd), ConditionExpression: aws.String("#seq < :s"),
		ExpressionAttributeNames: names, ExpressionAttributeValues: vals,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		if ccf.Item == nil {
			return false, false, nil // gone meanwhile
		}
		if v, ok := ccf.Item[aSeq].(*types.AttributeValueMemberN); ok {
			if n, _ := strconv.ParseInt(v.Value, 10, 64); n > seq {
				return false, true, nil
			}
		}
		return false, false, nil
	}
	return err == nil, false, err
}

func (s *Service) batchGet(ctx context.Context, ids map[string]bool) ([]*conn, error) {
	var keys []map[string]types.AttributeValue
	for id := range ids {
		keys = append(keys, ds.Key(connPK(id), connSK))
	}
	var out []*conn
	for len(keys) > 0 {
		n := min(len(keys), 100)
		req := map[string]types.KeysAndAttributes{s.Table: {Keys: keys[:n], ConsistentRead: aws.Bool(true)}}
		keys = keys[n:]
		for tries := 0; len(req) > 0; tries++ {
			res, err := s.DB.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
			s.read(1)
			if err != nil {
				return nil, err
			}
			for _, it := range res.Responses[s.Table] {
				pk := it[ds.AttrPK].(*types.AttributeValueMemberS).Value
				c, err := parseConn(pk[len("RTC#"):], it)
				if err != nil {
					s.log().Warn("realtime: connection item", "error", err.Error())
					continue
				}
				out = append(out, c)
			}
			if req = res.UnprocessedKeys; len(req) > 0 {
				if tries > 8 {
					return nil, errors.New("rtaws: batch get kept unprocessed keys")
				}
				time.Sleep(time.Duration(10<<tries) * time.Millisecond)
			}
		}
	}
	return out, nil
}

// IsConnectionKey reports whether (pk, sk) is a connection item and
// returns its connection id (the stream's cue for hello).
func IsConnectionKey(pk, sk string) (string, bool) {
	if sk != connSK || len(pk) <= len("RTC#") || pk[:4] != "RTC#" {
		return "", false
	}
	return pk[4:], true
}
