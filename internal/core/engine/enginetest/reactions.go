package enginetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/reactions"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// taskPlanner plans one "task.created" reaction per task row a commit
// writes (not for deletes), keyed by row id, with the title as payload.
func taskPlanner(maxAttempts int) reactions.Planner {
	return reactions.PlannerFunc(func(_ context.Context, in *reactions.Input) ([]reactions.Planned, error) {
		var out []reactions.Planned
		for _, c := range in.Changes {
			if c.Table != "tasks" || c.Deleted {
				continue
			}
			var row struct {
				Title string `json:"title"`
			}
			if err := json.Unmarshal(c.Row, &row); err != nil {
				return nil, err
			}
			payload, _ := json.Marshal(map[string]string{"title": row.Title, "by": in.ActorID})
			out = append(out, reactions.Planned{Key: "created:" + c.RowID, Type: "task.created", Version: 1, Payload: payload, MaxAttempts: maxAttempts})
		}
		return out, nil
	})
}

// effects records what handlers did, as an external system would see it.
type effects struct {
	mu  sync.Mutex
	got []reactions.Delivery
}

func (e *effects) add(d *reactions.Delivery) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, *d)
}

func (e *effects) list() []reactions.Delivery {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]reactions.Delivery(nil), e.got...)
}

// ackLoss fails the first terminal update of a reaction: what a worker
// that crashed after its handler's side effect leaves behind.
type ackLoss struct {
	store.ReactionStore
	mu   sync.Mutex
	lost int
}

func (a *ackLoss) UpdateReaction(ctx context.Context, p, owner string, r *store.Reaction) (bool, error) {
	a.mu.Lock()
	if a.lost == 0 && r.State == store.ReactionCompleted {
		a.lost++
		a.mu.Unlock()
		return false, errors.New("worker crashed before recording completion")
	}
	a.mu.Unlock()
	return a.ReactionStore.UpdateReaction(ctx, p, owner, r)
}

// RunReactions is the §6.9 durable-reaction suite over a store: planning
// only for accepted new commits, records as atomic as their commit,
// at-least-once delivery across a crash between the side effect and its
// acknowledgement, stale workers, retries, dead letters, order, and
// records surviving a prune of their commit.
func RunReactions(t *testing.T, newStore func(t *testing.T) store.Store, newSegs func() store.SegmentStore) {
	s := &rxSuite{newStore: newStore, newSegs: newSegs}
	t.Run("OnlyAcceptedNewCommits", s.onlyAcceptedNewCommits)
	t.Run("InvalidPlanWritesNothing", s.invalidPlanWritesNothing)
	t.Run("SurviveCrashBetweenDeliveryAndAck", s.surviveCrashBetweenDeliveryAndAck)
	t.Run("StaleWorkerCannotAck", s.staleWorkerCannotAck)
	t.Run("RetryDeadLetterReset", s.retryDeadLetterReset)
	t.Run("CommitOrderAndPrunedLog", s.commitOrderAndPrunedLog)
	t.Run("SweepUnmarksIdlePartitions", s.sweepUnmarksIdlePartitions)
}

// rxSuite is RunReactions' stores and its shared steps.
type rxSuite struct {
	newStore func(t *testing.T) store.Store
	newSegs  func() store.SegmentStore
}

// setup is a harness planning taskPlanner's reactions, alice's client on
// a fresh partition, and the store's reaction side.
func (s *rxSuite) setup(t *testing.T, maxAttempts int) (*Harness, *Client, store.ReactionStore, string) {
	st := s.newStore(t)
	rs, ok := st.(store.ReactionStore)
	if !ok {
		t.Fatalf("%T does not implement store.ReactionStore", st)
	}
	h := New(t, st, s.newSegs(), Options{Reactions: taskPlanner(maxAttempts)})
	h.Grants.Set("alice", engine.ScopeMap{"project_id": {"p1"}})
	part := fmt.Sprintf("rx-%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())
	return h, h.Client(part, "alice", "phone"), rs, part
}

// runner delivers "task.created" into fx, failing with fail when set.
func (s *rxSuite) runner(h *Harness, rs store.ReactionStore, fx *effects, fail func(*reactions.Delivery) error) *reactions.Runner {
	return &reactions.Runner{
		Log: h.Store, Store: rs, Lease: 10 * time.Second,
		Handlers: map[string]reactions.Handler{"task.created": reactions.HandlerFunc(func(_ context.Context, d *reactions.Delivery) error {
			fx.add(d)
			if fail != nil {
				return fail(d)
			}
			return nil
		})},
		Now: func() time.Time { return time.UnixMilli(h.Clock.Now()) },
	}
}

func (s *rxSuite) run(t *testing.T, r *reactions.Runner, p string) reactions.Stats {
	t.Helper()
	st, err := r.RunPartition(context.Background(), p)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return st
}

func (s *rxSuite) list(t *testing.T, rs store.ReactionStore, p string) []store.Reaction {
	t.Helper()
	var out []store.Reaction
	if err := rs.ListReactions(context.Background(), p, func(r *store.Reaction) bool { out = append(out, *r); return true }); err != nil {
		t.Fatal(err)
	}
	return out
}

func (s *rxSuite) onlyAcceptedNewCommits(t *testing.T) {
	h, c, rs, p := s.setup(t, 0)
	if r := c.Push("c1", Upsert("tasks", "t1", c.Task("t1", "p1", "write spec", false), 0)); r.Status != wire.PushApplied {
		t.Fatalf("c1 %+v", r)
	}
	// A replay of c1, a conflict (stale baseVersion) and a write
	// outside alice's scopes plan nothing (§6.9).
	if r := c.Push("c1", Upsert("tasks", "t1", c.Task("t1", "p1", "write spec", false), 0)); r.Status != wire.PushCached {
		t.Fatalf("replay %+v", r)
	}
	if r := c.Push("c2", Upsert("tasks", "t1", c.Task("t1", "p1", "stale", false), 0)); r.Status == wire.PushApplied {
		t.Fatalf("stale write applied %+v", r)
	}
	if r := c.Push("c3", Upsert("tasks", "t9", c.Task("t9", "p2", "not mine", false), 0)); r.Status == wire.PushApplied {
		t.Fatalf("foreign write applied %+v", r)
	}
	fx := &effects{}
	st := s.run(t, s.runner(h, rs, fx, nil), p)
	got := fx.list()
	if len(got) != 1 || st.Completed != 1 {
		t.Fatalf("deliveries %+v stats %+v, want one", got, st)
	}
	d := got[0]
	wantKey := `["` + p + `","phone","c1","created:t1"]`
	if d.IdempotencyKey != wantKey || d.ClientCommitID != "c1" || d.CommitSeq != 1 || d.Attempt != 1 || d.MaxAttempts != 10 || d.Version != 1 {
		t.Fatalf("delivery %+v (key %s)", d, d.IdempotencyKey)
	}
	if string(d.Payload) != `{"by":"alice","title":"write spec"}` {
		t.Fatalf("payload %s", d.Payload)
	}
	if st := s.run(t, s.runner(h, rs, fx, nil), p); st.Completed != 0 || len(fx.list()) != 1 {
		t.Fatalf("second run delivered again: %+v", st)
	}
	if all := s.list(t, rs, p); len(all) != 1 || all[0].State != store.ReactionCompleted {
		t.Fatalf("records %+v", all)
	}
}

func (s *rxSuite) invalidPlanWritesNothing(t *testing.T) {
	ctx := context.Background()
	st := s.newStore(t)
	bad := reactions.PlannerFunc(func(context.Context, *reactions.Input) ([]reactions.Planned, error) {
		return []reactions.Planned{{Key: "", Type: "x", Version: 1}}, nil
	})
	h := New(t, st, s.newSegs(), Options{Reactions: bad})
	h.Grants.Set("alice", engine.ScopeMap{"project_id": {"p1"}})
	p := fmt.Sprintf("rx-bad-%d", time.Now().UnixNano())
	c := h.Client(p, "alice", "phone")
	resp, err := c.Send(c.Request([]wire.PushCommit{{ClientCommitID: "c1", Operations: []wire.Operation{Upsert("tasks", "t1", c.Task("t1", "p1", "x", false), 0)}}}, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	// A server failure: the internal error (as the client's wire
	// version names it), retryable, and no push result.
	want := syncerr.ForWire(syncerr.InternalError, c.Version)
	var ef *wire.ErrorFrame
	for _, f := range resp.Frames {
		switch f := f.(type) {
		case *wire.ErrorFrame:
			ef = f
		case *wire.PushResult:
			t.Fatalf("push result %+v for a failed plan", f)
		}
	}
	if ef == nil || ef.Code != string(want) || !ef.Retryable || ef.Message != syncerr.InternalMessage {
		t.Fatalf("error frame %+v, want %s", ef, want)
	}
	head, _, herr := st.Head(ctx, p)
	if herr != nil || head.MaxCommitSeq != 0 {
		t.Fatalf("head %+v %v: the failed push wrote a commit", head, herr)
	}
}

func (s *rxSuite) surviveCrashBetweenDeliveryAndAck(t *testing.T) {
	ctx := context.Background()
	h, c, rs, p := s.setup(t, 0)
	c.Push("c1", Upsert("tasks", "t1", c.Task("t1", "p1", "a", false), 0))
	fx := &effects{}
	crashing := s.runner(h, rs, fx, nil)
	crashing.Store = &ackLoss{ReactionStore: rs}
	if _, err := crashing.RunPartition(ctx, p); err == nil {
		t.Fatal("the crashing worker reported success")
	}
	if len(fx.list()) != 1 {
		t.Fatalf("side effects %d, want 1", len(fx.list()))
	}
	// The lease still holds: another worker must not take it yet.
	if st := s.run(t, s.runner(h, rs, fx, nil), p); st.Completed != 0 || len(fx.list()) != 1 {
		t.Fatalf("taken over before the lease expired: %+v", st)
	}
	h.Clock.Advance(10_001)
	if st := s.run(t, s.runner(h, rs, fx, nil), p); st.Completed != 1 {
		t.Fatalf("after the lease: %+v", st)
	}
	got := fx.list()
	if len(got) != 2 || got[0].IdempotencyKey != got[1].IdempotencyKey || got[1].Attempt != 2 {
		t.Fatalf("redelivery %+v", got)
	}
	if st := s.run(t, s.runner(h, rs, fx, nil), p); st.Completed != 0 || len(fx.list()) != 2 {
		t.Fatalf("delivered a third time: %+v", st)
	}
}

func (s *rxSuite) staleWorkerCannotAck(t *testing.T) {
	ctx := context.Background()
	h, c, rs, p := s.setup(t, 0)
	c.Push("c1", Upsert("tasks", "t1", c.Task("t1", "p1", "a", false), 0))
	fx := &effects{}
	started, release := make(chan struct{}), make(chan struct{})
	slow := s.runner(h, rs, fx, func(*reactions.Delivery) error {
		close(started)
		<-release
		return errors.New("too late anyway")
	})
	done := make(chan error, 1)
	go func() { _, err := slow.RunPartition(ctx, p); done <- err }()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("the slow worker ended before its handler ran: %v", err)
	}
	h.Clock.Advance(10_001)
	if st := s.run(t, s.runner(h, rs, fx, nil), p); st.Completed != 1 {
		t.Fatalf("takeover: %+v", st)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("stale worker: %v", err)
	}
	all := s.list(t, rs, p)
	if len(all) != 1 || all[0].State != store.ReactionCompleted || all[0].FailureCode != "" {
		t.Fatalf("the stale worker's failure overwrote the takeover: %+v", all)
	}
}

func (s *rxSuite) retryDeadLetterReset(t *testing.T) {
	ctx := context.Background()
	h, c, rs, p := s.setup(t, 3)
	c.Push("c1", Upsert("tasks", "t1", c.Task("t1", "p1", "a", false), 0))
	fx := &effects{}
	failing := s.runner(h, rs, fx, func(*reactions.Delivery) error {
		return reactions.Retryable("mail.down", errors.New("smtp: 421"))
	})
	failing.InitialBackoff, failing.MaxBackoff = time.Second, 3*time.Second
	want := []int64{1000, 2000} // backoff after attempts 1 and 2
	for i, wait := range want {
		if st := s.run(t, failing, p); st.Retried != 1 {
			t.Fatalf("attempt %d: %+v", i+1, st)
		}
		// Not due before its backoff has passed.
		h.Clock.Advance(wait - 1)
		if st := s.run(t, failing, p); st.Retried+st.Completed+st.DeadLettered != 0 {
			t.Fatalf("attempt %d retried early: %+v", i+1, st)
		}
		h.Clock.Advance(1)
	}
	if st := s.run(t, failing, p); st.DeadLettered != 1 {
		t.Fatalf("third attempt: %+v", st)
	}
	all := s.list(t, rs, p)
	if len(all) != 1 || all[0].State != store.ReactionDead || all[0].Attempts != 3 || all[0].FailureCode != "mail.down" {
		t.Fatalf("dead letter %+v", all)
	}
	if strings.Contains(string(all[0].FailureDetails), "421") {
		t.Fatal("raw error text was stored")
	}
	ok, err := rs.ResetDeadReaction(ctx, p, all[0].ID, h.Clock.Now())
	if err != nil || !ok {
		t.Fatalf("reset: %v %v", ok, err)
	}
	if st := s.run(t, s.runner(h, rs, fx, nil), p); st.Completed != 1 {
		t.Fatalf("after reset: %+v", st)
	}
	// Permanent failures dead-letter at once.
	c.Push("c2", Upsert("tasks", "t2", c.Task("t2", "p1", "b", false), 0))
	perm := s.runner(h, rs, fx, func(*reactions.Delivery) error { return reactions.Permanent("bad.address", nil) })
	if st := s.run(t, perm, p); st.DeadLettered != 1 {
		t.Fatalf("permanent: %+v", st)
	}
	// Retention: completed rows older than the cutoff go, the
	// dead-lettered one newer than its cutoff stays.
	now := h.Clock.Now()
	done, dead, more, err := rs.PruneReactions(ctx, p, now+1, now-1, 10)
	if err != nil || done != 1 || dead != 0 || more {
		t.Fatalf("prune: %d completed %d dead more=%v %v", done, dead, more, err)
	}
	if all := s.list(t, rs, p); len(all) != 1 || all[0].State != store.ReactionDead {
		t.Fatalf("after prune %+v", all)
	}
}

func (s *rxSuite) commitOrderAndPrunedLog(t *testing.T) {
	ctx := context.Background()
	h, c, rs, p := s.setup(t, 0)
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("t%d", i)
		c.Push(fmt.Sprintf("c%d", i), Upsert("tasks", id, c.Task(id, "p1", id, false), 0))
	}
	// The log is pruned before any runner ran: the records survive.
	zero := int64(0)
	if rep, err := h.Engine.Prune(ctx, p, &engine.RetentionOverride{MinRetainedCommits: &zero, AgeForceMs: &zero}); err != nil || rep.NewHorizon != 3 {
		t.Fatalf("prune %+v %v", rep, err)
	}
	fx := &effects{}
	if st := s.run(t, s.runner(h, rs, fx, nil), p); st.Completed != 3 {
		t.Fatalf("after prune: %+v", st)
	}
	for i, d := range fx.list() {
		if d.CommitSeq != int64(i+1) {
			t.Fatalf("delivery %d is commit %d: out of order", i, d.CommitSeq)
		}
	}
}

func (s *rxSuite) sweepUnmarksIdlePartitions(t *testing.T) {
	ctx := context.Background()
	h, c, rs, p := s.setup(t, 0)
	c.Push("c1", Upsert("tasks", "t1", c.Task("t1", "p1", "a", false), 0))
	if _, err := reactions.Enqueue(ctx, h.Store, rs, p, 0, h.Clock.Now()); err != nil {
		t.Fatal(err)
	}
	marked := func() bool {
		found := false
		_ = rs.DueReactionPartitions(ctx, func(q, _ string) bool { found = found || q == p; return true })
		return found
	}
	if !marked() {
		t.Fatal("an enqueued partition is not marked")
	}
	fx := &effects{}
	r := s.runner(h, rs, fx, nil)
	if _, err := r.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if len(fx.list()) != 1 || marked() {
		t.Fatalf("sweep delivered %d, still marked %v", len(fx.list()), marked())
	}
}
