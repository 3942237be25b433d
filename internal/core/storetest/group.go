package storetest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// Group commit (store.GroupCommitter, issue 20 item 7): several commits
// land as consecutive seqs in one write, each whole, each exactly once,
// and a member that cannot land leaves the others (before it) landed.

// grouper is the subtest's store as a GroupCommitter; the subtest is
// skipped on a store without it.
func (e *partitionT) grouper() store.GroupCommitter {
	e.t.Helper()
	g, ok := e.s.(store.GroupCommitter)
	if !ok {
		e.t.Skip("store has no group commit")
	}
	return g
}

// group builds n requests following head h: request i writes row
// "g<i>" under client "c<i>".
func group(h int64, n int) []*store.CommitRequest {
	reqs := make([]*store.CommitRequest, n)
	for i := range reqs {
		id := fmt.Sprintf("g%d", i)
		reqs[i] = commitReq(h+int64(i), fmt.Sprintf("c%d", i), "cc-"+id, upsert("tasks", id, 1, "v-"+id))
	}
	return reqs
}

func testGroupLandsInOrder(t *testing.T, e *partitionT) {
	g := e.grouper()
	e.touch()
	e.commitNext(upsert("tasks", "seed", 1, "s"))
	reqs := group(1, 4)
	n, err := g.CommitGroup(e.ctx, e.p, reqs)
	if err != nil || n != 4 {
		t.Fatalf("CommitGroup: %d landed, %v; want 4", n, err)
	}
	if h := e.head(); h.MaxCommitSeq != 5 {
		t.Fatalf("head %d after a group of 4 on 1, want 5", h.MaxCommitSeq)
	}
	log := e.log(0, 10)
	if len(log) != 5 {
		t.Fatalf("log has %d commits, want 5", len(log))
	}
	for i, c := range log {
		if c.Seq != int64(i+1) {
			t.Fatalf("log[%d] seq %d: not gapless", i, c.Seq)
		}
	}
	for i, r := range reqs {
		seq := int64(2 + i)
		if c := log[seq-1]; c.ClientCommitID != r.Commit.ClientCommitID || c.ClientID != r.Commit.ClientID || c.ActorID != r.Commit.ActorID {
			t.Errorf("seq %d logged %s/%s by %s, want %s/%s by %s", seq, c.ClientID, c.ClientCommitID, c.ActorID, r.Commit.ClientID, r.Commit.ClientCommitID, r.Commit.ActorID)
		}
		o := e.outcome(r.Commit.ClientID, r.Commit.ClientCommitID)
		if o == nil || !o.Applied || o.CommitSeq != seq || string(o.Result) != string(r.Outcome.Result) || o.ActorID != r.Outcome.ActorID {
			t.Errorf("outcome of member %d: %+v, want applied at %d by %s", i, o, seq, r.Outcome.ActorID)
		}
		id := r.Rows[0].Row.RowID
		if row := e.rows("tasks", id)[id]; row == nil || row.CommitSeq != seq || string(row.Payload) != "v-"+id {
			t.Errorf("row %s: %+v, want written at %d", id, row, seq)
		}
	}
}

// A member whose idempotency key already has an outcome (its client's
// retry landed it, or recorded its rejection) is not applied again, and
// does not sink the members before it.
func testGroupMemberOutcomeExists(t *testing.T, e *partitionT) {
	g := e.grouper()
	e.touch()
	reqs := group(0, 3)
	rej := store.Outcome{Result: []byte("rejected"), RecordedAtMs: baseMs, ActorID: "actor-c1"}
	if err := e.s.PutRejection(e.ctx, e.p, "c1", "cc-g1", rej, store.WriterCheck{}); err != nil {
		t.Fatal(err)
	}
	n, err := g.CommitGroup(e.ctx, e.p, reqs)
	if err != nil || n != 1 {
		t.Fatalf("CommitGroup: %d landed, %v; want the first alone", n, err)
	}
	if h := e.head(); h.MaxCommitSeq != 1 {
		t.Fatalf("head %d, want 1", h.MaxCommitSeq)
	}
	if o := e.outcome("c1", "cc-g1"); o == nil || o.Applied || string(o.Result) != "rejected" {
		t.Errorf("member 1's recorded outcome changed: %+v", o)
	}
	if o := e.outcome("c2", "cc-g2"); o != nil {
		t.Errorf("member after the failed one recorded %+v", o)
	}
	if m := e.rows("tasks", "g1", "g2"); len(m) != 0 {
		t.Errorf("rows of members left out were written: %v", m)
	}
}

// A member evaluated on a row that changed before the group landed — by
// an earlier member of the same group, or by any commit — is left out:
// landing it would lose that write.
func testGroupMemberRowChanged(t *testing.T, e *partitionT) {
	g := e.grouper()
	e.touch()
	e.commitNext(upsert("tasks", "hot", 1, "h1")) // seq 1
	reqs := group(1, 3)
	// Both the first request and member 1 update "hot" from what they
	// read at seq 1; member 1 was evaluated before the first one's write.
	read := []store.RowRead{{Table: "tasks", RowID: "hot", Present: true, CommitSeq: 1}}
	reqs[0] = commitReq(1, "c0", "cc-g0", upsert("tasks", "hot", 2, "by-0"))
	reqs[0].ReadRows = read
	reqs[1] = commitReq(2, "c1", "cc-g1", upsert("tasks", "hot", 2, "by-1"))
	reqs[1].ReadRows = read
	n, err := g.CommitGroup(e.ctx, e.p, reqs)
	if err != nil || n != 1 {
		t.Fatalf("CommitGroup: %d landed, %v; want the first alone", n, err)
	}
	if r := e.rows("tasks", "hot")["hot"]; r == nil || string(r.Payload) != "by-0" || r.CommitSeq != 2 {
		t.Fatalf("hot row %+v, want the first request's write at 2", r)
	}
	if o := e.outcome("c1", "cc-g1"); o != nil {
		t.Errorf("member 1 recorded %+v", o)
	}
	// A member whose read row moved since (another commit) is left out
	// even when it is the only member.
	again := []*store.CommitRequest{
		commitReq(2, "c0", "cc-a0", upsert("tasks", "a0", 1, "a0")),
		commitReq(3, "c1", "cc-a1", upsert("tasks", "a1", 1, "a1")),
	}
	again[1].ReadRows = read
	if n, err := g.CommitGroup(e.ctx, e.p, again); err != nil || n != 1 {
		t.Fatalf("CommitGroup: %d landed, %v; want the first alone", n, err)
	}
	if h := e.head(); h.MaxCommitSeq != 3 {
		t.Fatalf("head %d, want 3", h.MaxCommitSeq)
	}
}

// The first request fails exactly as Commit would, and no member lands
// without it.
func testGroupLeadFails(t *testing.T, e *partitionT) {
	g := e.grouper()
	e.touch()
	e.commitNext(upsert("tasks", "seed", 1, "s"))
	reqs := group(0, 3) // built on a head that moved
	_, err := g.CommitGroup(e.ctx, e.p, reqs)
	if !errors.Is(err, store.ErrHeadMoved) {
		t.Fatalf("CommitGroup on a moved head: %v, want ErrHeadMoved", err)
	}
	if h := e.head(); h.MaxCommitSeq != 1 {
		t.Fatalf("head %d, want 1", h.MaxCommitSeq)
	}
	for i := range 3 {
		if o := e.outcome(fmt.Sprintf("c%d", i), fmt.Sprintf("cc-g%d", i)); o != nil {
			t.Errorf("request %d recorded %+v", i, o)
		}
	}
}

// Published commits read back whole, in ticket order, up to the first
// ticket without one; publishing again replaces.
func testGroupPublications(t *testing.T, e *partitionT) {
	g := e.grouper()
	e.touch()
	reqs := group(0, 4)
	for i, tk := range []int64{5, 6, 8} {
		r := reqs[i]
		r.Ticket = tk
		r.ReadRows = []store.RowRead{{Table: "tasks", RowID: "x", Present: true, CommitSeq: 7}}
		r.WriterVersion, r.CheckGate, r.GateToken = 3, true, 9
		if err := g.PublishCommit(e.ctx, e.p, r); err != nil {
			t.Fatal(err)
		}
	}
	reqs[3].Ticket = 6
	if err := g.PublishCommit(e.ctx, e.p, reqs[3]); err != nil {
		t.Fatal(err)
	}
	got, err := g.PublishedCommits(e.ctx, e.p, 5, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d published commits from ticket 5, want 2 (5 and 6; 7 has none)", len(got))
	}
	a := got[0]
	if a.Ticket != 5 || a.Commit.ClientCommitID != "cc-g0" || len(a.Rows) != 1 || string(a.Rows[0].Row.Payload) != "v-g0" ||
		len(a.ReadRows) != 1 || a.ReadRows[0] != reqs[0].ReadRows[0] || string(a.Outcome.Result) != "applied:cc-g0" ||
		a.WriterVersion != 3 || !a.CheckGate || a.GateToken != 9 || len(a.Commit.Changes) != 1 || string(a.Commit.Changes[0].Row) != "v-g0" {
		t.Errorf("published commit 5 read back as %+v", a)
	}
	if got[1].Ticket != 6 || got[1].Commit.ClientCommitID != "cc-g3" {
		t.Errorf("ticket 6 read back %s, want the later publication cc-g3", got[1].Commit.ClientCommitID)
	}
	if got, err := g.PublishedCommits(e.ctx, e.p, 5, 1); err != nil || len(got) != 1 {
		t.Errorf("PublishedCommits(5, 1): %d, %v; want 1", len(got), err)
	}
	if got, err := g.PublishedCommits(e.ctx, e.p, 7, 3); err != nil || len(got) != 0 {
		t.Errorf("PublishedCommits(7, 3): %d, %v; want none", len(got), err)
	}
}
