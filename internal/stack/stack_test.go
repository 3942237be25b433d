package stack

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/skyfold/syncular-lambda/internal/app/apptest"
	"github.com/skyfold/syncular-lambda/internal/core/realtime"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// One stack serves every test of the package (starting it builds six
// binaries and starts a JVM); TestMain stops it.
var shared struct {
	once sync.Once
	s    *Stack
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.s != nil {
		shared.s.Close()
	}
	os.Exit(code)
}

func theStack(t testing.TB) *Stack {
	t.Helper()
	// As internal/testenv: DynamoDB Local (java, npm) may be skipped
	// locally, never in CI.
	if os.Getenv("SKIP_DYNAMODB_LOCAL") == "1" && (os.Getenv("CI") == "" || os.Getenv("CI") == "0" || os.Getenv("CI") == "false") {
		t.Skip("SKIP_DYNAMODB_LOCAL=1: the stack needs DynamoDB Local")
	}
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		start := time.Now()
		cfg := Config{}
		if os.Getenv("SSP2_STACK_LOGS") == "1" {
			cfg.Logs = os.Stderr // every child's output, line-prefixed
		}
		shared.s, shared.err = Start(ctx, cfg)
		if shared.err == nil {
			t.Logf("stack up in %v: %s", time.Since(start).Round(time.Millisecond), shared.s.BaseURL)
		}
	})
	if shared.err != nil {
		t.Fatalf("the stack did not start: %v", shared.err)
	}
	return shared.s
}

// withTier skips a realtime test in a tree without the realtime tier.
func withTier(t *testing.T) *Stack {
	s := theStack(t)
	if !s.HasTier {
		t.Skip("cmd/syncular-realtime is not in this tree: no realtime tier to test")
	}
	return s
}

// httpWriter returns a function committing one task row of project over
// HTTP (the gateway and the push function), as a writer client would.
func httpWriter(t *testing.T, d *apptest.Deployment, project string) func(id string) {
	tok := d.Token(t, "writer", map[string][]string{"project_id": {project}})
	epoch := d.Epoch(t, "push", "/sync", tok, project+"-w")
	return func(id string) {
		t.Helper()
		d.Push(t, tok, project+"-w", epoch, wire.PushCommit{ClientCommitID: id, Operations: []wire.Operation{
			apptest.Upsert("tasks", id, 0, d.Task(t, id, project, "w")),
		}})
	}
}

// The gateway enforces the platform's limits before any function runs:
// an event over Lambda's 6 MB invoke payload (a 4.7 MB binary body is
// over 6 MB as base64) and a body over API Gateway's 10 MB answer 413
// with the §10 error body; an unknown route is API Gateway's 404; a
// request that fits is one invocation of the route's function.
func TestGatewayLimits(t *testing.T) {
	s := theStack(t)
	tok, err := s.DevToken("limits")
	if err != nil {
		t.Fatal(err)
	}
	post := func(path string, body []byte) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, s.BaseURL+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", apptest.ContentType)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	before := s.Invocations()
	for _, n := range []int{4_800_000, 10<<20 + 1} {
		body := make([]byte, n)
		_, _ = rand.Read(body)
		status, b := post("/sync", body)
		var e struct {
			Code      string `json:"code"`
			Retryable *bool  `json:"retryable"`
		}
		if status != http.StatusRequestEntityTooLarge || json.Unmarshal(b, &e) != nil || e.Code != "sync.invalid_request" || e.Retryable == nil || *e.Retryable {
			t.Fatalf("%d-byte body: HTTP %d %s", n, status, b)
		}
	}
	if got := s.Invocations()["push"]; got != before["push"] {
		t.Fatalf("an oversize request reached the push function (%d → %d invocations)", before["push"], got)
	}
	if status, b := post("/nowhere", nil); status != http.StatusNotFound || !bytes.Contains(b, []byte(`"message"`)) {
		t.Fatalf("unknown route: HTTP %d %s", status, b)
	}
	body := apptest.Request(t, wire.Version2, wire.ReqHeader{ClientID: "limits-1", SchemaVersion: s.Schema.Latest}, pullHeader)
	if status, b := post("/sync", body); status != http.StatusOK {
		t.Fatalf("a request that fits: HTTP %d %s", status, b)
	}
	after := s.Invocations()
	if after["push"] != before["push"]+1 || after["pull"] != before["pull"] {
		t.Fatalf("invocations %v → %v: want exactly one more push", before, after)
	}
}

// The end-to-end HTTP flow (push, pull, bootstrap segments through S3
// presigned URLs, the segment route) through the gateway and the
// functions under the emulator.
func TestGatewayFlow(t *testing.T) {
	s := theStack(t)
	apptest.RunFlow(t, deployment(s))
}

// Two stock-protocol clients, wire 2 and wire 3, on different tier
// instances: each connects first and then syncs over the socket (§8.7),
// receives the other's commits as 0x00 deltas (§8.2), sees the other's
// presence join and leave (§8.6), and after a reconnect catches up on what
// it missed.
func TestRealtimeAcrossInstances(t *testing.T) {
	s := withTier(t)
	d := deployment(s)
	ids := s.Instances()
	a := newSockClient(t, s, wire.Version2, "alice", "across-a", "across")
	b := newSockClient(t, s, wire.Version3, "bob", "across-b", "across")
	if h := a.connect(ids[0]); !h.RequiresSync {
		t.Fatalf("a new client's hello: %+v", h)
	}
	b.connect(ids[1])
	if a.instance == b.instance || a.instance == "" {
		t.Fatalf("clients on instances %q and %q, want two different ones", a.instance, b.instance)
	}
	if got := a.sync(); len(got) != 0 {
		t.Fatalf("a's first pull: %v", got)
	}
	b.sync()

	a.push(d, "a1", "across-r1")
	if got := joined(b.delta()); got != "across-r1" {
		t.Fatalf("b's delta: %s", got)
	}
	b.push(d, "b1", "across-r2")
	if got := joined(a.delta()); got != "across-r2" {
		t.Fatalf("a's delta: %s", got)
	}

	a.presence(`{"cursor":1}`)
	p := b.nextPresence()
	if p.Kind != "join" || p.ActorID != "alice" || p.ClientID != "across-a" || string(p.Doc) != `{"cursor":1}` {
		t.Fatalf("b saw %+v", p)
	}
	b.presence(`{"cursor":2}`)
	if p := a.nextPresence(); p.Kind != "join" || p.ClientID != "across-b" {
		t.Fatalf("a saw %+v", p)
	}

	// b goes away: a sees it leave; a commits twice meanwhile; b comes
	// back through the one address and catches up, then gets deltas again.
	b.ws.Close(1000, "bye")
	if p := a.nextPresence(); p.Kind != "leave" || p.ClientID != "across-b" || p.Doc != nil {
		t.Fatalf("a saw %+v after b left", p)
	}
	a.push(d, "a2", "across-r3")
	a.push(d, "a3", "across-r4")
	if h := b.connect(""); h.RequiresSync && b.cursor < 0 {
		t.Fatalf("hello on reconnect: %+v", h)
	}
	if got := joined(b.sync()); got != "across-r3,across-r4" {
		t.Fatalf("b caught up on %q, want r3,r4", got)
	}
	a.push(d, "a4", "across-r5")
	if got := joined(b.delta()); got != "across-r5" {
		t.Fatalf("b's delta after the reconnect: %s", got)
	}
}

// A commit pushed over HTTP (the gateway, the push function under the
// emulator) reaches a socket as a delta: table stream → the stream
// consumer → the fanout function → a hint to every live instance.
func TestRealtimeHTTPPushReachesSocket(t *testing.T) {
	s := withTier(t)
	d := deployment(s)
	for _, id := range s.Instances() {
		c := newSockClient(t, s, wire.Version3, "reader-"+id, "http-"+id, "http-"+id)
		c.connect(id)
		c.sync()
		tok := d.Token(t, "writer", map[string][]string{"project_id": {c.project}})
		epoch := d.Epoch(t, "push", "/sync", tok, "http-writer-"+id)
		fanout := s.Invocations()["fanout"]
		start := time.Now()
		row := "h-" + id // row ids are table-wide: one per project
		d.Push(t, tok, "http-writer-"+id, epoch, wire.PushCommit{ClientCommitID: "h1", Operations: []wire.Operation{
			apptest.Upsert("tasks", row, 0, d.Task(t, row, c.project, "over http")),
		}})
		if got := joined(c.delta()); got != row {
			t.Fatalf("%s: delta %q", id, got)
		}
		t.Logf("%s: HTTP push → socket delta in %v", id, time.Since(start).Round(time.Millisecond))
		if s.Invocations()["fanout"] == fanout {
			t.Fatalf("%s: the delta came without a fanout invocation", id)
		}
	}
}

// An instance killed while a client's round is half sent: the client
// reconnects through the one address to the other instance, and catches
// up on every commit made meanwhile, with no gap and no duplicate; the
// half-sent push was never applied.
func TestRealtimeInstanceKilledMidRound(t *testing.T) {
	s := withTier(t)
	d := deployment(s)
	ids := s.Instances()
	victim := ids[len(ids)-1]
	t.Cleanup(func() {
		if err := s.RestartInstance(context.Background(), victim); err != nil {
			t.Errorf("restart %s: %v", victim, err)
		}
	})
	c := newSockClient(t, s, wire.Version3, "carol", "kill-c", "kill")
	c.connect(victim)
	c.sync()
	write := httpWriter(t, d, "kill")
	write("kill-k1")
	got := c.delta()

	// Half a push round, then the instance dies.
	hdr := wire.ReqHeader{ClientID: c.clientID, SchemaVersion: s.Schema.Latest, LogEpoch: wire.Some(c.epoch)}
	body := apptest.Request(t, c.version, hdr, &wire.PushCommit{ClientCommitID: "kill-k2", Operations: []wire.Operation{
		apptest.Upsert("tasks", "kill-k2", 0, d.Task(t, "kill-k2", "kill", "half")),
	}})
	c.sendRound(body[:len(body)/2], len(body))
	if err := s.KillInstance(victim); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.closed:
	case <-time.After(waitFor):
		t.Fatal("the socket outlived its instance")
	}
	write("kill-k3")
	c.connect("")
	if c.instance == victim {
		t.Fatalf("reconnected to the killed instance %s", victim)
	}
	got = append(got, c.sync()...)
	write("kill-k4")
	got = append(got, c.delta()...)
	if joined(got) != "kill-k1,kill-k3,kill-k4" {
		t.Fatalf("the client received %v, want k1,k3,k4 once each and in order", got)
	}
	// The half-sent push was never applied: sent whole now, it applies
	// (a replay of an applied commit would answer cached).
	c.push(d, "kill-k2", "kill-k2")
}

// A client may start its first round as soon as the socket is open,
// before the hello arrives (§8.1 sets no order): bytes that reach the
// instance together with the upgrade are part of the stream and must not
// be lost. Each try dials an instance and sends an epoch round at once.
func TestRealtimeRoundRightAfterUpgrade(t *testing.T) {
	s := withTier(t)
	for i := range 30 {
		id := s.Instances()[i%len(s.Instances())]
		c := newSockClient(t, s, wire.Version3, "eager", "eager-"+strconv.Itoa(i), "eager")
		tok := url.QueryEscape(c.token)
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		ws, _, err := websocket.Dial(ctx, s.InstanceURL(id)+"?clientId="+c.clientID+"&token="+tok, nil)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ws.CloseNow() })
		c.ws = ws
		c.text, c.binary, c.closed = make(chan []byte, 64), make(chan []byte, 64), make(chan struct{})
		hdr := wire.ReqHeader{ClientID: c.clientID, SchemaVersion: s.Schema.Latest}
		c.sendRound(apptest.Request(t, wire.Version3, hdr, pullHeader), 1<<20)
		go c.readLoop(ws, c.text, c.binary, c.closed)
		c.nextText(func(m any) bool { _, ok := m.(*realtime.Hello); return ok })
		var stream []byte
		for {
			b := c.nextBinary()
			stream = append(stream, b[1:]...)
			if m, err := wire.Decode(stream); err == nil {
				if hs := apptest.Find[*wire.RespHeader](m); len(hs) != 1 || hs[0].LogEpoch == "" {
					t.Fatalf("try %d on %s: %+v", i, id, m.Frames)
				}
				break
			}
		}
		ws.CloseNow()
	}
}

// A stream batch the mapping gives up on (the fanout function failed
// through every retry and bisect, the records went to the on-failure
// destination) loses only a hint: the next commit's hint makes the
// instance read the log from what it delivered, so the socket gets the
// lost commit and the next one, in order.
func TestRealtimeDroppedStreamBatch(t *testing.T) {
	s := withTier(t)
	d := deployment(s)
	c := newSockClient(t, s, wire.Version2, "dora", "drop-c", "drop")
	c.connect(s.Instances()[1])
	c.sync()
	write := httpWriter(t, d, "drop")
	discarded := s.StreamStats().Discarded
	s.consumer.failing.Store(true)
	write("drop-x1")
	deadline := time.Now().Add(waitFor)
	for s.StreamStats().Discarded == discarded {
		if time.Now().After(deadline) {
			s.consumer.failing.Store(false)
			t.Fatalf("the consumer never gave the batch up: %+v", s.StreamStats())
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.consumer.failing.Store(false)
	write("drop-x2")
	var got []string
	for len(got) < 2 {
		got = append(got, c.delta()...)
	}
	if joined(got) != "drop-x1,drop-x2" {
		t.Fatalf("the socket got %v, want x1,x2 once each and in order", got)
	}
}
