package dynamostore

import (
	"bytes"
	"context"
	"encoding/gob"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// Group commit (store.GroupCommitter, issue 20 item 7). A queued waiter
// publishes its evaluated commit as one item under the partition's
// publication key, sort key its ticket; the holder of an earlier turn
// reads the publications after its ticket (one consistent Query) and
// lands its own commit and theirs in one TransactWriteItems: one head
// update moving maxCommitSeq, appliedSeq and the turn past the whole
// group, then each member's per-commit items (commitParts, built from
// prepare exactly as a lone transactional commit builds them) at its own
// seq. The group writes log-index entries for every member or for none,
// as this instance knows the partition's index (logindex.go): without,
// the head update carries the index-off condition; with, it starts the
// index at the group's first seq. A group never takes the small-commit
// path (fast.go): it is one transaction. Publications expire by TTL (groupPubTTL); a publication whose
// ticket the turn passed is never read again.
const (
	groupPubData = "d" // B gob of the store.CommitRequest
	groupPubTTL  = time.Hour
)

func groupPK(p string) string { return PartitionPK(p) + "#G" }

var _ store.GroupCommitter = (*Store)(nil)

// PublishCommit implements store.GroupCommitter: one PutItem.
func (s *Store) PublishCommit(ctx context.Context, partition string, req *store.CommitRequest) error {
	if err := checkPartition(partition); err != nil {
		return err
	}
	if req.Ticket < 1 {
		return fmt.Errorf("dynamostore: a published commit needs its ticket")
	}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(req); err != nil {
		return fmt.Errorf("dynamostore: encode published commit: %w", err)
	}
	item := Key(groupPK(partition), seqSK(req.Ticket))
	item[groupPubData] = B(buf.Bytes())
	item[TTLAttribute] = N(time.Now().Add(groupPubTTL).Unix())
	if ItemSize(item) > itemBudget {
		return fmt.Errorf("dynamostore: published commit of %d bytes: %w", ItemSize(item), store.ErrTooLarge)
	}
	return s.putItem(ctx, "publish commit", item, "", nil)
}

// PublishedCommits implements store.GroupCommitter: one consistent
// Query over the tickets from … from+n−1.
func (s *Store) PublishedCommits(ctx context.Context, partition string, from int64, n int) ([]*store.CommitRequest, error) {
	if err := checkPartition(partition); err != nil {
		return nil, err
	}
	if n < 1 || from < 1 {
		return nil, nil
	}
	var out []*store.CommitRequest
	var derr error
	next := from
	err := s.query(ctx, "read published commits", &dynamodb.QueryInput{
		KeyConditionExpression: aws.String("pk = :pk AND sk BETWEEN :lo AND :hi"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": S(groupPK(partition)), ":lo": S(seqSK(from)), ":hi": S(seqSK(from + int64(n) - 1)),
		},
		Limit: aws.Int32(int32(n)),
	}, func(items []map[string]types.AttributeValue) bool {
		for _, it := range items {
			sk, _ := getS(it, AttrSK)
			if sk != seqSK(next) {
				return false // a ticket without a publication ends the run
			}
			d, ok := getB(it, groupPubData)
			req := &store.CommitRequest{}
			if !ok {
				derr = fmt.Errorf("dynamostore: published commit %s is malformed: %w", sk, errCorrupt)
				return false
			}
			if err := gob.NewDecoder(bytes.NewReader(d)).Decode(req); err != nil || req.Ticket != next {
				derr = fmt.Errorf("dynamostore: published commit %s is malformed (%v): %w", sk, err, errCorrupt)
				return false
			}
			out = append(out, req)
			next++
		}
		return len(out) < n
	})
	if err == nil {
		err = derr
	}
	return out, err
}

// CommitGroup implements store.GroupCommitter. The group is one
// transaction: [0] the head update of the whole group (conditioned as
// reqs[0]'s own commit, turn included), then each member's items, every
// one of them inline (rows with the log). A member is left out, with
// those after it, when its items would exceed 100 actions / 4 MB, touch
// an item an earlier member touches (a row written or read by two
// members: the later one was evaluated without the earlier's write),
// carry another writer version or gate token, or raise the writer fence
// (store.CommitRequest.RaiseFence: the group's head update would not
// raise it, so such a commit lands alone, through Commit); when the
// transaction is cancelled by a member's own condition (its outcome
// exists, a row it read changed) it is retried without that member. A
// group written without log-index entries or live scope copies that
// meets a head asking for them is written again with them (layoutError
// for a lone commit). A failure of reqs[0] is answered by Commit alone, with its exact error.
func (s *Store) CommitGroup(ctx context.Context, partition string, reqs []*store.CommitRequest) (int, error) {
	if len(reqs) == 0 {
		return 0, nil
	}
	n := len(reqs)
	settled := false
	var want layout // what a refused attempt's head asked for
	for n > 1 {
		l := s.layout(partition).or(want)
		items, owner, fit, err := s.groupItems(partition, reqs[:n], l)
		if err != nil {
			return 0, err
		}
		if fit < n {
			n = fit
			continue
		}
		err = s.transact(ctx, "append commit group", items)
		if err == nil {
			return n, nil
		}
		codes, olds := cancelReasons(err)
		if codes == nil {
			return 0, wrap("append commit group", err)
		}
		if codes[0] == "ConditionalCheckFailed" && olds[0] != nil {
			if h, perr := parseHead(olds[0]); perr == nil {
				s.noteIndex(partition, h)
				if !l.covers(h.layout()) {
					want = want.or(h.layout())
					continue // the same group with its log-index entries or scope copies
				}
				if h.MaxCommitSeq == reqs[0].ExpectedMaxSeq && h.pendingSmall() && !settled {
					// The head's last commit is a small one (fast.go):
					// settle it, move appliedSeq, and try the group again.
					settled = true
					if err := s.rollForward(ctx, partition, h); err != nil {
						return 0, err
					}
					continue
				}
			}
		}
		failed := -1
		for i, c := range codes {
			if c != "" && c != "None" && i < len(owner) {
				failed = owner[i]
				break
			}
		}
		if failed < 1 {
			n = 1 // the head or reqs[0] failed: Commit tells which
		} else {
			n = failed
		}
	}
	if err := s.Commit(ctx, partition, reqs[0]); err != nil {
		return 0, err
	}
	return 1, nil
}

// groupItems builds the transaction of reqs as one group, and which
// request owns each item (−1 for the head). fit < len(reqs) says only
// the first fit members can go in one group.
func (s *Store) groupItems(partition string, reqs []*store.CommitRequest, l layout) (items []txItem, owner []int, fit int, err error) {
	lead := reqs[0]
	if lead.Advance != nil || lead.RaiseFence > 0 {
		return nil, nil, 1, nil
	}
	items = append(items, txItem{})
	owner = append(owner, -1)
	keys := map[string]bool{headPK(partition) + "\x00" + headSK: true}
	total := 200
	for i, r := range reqs {
		ok := r.Advance == nil && r.RaiseFence == 0 && r.ExpectedMaxSeq == lead.ExpectedMaxSeq+int64(i) &&
			r.WriterVersion == lead.WriterVersion && r.CheckGate == lead.CheckGate && r.GateToken == lead.GateToken &&
			(lead.Ticket == 0 || r.Ticket == lead.Ticket+int64(i))
		var parts *commitParts
		if ok {
			var pc *prepared
			if pc, err = s.prepare(partition, r); err == nil {
				parts, err = s.commitParts(partition, r, pc, l)
			}
			if err != nil {
				if i == 0 {
					return nil, nil, 0, err
				}
				ok = false
			}
		}
		if ok {
			acts := append(append(append([]txItem(nil), parts.log...), parts.rows...), parts.checks...)
			sz := 0
			fresh := make(map[string]bool, len(acts))
			for _, a := range acts {
				k := txKey(a)
				if keys[k] || fresh[k] {
					ok = false
					break
				}
				fresh[k] = true
				sz += a.size
			}
			if ok && len(items)+len(acts) <= txMaxActions && total+sz <= txMaxBytes {
				for k := range fresh {
					keys[k] = true
				}
				items = append(items, acts...)
				for range acts {
					owner = append(owner, i)
				}
				total += sz
				continue
			}
		}
		if i == 0 {
			return nil, nil, 1, nil // the lead does not fit inline: it commits alone
		}
		return nil, nil, i, nil
	}
	last := reqs[len(reqs)-1]
	cond, vals := commitCondition(lead)
	vals[":n"] = N(last.Commit.Seq)
	update, cond := indexHead("SET mx = :n, ap = :n", cond, ":first", l)
	if l.index {
		vals[":first"] = N(lead.Commit.Seq)
	}
	if lead.Ticket > 0 {
		cond += " AND " + turnCondition(lead.Ticket-1)
		update += ", tn = :t, tt = :at, tg = :gap"
		vals[":tp"], vals[":t"], vals[":at"], vals[":gap"] = N(lead.Ticket-1), N(last.Ticket), N(lead.TurnAtUs), N(lead.TurnGapUs)
	}
	items[0] = s.headUpdate(partition, update, cond, vals)
	return items, owner, len(reqs), nil
}

// txKey is the primary key of a transaction action, as one string.
func txKey(a txItem) string {
	var key map[string]types.AttributeValue
	switch {
	case a.w.Put != nil:
		key = a.w.Put.Item
	case a.w.Delete != nil:
		key = a.w.Delete.Key
	case a.w.Update != nil:
		key = a.w.Update.Key
	case a.w.ConditionCheck != nil:
		key = a.w.ConditionCheck.Key
	}
	pk, _ := getS(key, AttrPK)
	sk, _ := getS(key, AttrSK)
	return pk + "\x00" + sk
}
