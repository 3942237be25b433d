package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// DefaultLastSeenRefresh is how stale the head's lastSeenAtMs may get
// before TouchPartition rewrites it (§2.1): coarse last-seen times are
// enough for retention, and skipping the write keeps a quiet pull at one
// consistent GetItem.
const DefaultLastSeenRefresh = 60 * time.Second

// ErrUnknownPartition reports a write to a partition TouchPartition never
// created (a caller bug: the engine always touches first).
var ErrUnknownPartition = fmt.Errorf("dynamostore: unknown partition: %w", store.ErrNotFound)

// Options configures a Store.
type Options struct {
	// LastSeenRefresh (default DefaultLastSeenRefresh).
	LastSeenRefresh time.Duration
	// Retry bounds retries of throttled or conflicting calls (zero fields
	// take DefaultRetryPolicy's).
	Retry RetryPolicy
	// ScanPageSize is the Query Limit of ScanRows pages (default 1000,
	// one bootstrap page: at most one page is over-read when fn stops).
	ScanPageSize int32
	// LogPageSize is the Query Limit of ReadLog pages (default 100 items).
	LogPageSize int32
	// AfterLogWrite, when set, runs after a large commit's log transaction
	// and before its rows are materialized; a non-nil error aborts Commit
	// there (crash injection for tests).
	AfterLogWrite func() error
}

// Store implements store.Store on one DynamoDB table.
type Store struct {
	db        *dynamodb.Client
	table     *string
	refreshMs int64
	retry     RetryPolicy
	scanPage  int32
	logPage   int32
	afterLog  func() error
}

var _ store.Store = (*Store)(nil)

// New returns a Store over table (created with CreateTable or the SAM
// template).
func New(client *dynamodb.Client, table string, opts Options) *Store {
	s := &Store{
		db:        client,
		table:     aws.String(table),
		refreshMs: opts.LastSeenRefresh.Milliseconds(),
		retry:     opts.Retry.withDefaults(),
		scanPage:  opts.ScanPageSize,
		logPage:   opts.LogPageSize,
		afterLog:  opts.AfterLogWrite,
	}
	if opts.LastSeenRefresh <= 0 {
		s.refreshMs = DefaultLastSeenRefresh.Milliseconds()
	}
	if s.scanPage <= 0 {
		s.scanPage = 1000
	}
	if s.logPage <= 0 {
		s.logPage = 100
	}
	return s
}

// Head item attributes.
const (
	hEpoch    = "ep" // S logEpoch
	hRequired = "er" // BOOL epochRequired
	hMax      = "mx" // N maxCommitSeq
	hApplied  = "ap" // N appliedSeq: every commit ≤ ap has its rows materialized
	hHorizon  = "hz" // N horizonSeq
	hSeen     = "ls" // N lastSeenAtMs
)

// head is the stored head plus the roll-forward watermark.
type head struct {
	store.Head
	applied int64
	// scoped: every live row has its scope copies (hScoped, scopeindex.go).
	scoped bool
	// indexFrom: the first commit with log-index entries (hLogIndexFrom,
	// logindex.go); 0 when none yet.
	indexFrom int64
}

func parseHead(item map[string]types.AttributeValue) (head, error) {
	var h head
	var ok [6]bool
	h.LogEpoch, ok[0] = getS(item, hEpoch)
	h.EpochRequired, ok[1] = getBool(item, hRequired)
	h.MaxCommitSeq, ok[2] = getN(item, hMax)
	h.applied, ok[3] = getN(item, hApplied)
	h.HorizonSeq, ok[4] = getN(item, hHorizon)
	h.LastSeenAtMs, ok[5] = getN(item, hSeen)
	h.scoped, _ = getBool(item, hScoped) // absent before the index existed
	h.indexFrom, _ = getN(item, hLogIndexFrom)
	for _, v := range ok {
		if !v {
			return h, fmt.Errorf("dynamostore: partition head item is malformed: %w", errCorrupt)
		}
	}
	return h, nil
}

// checkName rejects names DynamoDB cannot key on.
func checkName(what, s string) error {
	if !validKeyPart(s) {
		return fmt.Errorf("dynamostore: %s is not valid UTF-8", what)
	}
	return nil
}

func checkPartition(p string) error {
	if err := checkName("partition", p); err != nil {
		return err
	}
	if len(PartitionPK(p))+8 > maxPKBytes {
		return fmt.Errorf("dynamostore: partition name longer than the %d-byte key limit allows: %w", maxPKBytes, store.ErrTooLarge)
	}
	return nil
}

// readHead is one consistent GetItem of the head; ok is false when the
// partition does not exist.
func (s *Store) readHead(ctx context.Context, p string) (head, bool, error) {
	item, err := s.getItem(ctx, "read partition head", headPK(p), headSK, nil)
	if err != nil || item == nil {
		return head{}, false, err
	}
	h, err := parseHead(item)
	return h, err == nil, err
}

// TouchPartition implements store.Store: one consistent GetItem, plus one
// conditional write only on creation or when lastSeenAtMs aged past the
// refresh interval (§2.1).
func (s *Store) TouchPartition(ctx context.Context, partition string, nowMs int64, newEpoch string) (store.Head, error) {
	if err := checkPartition(partition); err != nil {
		return store.Head{}, err
	}
	for range 3 {
		h, ok, err := s.readHead(ctx, partition)
		if err != nil {
			return store.Head{}, err
		}
		if !ok {
			if newEpoch == "" {
				return store.Head{}, errors.New("dynamostore: TouchPartition needs a non-empty epoch to create a partition")
			}
			item := Key(headPK(partition), headSK)
			item[hEpoch], item[hRequired], item[hMax], item[hApplied], item[hHorizon], item[hSeen] =
				S(newEpoch), BOOL(false), N(0), N(0), N(0), N(nowMs)
			item[hScoped] = BOOL(true) // a new partition indexes every row from its first commit
			err := s.putItem(ctx, "create partition", item, "attribute_not_exists(pk)", nil)
			if isConditionFailed(err) {
				continue // lost the creation race: read the winner's head
			}
			if err != nil {
				return store.Head{}, err
			}
			return store.Head{LogEpoch: newEpoch, LastSeenAtMs: nowMs}, nil
		}
		if nowMs-h.LastSeenAtMs <= s.refreshMs {
			return h.Head, nil
		}
		cut := nowMs - s.refreshMs
		item, err := s.updateItem(ctx, "refresh last seen", &dynamodb.UpdateItemInput{
			Key:                       Key(headPK(partition), headSK),
			UpdateExpression:          aws.String("SET ls = :now"),
			ConditionExpression:       aws.String("ls < :cut"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":now": N(nowMs), ":cut": N(cut)},
			ReturnValues:              types.ReturnValueAllNew,
		})
		if isConditionFailed(err) {
			// Another instance refreshed it (or the clock is behind):
			// the stored head is the answer.
			if old := conditionItem(err); old != nil {
				if h2, perr := parseHead(old); perr == nil {
					return h2.Head, nil
				}
			}
			continue
		}
		if err != nil {
			return store.Head{}, err
		}
		h2, err := parseHead(item)
		if err != nil {
			return store.Head{}, err
		}
		return h2.Head, nil
	}
	return store.Head{}, errors.New("dynamostore: partition head kept changing during TouchPartition")
}

// Head implements store.Store.
func (s *Store) Head(ctx context.Context, partition string) (store.Head, bool, error) {
	if err := checkPartition(partition); err != nil {
		return store.Head{}, false, err
	}
	h, ok, err := s.readHead(ctx, partition)
	return h.Head, ok, err
}

// RotateEpoch implements store.Store (§2.1 backup restore rule): the new
// epoch and epochRequired in one conditional update, then the client
// records are deleted. Log, rows, outcomes and horizon stay.
func (s *Store) RotateEpoch(ctx context.Context, partition, newEpoch string, nowMs int64) error {
	if newEpoch == "" {
		return errors.New("dynamostore: RotateEpoch needs a non-empty epoch")
	}
	if err := checkPartition(partition); err != nil {
		return err
	}
	_, err := s.updateItem(ctx, "rotate epoch", &dynamodb.UpdateItemInput{
		Key:                       Key(headPK(partition), headSK),
		UpdateExpression:          aws.String("SET ep = :ep, er = :t"),
		ConditionExpression:       aws.String("attribute_exists(pk)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":ep": S(newEpoch), ":t": BOOL(true)},
	})
	if isConditionFailed(err) {
		return ErrUnknownPartition
	}
	if err != nil {
		return err
	}
	var keys []map[string]types.AttributeValue
	err = s.query(ctx, "list client records", &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": S(clientPK(partition))},
		ProjectionExpression:      aws.String("pk, sk"),
	}, func(items []map[string]types.AttributeValue) bool {
		keys = append(keys, items...)
		return true
	})
	if err != nil {
		return err
	}
	return s.batchDelete(ctx, "delete client records", keys)
}

// Outcome item attributes.
const (
	oFormat  = "fv" // N 1
	oApplied = "a"  // BOOL
	oSeq     = "cs" // N commitSeq
	oResult  = "r"  // B engine-encoded result (absent when empty)
	oAt      = "at" // N recordedAtMs
	oActor   = "ac" // S actorId that recorded it (absent on older items)
)

func outcomeItem(p, clientID, clientCommitID string, o *store.Outcome) map[string]types.AttributeValue {
	item := Key(outcomePK(p, clientID), outcomeSK(clientCommitID))
	item[oFormat], item[oApplied], item[oSeq], item[oAt] = N(1), BOOL(o.Applied), N(o.CommitSeq), N(o.RecordedAtMs)
	if len(o.Result) > 0 {
		item[oResult] = B(o.Result)
	}
	if o.ActorID != "" {
		item[oActor] = S(o.ActorID)
	}
	return item
}

func checkOutcomeKey(p, clientID, clientCommitID string) error {
	if err := checkPartition(p); err != nil {
		return err
	}
	if err := checkName("clientId", clientID); err != nil {
		return err
	}
	if err := checkName("clientCommitId", clientCommitID); err != nil {
		return err
	}
	if len(outcomePK(p, clientID)) > maxPKBytes || len(outcomeSK(clientCommitID)) > maxSKBytes {
		return fmt.Errorf("dynamostore: idempotency key longer than the key limits allow: %w", store.ErrTooLarge)
	}
	return nil
}

// GetOutcome implements store.Store (§2.3).
func (s *Store) GetOutcome(ctx context.Context, partition, clientID, clientCommitID string) (*store.Outcome, error) {
	if err := checkOutcomeKey(partition, clientID, clientCommitID); err != nil {
		return nil, err
	}
	item, err := s.getItem(ctx, "read push outcome", outcomePK(partition, clientID), outcomeSK(clientCommitID), nil)
	if err != nil || item == nil {
		return nil, err
	}
	f, ok1 := getN(item, oFormat)
	applied, ok2 := getBool(item, oApplied)
	seq, ok3 := getN(item, oSeq)
	res, ok4 := getB(item, oResult)
	at, ok5 := getN(item, oAt)
	if f != 1 || !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return nil, store.ErrOutcomeUnreadable
	}
	actor, hasActor := getS(item, oActor)
	if _, present := item[oActor]; present && (!hasActor || actor == "") {
		return nil, store.ErrOutcomeUnreadable
	}
	return &store.Outcome{Applied: applied, CommitSeq: seq, Result: res, RecordedAtMs: at, ActorID: actor}, nil
}

// PutRejection implements store.Store: a put-if-absent of the outcome.
func (s *Store) PutRejection(ctx context.Context, partition, clientID, clientCommitID string, o store.Outcome) error {
	if err := checkOutcomeKey(partition, clientID, clientCommitID); err != nil {
		return err
	}
	item := outcomeItem(partition, clientID, clientCommitID, &o)
	if ItemSize(item) > MaxItemBytes {
		return fmt.Errorf("dynamostore: rejection outcome of %d bytes: %w", ItemSize(item), store.ErrTooLarge)
	}
	err := s.putItem(ctx, "record rejected outcome", item, "attribute_not_exists(pk)", nil)
	if isConditionFailed(err) {
		return store.ErrOutcomeExists
	}
	return err
}

// Client item attributes.
const (
	cActor   = "ac" // S
	cCursor  = "cu" // N
	cUpdated = "up" // N
	cWire    = "wv" // N
)

func parseClient(item map[string]types.AttributeValue) (*store.Client, error) {
	sk, ok0 := getS(item, AttrSK)
	actor, ok1 := getS(item, cActor)
	cur, ok2 := getN(item, cCursor)
	up, ok3 := getN(item, cUpdated)
	wv, ok4 := getN(item, cWire)
	if !ok0 || len(sk) < 1 || !ok1 || !ok2 || !ok3 || !ok4 {
		return nil, fmt.Errorf("dynamostore: client record is malformed: %w", errCorrupt)
	}
	return &store.Client{ClientID: sk[1:], ActorID: actor, Cursor: cur, UpdatedAtMs: up, WireVersion: uint16(wv)}, nil
}

func checkClientKey(p, clientID string) error {
	if err := checkPartition(p); err != nil {
		return err
	}
	if err := checkName("clientId", clientID); err != nil {
		return err
	}
	if len(clientSK(clientID)) > maxSKBytes {
		return fmt.Errorf("dynamostore: clientId longer than the key limit allows: %w", store.ErrTooLarge)
	}
	return nil
}

// GetClient implements store.Store.
func (s *Store) GetClient(ctx context.Context, partition, clientID string) (*store.Client, error) {
	if err := checkClientKey(partition, clientID); err != nil {
		return nil, err
	}
	item, err := s.getItem(ctx, "read client record", clientPK(partition), clientSK(clientID), nil)
	if err != nil || item == nil {
		return nil, err
	}
	return parseClient(item)
}

// BindClient implements store.Store: a PutItem conditioned on the record
// being absent; on a lost race DynamoDB returns the winner's item with the
// failed condition (ALL_OLD), so no second read is needed.
func (s *Store) BindClient(ctx context.Context, partition string, c *store.Client) (*store.Client, error) {
	if err := checkClientKey(partition, c.ClientID); err != nil {
		return nil, err
	}
	item := clientItem(partition, c)
	in := &dynamodb.PutItemInput{
		TableName:                           s.table,
		Item:                                item,
		ConditionExpression:                 aws.String("attribute_not_exists(pk)"),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		ReturnConsumedCapacity:              total,
	}
	const op = "bind client record"
	err := call(ctx, s.retry, op, func(ctx context.Context) error {
		o, err := s.db.PutItem(ctx, in, NoSDKRetry)
		if o != nil && o.ConsumedCapacity != nil {
			RecordConsumed(ctx, true, *o.ConsumedCapacity)
		}
		return err
	})
	if err == nil || isConditionFailed(err) {
		RecordEstimate(ctx, 0, units(ItemSize(item), writeUnit))
	}
	if err == nil {
		out := *c
		return &out, nil
	}
	if !isConditionFailed(err) {
		return nil, wrap(op, err)
	}
	if old := conditionItem(err); old != nil {
		return parseClient(old)
	}
	// A backend that does not return the item: read the winner.
	cur, gerr := s.GetClient(ctx, partition, c.ClientID)
	if gerr != nil {
		return nil, gerr
	}
	if cur == nil {
		return nil, fmt.Errorf("dynamostore: %s: record vanished after a lost bind", op)
	}
	return cur, nil
}

func clientItem(partition string, c *store.Client) map[string]types.AttributeValue {
	item := Key(clientPK(partition), clientSK(c.ClientID))
	item[cActor], item[cCursor], item[cUpdated], item[cWire] = S(c.ActorID), N(c.Cursor), N(c.UpdatedAtMs), N(int64(c.WireVersion))
	return item
}

// PutClient implements store.Store.
func (s *Store) PutClient(ctx context.Context, partition string, c *store.Client) error {
	if err := checkClientKey(partition, c.ClientID); err != nil {
		return err
	}
	return s.putItem(ctx, "write client record", clientItem(partition, c), "", nil)
}

// ListClients implements store.Store.
func (s *Store) ListClients(ctx context.Context, partition string, fn func(*store.Client) bool) error {
	if err := checkPartition(partition); err != nil {
		return err
	}
	var perr error
	err := s.query(ctx, "list client records", &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": S(clientPK(partition))},
	}, func(items []map[string]types.AttributeValue) bool {
		for _, it := range items {
			c, err := parseClient(it)
			if err != nil {
				perr = err
				return false
			}
			if !fn(c) {
				return false
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	return perr
}
