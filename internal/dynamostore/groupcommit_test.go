package dynamostore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// groupCounter is the DynamoDB store with its group commits counted:
// groups of more than one commit, and the members that joined a holder.
type groupCounter struct {
	*dynamostore.Store
	groups, members atomic.Int64
}

func (c *groupCounter) CommitGroup(ctx context.Context, partition string, reqs []*store.CommitRequest) (int, error) {
	n, err := c.Store.CommitGroup(ctx, partition, reqs)
	if n > 1 {
		c.groups.Add(1)
		c.members.Add(int64(n - 1))
	}
	return n, err
}

// Issue 20 item 7, group commit through the engine on DynamoDB Local:
// writers on one partition, each its own client writing its own rows,
// some commits sent twice at once (a client's retry racing its first
// try), and a writer whose every commit is outside its authority. Some
// commits land in groups; every commit lands exactly once, gapless
// (§2.1), and the seq each client was answered is the seq its commit
// has in the log; the unauthorized writer's commits are all rejected
// (§3.4) and write nothing, however they interleave with grouped ones.
// By default commits landing alone may take the small-commit path
// between groups (fast.go), and groups stay one transaction.
func TestGroupCommit(t *testing.T) {
	t.Run("transactions", func(t *testing.T) { groupCommit(t, dynamostore.Options{TransactionalCommits: true}) })
	t.Run("small commits", func(t *testing.T) { groupCommit(t, dynamostore.Options{}) })
}

func groupCommit(t *testing.T, opts dynamostore.Options) {
	c := ddbClient(t)
	gc := &groupCounter{Store: dynamostore.New(c, newTable(t, c), opts)}
	h := enginetest.New(t, gc, memstore.NewSegments(), enginetest.Options{})
	h.Grants.Set("alice", engine.ScopeMap{"project_id": {"p1"}})
	h.Grants.Set("mallory", engine.ScopeMap{"project_id": {"p9"}})
	const writers, each = 8, 10
	mustApply(t, h.Client("q", "alice", "seed"), "seed", "seed")

	type answer struct {
		cc  string
		seq int64
	}
	answers := make(chan answer, 2*writers*each)
	var wg sync.WaitGroup
	for i := range writers {
		c, twin := h.Client("q", "alice", fmt.Sprintf("w%d", i)), h.Client("q", "alice", fmt.Sprintf("w%d", i))
		wg.Go(func() {
			for n := range each {
				cc := fmt.Sprintf("w%d-%d", i, n)
				op := enginetest.Upsert("tasks", cc, c.Task(cc, "p1", cc, false), 0)
				var rs [2]*wire.PushResult
				if n%3 == 0 { // the same commit twice, at once
					var both sync.WaitGroup
					both.Go(func() { rs[1] = twin.Push(cc, op) })
					rs[0] = c.Push(cc, op)
					both.Wait()
				} else {
					rs[0] = c.Push(cc, op)
				}
				for _, r := range rs {
					if r == nil {
						continue
					}
					if (r.Status != wire.PushApplied && r.Status != wire.PushCached) || !r.CommitSeq.Present {
						t.Errorf("push %s: %+v", cc, r)
						return
					}
					answers <- answer{cc, r.CommitSeq.Value}
				}
			}
		})
	}
	mallory := h.Client("q", "mallory", "m")
	wg.Go(func() {
		for n := range each {
			cc := fmt.Sprintf("m-%d", n)
			r := mallory.Push(cc, enginetest.Upsert("tasks", cc, mallory.Task(cc, "p1", cc, false), 0))
			if r.Status != wire.PushRejected || len(r.Results) != 1 || r.Results[0].Code != string(syncerr.Forbidden) {
				t.Errorf("unauthorized push %s: %+v, want rejected %s", cc, r, syncerr.Forbidden)
			}
		}
	})
	wg.Wait()
	close(answers)

	ctx := context.Background()
	total := int64(1 + writers*each)
	hd, _, err := gc.Head(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if hd.MaxCommitSeq != total {
		t.Fatalf("head at %d, want %d commits", hd.MaxCommitSeq, total)
	}
	logged := map[int64]string{}
	seen := map[string]bool{}
	var prev int64
	if err := gc.ReadLog(ctx, "q", 0, total, func(c *store.Commit) bool {
		if c.Seq != prev+1 {
			t.Errorf("log seq %d after %d", c.Seq, prev)
		}
		prev = c.Seq
		if seen[c.ClientCommitID] {
			t.Errorf("clientCommitId %s logged twice", c.ClientCommitID)
		}
		seen[c.ClientCommitID] = true
		if c.ActorID != "alice" {
			t.Errorf("seq %d logged for actor %q", c.Seq, c.ActorID)
		}
		logged[c.Seq] = c.ClientCommitID
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if prev != total {
		t.Fatalf("log ends at %d, want %d", prev, total)
	}
	bySeq := map[int64]string{}
	for a := range answers {
		if logged[a.seq] != a.cc {
			t.Errorf("%s was answered seq %d, which the log holds for %q", a.cc, a.seq, logged[a.seq])
		}
		if other, ok := bySeq[a.seq]; ok && other != a.cc {
			t.Errorf("seq %d answered to %s and %s", a.seq, other, a.cc)
		}
		bySeq[a.seq] = a.cc
	}
	if int64(len(bySeq)) != total-1 {
		t.Errorf("%d distinct seqs answered, want %d", len(bySeq), total-1)
	}
	ids := make([]string, each)
	for n := range ids {
		ids[n] = fmt.Sprintf("m-%d", n)
	}
	if rows, err := gc.GetRows(ctx, "q", "tasks", ids); err != nil || len(rows) != 0 {
		t.Errorf("unauthorized writer's rows: %v, %v; want none", rows, err)
	}
	for _, id := range ids {
		if o, err := gc.GetOutcome(ctx, "q", "m", id, baseMs); err != nil || o == nil || o.Applied {
			t.Errorf("outcome of %s: %+v, %v; want its rejection", id, o, err)
		}
	}
	t.Logf("%d commits: %d groups carried %d commits of other writers; turn %d", total, gc.groups.Load(), gc.members.Load(), hd.Turn)
	if gc.members.Load() == 0 {
		t.Fatalf("no commit landed in a group")
	}
}
