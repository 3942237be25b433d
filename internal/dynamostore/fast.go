package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// Small commits without a transaction (issue 23; the default, off with
// Options.TransactionalCommits).
//
// A commit is small when its log is one item, it has no reference-index
// writes, moves no backfill checkpoint, raises no writer fence
// (store.CommitRequest.RaiseFence), holds no queue ticket (a queued
// commit keeps the transaction: its turn is held for 2 waves, not 4),
// its rows (and their scope copies, when the partition has them on)
// fit one materialization batch, its partition's log index is off
// (logindex.go) and the head stays under fastHeadMax bytes with the
// commit on it. Commit N = E+1 (E the
// caller's ExpectedMaxSeq) is then written in four waves:
//
//  1. one consistent BatchGetItem of N's outcome key, the log item of E
//     and the rows the evaluation read with the head (store.RowRead),
//     sent once a consistent look at the head showing mx = E has
//     completed: H below, usually the push's own head and rows read a
//     few milliseconds before, else one GetItem of the head first. E's
//     log item is left out when E is pending on H and this Store wrote
//     that log item itself (its put-if-absent in 4 returned, or found
//     it; knowsLogged compares seq, client, commit id and creation
//     time, so a partition created again never matches): the log item
//     is then known to exist, which is all 1 reads it for when E is
//     pending (its attributes are H's pl);
//  2. one conditional UpdateItem of the head, the commit point: mx = E,
//     E materialized or pending ("ap = E OR (ap = E−1 AND ps = E)"),
//     the writer fence and gate token (commitCondition's), the log index
//     off, scope copies off when H showed them off (scopeindex.go),
//     PutRejection's count as H showed it; it sets mx = N, ap = E,
//     and carries N's log item and outcome item (pl, po) with ps = N;
//  3. the outcome, row and scope-copy puts, in parallel: the outcome
//     put-if-absent (or expired, outcomeAbsent), each row and copy
//     "attribute_not_exists(pk) OR cs <= N";
//  4. the log item, put-if-absent, after every put of 3 returned.
//
// No write moves appliedSeq on its own: commit N+1's commit point marks
// N applied (ap = N in 2), and readers that need N's rows settle it
// themselves (settleSmall). A one-op insert is 4 WCU (head, outcome,
// row, log: 1 each, against 8 in the transaction; 5 and 10 with the
// partition's scope copies on, scopeindex.go) and 3 RCU (outcome key,
// E's log item, row) for 5 calls in 4 waves after the push's head and
// rows read (one TransactWriteItems in the transaction), 2 RCU when
// this Store wrote E (a client pushing again through the same
// instance); without a usable H, one more call and one more RCU for the
// head, in 5 waves.
//
// # The head wave 1 follows
//
// 1 reads no head. It follows H: the head item as this Store's latest
// consistent look at it showed it (headmemo.go) — a consistent read
// (TouchPartition, readHead, GetRows) or the image a head update
// returned (the previous small commit point's new head, a refused one's
// old head, TouchPartition's refresh or creation) — when that look is
// at most headMemoAge old, shows mx = E and admits a small commit
// (admitSmall: the gate, the log index off, E materialized or pending).
// Otherwise headBeforeSmall reads the head with one GetItem before 1
// and decides on it as the head always decided; a remembered head that
// refuses is never acted on, as its refusal may be stale. The
// guarantees below use three facts of H, and nothing else of it:
//
// (H1) H's look completed before 1 was sent: it is remembered only once
// its call returned, and 1 is sent after H is taken from memory.
//
// (H2) H shows mx = E, so E's commit point came before H's look, hence
// before 1. That is all (O) orders: commits ≤ E−1 are materialized
// before 1 starts, whichever look showed mx = E.
//
// (H3) Every other attribute 1 and 2 take from H is checked again by
// 2's condition on the head as it is then: mx; ap and ps (a head that
// showed E pending and shows it applied now passes, and the log and
// outcome items H carries for E are E's, which never change); the
// writer fence and gate token; the log-index flags; the scope-copy
// flags when H showed copies off (a head that showed them on needs no
// check: they never turn off, and 1's copies are then written); rj. A head that
// moved in any of them since H fails 2, which writes nothing and ends
// the commit as a lost race always ends it: the gate's refusal, or
// HeadMovedError with the head the failure returned, which this Store
// remembers in H's place, so a retry never follows the head that failed
// (the engine's retry also reads the head itself). H's size is taken as
// it is (fastHeadMax): it bounds a write's units, not correctness, and
// what grows a head without moving mx is a few numbers.
//
// # Invariants
//
// (P) ps is on the head exactly while the small commit ps = mx is
// pending: ap = ps−1. 2 sets ps = N with mx = N and ap = E = N−1; an
// advance of appliedSeq (advanceApplied) removes ps, pl and po in the
// same update; every other commit point requires ap = mx = E before it
// and so finds no ps.
//
// (M) ap ≥ k implies commit k is materialized: its outcome, rows and
// scope copies are written (or overwritten by later commits). A
// transactional commit writes them with its commit point; a large one
// moves ap when its last batch is written (commit.go); a small commit's
// ap moves only by 2 of the next commit, by advanceApplied, after its
// log item was seen (a consistent read found it, or this instance wrote
// it in 4) or written by settleSmall.
//
// (L) A small commit's log item exists only once its outcome, rows and
// scope copies are written: every writer of it (the committer, or any
// settleSmall) puts it in 4, after its own puts of 3 returned, each of
// them successful or refused by a condition that shows the item is
// already this commit's or a later commit's. Log items never change
// once written (put-if-absent of the same attributes, from pl).
//
// (O) Every commit point requires ap ≥ its seq−1 after it: commits ≤ E−1
// are materialized (M) before E's commit point, which precedes H's look
// at mx = E (H2), which completed before 1 was sent (H1).
//
// # Why each guarantee holds
//
// Gapless seqs (§2.1): N's seq is taken by 2 alone, conditioned on mx =
// E; every other commit path moves mx by the same condition. A crash
// after 2 leaves N on the head (pl, po) and every later reader can
// write it whole (settleSmall), so no seq is ever lost or skipped; a
// crash before 2 leaves nothing.
//
// Exactly-once outcomes (§2.3). N's key K has no live outcome before 2:
//   - a commit ≤ E−1 with K wrote its outcome before 1 (O), so 1 reads
//     it (ErrOutcomeExists);
//   - commit E's outcome may be written while 1 runs (E small and
//     pending), so 1 compares E's identity instead: E's log item (read
//     in 1, or the head's pl when E is pending) names its client and
//     commit id. 1 proceeds only with E's log item in hand (or E = 0):
//     when neither the read nor the head has it, one more consistent
//     GetItem reads it, and a log item gone for good (pruned) sends the
//     commit the transactional way, whose outcome put is atomic with
//     its head. A replay of a pending E finishes E first, so the outcome
//     the engine then reads exists;
//   - a rejection of K (PutRejection: one transaction that writes its
//     outcome and counts rj) that H's look saw is done before 1 is sent
//     (H1), so 1 reads its outcome; one H did not see moves rj past
//     H's count, which 2 requires unchanged (H3); one after 2 meets ps
//     on the head and waits for N to be settled (and then finds N's
//     outcome). This needs H's look to complete before 1 starts: read
//     in 1's BatchGetItem, whose items are read in no particular order,
//     the head could count a rejection whose outcome the same call read
//     as absent, which is why a commit without a usable H reads the
//     head on its own first.
//   - with a stale H (mx moved past E since), 1 ends in an outcome that
//     exists (ErrOutcomeExists), the transactional way (errNotFast) or
//     2, which fails on mx = E and writes nothing. H may show E pending
//     with K's identity: then E did commit K (its commit point carried
//     it), and finishing E from H before answering ErrOutcomeExists is
//     at worst a stale writer of E (below).
//
// Atomic visibility (§2.1): a reader sees all of N or none of it.
//   - Readers of rows settle a pending N first: GetRows, the push's head
//     and rows read (touch) and commit 1 overlay N's writes, decoded from
//     pl or N's log item, on the rows they read (overlayWrites: the row
//     of every key N writes is N's write, as no commit follows N yet), so
//     they neither read nor write more; ScanRows, ScanScopedRows,
//     ListChildren read N's log item consistently (settleSmall) and,
//     only when it is absent, write N whole before reading rows (L);
//     Prune, PutRejection, backfills and the transactional commit also
//     move ap (advanceApplied).
//   - Commit 1 overlays E's writes from E's log item (or H's pl): a row
//     read of 1 may predate E's puts even when H shows E applied (the
//     puts of a pending E may be under way); commits ≤ E−1 are
//     materialized before 1 starts (O), so E's writes are the only ones
//     a row read of 1 can miss, and the overlay makes the read-row check
//     of 1 exact. When the head moved past E since H, a row read may
//     show a later commit's write: the check then refuses (evaluate
//     again) or passes and 2 fails on mx = E; either way nothing lands
//     on a row state the evaluation did not see.
//   - A pull reads N from its log item, which exists only once N is
//     materialized (L); when the log ends just before N while N is
//     pending, it reads N from the head (pendingCommit), the same commit
//     its log item will hold, and writes nothing (readLogCheap).
//
// Writer fence: 2 carries commitCondition's fence and gate token, so
// no commit of a fenced build gets a seq once the fence rises; H's gate
// only lets 1 start (a refusal of it is decided on a fresh read). Writes
// after 2 (3 and 4, by anyone) are N's own items, derived from N's log
// body, the same whichever build writes them.
//
// A stale writer (one resuming 3 or 4 after others settled N and later
// commits moved on) changes nothing: its row and copy puts are refused
// wherever a later commit wrote or deleted the item (a higher cs; a
// delete leaves a tombstone with its cs), its outcome and log puts find
// their items (put-if-absent), and it writes no head. The only items it
// could bring back are ones Prune deleted, which Prune reaches only for
// commits older than the partition's retention, far beyond a request's
// deadline (as for the plain batches of a large commit, commit.go). A
// commit that finishes E from a stale H (E pending on H, settled since)
// is such a writer of E.
// TestSmallCommitCrash and TestSmallCommitStaleWriter cover a crash
// after each wave and a late writer.
//
// Builds from before this order (issue 23's first small commits, off by
// default there) read the same head attributes: such an instance meeting
// a pending commit finishes it (completeFast) and moves appliedSeq,
// which keeps (P) and (M), but it puts the log item beside the rows,
// not after them, so during a rolling deploy a commit can briefly have
// its log item before its rows; the next commit's overlay still checks
// its read rows exactly, and the old instance moves appliedSeq only once
// its own writes returned.
//
// Cost of the order elsewhere: a reader that settles a pending commit by
// its log item pays one consistent read (bootstrap pages, ListChildren);
// a transactional commit after a small one first moves appliedSeq (a
// head read, a log read and 1 WCU; pendingHint saves the refused
// transaction, which is charged whole); so does PutRejection, rare.

// Head attributes of a small commit on the head.
const (
	hPendSeq     = "ps" // N the pending commit (= mx)
	hPendLog     = "pl" // M its log item without the key
	hPendOutcome = "po" // M its outcome item without the key
	hRejections  = "rj" // N PutRejection's count
)

// fastHeadMax bounds the head with a small commit on it so that every
// consistent read of the head stays one read unit (4 KB). The head
// update that carries the commit and the one that replaces it are
// charged by that size (a write unit per KB): a 50-operation commit's
// 1.1 KB compressed log on the head costs 2 units in each, where the
// transaction charges every item twice (50 rows: 100 units, against 50
// plain puts here).
const fastHeadMax = 4000

// errNotFast: the commit goes the transactional way.
var errNotFast = errors.New("dynamostore: not a small commit")

func getM(item map[string]types.AttributeValue, name string) map[string]types.AttributeValue {
	if v, ok := item[name].(*types.AttributeValueMemberM); ok {
		return v.Value
	}
	return nil
}

// withoutKey is item's attributes other than its key.
func withoutKey(item map[string]types.AttributeValue) map[string]types.AttributeValue {
	out := maps.Clone(item)
	delete(out, AttrPK)
	delete(out, AttrSK)
	return out
}

// pendingSmall reports whether h carries a pending small commit (P).
func (h *head) pendingSmall() bool {
	return h.pendSeq > 0 && h.pendSeq == h.MaxCommitSeq && h.applied == h.pendSeq-1 &&
		h.pendLog != nil && h.pendOutcome != nil
}

// pendingItems rebuilds the log and outcome items of h's pending small
// commit from the head.
func pendingItems(p string, h *head) (logItem, outItem map[string]types.AttributeValue) {
	seq := h.pendSeq
	logItem = maps.Clone(h.pendLog)
	logItem[AttrPK], logItem[AttrSK] = S(logPK(p)), S(chunkSK(seq, 0))
	client, _ := getS(h.pendLog, lClient)
	commitID, _ := getS(h.pendLog, lCommit)
	outItem = maps.Clone(h.pendOutcome)
	outItem[AttrPK], outItem[AttrSK] = S(outcomePK(p, client)), S(outcomeSK(commitID))
	return logItem, outItem
}

// pendingCommit decodes h's pending small commit from the head, as
// readLog decodes its log item.
func pendingCommit(p string, h *head) (*store.Commit, *logBody, error) {
	it, _ := pendingItems(p, h)
	created, ok1 := getN(it, lCreated)
	actor, ok2 := getS(it, lActor)
	client, ok3 := getS(it, lClient)
	cc, ok4 := getS(it, lCommit)
	body, ok5 := getB(it, lData)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return nil, nil, fmt.Errorf("dynamostore: pending commit %d is malformed: %w", h.pendSeq, errCorrupt)
	}
	lb, err := decodeLogBody(body, h.pendSeq)
	if err != nil {
		return nil, nil, fmt.Errorf("dynamostore: pending commit %d: %w", h.pendSeq, err)
	}
	c := &store.Commit{Seq: h.pendSeq, CreatedAtMs: created, ActorID: actor, ClientID: client, ClientCommitID: cc,
		Changes: lb.changes, Reactions: lb.reactions}
	c.WriterVersion, _ = getN(it, lWriter)
	return c, lb, nil
}

// fastCandidate reports whether pc may take the small-commit path
// (before the head is read).
func (s *Store) fastCandidate(partition string, req *store.CommitRequest, pc *prepared) bool {
	return !s.transactional && s.mayWrite(levelSmallCommits) && len(pc.chunks) == 1 && len(pc.refs) == 0 && req.Advance == nil && req.RaiseFence == 0 &&
		req.Ticket == 0 && len(pc.rows) < txMaxActions && !s.indexOn(partition)
}

// commitFast writes a small commit (waves 1–4 above); errNotFast when
// what 1 reads shows it must go the transactional way.
func (s *Store) commitFast(ctx context.Context, partition string, req *store.CommitRequest, pc *prepared) error {
	e := req.ExpectedMaxSeq
	rr := readRowChecks(partition, req.ReadRows)
	hitem, h, err := s.headBeforeSmall(ctx, partition, req)
	if err != nil {
		return err
	}
	// E pending with a log item this Store wrote itself: 1 need not
	// read it (its attributes are the head's pl; (L) holds for it).
	logKnown := h.pendingSmall() && s.knowsLogged(partition, e, h.pendLog)
	r1, err := s.readBeforeSmall(ctx, partition, e, !logKnown, Key(outcomePK(partition, req.Commit.ClientID), outcomeSK(req.Commit.ClientCommitID)), rr)
	if err != nil {
		return err
	}
	r1.logKnown = logKnown
	read := r1.rows
	pending, copies := h.pendingSmall(), h.copiesOn()
	if copies && len(pc.rows)+len(pc.index) >= txMaxActions {
		return errNotFast // with its scope copies, more than one batch
	}
	prev, pendLog, pendOut, err := s.previousSmall(ctx, partition, req, &h, r1)
	if err != nil {
		return err
	}
	overlayWrites(partition, e, prev, func(k rowKey, r *store.Row) {
		if _, ok := rr[k]; ok {
			read[k] = r
		}
	})
	for k, want := range rr {
		got := read[k]
		if (got != nil) != want.Present || got != nil && got.CommitSeq != want.CommitSeq {
			return store.ErrHeadMoved // read before a commit that wrote it: evaluate again
		}
	}
	logAttrs, outAttrs := withoutKey(pc.chunks[0]), withoutKey(pc.outcome)
	bare := maps.Clone(hitem)
	delete(bare, hPendSeq)
	delete(bare, hPendLog)
	delete(bare, hPendOutcome)
	if ItemSize(bare)+ItemSize(logAttrs)+ItemSize(outAttrs)+3*16 > fastHeadMax {
		return errNotFast
	}
	if pending && !r1.logged(partition) {
		// E is on the head and its log item was not read: write E whole
		// (L) before 2 marks it applied.
		body, _ := getB(pendLog, lData)
		if err := s.finishSmall(ctx, partition, e, pendLog, pendOut, body, copies); err != nil {
			return err
		}
	}

	// 2: the commit point.
	seq := pc.seq
	if err := s.smallCommitPoint(ctx, partition, req, &h, seq, logAttrs, outAttrs, copies); err != nil {
		return err
	}
	if s.afterLog != nil {
		if err := s.afterLog(); err != nil {
			return err
		}
	}
	// 3 and 4. The commit is durable: a failure here leaves it to the
	// next reader or commit (settleSmall), so only a hook's error is
	// reported.
	if err := s.finishSmall(ctx, partition, seq, pc.chunks[0], pc.outcome, pc.body, copies); errors.Is(err, errInjected) {
		return err
	}
	return nil
}

// headBeforeSmall is the head wave 1 follows (see "The head wave 1
// follows" above): this Store's latest look at it when that is recent,
// shows maxCommitSeq = E and admits a small commit (admitSmall);
// otherwise one consistent GetItem of it, which decides as the head
// always did. A remembered head that admits nothing is never acted on:
// its refusals may be stale, the fresh read's are not.
func (s *Store) headBeforeSmall(ctx context.Context, partition string, req *store.CommitRequest) (map[string]types.AttributeValue, head, error) {
	if item := s.recentHead(partition, req.ExpectedMaxSeq); item != nil {
		if h, err := parseHead(item); err == nil && s.admitSmall(&h, req) == nil {
			return item, h, nil
		}
	}
	item, err := s.getItem(ctx, "read head before a small commit", headPK(partition), headSK, nil)
	if err != nil {
		return nil, head{}, err
	}
	if item == nil {
		return nil, head{}, ErrUnknownPartition
	}
	h, err := parseHead(item)
	if err != nil {
		return nil, head{}, err
	}
	s.noteIndex(partition, h)
	s.noteHeadItem(partition, item)
	return item, h, s.admitSmall(&h, req)
}

// admitSmall checks what the head alone decides of a small commit
// following it (h gets the table-wide declaration, lazyGate): the gate
// (writer fence and gate token), maxCommitSeq = E, and the log index off with commit
// E materialized or the small commit pending on the head.
func (s *Store) admitSmall(h *head, req *store.CommitRequest) error {
	s.lazyGate(h)
	if err := gateFailure(h.Gate, req); err != nil {
		return err
	}
	if h.MaxCommitSeq != req.ExpectedMaxSeq {
		return &store.HeadMovedError{Head: h.Head}
	}
	if h.indexOn() || !h.pendingSmall() && h.applied != req.ExpectedMaxSeq {
		return errNotFast // the transactional path finishes a large commit first, or writes the index
	}
	return nil
}

// previousSmall looks at commit E = req.ExpectedMaxSeq before a small
// commit follows it (wave 1 read r1; h its head): E's log item, read in 1,
// else the head's (E pending), else read once more (1's read may have
// missed it; absent for good: pruned, and the commit goes the
// transactional way). It returns E's row writes, E's pending log and
// outcome items when E is on the head, and ErrOutcomeExists when this
// commit's key already has a live outcome (§2.3).
func (s *Store) previousSmall(ctx context.Context, partition string, req *store.CommitRequest, h *head, r1 *smallRead) (prev []store.RowWrite, pendLog, pendOut map[string]types.AttributeValue, err error) {
	e, pending, elog, oitem := req.ExpectedMaxSeq, h.pendingSmall(), r1.log, r1.outcome
	opk, osk := outcomePK(partition, req.Commit.ClientID), outcomeSK(req.Commit.ClientCommitID)
	if pending {
		pendLog, pendOut = pendingItems(partition, h)
		if elog == nil {
			elog = pendLog
		}
	}
	if elog == nil && e > 0 {
		if elog, err = s.getItem(ctx, "read log before a small commit", logPK(partition), chunkSK(e, 0), nil); err != nil {
			return nil, nil, nil, err
		}
		if elog == nil {
			return nil, nil, nil, errNotFast
		}
	}
	if elog != nil {
		if nc, _ := getN(elog, lChunks); nc != 1 {
			return nil, nil, nil, errNotFast // E is a large commit: its body is in several items
		}
		body, _ := getB(elog, lData)
		if prev, err = writesOf(e, body); err != nil {
			return nil, nil, nil, err
		}
		client, _ := getS(elog, lClient)
		commitID, _ := getS(elog, lCommit)
		if client == req.Commit.ClientID && commitID == req.Commit.ClientCommitID {
			// E has this commit's key (§2.3). Pending and not logged: E
			// is recent; write it whole, so the engine reads its
			// outcome. Else E's outcome was written before its log item;
			// when 1 did not see it, read it again: absent now, it
			// expired and was deleted, and the key is free.
			if pending && !r1.logged(partition) {
				if err := s.finishSmall(ctx, partition, e, pendLog, pendOut, body, h.copiesOn()); err != nil {
					return nil, nil, nil, err
				}
				return nil, nil, nil, store.ErrOutcomeExists
			}
			if oitem == nil {
				if oitem, err = s.getItem(ctx, "read push outcome", opk, osk, nil); err != nil {
					return nil, nil, nil, err
				}
			}
		}
	}
	if oitem != nil && outcomeLive(oitem, req.Outcome.RecordedAtMs) {
		return nil, nil, nil, store.ErrOutcomeExists
	}
	return prev, pendLog, pendOut, nil
}

// smallRead is what wave 1 of a small commit read: its items as
// returned, and the outcome, the previous commit's log item and the read
// rows among them (absent: nil).
type smallRead struct {
	items        []map[string]types.AttributeValue
	outcome, log map[string]types.AttributeValue
	rows         map[rowKey]*store.Row
	// logKnown: E's log item was not read because this Store wrote it
	// (knowsLogged).
	logKnown bool
}

// logged reports whether E's log item is known to exist: 1 read it, or
// this Store wrote it.
func (r *smallRead) logged(p string) bool { return r.logKnown || hasLog(r.items, p) }

// readBeforeSmall is wave 1: one consistent BatchGetItem of the
// commit's outcome key, commit e's first log item (e > 0) and the rows
// the evaluation read (rr); errNotFast when they do not fit one call.
// The head is not among them: the caller has it from a read that
// completed before this one started (headBeforeSmall).
func (s *Store) readBeforeSmall(ctx context.Context, partition string, e int64, withLog bool, outKey map[string]types.AttributeValue, rr map[rowKey]store.RowRead) (*smallRead, error) {
	keys := []map[string]types.AttributeValue{outKey}
	if e > 0 && withLog {
		keys = append(keys, Key(logPK(partition), chunkSK(e, 0)))
	}
	for _, r := range rr {
		keys = append(keys, Key(rowPK(partition, r.Table), rowSK(r.RowID)))
	}
	if len(keys) > batchGetMax {
		return nil, errNotFast
	}
	items, err := s.batchGet(ctx, "read before a small commit", keys)
	if err != nil {
		return nil, err
	}
	opk, _ := getS(outKey, AttrPK)
	r := &smallRead{items: items, rows: map[rowKey]*store.Row{}}
	for _, it := range items {
		pk, _ := getS(it, AttrPK)
		sk, _ := getS(it, AttrSK)
		switch pk {
		case opk:
			r.outcome = it
		case logPK(partition):
			r.log = it
		default:
			row, err := parseRow(it)
			if err != nil {
				return nil, err
			}
			for k := range rr {
				if rowPK(partition, k.table) == pk && rowSK(k.id) == sk {
					r.rows[k] = row
				}
			}
		}
	}
	return r, nil
}

// smallCommitPoint is wave 2: the conditional head update that takes seq
// (the commit point), marks the previous small commit applied and carries
// this commit's log and outcome attributes; h is the head wave 1
// followed, copies whether it showed scope copies on (without, the head
// must still have them off). A failed condition reports the gate's
// refusal, the head that moved, or errNotFast when only the copies were
// turned on meanwhile. Either way the head as the update left or found
// it is what this Store remembers of it (headmemo.go): the next commit's
// wave 1 follows it, and a retry never follows the head that failed.
func (s *Store) smallCommitPoint(ctx context.Context, partition string, req *store.CommitRequest, h *head, seq int64, logAttrs, outAttrs map[string]types.AttributeValue, copies bool) error {
	e := req.ExpectedMaxSeq
	cond, vals := writerCondition(store.WriterCheck{WriterVersion: req.WriterVersion, CheckGate: req.CheckGate, GateToken: req.GateToken})
	cond = "attribute_exists(pk) AND mx = :e AND (ap = :e OR (ap = :e1 AND " + hPendSeq + " = :e)) AND " + cond +
		" AND " + indexOffCondition
	if !copies {
		cond += " AND " + copiesOffCondition
	}
	vals[":e"], vals[":e1"] = N(e), N(e-1)
	if h.rejections == 0 {
		cond += " AND attribute_not_exists(" + hRejections + ")"
	} else {
		cond += " AND " + hRejections + " = :rj"
		vals[":rj"] = N(h.rejections)
	}
	update := "SET mx = :n, ap = :e, " + hPendSeq + " = :n, " + hPendLog + " = :pl, " + hPendOutcome + " = :po"
	vals[":n"], vals[":pl"], vals[":po"] = N(seq), &types.AttributeValueMemberM{Value: logAttrs}, &types.AttributeValueMemberM{Value: outAttrs}
	after, err := s.updateItem(ctx, "small commit", &dynamodb.UpdateItemInput{
		Key:                                 Key(headPK(partition), headSK),
		UpdateExpression:                    aws.String(update),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeValues:           vals,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		ReturnValues:                        types.ReturnValueAllNew, // no read units: the write's own image
	})
	if err == nil {
		s.noteHeadItem(partition, after)
		return nil
	}
	if isConditionFailed(err) {
		if old := conditionItem(err); old != nil {
			if h2, perr := parseHead(old); perr == nil {
				s.noteIndex(partition, h2)
				s.noteHeadItem(partition, old)
				s.lazyGate(&h2)
				if gerr := gateFailure(h2.Gate, req); gerr != nil {
					return gerr
				}
				if !copies && h2.copiesOn() && h2.MaxCommitSeq == e {
					// Copies turned on between 1 and 2: the transactional
					// way, whose refusal (layoutError) writes them.
					return errNotFast
				}
				return &store.HeadMovedError{Head: h2.Head}
			}
		}
		s.forgetHead(partition)
		return store.ErrHeadMoved
	}
	s.forgetHead(partition) // unknown whether it was applied
	return err
}

// hasLog reports whether items (1's answer) hold a log item.
func hasLog(items []map[string]types.AttributeValue, p string) bool {
	for _, it := range items {
		if pk, _ := getS(it, AttrPK); pk == logPK(p) {
			return true
		}
	}
	return false
}

// errInjected wraps a test hook's error (Options.AfterSmallWrites).
var errInjected = errors.New("dynamostore: injected")

// writesOf decodes commit seq's row writes (the last write of each row)
// from its log body.
func writesOf(seq int64, body []byte) ([]store.RowWrite, error) {
	lb, err := decodeLogBody(body, seq)
	if err != nil {
		return nil, fmt.Errorf("dynamostore: log item %d: %w", seq, err)
	}
	rows, err := lb.materialization(seq)
	if err != nil {
		return nil, fmt.Errorf("dynamostore: log item %d: %w", seq, err)
	}
	return dedupeRows(rows), nil
}

// overlayWrites hands fn each row (or tombstone) commit seq writes, as
// its row item reads once written: the state of that row after seq.
func overlayWrites(p string, seq int64, writes []store.RowWrite, fn func(rowKey, *store.Row)) {
	for i := range writes {
		r, err := parseRow(rowItem(p, seq, &writes[i]))
		if err != nil {
			continue // rowItem always builds a well-formed item
		}
		fn(rowKey{writes[i].Table, writes[i].Row.RowID}, r)
	}
}

// overlayPending puts h's pending small commit's writes to rows of table
// over rows (keyed by rowId; only the ids in want).
func overlayPending(p string, h *head, table string, want map[string]bool, rows map[string]*store.Row) error {
	body, ok := getB(h.pendLog, lData)
	if !ok {
		return fmt.Errorf("dynamostore: pending commit %d has no body: %w", h.pendSeq, errCorrupt)
	}
	writes, err := writesOf(h.pendSeq, body)
	if err != nil {
		return err
	}
	overlayWrites(p, h.pendSeq, writes, func(k rowKey, r *store.Row) {
		if k.table == table && want[k.id] {
			rows[k.id] = r
		}
	})
	return nil
}

// finishSmall writes small commit seq's outcome, rows and scope copies
// (3: each idempotent, put-if-absent or conditioned on the stored cs;
// live copies when copies, the head its caller read asking for them),
// then, once all of them returned, its log item (4). It moves no head
// attribute.
func (s *Store) finishSmall(ctx context.Context, p string, seq int64, logItem, outItem map[string]types.AttributeValue, body []byte, copies bool) error {
	lb, err := s.decodeLog(body, seq)
	if err != nil {
		return fmt.Errorf("dynamostore: pending commit %d: %w", seq, err)
	}
	acts, err := s.materializationOf(p, seq, lb, copies)
	if err != nil {
		return err
	}
	if !monotonic(acts) {
		return fmt.Errorf("dynamostore: pending commit %d has writes without a commit seq: %w", seq, errCorrupt)
	}
	type write struct {
		item  map[string]types.AttributeValue
		cond  string
		names map[string]string
		vals  map[string]types.AttributeValue
	}
	at, _ := getN(outItem, oAt)
	ocond, onames, ovals := outcomeAbsent(at)
	ws := []write{{outItem, ocond, onames, ovals}}
	for _, a := range acts {
		ws = append(ws, write{a.w.Put.Item, "attribute_not_exists(pk) OR cs <= :s", nil, map[string]types.AttributeValue{":s": N(seq)}})
	}
	err = fanOut(plainConcurrency, ws, func(w write) error {
		err := s.putItemNamed(ctx, "materialize small commit", w.item, w.cond, w.names, w.vals)
		if isConditionFailed(err) {
			return nil // written before (this commit's), or a later commit's
		}
		return err
	})
	if err != nil {
		return err
	}
	if s.afterSmallWrites != nil {
		if err := s.afterSmallWrites(); err != nil {
			return fmt.Errorf("%w: %w", errInjected, err)
		}
	}
	err = s.putItem(ctx, "log small commit", logItem, "attribute_not_exists(pk)", nil)
	if isConditionFailed(err) {
		err = nil // another writer of this commit logged it (L)
	}
	if err == nil {
		s.noteLogged(p, seq, logItem)
	}
	return err
}

// settleSmall makes h's pending small commit materialized: one
// consistent read of its log item, and only when it is absent, the
// commit written whole from the head (finishSmall). With advance,
// appliedSeq then moves to it (advanceApplied, which also takes it off
// the head), for callers whose own writes require ap = mx.
func (s *Store) settleSmall(ctx context.Context, p string, h *head, advance bool) error {
	seq := h.pendSeq
	got, err := s.getItem(ctx, "read pending commit's log", logPK(p), chunkSK(seq, 0), nil)
	if err != nil {
		return err
	}
	if got == nil {
		logItem, outItem := pendingItems(p, h)
		body, ok := getB(h.pendLog, lData)
		if !ok {
			return fmt.Errorf("dynamostore: pending commit %d has no body: %w", seq, errCorrupt)
		}
		if err := s.finishSmall(ctx, p, seq, logItem, outItem, body, h.copiesOn()); err != nil {
			return err
		}
	}
	if !advance {
		return nil
	}
	return s.advanceApplied(ctx, p, seq)
}

// settle makes every commit up to h's maxCommitSeq readable from the row
// items before a reader reads them: a pending small commit by
// settleSmall without moving ap, anything else by rollForward.
func (s *Store) settle(ctx context.Context, p string, h head) error {
	if h.applied >= h.MaxCommitSeq {
		return nil
	}
	if h.pendingSmall() {
		return s.settleSmall(ctx, p, &h, false)
	}
	return s.rollForward(ctx, p, h)
}

// settleHinted settles and advances the small commit this Store last
// saw pending on p's head (pendingHint; only at seq when seq > 0), read
// again from the head as it is now, before a transaction whose head
// condition (appliedSeq = maxCommitSeq) would refuse it and be charged
// whole.
func (s *Store) settleHinted(ctx context.Context, p string, seq int64) error {
	if hint := s.pendingHint(p); hint == 0 || seq > 0 && hint != seq {
		return nil
	}
	h, ok, err := s.readHead(ctx, p)
	if err != nil || !ok || !h.pendingSmall() || seq > 0 && h.pendSeq != seq {
		return err
	}
	return s.settleSmall(ctx, p, &h, true)
}

// rollForwardFast settles and advances the small commit h carries;
// false when h carries none at seq.
func (s *Store) rollForwardFast(ctx context.Context, p string, h *head, seq int64) (bool, error) {
	if h.pendSeq != seq || h.pendLog == nil || h.pendOutcome == nil {
		return false, nil
	}
	return true, s.settleSmall(ctx, p, h, true)
}
