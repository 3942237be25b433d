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
	// MarkerTTL is how long this Store serves the schema marker from its
	// cache before the next request reads it again (default
	// DefaultMarkerTTL; negative: read it on every request, as before
	// issue 20). The writer fence, not the marker, stops a stale writer
	// (schema.go, "cached marker").
	MarkerTTL time.Duration
	// TransactionalCommits writes every commit in one transaction, as
	// before issue 23, instead of writing small commits without one
	// (fast.go: a 1-op push is 5 WCU in 4 waves instead of 10 in 2).
	// SYNC_SMALL_COMMITS=off sets it.
	TransactionalCommits bool
	// AfterSmallWrites, when set, runs after a small commit's outcome,
	// row and scope-copy puts and before its log item's (fast.go); a
	// non-nil error aborts Commit there (crash injection for tests).
	AfterSmallWrites func() error
	// IndexNewPartitions creates partitions with the log index on
	// (logindex.go) instead of waiting for a pull to show they are wide:
	// for deployments whose partitions are known to be wide, and tests.
	IndexNewPartitions bool
	// ScopeCopiesNewPartitions creates partitions with scope copies on
	// and marked complete (hScoped), as before issue 23, instead of
	// waiting for a bootstrap to show they are wide (scopeindex.go): a
	// 1-op insert then writes its copy from the first commit. For
	// deployments whose partitions are known to be wide, and tests.
	ScopeCopiesNewPartitions bool
	// AfterLogWrite, when set, runs after a large commit's log transaction
	// and before its rows are materialized, and after a small commit's
	// head update and before its puts (fast.go); a non-nil error aborts
	// Commit there (crash injection for tests).
	AfterLogWrite func() error
	// OutcomeTTL is the idempotency window of push outcomes (§2.3;
	// outcomettl.go). Zero or negative keeps outcomes forever (no TTL
	// attribute, as before issue 20); the functions pass SYNC_OUTCOME_TTL
	// (default store.DefaultOutcomeWindow).
	OutcomeTTL time.Duration
	// BeforeFormat, when positive, makes this Store stand for a build from
	// before the stored format of that store-format level (formats.go):
	// it neither decodes nor writes the formats of that level or above.
	// Tests only (an older build serving beside this one during a deploy).
	BeforeFormat int64
}

// Store implements store.Store on one DynamoDB table.
type Store struct {
	db               *dynamodb.Client
	table            *string
	refreshMs        int64
	retry            RetryPolicy
	scanPage         int32
	logPage          int32
	afterLog         func() error
	indexNew         bool
	copiesNew        bool
	transactional    bool
	afterSmallWrites func() error
	marker           markerCache
	// readLevel is the highest store-format level this Store decodes
	// (formats.go): FormatLevel, lower with Options.BeforeFormat.
	readLevel int64
	index     indexState
	// heads: the latest head item of each partition this Store saw
	// (headmemo.go), which a small commit's first read follows.
	heads headMemo
	// outcomeWindow is the idempotency window of outcomes (outcomettl.go).
	outcomeWindow time.Duration
}

var _ store.Store = (*Store)(nil)

// New returns a Store over table (created with CreateTable or the SAM
// template).
func New(client *dynamodb.Client, table string, opts Options) *Store {
	s := &Store{
		db:               client,
		table:            aws.String(table),
		refreshMs:        opts.LastSeenRefresh.Milliseconds(),
		retry:            opts.Retry.withDefaults(),
		scanPage:         opts.ScanPageSize,
		logPage:          opts.LogPageSize,
		afterLog:         opts.AfterLogWrite,
		indexNew:         opts.IndexNewPartitions,
		copiesNew:        opts.ScopeCopiesNewPartitions,
		transactional:    opts.TransactionalCommits,
		afterSmallWrites: opts.AfterSmallWrites,
		readLevel:        FormatLevel,
	}
	if opts.BeforeFormat > 0 {
		s.readLevel = min(s.readLevel, opts.BeforeFormat-1)
	}
	s.outcomeWindow = max(opts.OutcomeTTL, 0)
	s.marker.init(opts.MarkerTTL)
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
	// copiesRequested: commits write scope copies, the rows before not
	// all copied yet (hScopeOn, scopeindex.go).
	copiesRequested bool
	// fill: where an interrupted scope-copy backfill stopped (hScopeFill,
	// backfill.go).
	fill string
	// indexFrom: the first commit with log-index entries (hLogIndexFrom,
	// logindex.go); 0 when none yet.
	indexFrom int64
	// indexRequested: a pull turned the partition's log index on
	// (hLogIndexOn, logindex.go); the next commit starts it.
	indexRequested bool
	// rollSeq, rollBatches: the large commit being materialized and how
	// many of its batches are written (hRollSeq, hRollDone, commit.go).
	rollSeq, rollBatches int64
	rollPlan             string
	// pendSeq, pendLog, pendOutcome: a small commit written by its head
	// update alone, its log and outcome items carried on the head until
	// the next commit or an advance of appliedSeq marks it applied
	// (fast.go); rejections counts PutRejection's head updates.
	pendSeq              int64
	pendLog, pendOutcome map[string]types.AttributeValue
	rejections           int64
	// materialized: the table-wide checkpoint declaration version
	// materialised in the partition (hMaterialized, schema.go).
	materialized int64
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
	h.scoped, _ = getBool(item, hScoped) // absent before the index existed, and until a backfill
	h.copiesRequested, _ = getBool(item, hScopeOn)
	h.fill, _ = getS(item, hScopeFill)
	h.indexFrom, _ = getN(item, hLogIndexFrom)
	// hLogIndexOn is absent until a wide pull (or IndexNewPartitions).
	h.indexRequested, _ = getBool(item, hLogIndexOn)
	h.rollSeq, _ = getN(item, hRollSeq) // absent unless a materialization is under way
	h.rollBatches, _ = getN(item, hRollDone)
	h.rollPlan, _ = getS(item, hRollPlan)
	h.pendSeq, _ = getN(item, hPendSeq) // absent unless a small commit is being materialized
	h.pendLog, h.pendOutcome = getM(item, hPendLog), getM(item, hPendOutcome)
	h.rejections, _ = getN(item, hRejections)
	h.Turn, _ = getN(item, hTurn) // absent until the partition's queue is first used
	h.TurnAtUs, _ = getN(item, hTurnAt)
	h.TurnGapUs, _ = getN(item, hTurnGap)
	h.Dead.From, _ = getN(item, hDeadFrom) // absent until a skip found dead tickets behind a live one
	h.Dead.Mask, _ = getN(item, hDeadMask)
	for _, v := range ok {
		if !v {
			return h, fmt.Errorf("dynamostore: partition head item is malformed: %w", errCorrupt)
		}
	}
	h.Gate = parseGate(item)
	h.materialized, _ = getN(item, hMaterialized) // absent until materialised
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
	if err == nil {
		s.noteIndex(p, h)
		s.noteHeadItem(p, item)
		s.lazyGate(&h)
	}
	return h, err == nil, err
}

// TouchPartition implements store.Store: one consistent BatchGetItem of
// the head (the serve gate's inputs ride on the read the partition needs
// anyway; the schema marker joins it only when its cached copy is due,
// schema.go), plus one conditional write only on creation or when
// lastSeenAtMs aged past the refresh interval (§2.1). Creation reads the
// marker from the table and is a transaction that checks the marker is
// still what was read and starts the new head's writer fence at it, so
// a partition created while a migration raises fences cannot miss its
// fence.
func (s *Store) TouchPartition(ctx context.Context, partition string, nowMs int64, newEpoch string) (store.Head, error) {
	h, _, _, err := s.touch(ctx, partition, nowMs, newEpoch, "", nil)
	return h, err
}

// TouchPartitionRows implements store.CommitQueue: the rows ride on
// TouchPartition's BatchGetItem. They are returned (ok) when the head
// existed and had no unmaterialized commit but a small one, whose
// writes the head carries and which are put over the rows read
// (fast.go); otherwise the caller reads them with GetRows.
func (s *Store) TouchPartitionRows(ctx context.Context, partition string, nowMs int64, newEpoch, table string, rowIDs []string) (store.Head, map[string]*store.Row, bool, error) {
	return s.touch(ctx, partition, nowMs, newEpoch, table, rowIDs)
}

func (s *Store) touch(ctx context.Context, partition string, nowMs int64, newEpoch, table string, rowIDs []string) (store.Head, map[string]*store.Row, bool, error) {
	if err := checkPartition(partition); err != nil {
		return store.Head{}, nil, false, err
	}
	var rowKeys []map[string]types.AttributeValue
	if len(rowIDs) > 0 && checkName("table", table) == nil {
		rowKeys = rowKeysOf(partition, table, rowIDs)
		if len(rowKeys) > batchGetMax-2 {
			rowKeys = nil
		}
	}
	var rows map[string]*store.Row
	for range 3 {
		h, ok, marker, fresh, read, err := s.readHeadMarkerRows(ctx, partition, rowKeys)
		if err != nil {
			return store.Head{}, nil, false, err
		}
		if !ok && !fresh {
			// Creation starts the fence at the marker: read it from the
			// table, never from the cache (schema.go, markerCache). Once
			// per partition.
			if marker, err = s.SchemaMarker(ctx); err != nil {
				return store.Head{}, nil, false, err
			}
		}
		if rowKeys != nil && ok && (h.applied == h.MaxCommitSeq || h.pendingSmall()) {
			rows = make(map[string]*store.Row, len(read))
			for _, r := range read {
				rows[r.RowID] = r
			}
			if h.pendingSmall() {
				// The rows after the small commit on the head (fast.go).
				if err := overlayPending(partition, &h, table, wanted(rowIDs), rows); err != nil {
					return store.Head{}, nil, false, err
				}
			}
		}
		rowKeys = nil // a retry reads the head only
		head, err := s.touchHead(ctx, partition, nowMs, newEpoch, h, ok, marker)
		if errors.Is(err, errTouchAgain) {
			rows = nil
			continue
		}
		return head, rows, rows != nil && err == nil, err
	}
	return store.Head{}, nil, false, errors.New("dynamostore: partition head kept changing during TouchPartition")
}

// errTouchAgain: the head changed under TouchPartition; read it again.
var errTouchAgain = errors.New("dynamostore: touch again")

// touchHead finishes TouchPartition from the head read (ok: it exists):
// creates it, refreshes lastSeenAtMs, or returns it.
func (s *Store) touchHead(ctx context.Context, partition string, nowMs int64, newEpoch string, h head, ok bool, marker int64) (store.Head, error) {
	if !ok {
		return s.createHead(ctx, partition, nowMs, newEpoch, marker)
	}
	h.Gate = withMarker(h.Gate, marker)
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
				s.noteHeadItem(partition, old)
				s.lazyGate(&h2)
				h2.Gate = withMarker(h2.Gate, marker)
				return h2.Head, nil
			}
		}
		return store.Head{}, errTouchAgain
	}
	if err != nil {
		return store.Head{}, err
	}
	h2, err := parseHead(item)
	if err != nil {
		return store.Head{}, err
	}
	s.noteHeadItem(partition, item)
	s.lazyGate(&h2)
	h2.Gate = withMarker(h2.Gate, marker)
	return h2.Head, nil
}

// createHead creates partition's head (touchHead, the head absent):
// registry entry first, then the head, pinned to the schema marker when
// there is one; errTouchAgain when another creation won.
func (s *Store) createHead(ctx context.Context, partition string, nowMs int64, newEpoch string, marker int64) (store.Head, error) {
	if newEpoch == "" {
		return store.Head{}, errors.New("dynamostore: TouchPartition needs a non-empty epoch to create a partition")
	}
	// Registry first: it must list every head (partitions.go).
	if err := s.RegisterPartition(ctx, partition); err != nil {
		return store.Head{}, err
	}
	item := Key(headPK(partition), headSK)
	item[hEpoch], item[hRequired], item[hMax], item[hApplied], item[hHorizon], item[hSeen] =
		S(newEpoch), BOOL(false), N(0), N(0), N(0), N(nowMs)
	if s.copiesNew {
		// Every row copied from the first commit; otherwise none
		// until a wide bootstrap asks for copies (scopeindex.go).
		item[hScoped] = BOOL(true)
	}
	if s.indexNew {
		item[hLogIndexOn] = BOOL(true)
	}
	created := store.Head{LogEpoch: newEpoch, LastSeenAtMs: nowMs}
	var err error
	if marker == 0 {
		err = s.putItem(ctx, "create partition", item, "attribute_not_exists(pk)", nil)
		if isConditionFailed(err) {
			return store.Head{}, errTouchAgain // lost the creation race: read the winner's head
		}
	} else {
		item[hFence] = N(marker)
		created.Gate = &store.Gate{StoredSchema: marker, WriterFence: marker}
		// A new partition has nothing to backfill: it starts with the
		// table-wide checkpoint declaration materialised (and so with
		// nothing pending), pinned like the marker.
		cond, vals := "v = :v AND attribute_not_exists(dg)", map[string]types.AttributeValue{":v": N(marker)}
		if dg := s.marker.decl.Load().Gen(); dg > 0 {
			item[hMaterialized] = N(dg)
			cond, vals[":dg"] = "v = :v AND dg = :dg", N(dg)
		}
		err = s.transact(ctx, "create partition", []txItem{
			{size: 40, w: types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
				TableName: s.table, Key: Key(markerPK, markerSK),
				ConditionExpression:       aws.String(cond),
				ExpressionAttributeValues: vals,
			}}},
			{size: ItemSize(item), w: types.TransactWriteItem{Put: &types.Put{
				TableName: s.table, Item: item, ConditionExpression: aws.String("attribute_not_exists(pk)"),
			}}},
		})
		if codes, _ := cancelReasons(err); codes != nil {
			return store.Head{}, errTouchAgain // lost the creation race, or the marker moved
		}
		err = wrap("create partition", err)
	}
	if err != nil {
		return store.Head{}, err
	}
	s.noteIndex(partition, head{indexRequested: s.indexNew, scoped: s.copiesNew})
	s.noteHeadItem(partition, item) // the head as the put created it
	return created, nil
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
//
// The same transaction puts the partition's epoch-event item (pk the
// head's, sk EPOCH, the new epoch in ep): the table's stream carries it
// to the realtime fanout, which makes every instance re-read the head and
// reset the open sockets of the partition at once (docs/REALTIME.md).
func (s *Store) RotateEpoch(ctx context.Context, partition, newEpoch string, nowMs int64) error {
	if newEpoch == "" {
		return errors.New("dynamostore: RotateEpoch needs a non-empty epoch")
	}
	if err := checkPartition(partition); err != nil {
		return err
	}
	event := Key(headPK(partition), EpochSK)
	event["ep"], event["at"] = S(newEpoch), N(nowMs)
	const op = "rotate epoch"
	err := s.transact(ctx, op, []txItem{
		{size: 100, w: types.TransactWriteItem{Update: &types.Update{
			TableName: s.table,
			Key:       Key(headPK(partition), headSK),
			// gt: the serve gate's token is bound to the log epoch, so a
			// commit or response begun in the old epoch is re-checked.
			UpdateExpression:          aws.String("SET ep = :ep, er = :t ADD gt :one"),
			ConditionExpression:       aws.String("attribute_exists(pk)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":ep": S(newEpoch), ":t": BOOL(true), ":one": N(1)},
		}}},
		{size: 100, w: types.TransactWriteItem{Put: &types.Put{TableName: s.table, Item: event}}},
	})
	if codes, _ := cancelReasons(err); len(codes) > 0 && codes[0] == "ConditionalCheckFailed" {
		return ErrUnknownPartition
	}
	if err != nil {
		return wrap(op, err)
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

// outcomeItem is the item of an outcome, with its TTL attribute when it
// expires (outcomeTTL).
func (s *Store) outcomeItem(p, clientID, clientCommitID string, o *store.Outcome) map[string]types.AttributeValue {
	item := Key(outcomePK(p, clientID), outcomeSK(clientCommitID))
	item[oFormat], item[oApplied], item[oSeq], item[oAt] = N(1), BOOL(o.Applied), N(o.CommitSeq), N(o.RecordedAtMs)
	if sec, ok := s.outcomeTTL(o.RecordedAtMs); ok {
		item[TTLAttribute] = N(sec)
	}
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

// GetOutcome implements store.Store (§2.3). An outcome past its window
// is absent (outcomettl.go), whether or not TTL has deleted it yet.
func (s *Store) GetOutcome(ctx context.Context, partition, clientID, clientCommitID string, nowMs int64) (*store.Outcome, error) {
	if err := checkOutcomeKey(partition, clientID, clientCommitID); err != nil {
		return nil, err
	}
	item, err := s.getItem(ctx, "read push outcome", outcomePK(partition, clientID), outcomeSK(clientCommitID), nil)
	if err != nil || item == nil || !outcomeLive(item, nowMs) {
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

// PutRejection implements store.Store: a put-if-absent of the outcome in
// one transaction with a ConditionCheck of the partition head carrying
// the writer fence and gate token, the condition a commit puts on its
// head update (commitCondition). A rejection is rare; the transaction
// costs it 2 WCU per KB of outcome plus the check (was 1 WCU per KB), in
// the same single round trip.
func (s *Store) PutRejection(ctx context.Context, partition, clientID, clientCommitID string, o store.Outcome, w store.WriterCheck) error {
	if err := checkOutcomeKey(partition, clientID, clientCommitID); err != nil {
		return err
	}
	item := s.outcomeItem(partition, clientID, clientCommitID, &o)
	if ItemSize(item) > MaxItemBytes {
		return fmt.Errorf("dynamostore: rejection outcome of %d bytes: %w", ItemSize(item), store.ErrTooLarge)
	}
	cond, vals := writerCondition(w)
	// The head action also counts the rejection and requires no pending
	// small commit on the head (ps): a small commit of the same key then
	// cannot land beside it (fast.go).
	cond += " AND attribute_not_exists(" + hPendSeq + ")"
	vals[":z"], vals[":one"] = N(0), N(1)
	ocond, onames, ovals := outcomeAbsent(o.RecordedAtMs)
	items := []txItem{
		{size: ItemSize(item), w: types.TransactWriteItem{Put: &types.Put{
			TableName:                 s.table,
			Item:                      item,
			ConditionExpression:       aws.String(ocond),
			ExpressionAttributeNames:  onames,
			ExpressionAttributeValues: ovals,
		}}},
		{size: 100, w: types.TransactWriteItem{Update: &types.Update{
			TableName:                           s.table,
			Key:                                 Key(headPK(partition), headSK),
			UpdateExpression:                    aws.String("SET " + hRejections + " = if_not_exists(" + hRejections + ", :z) + :one"),
			ConditionExpression:                 aws.String("attribute_exists(pk) AND " + cond),
			ExpressionAttributeValues:           vals,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}}},
	}
	if err := s.settleHinted(ctx, partition, 0); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		err := s.putRejection(ctx, partition, items, w)
		if !errors.Is(err, errPending) || attempt > 0 {
			return err
		}
		// A small commit is on the head (fast.go): finish it, then try
		// once more (it may be this key's, which the retry then finds).
		h, ok, err := s.readHead(ctx, partition)
		if err != nil || !ok {
			return err
		}
		if err := s.rollForward(ctx, partition, h); err != nil {
			return err
		}
	}
}

// errPending: a small commit is being materialized on the head.
var errPending = fmt.Errorf("dynamostore: a small commit is being materialized: %w", store.ErrGateMoved)

// putRejection is PutRejection's transaction and the reading of its
// failure.
func (s *Store) putRejection(ctx context.Context, partition string, items []txItem, w store.WriterCheck) error {
	err := s.transact(ctx, "record rejected outcome", items)
	codes, olds := cancelReasons(err)
	if codes == nil {
		return wrap("record rejected outcome", err)
	}
	if codes[0] == "ConditionalCheckFailed" {
		// The idempotency check goes first, as in a commit.
		return store.ErrOutcomeExists
	}
	if len(codes) > 1 && codes[1] == "ConditionalCheckFailed" {
		g := parseGate(olds[1])
		pending := olds[1] != nil && olds[1][hPendSeq] != nil
		if olds[1] == nil { // backend without ALL_OLD support
			h, _, rerr := s.readHead(ctx, partition)
			if rerr != nil {
				return rerr
			}
			g, pending = h.Gate, h.pendSeq > 0
		}
		req := store.CommitRequest{WriterVersion: w.WriterVersion, CheckGate: w.CheckGate, GateToken: w.GateToken}
		if gerr := gateFailure(g, &req); gerr != nil {
			return gerr
		}
		if pending {
			return errPending
		}
		return store.ErrGateMoved // the gate moved and back between the two reads
	}
	return wrap("record rejected outcome", err)
}

// Client item attributes.
const (
	cActor   = "ac" // S
	cCursor  = "cu" // N
	cUpdated = "up" // N
	cWire    = "wv" // N
	cReg     = "rg" // S, optional: the §8.1 registration (engine-encoded)
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
	c := &store.Client{ClientID: sk[1:], ActorID: actor, Cursor: cur, UpdatedAtMs: up, WireVersion: uint16(wv)}
	if r, ok := getS(item, cReg); ok {
		c.Registration = r
	}
	return c, nil
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
	if len(c.Registration) > 0 {
		item[cReg] = S(c.Registration)
	}
	return item
}

// PutClient implements store.Store.
func (s *Store) PutClient(ctx context.Context, partition string, c *store.Client) error {
	if err := checkClientKey(partition, c.ClientID); err != nil {
		return err
	}
	return s.putItem(ctx, "write client record", clientItem(partition, c), "", nil)
}

// AckCursor implements store.Store: one transaction of a condition check
// on the head's log epoch and an update of the client record conditioned
// on its existence, its actor and a cursor not above the ack, so a
// delayed ack from before an epoch rotation, an ack for another actor's
// clientId and an ack for a deleted record all write nothing, and no
// record is ever created (§8.2 of the newer spec). Only the cursor and
// the timestamp change; the registration a concurrent sync round wrote
// is preserved.
func (s *Store) AckCursor(ctx context.Context, partition, clientID, actorID, logEpoch string, cursor, nowMs int64) (bool, error) {
	if err := checkClientKey(partition, clientID); err != nil {
		return false, err
	}
	const op = "record realtime ack"
	err := s.transact(ctx, op, []txItem{
		s.epochGuard(partition, logEpoch),
		{w: types.TransactWriteItem{Update: &types.Update{
			TableName:                           s.table,
			Key:                                 Key(clientPK(partition), clientSK(clientID)),
			UpdateExpression:                    aws.String("SET #c = :c, #u = :u"),
			ConditionExpression:                 aws.String("attribute_exists(pk) AND #a = :a AND #c <= :c AND #u <= :u"),
			ExpressionAttributeNames:            map[string]string{"#c": cCursor, "#u": cUpdated, "#a": cActor},
			ExpressionAttributeValues:           map[string]types.AttributeValue{":c": N(cursor), ":u": N(nowMs), ":a": S(actorID)},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}}, size: 200},
	})
	if err == nil {
		return true, nil
	}
	codes, items := cancelReasons(err)
	if len(codes) != 2 {
		return false, wrap(op, err)
	}
	if codes[0] == "ConditionalCheckFailed" {
		return false, nil // the epoch moved on
	}
	if codes[1] != "ConditionalCheckFailed" {
		return false, wrap(op, err)
	}
	old := items[1]
	if old == nil {
		return false, nil // no record: never created by an ack
	}
	c, perr := parseClient(old)
	if perr != nil {
		return false, perr
	}
	if c.ActorID != actorID {
		return false, nil
	}
	if c.Cursor > cursor || c.UpdatedAtMs > nowMs {
		// Guard passed; one of the maxima is already stored. Advance the
		// other one alone (a plain conditional update, same guard).
		return s.ackOne(ctx, partition, clientID, actorID, logEpoch, max(c.Cursor, cursor), max(c.UpdatedAtMs, nowMs), c)
	}
	return false, wrap(op, err)
}

// epochGuard is the ConditionCheck both ack transactions lead with:
// the partition head still carries logEpoch (an ack from before a
// rotation writes nothing). It is item 0 of their cancellation reasons.
func (s *Store) epochGuard(partition, logEpoch string) txItem {
	return txItem{size: 100, w: types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName:                 s.table,
		Key:                       Key(headPK(partition), headSK),
		ConditionExpression:       aws.String("#e = :e"),
		ExpressionAttributeNames:  map[string]string{"#e": hEpoch},
		ExpressionAttributeValues: map[string]types.AttributeValue{":e": S(logEpoch)},
	}}}
}

// ackOne finishes an ack whose first attempt found one of the two
// maxima already stored: it writes the maxima only if the record is
// still the one read (same cursor and timestamp), inside the same epoch
// guard; a concurrent change makes it report the guard result without
// writing.
func (s *Store) ackOne(ctx context.Context, partition, clientID, actorID, logEpoch string, cursor, nowMs int64, seen *store.Client) (bool, error) {
	if cursor == seen.Cursor && nowMs == seen.UpdatedAtMs {
		return true, nil
	}
	err := s.transact(ctx, "record realtime ack", []txItem{
		s.epochGuard(partition, logEpoch),
		{w: types.TransactWriteItem{Update: &types.Update{
			TableName:                 s.table,
			Key:                       Key(clientPK(partition), clientSK(clientID)),
			UpdateExpression:          aws.String("SET #c = :c, #u = :u"),
			ConditionExpression:       aws.String("attribute_exists(pk) AND #a = :a AND #c = :oc AND #u = :ou"),
			ExpressionAttributeNames:  map[string]string{"#c": cCursor, "#u": cUpdated, "#a": cActor},
			ExpressionAttributeValues: map[string]types.AttributeValue{":c": N(cursor), ":u": N(nowMs), ":a": S(actorID), ":oc": N(seen.Cursor), ":ou": N(seen.UpdatedAtMs)},
		}}, size: 200},
	})
	if err == nil {
		return true, nil
	}
	if codes, _ := cancelReasons(err); len(codes) == 2 {
		return codes[0] != "ConditionalCheckFailed", nil
	}
	return false, wrap("record realtime ack", err)
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
