package realtime_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/realtime"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// conn is an in-memory transport: it records what the hub sends.
type conn struct {
	mu      sync.Mutex
	text    [][]byte
	binary  [][]byte
	closed  string
	code    int
	refuse  bool
	changed chan struct{}
}

func newConn() *conn { return &conn{changed: make(chan struct{}, 1000)} }

func (c *conn) SendText(m []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.text = append(c.text, append([]byte(nil), m...))
	c.changed <- struct{}{}
	return true
}

func (c *conn) SendBinary(m []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refuse {
		return false
	}
	c.binary = append(c.binary, append([]byte(nil), m...))
	c.changed <- struct{}{}
	return true
}

func (c *conn) Close(reason string) { c.CloseCode(0, reason) }

func (c *conn) CloseCode(code int, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.code != 0 || c.closed != "" {
		return // a connection closes once
	}
	c.closed, c.code = reason, code
	if reason == "" {
		c.closed = "closed"
	}
	c.changed <- struct{}{}
}

// closedWith reports the close code and reason (0, "" while open).
func (c *conn) closedWith() (int, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.code, c.closed
}

// events returns the parsed text messages of one event name.
func (c *conn) events(t *testing.T) []any {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []any
	for _, m := range c.text {
		v, err := realtime.Parse(m)
		if err != nil {
			t.Fatalf("server sent an invalid control message %s: %v", m, err)
		}
		out = append(out, v)
	}
	return out
}

func (c *conn) wakes(t *testing.T) []string {
	var out []string
	for _, e := range c.events(t) {
		if w, ok := e.(*realtime.Wake); ok {
			out = append(out, w.Reason)
		}
	}
	return out
}

func (c *conn) presence(t *testing.T) []*realtime.PresenceFanout {
	var out []*realtime.PresenceFanout
	for _, e := range c.events(t) {
		if p, ok := e.(*realtime.PresenceFanout); ok {
			out = append(out, p)
		}
	}
	return out
}

func (c *conn) hello(t *testing.T) *realtime.Hello {
	t.Helper()
	for _, e := range c.events(t) {
		if h, ok := e.(*realtime.Hello); ok {
			return h
		}
	}
	t.Fatal("no hello")
	return nil
}

// deltas decodes the 0x00-tagged messages.
func (c *conn) deltas(t *testing.T) []*wire.Message {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*wire.Message
	for _, b := range c.binary {
		if b[0] != realtime.TagDelta {
			continue
		}
		m, err := wire.Decode(b[1:])
		if err != nil {
			t.Fatalf("delta does not decode: %v", err)
		}
		out = append(out, m)
	}
	return out
}

// round concatenates the 0x01-tagged messages (§8.7 reassembly).
func (c *conn) round() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b []byte
	for _, m := range c.binary {
		if m[0] == realtime.TagRound {
			b = append(b, m[1:]...)
		}
	}
	return b
}

func (c *conn) wait(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	// ok may also depend on hub state that changes without a message on
	// this connection (a session unregistered after its close): look
	// again every 10 ms too.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !ok() {
		select {
		case <-c.changed:
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

type env struct {
	h   *enginetest.Harness
	hub *realtime.Hub
}

func newEnv(t *testing.T, lim realtime.Limits) *env {
	return newEnvWith(t, realtime.Options{Limits: lim}, func(hub *realtime.Hub, p string, c *store.Commit) { hub.Notify(p, c) })
}

// newEnvWith builds a hub with o whose engine hands each commit to
// onCommit (nil: the hub hears of no commit).
func newEnvWith(t *testing.T, o realtime.Options, onCommit func(hub *realtime.Hub, p string, c *store.Commit)) *env {
	var hub *realtime.Hub
	h := enginetest.New(t, memstore.New(), memstore.NewSegments(), enginetest.Options{
		OnCommit: func(p string, c *store.Commit) {
			if onCommit != nil {
				onCommit(hub, p, c)
			}
		},
	})
	hub = realtime.NewHub(h.Engine, o)
	h.Grants.Set("actor-a", engine.ScopeMap{"project_id": {"p1", "p2"}})
	h.Grants.Set("actor-b", engine.ScopeMap{"project_id": {"p1"}})
	h.Grants.Set("actor-d", engine.ScopeMap{"project_id": {"p2"}})
	return &env{h: h, hub: hub}
}

func sub(project string) wire.Subscription {
	return wire.Subscription{ID: "tasks", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{project}}}, Cursor: -1}
}

// synced pulls once over the HTTP binding so the client record holds the
// §8.1 registration, and returns the client.
func (e *env) synced(t *testing.T, v uint16, actor, id, project string) *enginetest.Client {
	c := e.h.ClientV(v, "part", actor, id)
	s := sub(project)
	if _, err := c.Pull(wire.PullHeader{Accept: c.Accept}, s); err != nil {
		t.Fatal(err)
	}
	return c
}

func (e *env) connect(t *testing.T, actor, id string) (*realtime.Session, *conn) {
	t.Helper()
	c := newConn()
	s, err := e.hub.Connect(context.Background(), engine.Auth{Partition: "part", ActorID: actor}, id, c, realtime.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, c
}

func (e *env) push(t *testing.T, c *enginetest.Client, id, project string) int64 {
	t.Helper()
	r := c.Push(id, enginetest.Upsert("tasks", id, c.Task(id, project, "t "+id, false), -1))
	if r.Status != wire.PushApplied {
		t.Fatalf("push %s: %+v", id, r)
	}
	return r.CommitSeq.Value
}

func deltaRows(t *testing.T, m *wire.Message) (ids []string, next int64) {
	t.Helper()
	secs, err := enginetest.ParseSections(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secs {
		for _, c := range s.Commits {
			for _, ch := range c.Changes {
				ids = append(ids, ch.RowID)
			}
		}
		next = s.End.NextCursor
	}
	return ids, next
}

// §8.1/§8.2: a caught-up client registered by its HTTP pull gets hello
// without requiresSync, a delta (tag 0x00, its wire version) for a
// matching commit and none for another scope; its ack persists the
// cursor.
func TestDeltaAndAck(t *testing.T) {
	for _, v := range []uint16{wire.Version2, wire.Version3} {
		e := newEnv(t, realtime.Limits{})
		writer := e.synced(t, v, "actor-a", "writer", "p1")
		e.synced(t, v, "actor-b", "reader", "p1")
		s, c := e.connect(t, "actor-b", "reader")
		if h := c.hello(t); h.RequiresSync || h.ClientID != "reader" || h.ActorID != "actor-b" || h.SessionID != s.ID() {
			t.Fatalf("hello %+v", h)
		}
		e.push(t, writer, "x1", "p2") // another scope: nothing
		seq := e.push(t, writer, "t1", "p1")
		d := c.deltas(t)
		if len(d) != 1 {
			t.Fatalf("v%d: %d deltas, want 1", v, len(d))
		}
		if d[0].WireVersion != v || d[0].Kind != wire.KindResponse {
			t.Fatalf("delta in version %d kind %v", d[0].WireVersion, d[0].Kind)
		}
		ids, next := deltaRows(t, d[0])
		if len(ids) != 1 || ids[0] != "t1" || next != seq {
			t.Fatalf("delta rows %v next %d, want [t1] %d", ids, next, seq)
		}
		if w := c.wakes(t); len(w) != 0 {
			t.Fatalf("unexpected wakes %v", w)
		}
		s.HandleText(context.Background(), realtime.EncodeAck(seq))
		rec, _ := e.h.Store.GetClient(context.Background(), "part", "reader")
		if rec.Cursor != seq || rec.Registration == "" {
			t.Fatalf("ack not persisted: %+v", rec)
		}
	}
}

// §8.1/§8.2: behind at connect → requiresSync, matching commits wake
// (catchup-required) with no delta, until an ack reaches what the
// session observed; then deltas resume.
func TestBehindWakesThenResumes(t *testing.T) {
	e := newEnv(t, realtime.Limits{})
	writer := e.synced(t, wire.Version3, "actor-a", "writer", "p1")
	e.synced(t, wire.Version3, "actor-b", "reader", "p1")
	e.push(t, writer, "t1", "p1")
	s, c := e.connect(t, "actor-b", "reader")
	if !c.hello(t).RequiresSync {
		t.Fatal("behind session not told to sync")
	}
	seq2 := e.push(t, writer, "t2", "p1")
	if w := c.wakes(t); len(w) != 1 || w[0] != realtime.ReasonCatchupRequired || len(c.deltas(t)) != 0 {
		t.Fatalf("wakes %v deltas %d", w, len(c.deltas(t)))
	}
	s.HandleText(context.Background(), realtime.EncodeAck(seq2-1)) // not far enough
	e.push(t, writer, "t3", "p1")
	if len(c.deltas(t)) != 0 || len(c.wakes(t)) != 2 {
		t.Fatal("a short ack lifted suppression")
	}
	s.HandleText(context.Background(), realtime.EncodeAck(seq2+1))
	e.push(t, writer, "t4", "p1")
	if d := c.deltas(t); len(d) != 1 {
		t.Fatalf("deltas did not resume: %d", len(d))
	}
}

// §8.2/§8.3: a delta over the message limit becomes delta-too-large,
// never a truncated message; a refused send becomes catchup-required.
func TestOversizeAndDrop(t *testing.T) {
	e := newEnv(t, realtime.Limits{MaxMessageBytes: 40})
	writer := e.synced(t, wire.Version3, "actor-a", "writer", "p1")
	e.synced(t, wire.Version3, "actor-b", "reader", "p1")
	s, c := e.connect(t, "actor-b", "reader")
	seq := e.push(t, writer, "t1", "p1")
	if w := c.wakes(t); len(w) != 1 || w[0] != realtime.ReasonDeltaTooLarge || len(c.binary) != 0 {
		t.Fatalf("wakes %v binary %d", w, len(c.binary))
	}
	// Suppressed until acked.
	s.HandleText(context.Background(), realtime.EncodeAck(seq))
	e2 := newEnv(t, realtime.Limits{})
	w2 := e2.synced(t, wire.Version3, "actor-a", "writer", "p1")
	e2.synced(t, wire.Version3, "actor-b", "reader", "p1")
	_, c2 := e2.connect(t, "actor-b", "reader")
	c2.refuse = true
	e2.push(t, w2, "t1", "p1")
	c2.refuse = false
	e2.push(t, w2, "t2", "p1")
	if w := c2.wakes(t); len(w) != 2 || w[0] != realtime.ReasonCatchupRequired || len(c2.deltas(t)) != 0 {
		t.Fatalf("after a drop: wakes %v deltas %d", w, len(c2.deltas(t)))
	}
}

// §8.2 with the log as the truth: notifications outside the registered
// scopes still advance the feed (an unrelated commit is not a gap); a
// notification the hub already fed (a duplicate, or one reordered behind
// a later one) is ignored, never a second delta or a wake-up; a commit
// whose predecessors are missing from the log (a hole) is a gap and
// forces catchup-required.
func TestNotificationGap(t *testing.T) {
	e := newEnv(t, realtime.Limits{})
	writer := e.synced(t, wire.Version3, "actor-a", "writer", "p1")
	e.synced(t, wire.Version3, "actor-b", "reader", "p1")
	_, c := e.connect(t, "actor-b", "reader")
	e.push(t, writer, "x1", "p2") // advances the sequence silently
	e.push(t, writer, "t1", "p1")
	if len(c.deltas(t)) != 1 || len(c.wakes(t)) != 0 {
		t.Fatal("an out-of-scope notification broke contiguity")
	}
	// Replay commit t1 from the log: a duplicate.
	var old *store.Commit
	_ = e.h.Store.ReadLog(context.Background(), "part", 0, 100, func(c *store.Commit) bool {
		if c.ClientCommitID == "t1" {
			old = c
		}
		return true
	})
	e.hub.Notify("part", old)
	if w := c.wakes(t); len(w) != 0 || len(c.deltas(t)) != 1 {
		t.Fatalf("duplicate notification: wakes %v deltas %d", w, len(c.deltas(t)))
	}
	// A hole: seq jumps past commits the log does not hold.
	skip := *old
	skip.Seq = old.Seq + 5
	e.hub.Notify("part", &skip)
	if w := c.wakes(t); len(w) != 1 || w[0] != realtime.ReasonCatchupRequired || len(c.deltas(t)) != 1 {
		t.Fatalf("gap: wakes %v deltas %d", w, len(c.deltas(t)))
	}
}

// §3.3 at a decision point: a revoked scope stops deltas and presence.
func TestRevocationStopsDeltas(t *testing.T) {
	e := newEnv(t, realtime.Limits{})
	writer := e.synced(t, wire.Version3, "actor-a", "writer", "p1")
	e.synced(t, wire.Version3, "actor-b", "reader", "p1")
	_, c := e.connect(t, "actor-b", "reader")
	e.h.Grants.Set("actor-b", engine.ScopeMap{"project_id": {"p9"}})
	e.hub.RefreshScopes(context.Background(), "part", "actor-b")
	e.push(t, writer, "t1", "p1")
	if len(c.deltas(t)) != 0 {
		t.Fatal("revoked registration still received a delta")
	}
	// A resolver outage at refresh fails closed too.
	e.h.Grants.Set("actor-b", engine.ScopeMap{"project_id": {"p1"}})
	e.h.Grants.Fail(true)
	e.hub.RefreshScopes(context.Background(), "part", "actor-b")
	e.h.Grants.Fail(false)
	e.push(t, writer, "t2", "p1")
	if len(c.deltas(t)) != 0 {
		t.Fatal("a failed refresh kept the registration")
	}
}

// §8.6: lifecycle, snapshot, privacy floor, forbidden and too-large.
func TestPresence(t *testing.T) {
	e := newEnv(t, realtime.Limits{MaxPresenceBytes: 64, PresencePerSecond: 1 << 30}) // no coalescing here
	for _, id := range []string{"a", "b", "d"} {
		actor := map[string]string{"a": "actor-a", "b": "actor-b", "d": "actor-d"}[id]
		project := map[string]string{"a": "p1", "b": "p1", "d": "p2"}[id]
		e.synced(t, wire.Version3, actor, id, project)
	}
	ctx := context.Background()
	sa, ca := e.connect(t, "actor-a", "a")
	_, cb := e.connect(t, "actor-b", "b")
	sd, cd := e.connect(t, "actor-d", "d")
	sa.HandleText(ctx, []byte(`{"event":"presence","data":{"scopeKey":"project:p1","doc":{"n":1}}}`))
	sa.HandleText(ctx, []byte(`{"event":"presence","data":{"scopeKey":"project:p1","doc":{"n":2}}}`))
	sa.HandleText(ctx, []byte(`{"event":"presence","data":{"scopeKey":"project:p1","doc":null}}`))
	sa.HandleText(ctx, []byte(`{"event":"presence","data":{"scopeKey":"project:p1","doc":{"n":3}}}`))
	kinds := func(ps []*realtime.PresenceFanout) string {
		var k []string
		for _, p := range ps {
			k = append(k, p.Kind+":"+string(p.Doc))
		}
		return strings.Join(k, ",")
	}
	if got := kinds(cb.presence(t)); got != `join:{"n":1},update:{"n":2},leave:,join:{"n":3}` {
		t.Fatalf("B saw %s", got)
	}
	if p := cb.presence(t)[0]; p.ActorID != "actor-a" || p.ClientID != "a" {
		t.Fatalf("identity %+v", p)
	}
	if len(ca.presence(t)) != 0 || len(cd.presence(t)) != 0 {
		t.Fatal("presence reached the publisher or a non-scope-mate")
	}
	// Forbidden key, oversize doc: errors to the publisher only.
	sd.HandleText(ctx, []byte(`{"event":"presence","data":{"scopeKey":"project:p1","doc":{"x":1}}}`))
	sa.HandleText(ctx, []byte(`{"event":"presence","data":{"scopeKey":"project:p1","doc":{"big":"`+strings.Repeat("x", 100)+`"}}}`))
	var errs []string
	for _, ev := range append(cd.events(t), ca.events(t)...) {
		if pe, ok := ev.(*realtime.PresenceError); ok {
			errs = append(errs, pe.Error)
		}
	}
	if strings.Join(errs, ",") != "presence.forbidden,presence.too_large" {
		t.Fatalf("errors %v", errs)
	}
	if got := kinds(cb.presence(t)); strings.Count(got, "join") != 2 || strings.Contains(got, "big") {
		t.Fatalf("a refused publish fanned out: %s", got)
	}
	// Late joiner: snapshot join-burst; then A disconnects → leave.
	e.synced(t, wire.Version3, "actor-b", "c", "p1")
	_, cc := e.connect(t, "actor-b", "c")
	if got := kinds(cc.presence(t)); got != `join:{"n":3}` {
		t.Fatalf("snapshot %s", got)
	}
	sa.Close()
	if got := kinds(cb.presence(t)); !strings.HasSuffix(got, "leave:") {
		t.Fatalf("disconnect did not leave: %s", got)
	}
	// A malformed known event closes the connection; unknown JSON does not.
	_, cx := e.connect(t, "actor-b", "b")
	sx, _ := e.hub.Connect(ctx, engine.Auth{Partition: "part", ActorID: "actor-b"}, "b", cx, realtime.ConnectOptions{})
	sx.HandleText(ctx, []byte(`{"event":"future","data":1}`))
	sx.HandleText(ctx, []byte(`not json`))
	if cx.closed != "" {
		t.Fatal("tolerated input closed the connection")
	}
	sx.HandleText(ctx, []byte(`{"event":"presence","data":{"scopeKey":"project:p1","doc":"online"}}`))
	if !strings.Contains(cx.closed, "sync.invalid_request") {
		t.Fatalf("malformed presence: closed %q", cx.closed)
	}
}

func requestBytes(t *testing.T, c *enginetest.Client, subs ...wire.Subscription) []byte {
	m := c.Request(nil, &wire.PullHeader{Accept: c.Accept}, subs)
	b, err := wire.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// §8.7: a round over the socket in arbitrary chunks gets the same
// response as POST /sync, registers at round end, keeps deltas out of
// the response stream, and protocol violations close the connection.
func TestSocketRound(t *testing.T) {
	e := newEnv(t, realtime.Limits{RoundChunkBytes: 16})
	writer := e.synced(t, wire.Version3, "actor-a", "writer", "p1")
	e.push(t, writer, "t0", "p1")
	ctx := context.Background()
	s, c := e.connect(t, "actor-b", "fresh")
	if !c.hello(t).RequiresSync {
		t.Fatal("never-synced client not told to sync")
	}
	rc := e.h.ClientV(wire.Version3, "part", "actor-b", "fresh-http")
	_ = rc
	cli := &enginetest.Client{H: e.h, Partition: "part", Actor: "actor-b", ID: "fresh", Version: wire.Version3, Schema: 1, Accept: wire.AcceptInlineRows | wire.AcceptExternalRows, Epoch: writer.Epoch}
	req := requestBytes(t, cli, sub("p1"))
	for i := 0; i < len(req); i += 7 {
		s.HandleBinary(ctx, append([]byte{realtime.TagRound}, req[i:min(i+7, len(req))]...))
	}
	var resp *wire.Message
	c.wait(t, "round response", func() bool {
		m, err := wire.Decode(c.round())
		resp = m
		return err == nil
	})
	for _, b := range c.binary {
		if len(b) > 16 {
			t.Fatalf("chunk of %d bytes over the 16-byte limit", len(b))
		}
	}
	secs, err := enginetest.ParseSections(resp)
	if err != nil || len(secs) != 1 || secs[0].Start.Status != wire.SubActive {
		t.Fatalf("round sections %+v %v", secs, err)
	}
	next := secs[0].End.NextCursor
	// Wait for the round to finish registering, then ack and expect deltas.
	time.Sleep(20 * time.Millisecond)
	s.HandleText(ctx, realtime.EncodeAck(next))
	seq := e.push(t, writer, "t1", "p1")
	c.wait(t, "delta after round registration", func() bool { return len(c.deltas(t)) == 1 })
	if _, n := deltaRows(t, c.deltas(t)[0]); n != seq {
		t.Fatalf("delta next %d want %d", n, seq)
	}

	// A clientId mismatch fails the round with RESP_HEADER, ERROR, END.
	c.mu.Lock()
	c.binary = nil
	c.mu.Unlock()
	other := *cli
	other.ID = "someone-else"
	s.HandleBinary(ctx, append([]byte{realtime.TagRound}, requestBytes(t, &other, sub("p1"))...))
	c.wait(t, "error round", func() bool { _, err := wire.Decode(c.round()); return err == nil })
	m, _ := wire.Decode(c.round())
	ef, ok := m.Frames[len(m.Frames)-1].(*wire.ErrorFrame)
	if !ok || ef.Code != string(syncerr.InvalidClientID) {
		t.Fatalf("mismatch round: %+v", m.Frames)
	}

	// Pipelining (bytes past END) and a wrong tag close the connection.
	time.Sleep(20 * time.Millisecond)
	twice := append(append([]byte{realtime.TagRound}, req...), req...)
	s.HandleBinary(ctx, twice)
	if c.closed == "" {
		t.Fatal("pipelined request did not close the connection")
	}
	s2, c2 := e.connect(t, "actor-b", "fresh")
	s2.HandleBinary(ctx, []byte{0x07, 1, 2})
	if c2.closed == "" {
		t.Fatal("unknown client tag did not close")
	}
	s3, c3 := e.connect(t, "actor-b", "fresh")
	s3.HandleBinary(ctx, append([]byte{realtime.TagRound}, []byte("HTTP/1.1 GET")...))
	if c3.closed == "" {
		t.Fatal("a non-SSP2 stream did not close")
	}
}

// §8.7 interleaving: a commit during the connection's own round is a
// wake-up, never a 0x00 message inside the response stream.
func TestCommitDuringRound(t *testing.T) {
	e := newEnv(t, realtime.Limits{})
	ctx := context.Background()
	e.synced(t, wire.Version3, "actor-b", "b", "p1")
	s, c := e.connect(t, "actor-b", "b")
	cli := &enginetest.Client{H: e.h, Partition: "part", Actor: "actor-b", ID: "b", Version: wire.Version3, Schema: 1, Accept: wire.AcceptInlineRows | wire.AcceptExternalRows}
	rec, _, _ := e.h.Store.Head(ctx, "part")
	cli.Epoch = rec.LogEpoch
	// Register through a first round, ack, then push inside a round.
	s.HandleBinary(ctx, append([]byte{realtime.TagRound}, requestBytes(t, cli, sub("p1"))...))
	c.wait(t, "round 1", func() bool { _, err := wire.Decode(c.round()); return err == nil })
	time.Sleep(20 * time.Millisecond)
	c.mu.Lock()
	c.binary = nil
	c.mu.Unlock()
	m := cli.Request([]wire.PushCommit{{ClientCommitID: "own", Operations: []wire.Operation{enginetest.Upsert("tasks", "own", cli.Task("own", "p1", "x", false), -1)}}}, &wire.PullHeader{Accept: cli.Accept}, []wire.Subscription{sub("p1")})
	body, _ := wire.Encode(m)
	s.HandleBinary(ctx, append([]byte{realtime.TagRound}, body...))
	c.wait(t, "round 2", func() bool { _, err := wire.Decode(c.round()); return err == nil })
	if len(c.deltas(t)) != 0 {
		t.Fatal("a delta went out during the round")
	}
	if w := c.wakes(t); len(w) == 0 || w[len(w)-1] != realtime.ReasonCatchupRequired {
		t.Fatalf("wakes %v", w)
	}
	if !bytes.HasPrefix(c.round(), wire.Magic[:]) {
		t.Fatal("round stream corrupted")
	}
}

var _ = json.Valid
