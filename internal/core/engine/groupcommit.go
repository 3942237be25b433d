package engine

import (
	"context"
	"errors"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// Group commit (issue 20 item 7), on a store implementing both
// store.CommitQueue and store.GroupCommitter. A partition's queue lands
// one commit per turn, and a turn is a read plus a transaction: that is
// the partition's ceiling. Waiting commits are in other Lambda
// instances, so a group is a hand-off through the store:
//
//   - A waiter whose turn has not come evaluates its commit as usual
//     (its own request, its own authorization, §3.4) and, when the
//     evaluation is one a later seq cannot change (below), publishes the
//     commit it would make on its ticket (publish).
//   - The holder of a turn, about to commit, reads the commits published
//     on the tickets right after its own and lands its commit and theirs
//     as consecutive commitSeqs in one atomic write, moving the turn past
//     all of them (commitGrouped). It evaluates nothing of theirs and
//     adds no authority: each member is exactly what its own request
//     evaluated, re-stamped with the seq it gets.
//   - A waiter that finds the turn past its ticket looks for its outcome
//     (§2.3): applied, its commit landed in a group, and it answers from
//     it (groupedResult); otherwise it goes on as any skipped waiter.
//
// Soundness. A member lands at a later seq than the head it was
// evaluated on, so only an evaluation that depends on nothing but the
// rows it read may be published: every read row rides as a condition
// (store.CommitRequest.ReadRows, and the store leaves out a member
// touching a row an earlier member touches), and commits whose pipeline
// reads anything else — §6.8 validators, §6.11 references, §5.9.6 blob
// checks, §6.9 reaction planning, more rows than are read with the head —
// are never published and commit in their own turn. Exactly once: each
// member's outcome is still put only if absent, in the same write as
// its commit. A member the holder could not take (not published in
// time, too large for the write, its rows changed) lands in its own
// turn as before; a holder that dies leaves its waiters to the lease.

// maxGroupMembers bounds the published commits a holder reads; the store
// takes as many as fit one write (100 items / 4 MB).
const maxGroupMembers = 24

// grouper is the store's group commit, nil without a queue or without it.
func (e *Engine) grouper() store.GroupCommitter {
	if e.cfg.NoGroupCommit {
		return nil
	}
	if _, ok := e.store.(store.CommitQueue); !ok {
		return nil
	}
	g, _ := e.store.(store.GroupCommitter)
	return g
}

// publishable: the evaluation's outcome depends only on the rows it read
// with the head (see "Soundness").
func (run *pushRun) publishable(ev *evaluation) bool {
	e := run.e
	return ev.head != nil && ev.reject == nil && run.hooks.Empty() && e.cfg.Reactions == nil &&
		!e.schema.Versions[e.schema.Latest].HasReferences() &&
		len(ev.blobChecks) == 0 && len(ev.refs) == 0 && ev.cascaded == 0
}

// publish offers the evaluated commit of a waiter not in its turn to the
// holders before it, once per ticket. Nothing is published when the
// commit could not be grouped (publishable), or the gate refuses it
// (the commit then meets the refusal in its own turn).
func (qs *queueState) publish(ctx context.Context, run *pushRun, ev *evaluation) error {
	g := run.e.grouper()
	if g == nil || qs.ticket == 0 || qs.published == qs.ticket || !run.publishable(ev) {
		return nil
	}
	qs.published = qs.ticket // one attempt per ticket, whatever comes of it
	if err := run.stages(ctx, ev); err != nil || !run.publishable(ev) {
		return err
	}
	_, creq, err := run.e.commitRequest(run, ev)
	if err != nil {
		return err
	}
	if run.e.gateForCommit(run.rs, run.head, creq) != nil {
		return nil
	}
	creq.Ticket = qs.ticket
	err = g.PublishCommit(ctx, qs.partition, creq)
	if errors.Is(err, store.ErrTooLarge) {
		return nil
	}
	if err != nil {
		return storeErr(err, "publish a waiting commit")
	}
	run.rs.report.GroupPublished++
	return nil
}

// groupedResult is the answer of a waiter whose published commit a
// holder landed (the turn passed its ticket): its applied outcome, nil
// when there is none (the waiter goes on as a skipped one).
func (qs *queueState) groupedResult(ctx context.Context, run *pushRun) (*wire.PushResult, error) {
	if qs.published == 0 || qs.published != qs.ticket {
		return nil, nil
	}
	rs := run.rs
	o, err := run.e.store.GetOutcome(ctx, rs.auth.Partition, rs.clientID, run.pc.ClientCommitID, rs.now)
	if err != nil && !errors.Is(err, store.ErrOutcomeUnreadable) {
		return nil, storeErr(err, "read a grouped commit's outcome")
	}
	if o == nil || !o.Applied || o.ActorID != rs.auth.ActorID {
		return nil, nil
	}
	res, _, err := decodeOutcome(o.Result)
	if err != nil || res.ClientCommitID != run.pc.ClientCommitID {
		return nil, nil // the commit lines up again and replays the outcome
	}
	qs.ticket = 0
	rs.head.MaxCommitSeq = max(rs.head.MaxCommitSeq, o.CommitSeq)
	rs.report.CommittedSeq = max(rs.report.CommittedSeq, o.CommitSeq)
	rs.report.GroupedCommits++
	return res, nil
}

// commitGrouped lands the holder's commit with the commits published on
// the tickets after its own; it returns the last commitSeq and ticket
// that landed (the holder's own when none joined).
func (qs *queueState) commitGrouped(ctx context.Context, run *pushRun, creq *store.CommitRequest) (int64, int64, error) {
	e := run.e
	g := e.grouper()
	if g == nil || creq.Ticket == 0 || creq.Advance != nil || qs.pubsFor != creq.Ticket && !qs.lineBehind() {
		return creq.Commit.Seq, creq.Ticket, e.store.Commit(ctx, qs.partition, creq)
	}
	var members []*store.CommitRequest
	var err error
	if qs.pubs != nil && qs.pubsFor == creq.Ticket {
		members = <-qs.pubs
	} else {
		members, err = g.PublishedCommits(ctx, qs.partition, creq.Ticket+1, maxGroupMembers)
	}
	qs.pubs, qs.pubsFor = nil, 0
	if err != nil {
		// The holder's own commit does not depend on the others': it
		// lands alone, and the waiters commit in their turns.
		e.log.WarnContext(ctx, "published commits unreadable; committing alone", "partition", qs.partition, "error", err.Error())
		members = nil
	}
	reqs := make([]*store.CommitRequest, 1, 1+len(members))
	reqs[0] = creq
	for i, m := range members {
		if stamp(m, creq.Commit.Seq+int64(i)+1) != nil {
			break
		}
		reqs = append(reqs, m)
	}
	n, err := g.CommitGroup(ctx, qs.partition, reqs)
	if err != nil {
		return 0, 0, err
	}
	// Members read but not landed (not stampable, over the write's
	// limits, their rows changed) commit in their own turns.
	run.rs.report.GroupLeftOut += len(members) - (n - 1)
	for _, m := range reqs[1:n] {
		run.rs.report.GroupMembers++
		if e.cfg.OnCommit != nil {
			e.cfg.OnCommit(qs.partition, &m.Commit)
		}
	}
	last := reqs[n-1]
	return last.Commit.Seq, last.Ticket, nil
}

// prefetchPublished starts reading the commits published after the
// ticket when its turn is next, beside the read of the commit's rows, so
// that a holder's group costs no round trip of its own in its turn. A
// read that fails counts as none published.
func (qs *queueState) prefetchPublished(ctx context.Context, run *pushRun) {
	g := run.e.grouper()
	if g == nil || qs.ticket == 0 || qs.ticket-1-qs.seen.Turn > 1 || !qs.lineBehind() {
		return
	}
	ch := make(chan []*store.CommitRequest, 1)
	qs.pubs, qs.pubsFor = ch, qs.ticket
	go func(ticket int64) {
		m, err := g.PublishedCommits(ctx, qs.partition, ticket+1, maxGroupMembers)
		if err != nil && ctx.Err() == nil {
			run.e.log.WarnContext(ctx, "published commits unreadable", "partition", qs.partition, "error", err.Error())
		}
		ch <- m
	}(qs.ticket)
}

// lineBehind guesses whether commits wait behind this one: the line was
// at least two long when it took its ticket. A holder that guesses no
// reads no publications (a queued commit stays ticket, read, commit);
// waiters it misses commit in their own turns.
func (qs *queueState) lineBehind() bool { return qs.lineAtTake >= 2 }

// stamp gives a published commit the seq it lands at: the commit, its
// rows, its outcome and the result the outcome replays.
func stamp(m *store.CommitRequest, seq int64) error {
	res, det, err := decodeOutcome(m.Outcome.Result)
	if err != nil || res.Status != wire.PushApplied {
		return errors.New("engine: published commit has no applied result")
	}
	res.CommitSeq = wire.Some(seq)
	blob, err := encodeOutcome(res, det)
	if err != nil {
		return err
	}
	m.ExpectedMaxSeq, m.Commit.Seq = seq-1, seq
	for i := range m.Rows {
		m.Rows[i].Row.CommitSeq = seq
	}
	m.Outcome.CommitSeq, m.Outcome.Result = seq, blob
	return nil
}
