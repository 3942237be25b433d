package dynamostore

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/sync/errgroup"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// §6.9 reactions (keys.go has the layout). Planned records ride in the
// commit's log body (codec.go), so they cost the commit no item; the
// runner copies them here. A reaction is one item under the partition's
// reaction pk: its sort key starts with "L" while it is live (pending or
// leased) and with "T" once terminal (completed or dead-lettered), so the
// runner's due query reads only live reactions however many finished
// ones are kept. Moving to terminal is one transaction (delete the live
// item if still leased to the worker, put the terminal one); every other
// transition is one conditional UpdateItem on the live item, which is
// what serializes concurrent workers (§6.9 "disjoint leases").
//
// Item attributes: ty type, ve version, pl payload, ma maxAttempts,
// ci/cc the source commit's client and commit ids, st state, na attempts,
// du due (pending) or lease expiry (leased), ow lease owner, fa finished
// at, fc failure code, fd failure details.

const (
	rxLive     = "L"
	rxTerminal = "T"
	// reactionCursorSK is the item (pk the head's) holding the seq through
	// which the log's records were enqueued.
	reactionCursorSK = "RXC"
	// rxMarkShards spreads the "may have live reactions" marks over a few
	// pks, so no single item is written by every partition.
	rxMarkShards = 16
)

func rxPK(p string) string { return PartitionPK(p) + "#RX" }

func rxSK(prefix string, id store.ReactionID) string {
	return fmt.Sprintf("%s%020d#%03d", prefix, id.Seq, id.Index)
}

func rxMarkPK(p string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(p))
	return "RXQ#" + strconv.Itoa(int(h.Sum32()%rxMarkShards))
}

func rxStateN(s store.ReactionState) types.AttributeValue { return N(int64(s)) }

func reactionItem(partition, prefix string, r *store.Reaction) map[string]types.AttributeValue {
	it := Key(rxPK(partition), rxSK(prefix, r.ID))
	it["ty"], it["ve"], it["pl"], it["ma"] = S(r.Type), N(int64(r.Version)), B(r.Payload), N(int64(r.MaxAttempts))
	it["ci"], it["cc"], it["st"], it["na"] = S(r.ClientID), S(r.ClientCommitID), rxStateN(r.State), N(int64(r.Attempts))
	it["ky"] = S(r.Key)
	if r.Payload == nil {
		it["pl"] = B([]byte{})
	}
	if prefix == rxLive {
		it["du"] = N(r.DueAtMs)
	} else {
		it["fa"] = N(r.FinishedAtMs)
	}
	if r.Owner != "" {
		it["ow"] = S(r.Owner)
	}
	if r.FailureCode != "" {
		it["fc"] = S(r.FailureCode)
	}
	if len(r.FailureDetails) > 0 {
		it["fd"] = B(r.FailureDetails)
	}
	return it
}

func parseReaction(it map[string]types.AttributeValue) (*store.Reaction, error) {
	sk, _ := getS(it, AttrSK)
	var r store.Reaction
	if len(sk) < 2 {
		return nil, fmt.Errorf("dynamostore: reaction item %q: %w", sk, errCorrupt)
	}
	seq, idx, ok := strings.Cut(sk[1:], "#")
	s, err1 := strconv.ParseInt(seq, 10, 64)
	i, err2 := strconv.ParseInt(idx, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return nil, fmt.Errorf("dynamostore: reaction item %q: %w", sk, errCorrupt)
	}
	r.ID = store.ReactionID{Seq: s, Index: int32(i)}
	r.Key, _ = getS(it, "ky")
	r.Type, _ = getS(it, "ty")
	ve, _ := getN(it, "ve")
	ma, _ := getN(it, "ma")
	st, _ := getN(it, "st")
	at, _ := getN(it, "na")
	r.Version, r.MaxAttempts, r.State, r.Attempts = int32(ve), int32(ma), store.ReactionState(st), int32(at)
	r.Payload, _ = getB(it, "pl")
	r.ClientID, _ = getS(it, "ci")
	r.ClientCommitID, _ = getS(it, "cc")
	r.DueAtMs, _ = getN(it, "du")
	r.FinishedAtMs, _ = getN(it, "fa")
	r.Owner, _ = getS(it, "ow")
	r.FailureCode, _ = getS(it, "fc")
	r.FailureDetails, _ = getB(it, "fd")
	return &r, nil
}

// queryReactions calls fn with each reaction under the partition's
// reaction pk whose sort key starts with prefix, in key order, with the
// filter and values given (nil for none), until fn returns false.
func (s *Store) queryReactions(ctx context.Context, op, partition, prefix, filter string, vals map[string]types.AttributeValue, fn func(r *store.Reaction, sk string) bool) error {
	if vals == nil {
		vals = map[string]types.AttributeValue{}
	}
	vals[":pk"], vals[":prefix"] = S(rxPK(partition)), S(prefix)
	in := &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("pk = :pk AND begins_with(sk, :prefix)"),
		ExpressionAttributeValues: vals,
	}
	if filter != "" {
		in.FilterExpression = aws.String(filter)
	}
	var perr error
	err := s.query(ctx, op, in, func(items []map[string]types.AttributeValue) bool {
		for _, it := range items {
			r, err := parseReaction(it)
			if err != nil {
				perr = err
				return false
			}
			sk, _ := getS(it, AttrSK)
			if !fn(r, sk) {
				return false
			}
		}
		return true
	})
	if err == nil {
		err = perr
	}
	return err
}

// ReactionCursor implements store.ReactionStore.
func (s *Store) ReactionCursor(ctx context.Context, partition string) (int64, error) {
	it, err := s.getItem(ctx, "read reaction cursor", headPK(partition), reactionCursorSK, nil)
	if err != nil || it == nil {
		return 0, err
	}
	c, _ := getN(it, "c")
	return c, nil
}

// AdvanceReactionCursor implements store.ReactionStore.
func (s *Store) AdvanceReactionCursor(ctx context.Context, partition string, from, to int64) (bool, error) {
	if to <= from {
		return false, nil
	}
	cond := "c = :from"
	if from == 0 {
		cond = "attribute_not_exists(c) OR c = :from"
	}
	_, err := s.updateItem(ctx, "advance reaction cursor", &dynamodb.UpdateItemInput{
		Key:                       Key(headPK(partition), reactionCursorSK),
		UpdateExpression:          aws.String("SET c = :to"),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeValues: map[string]types.AttributeValue{":from": N(from), ":to": N(to)},
	})
	if isConditionFailed(err) {
		return false, nil
	}
	return err == nil, err
}

// EnqueueReactions implements store.ReactionStore: a record already
// live or terminal is left alone (the terminal keys are read first, in
// batches, then each missing live item is put if absent).
func (s *Store) EnqueueReactions(ctx context.Context, partition string, rs []store.Reaction) error {
	for len(rs) > 0 {
		n := min(len(rs), 100)
		batch := rs[:n]
		rs = rs[n:]
		keys := make([]map[string]types.AttributeValue, n)
		for i := range batch {
			keys[i] = Key(rxPK(partition), rxSK(rxTerminal, batch[i].ID))
		}
		done, err := s.batchGet(ctx, "read finished reactions", keys)
		if err != nil {
			return err
		}
		finished := make(map[string]bool, len(done))
		for _, it := range done {
			sk, _ := getS(it, AttrSK)
			finished[sk[1:]] = true
		}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(8)
		for i := range batch {
			r := &batch[i]
			if finished[rxSK("", r.ID)] {
				continue
			}
			g.Go(func() error {
				err := s.putItem(gctx, "enqueue reaction", reactionItem(partition, rxLive, r), "attribute_not_exists(pk)", nil)
				if isConditionFailed(err) {
					return nil
				}
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return err
		}
	}
	return s.markReactionsDue(ctx, partition)
}

func (s *Store) markReactionsDue(ctx context.Context, partition string) error {
	it := Key(rxMarkPK(partition), "M"+esc(partition))
	it["p"], it["tok"] = S(partition), S(newToken())
	return s.putItem(ctx, "mark reactions due", it, "", nil)
}

// DueReactions implements store.ReactionStore.
func (s *Store) DueReactions(ctx context.Context, partition string, types_ []string, nowMs int64, limit int, fn func(*store.Reaction) bool) error {
	if len(types_) == 0 {
		return nil
	}
	vals := map[string]types.AttributeValue{":now": N(nowMs)}
	names := make([]string, len(types_))
	for i, t := range types_ {
		k := ":t" + strconv.Itoa(i)
		vals[k] = S(t)
		names[i] = k
	}
	var out []*store.Reaction
	err := s.queryReactions(ctx, "read due reactions", partition, rxLive, "du <= :now AND ty IN ("+strings.Join(names, ",")+")", vals, func(r *store.Reaction, _ string) bool {
		out = append(out, r)
		return limit <= 0 || len(out) < limit
	})
	if err != nil {
		return err
	}
	for _, r := range out {
		if !fn(r) {
			break
		}
	}
	return nil
}

// ClaimReaction implements store.ReactionStore.
func (s *Store) ClaimReaction(ctx context.Context, partition string, id store.ReactionID, owner string, nowMs, leaseMs int64) (*store.Reaction, bool, error) {
	it, err := s.updateItem(ctx, "claim reaction", &dynamodb.UpdateItemInput{
		Key:                 Key(rxPK(partition), rxSK(rxLive, id)),
		UpdateExpression:    aws.String("SET st = :leased, ow = :ow, du = :exp ADD na :one"),
		ConditionExpression: aws.String("attribute_exists(pk) AND du <= :now"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":leased": rxStateN(store.ReactionLeased), ":ow": S(owner), ":exp": N(nowMs + leaseMs),
			":one": N(1), ":now": N(nowMs),
		},
		ReturnValues: types.ReturnValueAllNew,
	})
	if isConditionFailed(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	r, err := parseReaction(it)
	return r, err == nil, err
}

// UpdateReaction implements store.ReactionStore.
func (s *Store) UpdateReaction(ctx context.Context, partition, owner string, r *store.Reaction) (bool, error) {
	held := map[string]types.AttributeValue{":leased": rxStateN(store.ReactionLeased), ":mine": S(owner)}
	const heldCond = "st = :leased AND ow = :mine"
	if r.State == store.ReactionPending || r.State == store.ReactionLeased {
		set := []string{"st = :st", "du = :du"}
		var remove []string
		vals := map[string]types.AttributeValue{":st": rxStateN(r.State), ":du": N(r.DueAtMs)}
		for k, v := range held {
			vals[k] = v
		}
		if r.State == store.ReactionLeased {
			set = append(set, "ow = :ow")
			vals[":ow"] = S(owner)
		} else {
			remove = append(remove, "ow")
		}
		if r.FailureCode != "" {
			set = append(set, "fc = :fc")
			vals[":fc"] = S(r.FailureCode)
		} else {
			remove = append(remove, "fc")
		}
		if len(r.FailureDetails) > 0 {
			set = append(set, "fd = :fd")
			vals[":fd"] = B(r.FailureDetails)
		} else {
			remove = append(remove, "fd")
		}
		expr := "SET " + strings.Join(set, ", ")
		if len(remove) > 0 {
			expr += " REMOVE " + strings.Join(remove, ", ")
		}
		_, err := s.updateItem(ctx, "update reaction", &dynamodb.UpdateItemInput{
			Key: Key(rxPK(partition), rxSK(rxLive, r.ID)), UpdateExpression: aws.String(expr),
			ConditionExpression: aws.String(heldCond), ExpressionAttributeValues: vals,
		})
		if isConditionFailed(err) {
			return false, nil
		}
		return err == nil, err
	}
	term := *r
	term.Owner = ""
	put := reactionItem(partition, rxTerminal, &term)
	err := s.transact(ctx, "finish reaction", []txItem{
		{w: types.TransactWriteItem{Delete: &types.Delete{
			TableName: s.table, Key: Key(rxPK(partition), rxSK(rxLive, r.ID)),
			ConditionExpression: aws.String(heldCond), ExpressionAttributeValues: held,
		}}, size: 200},
		{w: types.TransactWriteItem{Put: &types.Put{TableName: s.table, Item: put}}, size: ItemSize(put)},
	})
	if codes, _ := cancelReasons(err); len(codes) > 0 && codes[0] == "ConditionalCheckFailed" {
		return false, nil
	}
	if err != nil {
		return false, wrap("finish reaction", err)
	}
	return true, nil
}

// ResetDeadReaction implements store.ReactionStore.
func (s *Store) ResetDeadReaction(ctx context.Context, partition string, id store.ReactionID, nowMs int64) (bool, error) {
	it, err := s.getItem(ctx, "read dead reaction", rxPK(partition), rxSK(rxTerminal, id), nil)
	if err != nil || it == nil {
		return false, err
	}
	r, err := parseReaction(it)
	if err != nil || r.State != store.ReactionDead {
		return false, err
	}
	r.State, r.DueAtMs, r.Attempts, r.FailureCode, r.FailureDetails, r.FinishedAtMs, r.Owner = store.ReactionPending, nowMs, 0, "", nil, 0, ""
	live := reactionItem(partition, rxLive, r)
	err = s.transact(ctx, "reset dead reaction", []txItem{
		{w: types.TransactWriteItem{Delete: &types.Delete{
			TableName: s.table, Key: Key(rxPK(partition), rxSK(rxTerminal, id)),
			ConditionExpression:       aws.String("st = :dead"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":dead": rxStateN(store.ReactionDead)},
		}}, size: 200},
		{w: types.TransactWriteItem{Put: &types.Put{TableName: s.table, Item: live, ConditionExpression: aws.String("attribute_not_exists(pk)")}}, size: ItemSize(live)},
	})
	if codes, _ := cancelReasons(err); len(codes) > 0 && slices.Contains(codes, "ConditionalCheckFailed") {
		return false, nil
	}
	if err != nil {
		return false, wrap("reset dead reaction", err)
	}
	return true, s.markReactionsDue(ctx, partition)
}

// PruneReactions implements store.ReactionStore: it reads the terminal
// reactions and deletes those past their cutoff, each conditioned on
// still being in the state read (a concurrent reset of a dead one wins
// or loses as a whole).
func (s *Store) PruneReactions(ctx context.Context, partition string, completedBefore, deadBefore int64, limit int) (int, int, bool, error) {
	type victim struct {
		sk string
		st store.ReactionState
	}
	var victims []victim
	more := false
	err := s.queryReactions(ctx, "read finished reactions", partition, rxTerminal, "", nil, func(r *store.Reaction, sk string) bool {
		if r.State == store.ReactionCompleted && r.FinishedAtMs < completedBefore || r.State == store.ReactionDead && r.FinishedAtMs < deadBefore {
			if limit > 0 && len(victims) >= limit {
				more = true
				return false
			}
			victims = append(victims, victim{sk, r.State})
		}
		return true
	})
	if err != nil {
		return 0, 0, false, err
	}
	completed, dead := 0, 0
	for _, v := range victims {
		err := s.deleteItem(ctx, "prune reaction", Key(rxPK(partition), v.sk), "st = :st",
			map[string]types.AttributeValue{":st": rxStateN(v.st)})
		if isConditionFailed(err) {
			continue
		}
		if err != nil {
			return completed, dead, true, err
		}
		if v.st == store.ReactionCompleted {
			completed++
		} else {
			dead++
		}
	}
	return completed, dead, more, nil
}

// ListReactions implements store.ReactionStore: live and terminal
// reactions, merged in commit order.
func (s *Store) ListReactions(ctx context.Context, partition string, fn func(*store.Reaction) bool) error {
	var all []*store.Reaction
	for _, prefix := range []string{rxLive, rxTerminal} {
		err := s.queryReactions(ctx, "list reactions", partition, prefix, "", nil, func(r *store.Reaction, _ string) bool {
			all = append(all, r)
			return true
		})
		if err != nil {
			return err
		}
	}
	slices.SortFunc(all, func(a, b *store.Reaction) int { return store.CompareReactionIDs(a.ID, b.ID) })
	for _, r := range all {
		if !fn(r) {
			break
		}
	}
	return nil
}

// HasLiveReactions implements store.ReactionStore.
func (s *Store) HasLiveReactions(ctx context.Context, partition string) (bool, error) {
	found := false
	err := s.query(ctx, "find live reactions", &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("pk = :pk AND begins_with(sk, :l)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": S(rxPK(partition)), ":l": S(rxLive)},
		ProjectionExpression:      aws.String("pk"),
		Limit:                     aws.Int32(1),
	}, func(items []map[string]types.AttributeValue) bool {
		found = len(items) > 0
		return false
	})
	return found, err
}

// DueReactionPartitions implements store.ReactionStore.
func (s *Store) DueReactionPartitions(ctx context.Context, fn func(partition, token string) bool) error {
	stop := false
	for shard := 0; shard < rxMarkShards && !stop; shard++ {
		err := s.query(ctx, "list partitions with reactions", &dynamodb.QueryInput{
			KeyConditionExpression:    aws.String("pk = :pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": S("RXQ#" + strconv.Itoa(shard))},
		}, func(items []map[string]types.AttributeValue) bool {
			for _, it := range items {
				p, _ := getS(it, "p")
				tok, _ := getS(it, "tok")
				if !fn(p, tok) {
					stop = true
					return false
				}
			}
			return true
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// ClearReactionsDue implements store.ReactionStore.
func (s *Store) ClearReactionsDue(ctx context.Context, partition, token string) error {
	err := s.deleteItem(ctx, "unmark reactions due", Key(rxMarkPK(partition), "M"+esc(partition)), "tok = :tok",
		map[string]types.AttributeValue{":tok": S(token)})
	if isConditionFailed(err) {
		return nil
	}
	return err
}

var _ store.ReactionStore = (*Store)(nil)
