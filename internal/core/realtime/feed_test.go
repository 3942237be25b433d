package realtime_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/realtime"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// hintEnv is an env whose engine hints commits to a running hub unless
// drop is set (a hint lost on the way).
func hintEnv(t *testing.T, o realtime.Options) (*env, *atomic.Bool) {
	t.Helper()
	var drop atomic.Bool
	e := newEnvWith(t, o, func(hub *realtime.Hub, p string, c *store.Commit) {
		if !drop.Load() {
			hub.Hint(p, c.Seq)
		}
	})
	run(t, e.hub)
	return e, &drop
}

func run(t *testing.T, hub *realtime.Hub) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { hub.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// deltaIDs lists the row ids of every delta c received, in order, and
// the nextCursor of each delta.
func deltaIDs(t *testing.T, c *conn) (ids []string, next []int64) {
	t.Helper()
	for _, d := range c.deltas(t) {
		i, n := deltaRows(t, d)
		ids = append(ids, i...)
		next = append(next, n)
	}
	return ids, next
}

// Decision 2 (the log is the truth): a hint that never arrives is
// covered by the next one — the hub reads the log from the last commit
// it delivered, so both commits arrive as deltas, in order, with no gap
// and no wake-up.
func TestLostHintDeliveredByNextHint(t *testing.T) {
	e, drop := hintEnv(t, realtime.Options{ReconcileInterval: time.Hour})
	writer := e.synced(t, wire.Version3, "actor-a", "writer", "p1")
	e.synced(t, wire.Version3, "actor-b", "reader", "p1")
	_, c := e.connect(t, "actor-b", "reader")
	drop.Store(true)
	s1 := e.push(t, writer, "t1", "p1")
	drop.Store(false)
	s2 := e.push(t, writer, "t2", "p1")
	c.wait(t, "two deltas", func() bool { return len(c.deltas(t)) == 2 })
	ids, next := deltaIDs(t, c)
	if strings.Join(ids, ",") != "t1,t2" || next[0] != s1 || next[1] != s2 {
		t.Fatalf("deltas %v next %v, want t1,t2 at %d,%d", ids, next, s1, s2)
	}
	if w := c.wakes(t); len(w) != 0 {
		t.Fatalf("wake-ups %v: the lost hint was bridged from the log", w)
	}
}

// Decision 2: when the last hint is lost, the periodic reconciliation
// (a head read of every partition with sessions) delivers the commit.
func TestReconciliationDeliversLostLastHint(t *testing.T) {
	e, drop := hintEnv(t, realtime.Options{ReconcileInterval: 20 * time.Millisecond})
	writer := e.synced(t, wire.Version3, "actor-a", "writer", "p1")
	e.synced(t, wire.Version3, "actor-b", "reader", "p1")
	_, c := e.connect(t, "actor-b", "reader")
	drop.Store(true)
	seq := e.push(t, writer, "t1", "p1")
	c.wait(t, "the reconciled delta", func() bool { return len(c.deltas(t)) == 1 })
	if ids, next := deltaIDs(t, c); ids[0] != "t1" || next[0] != seq || len(c.wakes(t)) != 0 {
		t.Fatalf("deltas %v %v wakes %v", ids, next, c.wakes(t))
	}
}

// Decision 2: duplicated and reordered hints deliver each commit once,
// in log order.
func TestDuplicateAndReorderedHints(t *testing.T) {
	e, drop := hintEnv(t, realtime.Options{ReconcileInterval: time.Hour})
	writer := e.synced(t, wire.Version3, "actor-a", "writer", "p1")
	e.synced(t, wire.Version3, "actor-b", "reader", "p1")
	_, c := e.connect(t, "actor-b", "reader")
	drop.Store(true)
	var seqs []int64
	for _, id := range []string{"t1", "t2", "t3"} {
		seqs = append(seqs, e.push(t, writer, id, "p1"))
	}
	for _, i := range []int{1, 0, 1, 2, 2, 0} {
		e.hub.Hint("part", seqs[i])
	}
	c.wait(t, "three deltas", func() bool { return len(c.deltas(t)) == 3 })
	// A later commit, hinted normally: anything a duplicate hint could
	// still cause would be queued before its delta.
	drop.Store(false)
	s4 := e.push(t, writer, "t4", "p1")
	c.wait(t, "the fourth delta", func() bool { return len(c.deltas(t)) >= 4 })
	ids, next := deltaIDs(t, c)
	want := fmt.Sprint([]int64{seqs[0], seqs[1], seqs[2], s4})
	if strings.Join(ids, ",") != "t1,t2,t3,t4" || fmt.Sprint(next) != want || len(c.wakes(t)) != 0 {
		t.Fatalf("deltas %v next %v (want %s) wakes %v", ids, next, want, c.wakes(t))
	}
}

// Item 8 and decision 4: two groups of sessions with the same
// registrations and wire version on different log epochs (connected
// before and after a rotation) each get deltas carrying their own epoch
// — the shared delta cache never hands a new-epoch session an old-epoch
// delta — and the head check then sends the old-epoch sessions
// reset-required and closes them.
func TestEpochRotationDeltaCacheAndReset(t *testing.T) {
	e := newEnv(t, realtime.Limits{})
	ctx := context.Background()
	const n = 6
	var olds, news []*conn
	for i := range n {
		id := fmt.Sprintf("old-%d", i)
		e.synced(t, wire.Version3, "actor-b", id, "p1")
		_, c := e.connect(t, "actor-b", id)
		olds = append(olds, c)
	}
	head, _, _ := e.h.Store.Head(ctx, "part")
	oldEpoch := head.LogEpoch
	if err := e.h.Store.RotateEpoch(ctx, "part", "epoch-2", e.h.Clock.Now()); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		id := fmt.Sprintf("new-%d", i)
		e.synced(t, wire.Version3, "actor-b", id, "p1")
		_, c := e.connect(t, "actor-b", id)
		news = append(news, c)
	}
	writer := e.synced(t, wire.Version3, "actor-a", "writer", "p1")
	e.push(t, writer, "t1", "p1")
	epochOf := func(c *conn) string {
		d := c.deltas(t)
		if len(d) != 1 {
			t.Fatalf("%d deltas, want 1 (wakes %v)", len(d), c.wakes(t))
		}
		return d[0].Frames[0].(*wire.RespHeader).LogEpoch
	}
	for i := range n {
		if got := epochOf(news[i]); got != "epoch-2" {
			t.Fatalf("new-epoch session %d got a delta of epoch %q", i, got)
		}
		if got := epochOf(olds[i]); got != oldEpoch {
			t.Fatalf("old-epoch session %d got a delta of epoch %q", i, got)
		}
	}
	e.hub.Reconcile(ctx) // what HintHead and the periodic head read run
	for i := range n {
		if w := olds[i].wakes(t); len(w) != 1 || w[0] != realtime.ReasonResetRequired {
			t.Fatalf("old session %d wakes %v, want reset-required", i, w)
		}
		if code, _ := olds[i].closedWith(); code != realtime.CloseNormal {
			t.Fatalf("old session %d not closed (code %d)", i, code)
		}
		if code, _ := news[i].closedWith(); code != 0 || len(news[i].wakes(t)) != 0 {
			t.Fatalf("new session %d disturbed: code %d wakes %v", i, code, news[i].wakes(t))
		}
	}
	if got := e.hub.Sessions("part"); got != n {
		t.Fatalf("%d sessions left, want the %d new ones", got, n)
	}
}

// Decision 4 through a running hub: RotateEpoch + HintHead wakes the
// connected session with reset-required and closes it at once.
func TestHintHeadAfterRotation(t *testing.T) {
	e, _ := hintEnv(t, realtime.Options{ReconcileInterval: time.Hour})
	e.synced(t, wire.Version3, "actor-b", "reader", "p1")
	_, c := e.connect(t, "actor-b", "reader")
	if err := e.h.Store.RotateEpoch(context.Background(), "part", "epoch-2", e.h.Clock.Now()); err != nil {
		t.Fatal(err)
	}
	e.hub.HintHead("part")
	c.wait(t, "the close", func() bool { code, _ := c.closedWith(); return code != 0 })
	if w := c.wakes(t); len(w) != 1 || w[0] != realtime.ReasonResetRequired {
		t.Fatalf("wakes %v", w)
	}
}

// Decision 5: the periodic grant re-check (AuthInterval) drops a revoked
// scope's registration — catchup-required, and no delta for that scope
// afterwards — while a scope-mate that keeps its grant still gets it.
func TestRevokedGrantStopsDeltasWithinInterval(t *testing.T) {
	e, _ := hintEnv(t, realtime.Options{ReconcileInterval: time.Hour, AuthInterval: 20 * time.Millisecond})
	writer := e.synced(t, wire.Version3, "actor-a", "writer", "p1")
	e.synced(t, wire.Version3, "actor-b", "reader", "p1")
	e.synced(t, wire.Version3, "actor-a", "witness", "p1")
	_, c := e.connect(t, "actor-b", "reader")
	_, w := e.connect(t, "actor-a", "witness")
	e.h.Grants.Set("actor-b", engine.ScopeMap{"project_id": {"p9"}})
	c.wait(t, "the revocation wake-up", func() bool { return len(c.wakes(t)) == 1 })
	if c.wakes(t)[0] != realtime.ReasonCatchupRequired {
		t.Fatalf("wakes %v", c.wakes(t))
	}
	e.push(t, writer, "t1", "p1")
	w.wait(t, "the witness's delta", func() bool { return len(w.deltas(t)) == 1 })
	if len(c.deltas(t)) != 0 {
		t.Fatal("a revoked registration still received a delta")
	}
}

// Decision 5: one resolver call per (partition, actor) per re-check,
// shared by that actor's sessions; a resolver that cannot answer fails
// closed: registrations dropped, catchup-required, no further delta.
func TestRecheckSharesResolverCallsAndFailsClosed(t *testing.T) {
	e := newEnv(t, realtime.Limits{})
	ctx := context.Background()
	writer := e.synced(t, wire.Version3, "actor-a", "writer", "p1")
	var conns []*conn
	for i := range 3 {
		id := fmt.Sprintf("r%d", i)
		e.synced(t, wire.Version3, "actor-b", id, "p1")
		_, c := e.connect(t, "actor-b", id)
		conns = append(conns, c)
	}
	before := e.h.Grants.Calls()
	e.hub.RecheckAuth(ctx)
	if got := e.h.Grants.Calls() - before; got != 1 {
		t.Fatalf("%d resolver calls for one actor's 3 sessions, want 1", got)
	}
	for _, c := range conns {
		if len(c.wakes(t)) != 0 {
			t.Fatal("an unchanged grant woke a session")
		}
	}
	e.h.Grants.Fail(true)
	e.hub.RecheckAuth(ctx)
	e.h.Grants.Fail(false)
	e.push(t, writer, "t1", "p1")
	for _, c := range conns {
		if w := c.wakes(t); len(w) != 1 || w[0] != realtime.ReasonCatchupRequired || len(c.deltas(t)) != 0 {
			t.Fatalf("after a failed re-check: wakes %v deltas %d", w, len(c.deltas(t)))
		}
	}
}

// Decision 5: a token's expiry closes the socket; input after the expiry
// — a socket round carrying a push — is refused, never applied.
func TestTokenExpiry(t *testing.T) {
	e := newEnv(t, realtime.Limits{})
	ctx := context.Background()
	e.synced(t, wire.Version3, "actor-b", "soon", "p1")
	c := newConn()
	s, err := e.hub.Connect(ctx, engine.Auth{Partition: "part", ActorID: "actor-b"}, "soon", c, realtime.ConnectOptions{ExpiresAt: e.h.Clock.Now() + 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	c.wait(t, "the expiry close", func() bool { code, _ := c.closedWith(); return code != 0 })
	if code, why := c.closedWith(); code != realtime.ClosePolicyViolation || !strings.Contains(why, "expired") {
		t.Fatalf("closed %d %q", code, why)
	}

	// Expired by the clock before its timer fired: a push round is not run.
	cli := e.synced(t, wire.Version3, "actor-b", "late", "p1")
	c2 := newConn()
	s2, err := e.hub.Connect(ctx, engine.Auth{Partition: "part", ActorID: "actor-b"}, "late", c2, realtime.ConnectOptions{ExpiresAt: e.h.Clock.Now() + 60_000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s2.Close)
	e.h.Clock.Advance(61_000)
	head, _, _ := e.h.Store.Head(ctx, "part")
	m := cli.Request([]wire.PushCommit{{ClientCommitID: "after-exp", Operations: []wire.Operation{enginetest.Upsert("tasks", "x", cli.Task("x", "p1", "x", false), -1)}}}, nil, nil)
	body, _ := wire.Encode(m)
	s2.HandleBinary(ctx, append([]byte{realtime.TagRound}, body...))
	if code, _ := c2.closedWith(); code != realtime.ClosePolicyViolation {
		t.Fatalf("a round after expiry: close code %d", code)
	}
	time.Sleep(20 * time.Millisecond) // a round would run in its own goroutine
	after, _, _ := e.h.Store.Head(ctx, "part")
	if after.MaxCommitSeq != head.MaxCommitSeq || len(c2.round()) != 0 {
		t.Fatalf("the push after expiry was applied (head %d → %d)", head.MaxCommitSeq, after.MaxCommitSeq)
	}
	// A connect with an expired token is refused.
	if _, err := e.hub.Connect(ctx, engine.Auth{Partition: "part", ActorID: "actor-b"}, "late", newConn(), realtime.ConnectOptions{ExpiresAt: e.h.Clock.Now() - 1}); err == nil {
		t.Fatal("a connect with an expired token was accepted")
	}
}

// partial returns the first n bytes of a request longer than n, tagged.
func partial(t *testing.T, cli *enginetest.Client, n int) []byte {
	t.Helper()
	m := cli.Request([]wire.PushCommit{{ClientCommitID: "big", Operations: []wire.Operation{enginetest.Upsert("tasks", "big", cli.Task("big", "p1", strings.Repeat("x", 4*n), false), -1)}}}, nil, nil)
	body, err := wire.Encode(m)
	if err != nil || len(body) <= n {
		t.Fatalf("request of %d bytes: %v", len(body), err)
	}
	return append([]byte{realtime.TagRound}, body[:n]...)
}

// Item 5: buffered round bytes are capped per connection (close 1009),
// per actor across its connections and per hub (close 1013), and a
// closed connection gives its bytes back.
func TestRoundBufferCaps(t *testing.T) {
	e := newEnv(t, realtime.Limits{MaxRoundRequestBytes: 100, MaxActorRoundBytes: 150, MaxHubRoundBytes: 250})
	ctx := context.Background()
	open := func(actor, id string) (*realtime.Session, *conn, *enginetest.Client) {
		cli := e.synced(t, wire.Version3, actor, id, "p1")
		s, c := e.connect(t, actor, id)
		return s, c, cli
	}
	s1, c1, k1 := open("actor-b", "b1")
	s1.HandleBinary(ctx, partial(t, k1, 90))
	s1.HandleBinary(ctx, append([]byte{realtime.TagRound}, make([]byte, 20)...))
	if code, _ := c1.closedWith(); code != realtime.CloseMessageTooBig {
		t.Fatalf("per-connection cap: close %d", code)
	}
	s1.Close()
	if hub, _ := e.hub.RoundBytes("part", "actor-b"); hub != 0 {
		t.Fatalf("a closed connection still holds %d round bytes", hub)
	}
	// Two connections buffering 90 bytes each: the second passes a cap.
	pair := func(what string, a, b [2]string, wantSecond int) (*realtime.Session, *realtime.Session) {
		t.Helper()
		sa, ca, ka := open(a[0], a[1])
		sb, cb, kb := open(b[0], b[1])
		sa.HandleBinary(ctx, partial(t, ka, 90))
		sb.HandleBinary(ctx, partial(t, kb, 90))
		if code, _ := ca.closedWith(); code != 0 {
			t.Fatalf("%s: the first connection was closed (%d)", what, code)
		}
		if code, _ := cb.closedWith(); code != wantSecond {
			t.Fatalf("%s: close %d, want %d", what, code, wantSecond)
		}
		return sa, sb
	}
	s2, _ := pair("per-actor cap", [2]string{"actor-b", "b2"}, [2]string{"actor-b", "b3"}, realtime.CloseTryAgainLater)
	s4, _ := pair("per-hub cap", [2]string{"actor-a", "a4"}, [2]string{"actor-d", "d5"}, realtime.CloseTryAgainLater)
	s2.Close()
	s4.Close()
	if hub, actor := e.hub.RoundBytes("part", "actor-b"); hub != 0 || actor != 0 {
		t.Fatalf("round bytes after every close: hub %d actor %d", hub, actor)
	}
}

// Item 5: presence publishes beyond the rate cap coalesce: peers get
// far fewer events than were published, and the latest document last.
func TestPresenceRateCap(t *testing.T) {
	e := newEnv(t, realtime.Limits{PresencePerSecond: 10})
	ctx := context.Background()
	e.synced(t, wire.Version3, "actor-a", "a", "p1")
	e.synced(t, wire.Version3, "actor-b", "b", "p1")
	sa, _ := e.connect(t, "actor-a", "a")
	_, cb := e.connect(t, "actor-b", "b")
	const n = 50
	for i := range n {
		sa.HandleText(ctx, fmt.Appendf(nil, `{"event":"presence","data":{"scopeKey":"project:p1","doc":{"n":%d}}}`, i))
	}
	last := fmt.Sprintf(`{"n":%d}`, n-1)
	cb.wait(t, "the latest document", func() bool {
		p := cb.presence(t)
		return len(p) > 0 && string(p[len(p)-1].Doc) == last
	})
	got := len(cb.presence(t))
	t.Logf("%d publishes in a burst reached the peer as %d events", n, got)
	if got >= n/2 {
		t.Fatalf("%d of %d publishes fanned out: no rate cap", got, n)
	}
}

// §8.5 from Run, Sessions and Drain (1001 going away).
func TestHeartbeatAndDrain(t *testing.T) {
	e, _ := hintEnv(t, realtime.Options{HeartbeatInterval: 10 * time.Millisecond, ReconcileInterval: time.Hour})
	e.synced(t, wire.Version3, "actor-b", "b", "p1")
	_, c := e.connect(t, "actor-b", "b")
	c.wait(t, "a heartbeat", func() bool {
		for _, ev := range c.events(t) {
			if _, ok := ev.(*realtime.Heartbeat); ok {
				return true
			}
		}
		return false
	})
	if e.hub.Sessions("") != 1 {
		t.Fatalf("sessions %d", e.hub.Sessions(""))
	}
	e.hub.Drain("scale-in")
	if code, _ := c.closedWith(); code != realtime.CloseGoingAway || e.hub.Sessions("") != 0 {
		t.Fatalf("drain: close %d, %d sessions", code, e.hub.Sessions(""))
	}
}

// §8.6 across instances: two hubs over one store exchange presence
// through OnPresence/RemotePresence; a late joiner gets the peer's
// document in its join burst; DropOrigin makes the peer's documents
// leave.
func TestPresenceAcrossInstances(t *testing.T) {
	e := newEnv(t, realtime.Limits{})
	var other *realtime.Hub
	first := realtime.NewHub(e.h.Engine, realtime.Options{InstanceID: "A", OnPresence: func(ev realtime.PresenceEvent) { go other.RemotePresence(ev) }})
	other = realtime.NewHub(e.h.Engine, realtime.Options{InstanceID: "B", OnPresence: func(ev realtime.PresenceEvent) { go first.RemotePresence(ev) }})
	ctx := context.Background()
	for _, id := range []string{"a", "b", "late"} {
		e.synced(t, wire.Version3, "actor-b", id, "p1")
	}
	connect := func(h *realtime.Hub, id string) (*realtime.Session, *conn) {
		c := newConn()
		s, err := h.Connect(ctx, engine.Auth{Partition: "part", ActorID: "actor-b"}, id, c, realtime.ConnectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s, c
	}
	sa, _ := connect(first, "a")
	_, cb := connect(other, "b")
	sa.HandleText(ctx, []byte(`{"event":"presence","data":{"scopeKey":"project:p1","doc":{"on":1}}}`))
	cb.wait(t, "the remote join", func() bool { return len(cb.presence(t)) == 1 })
	if p := cb.presence(t)[0]; p.Kind != realtime.KindJoin || p.ClientID != "a" || string(p.Doc) != `{"on":1}` {
		t.Fatalf("remote join %+v", p)
	}
	_, cl := connect(other, "late")
	if p := cl.presence(t); len(p) != 1 || p[0].ClientID != "a" || p[0].Kind != realtime.KindJoin {
		t.Fatalf("late joiner's burst %+v", p)
	}
	other.DropOrigin("A")
	if p := cb.presence(t); len(p) != 2 || p[1].Kind != realtime.KindLeave || p[1].ClientID != "a" {
		t.Fatalf("after DropOrigin %+v", p)
	}
}

// removable is a store whose partitions can disappear (what an
// operator's partition removal leaves): Head reports none.
type removable struct {
	store.Store
	gone atomic.Bool
}

func (r *removable) Head(ctx context.Context, p string) (store.Head, bool, error) {
	if r.gone.Load() {
		return store.Head{}, false, nil
	}
	return r.Store.Head(ctx, p)
}

// Decision 4: a partition whose head is gone closes its sessions at the
// next head read (HintHead or reconciliation).
func TestRemovedPartitionClosesSessions(t *testing.T) {
	st := &removable{Store: memstore.New()}
	var hub *realtime.Hub
	h := enginetest.New(t, st, memstore.NewSegments(), enginetest.Options{OnCommit: func(p string, c *store.Commit) { hub.Hint(p, c.Seq) }})
	hub = realtime.NewHub(h.Engine, realtime.Options{ReconcileInterval: time.Hour})
	h.Grants.Set("actor-b", engine.ScopeMap{"project_id": {"p1"}})
	e := &env{h: h, hub: hub}
	run(t, hub)
	e.synced(t, wire.Version3, "actor-b", "reader", "p1")
	_, c := e.connect(t, "actor-b", "reader")
	st.gone.Store(true)
	hub.HintHead("part")
	// The connection is closed before the session is unregistered: wait
	// for both.
	c.wait(t, "the close", func() bool { code, _ := c.closedWith(); return code != 0 && hub.Sessions("part") == 0 })
	if code, why := c.closedWith(); code != realtime.CloseNormal || !strings.Contains(why, "removed") || hub.Sessions("part") != 0 {
		t.Fatalf("closed %d %q, %d sessions", code, why, hub.Sessions("part"))
	}
}

// nopConn accepts every message and keeps nothing (the fanout benchmark).
type nopConn struct{ n atomic.Int64 }

func (c *nopConn) SendText([]byte) bool   { c.n.Add(1); return true }
func (c *nopConn) SendBinary([]byte) bool { c.n.Add(1); return true }
func (c *nopConn) Close(string)           {}

// BenchmarkHotScopeFanout: one commit to 10,000 sessions registered on
// the same scope key (one DeltaKey): encoded once, handed to every
// session's queue. Reports ns and allocations per commit.
func BenchmarkHotScopeFanout(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			hub, commits := hotScope(b, n, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				hub.Notify("part", commits[i])
			}
		})
	}
}

// hotScope connects n sessions of one caught-up client and commits
// commits (not yet delivered) for them.
func hotScope(b *testing.B, n, commits int) (*realtime.Hub, []*store.Commit) {
	h := enginetest.New(b, memstore.New(), memstore.NewSegments(), enginetest.Options{})
	h.Grants.Set("actor-a", engine.ScopeMap{"project_id": {"p1"}})
	hub := realtime.NewHub(h.Engine, realtime.Options{})
	reader := h.ClientV(wire.Version3, "part", "actor-a", "reader")
	if _, err := reader.Pull(wire.PullHeader{Accept: reader.Accept}, sub("p1")); err != nil {
		b.Fatal(err)
	}
	for range n {
		if _, err := hub.Connect(context.Background(), engine.Auth{Partition: "part", ActorID: "actor-a"}, "reader", &nopConn{}, realtime.ConnectOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	writer := h.ClientV(wire.Version3, "part", "actor-a", "writer")
	head, _, _ := h.Store.Head(context.Background(), "part")
	for i := range commits {
		id := fmt.Sprintf("t%d", i)
		if r := writer.Push(id, enginetest.Upsert("tasks", id, writer.Task(id, "p1", "x", false), -1)); r.Status != wire.PushApplied {
			b.Fatalf("push: %+v", r)
		}
	}
	var out []*store.Commit
	_ = h.Store.ReadLog(context.Background(), "part", head.MaxCommitSeq, head.MaxCommitSeq+int64(commits), func(c *store.Commit) bool { out = append(out, c); return true })
	return hub, out
}

// TestNewerBuildCommitWakesInsteadOfDelta (issue 20: the realtime tier
// behind the serve gate): a hub whose build runs schema version 1 never
// encodes a delta of a commit a version-2 build wrote (its rows may be in
// a layout version 1 cannot read); the session gets a catch-up wake-up
// and its pull meets the gate. Its own build's commits still go out as
// deltas.
func TestNewerBuildCommitWakesInsteadOfDelta(t *testing.T) {
	e, _ := hintEnv(t, realtime.Options{ReconcileInterval: time.Hour})
	writer := e.synced(t, wire.Version3, "actor-a", "writer", "p1")
	e.synced(t, wire.Version3, "actor-b", "reader", "p1")
	_, c := e.connect(t, "actor-b", "reader")
	s1 := e.push(t, writer, "t1", "p1")
	c.wait(t, "the same build's delta", func() bool { return len(c.deltas(t)) == 1 })

	newer := enginetest.New(t, e.h.Store, e.h.Segments, enginetest.Options{Schema: enginetest.TodoSchemaV2, OlderSchemas: []string{enginetest.TodoSchema}})
	newer.Grants.Set("actor-a", engine.ScopeMap{"project_id": {"p1"}})
	nw := newer.ClientV3("part", "actor-a", "writer-v2")
	nw.Schema = 1
	r := nw.Push("t2", enginetest.Upsert("tasks", "t2", nw.Task("t2", "p1", "from the newer build", false), -1))
	if r.Status != wire.PushApplied {
		t.Fatalf("newer build's push: %+v", r)
	}
	e.hub.Hint("part", r.CommitSeq.Value)
	c.wait(t, "a wake-up for the newer build's commit", func() bool { return len(c.wakes(t)) == 1 })
	if ids, _ := deltaIDs(t, c); strings.Join(ids, ",") != "t1" {
		t.Fatalf("deltas %v: the newer build's commit went out as a delta (after %d)", ids, s1)
	}
	if w := c.wakes(t); w[0] != realtime.ReasonCatchupRequired {
		t.Fatalf("wake-up reason %q", w[0])
	}
}
