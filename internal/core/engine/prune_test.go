package engine_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/reactions"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

func i64(v int64) *int64 { return &v }

// pushN appends n single-change commits (in requests of up to 250).
func pushN(t *testing.T, c *enginetest.Client, prefix string, n int) {
	t.Helper()
	var commits []wire.PushCommit
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("%s%d", prefix, i)
		commits = append(commits, cmt(id, up("tasks", "hot", c.Task("hot", "p1", id, false), -1)))
		if len(commits) == 250 || i == n-1 {
			for _, r := range mustPushAll(t, c, commits...) {
				wantApplied(t, r)
			}
			commits = nil
		}
	}
}

// pullTo records a client cursor (the §4.5 watermark input) by pulling
// once with the given cursor.
func pullTo(t *testing.T, h *enginetest.Harness, clientID string, cursor int64) {
	t.Helper()
	c := h.Client("tenant", "reader", clientID)
	mustPull(t, c, wire.PullHeader{Accept: acceptRows, LimitCommits: 1}, sub("s", "tasks", "p1", cursor))
}

// §4.6 retention floors.
func TestPruneFloors(t *testing.T) {
	t.Run("newest MinRetainedCommits kept", func(t *testing.T) {
		h := newHarness(t, enginetest.Options{})
		grantAll(h, projects("p1"), "alice", "reader")
		pushN(t, h.Client("tenant", "alice", "a"), "c", 30)
		rep, err := h.Engine.Prune(t.Context(), "tenant", &engine.RetentionOverride{MinRetainedCommits: i64(10)})
		if err != nil {
			t.Fatal(err)
		}
		if rep.OldHorizon != 0 || rep.NewHorizon != 20 || rep.Removed != 20 {
			t.Fatalf("prune %+v", rep)
		}
		if seqs := logSeqs(t, h, "tenant"); len(seqs) != 10 || seqs[0] != 21 {
			t.Fatalf("log after prune %v", seqs)
		}
		// Idempotent; the horizon never moves back.
		rep, _ = h.Engine.Prune(t.Context(), "tenant", &engine.RetentionOverride{MinRetainedCommits: i64(10)})
		if rep.NewHorizon != 20 || rep.Removed != 0 {
			t.Fatalf("second prune %+v", rep)
		}
		rep, _ = h.Engine.Prune(t.Context(), "tenant", &engine.RetentionOverride{MinRetainedCommits: i64(25)})
		if rep.NewHorizon != 20 || head(t, h, "tenant").HorizonSeq != 20 {
			t.Fatalf("looser floor moved the horizon: %+v", rep)
		}
	})
	t.Run("defaults keep 1000 and hosts cannot lower them", func(t *testing.T) {
		h := newHarness(t, enginetest.Options{Limits: engine.Limits{MinRetainedCommits: 5, ActiveWindow: 1, AgeForce: 1}})
		l := h.Engine.Limits()
		if l.MinRetainedCommits != 1000 || l.ActiveWindow != engine.DefaultActiveWindow || l.AgeForce != engine.DefaultAgeForce {
			t.Fatalf("limits below the §4.6 floors were accepted: %+v", l)
		}
		grantAll(h, projects("p1"), "alice")
		pushN(t, h.Client("tenant", "alice", "a"), "c", 1005)
		rep, err := h.Engine.Prune(t.Context(), "tenant", nil)
		if err != nil {
			t.Fatal(err)
		}
		if rep.NewHorizon != 5 {
			t.Fatalf("default prune of 1005 commits: %+v, want horizon 5", rep)
		}
	})
	t.Run("active client cursor is a watermark", func(t *testing.T) {
		h := newHarness(t, enginetest.Options{})
		grantAll(h, projects("p1"), "alice", "reader")
		pushN(t, h.Client("tenant", "alice", "a"), "c", 30)
		pullTo(t, h, "laggard", 12) // records cursor 13 (one change delivered)
		pullTo(t, h, "current", 29)
		rep, err := h.Engine.Prune(t.Context(), "tenant", &engine.RetentionOverride{MinRetainedCommits: i64(5)})
		if err != nil {
			t.Fatal(err)
		}
		if rep.NewHorizon != 13 {
			t.Fatalf("prune %+v: want the laggard's cursor 13", rep)
		}
		// The laggard at cursor = horizon still pulls incrementally.
		secs := mustPull(t, h.Client("tenant", "reader", "laggard"), pullHdr(acceptRows), sub("s", "tasks", "p1", 13))
		if secs[0].Start.Status != wire.SubActive || len(secs[0].Commits) == 0 || secs[0].Commits[0].CommitSeq != 14 {
			t.Fatalf("laggard after prune: %+v", secs[0].Start)
		}
		// Once the laggard leaves the active window it no longer holds
		// the horizon back.
		h.Clock.Advance(10_000)
		pullTo(t, h, "current", 29)
		rep, _ = h.Engine.Prune(t.Context(), "tenant", &engine.RetentionOverride{MinRetainedCommits: i64(5), ActiveWindowMs: i64(5_000)})
		if rep.NewHorizon != 25 {
			t.Fatalf("prune %+v: want the floor 25 (current client at 30)", rep)
		}
	})
	t.Run("age force passes laggards, never the floor", func(t *testing.T) {
		h := newHarness(t, enginetest.Options{})
		grantAll(h, projects("p1"), "alice", "reader")
		a := h.Client("tenant", "alice", "a")
		pushN(t, a, "old", 15)
		h.Clock.Advance(10_000)
		pushN(t, a, "new", 15)
		pullTo(t, h, "laggard", 2) // cursor 3, active
		h.Clock.Advance(10_000)
		pullTo(t, h, "laggard", 2)
		// Commits older than 15 s (1..15) go despite the laggard at 3.
		rep, err := h.Engine.Prune(t.Context(), "tenant", &engine.RetentionOverride{MinRetainedCommits: i64(5), AgeForceMs: i64(15_000)})
		if err != nil {
			t.Fatal(err)
		}
		if rep.NewHorizon != 15 {
			t.Fatalf("age force: %+v, want horizon 15", rep)
		}
		secs := mustPull(t, h.Client("tenant", "reader", "laggard"), pullHdr(acceptRows), sub("s", "tasks", "p1", 3))
		if secs[0].Start.Status != wire.SubReset {
			t.Fatalf("forced-past laggard: %+v", secs[0].Start)
		}
		// Everything is old now, but the floor keeps the newest 20.
		h.Clock.Advance(60_000)
		rep, _ = h.Engine.Prune(t.Context(), "tenant", &engine.RetentionOverride{MinRetainedCommits: i64(20), AgeForceMs: i64(1)})
		if rep.NewHorizon != 15 {
			t.Fatalf("age force passed the retention floor: %+v", rep)
		}
		rep, _ = h.Engine.Prune(t.Context(), "tenant", &engine.RetentionOverride{MinRetainedCommits: i64(4), AgeForceMs: i64(1)})
		if rep.NewHorizon != 26 {
			t.Fatalf("age force with floor 4: %+v, want 26", rep)
		}
	})
}

// A partition never seen has nothing to prune: no error, horizon 0.
func TestPruneUnknownPartition(t *testing.T) {
	h := newHarness(t, enginetest.Options{})
	rep, err := h.Engine.Prune(context.Background(), "never-seen", nil)
	if err != nil || rep.NewHorizon != 0 || rep.Removed != 0 {
		t.Fatalf("prune unknown partition: %+v %v", rep, err)
	}
}

// The client record is written at most once per CursorRecordInterval
// while the cursor moves up, and the lag never lets pruning pass a
// client's cursor (memstore; internal/dynamostore runs the same on
// DynamoDB Local).
func TestCursorRecordLagIsSafe(t *testing.T) {
	enginetest.RunCursorRecords(t, func(testing.TB) (store.Store, store.SegmentStore) {
		return memstore.New(), memstore.NewSegments()
	})
}

// A deployment without §6.9 reactions (Config.NoReactions,
// SYNC_REACTIONS_ENABLED=false) prunes without enqueueing reactions first: the
// reaction cursor is neither read into nor moved, while an engine of a
// deployment with reactions enqueues (and moves the cursor past) every
// commit it prunes. A planner together with NoReactions is refused.
func TestPruneWithoutReactionsSkipsEnqueue(t *testing.T) {
	st, segs := memstore.New(), memstore.NewSegments()
	h := enginetest.New(t, st, segs, enginetest.Options{})
	grantAll(h, projects("p1"), "alice")
	pushN(t, h.Client("tenant", "alice", "a"), "c", 30)
	cfg := engine.Config{Schema: h.Schema, Store: st, Segments: segs, Resolver: h.Grants, Clock: h.Clock.Now, NoReactions: true}
	quiet, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := quiet.Prune(t.Context(), "tenant", &engine.RetentionOverride{MinRetainedCommits: i64(20)})
	if err != nil || rep.NewHorizon != 10 {
		t.Fatalf("prune without reactions: %+v %v, want horizon 10", rep, err)
	}
	if c, err := st.ReactionCursor(t.Context(), "tenant"); err != nil || c != 0 {
		t.Fatalf("prune without reactions moved the reaction cursor to %d (%v)", c, err)
	}
	rep, err = h.Engine.Prune(t.Context(), "tenant", &engine.RetentionOverride{MinRetainedCommits: i64(10)})
	if err != nil || rep.NewHorizon != 20 {
		t.Fatalf("prune with reactions: %+v %v, want horizon 20", rep, err)
	}
	if c, err := st.ReactionCursor(t.Context(), "tenant"); err != nil || c != 20 {
		t.Fatalf("prune with reactions left the reaction cursor at %d (%v), want 20", c, err)
	}
	cfg.Reactions = reactions.PlannerFunc(func(context.Context, *reactions.Input) ([]reactions.Planned, error) { return nil, nil })
	if _, err := engine.New(cfg); err == nil {
		t.Fatal("engine.New accepted a reaction planner with NoReactions")
	}
}
