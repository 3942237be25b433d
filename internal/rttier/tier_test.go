package rttier

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/coder/websocket"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/app/apptest"
	"github.com/skyfold/syncular-lambda/internal/auth"
	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/realtime"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/metrics"
	"github.com/skyfold/syncular-lambda/internal/rtfanout"
	"github.com/skyfold/syncular-lambda/internal/testenv"
	"github.com/skyfold/syncular-lambda/internal/wiring"
)

const testSecret = "tier-test-hs256-secret-0123456789abcdef"

// stack is one table (with its KEYS_ONLY stream) and bucket, the push
// and pull functions in process (as API Gateway would invoke them), and
// the stream read as the event source mapping reads it.
type stack struct {
	t       *testing.T
	env     map[string]string
	clients *wiring.AWSClients
	d       *apptest.Deployment
	poller  *rtfanout.Poller
	fwd     *rtfanout.Forwarder
	// drain is the instances' drain delay (SYNC_REALTIME_DRAIN_DELAY).
	drain time.Duration
	// logs, when set, receives the instances' info lines.
	logs *syncBuffer
	// tls, when set, makes the instances serve wss:// (SYNC_TLS_CERT_REF).
	tls *tlsSetup
}

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newStack(t *testing.T) *stack {
	t.Helper()
	ddb := testenv.DynamoDB(t)
	s3s := testenv.S3(t)
	table, bucket := testenv.UniqueName(t, "tier"), strings.ToLower(testenv.UniqueName(t, "tier"))
	s3s.CreateBucket(t, bucket)
	env := map[string]string{
		"SYNC_TABLE_NAME": table, "SYNC_BUCKET": bucket, "SYNC_SCHEMA_PATH": "../../examples/todo/schema.json",
		"SYNC_AUTH_MODE": "hs256", "SYNC_HS256_SECRET": testSecret, "SYNC_SIGNED_URLS": "off",
		"SYNC_DYNAMODB_ENDPOINT": ddb.Endpoint, "SYNC_S3_ENDPOINT": s3s.Endpoint, "SYNC_S3_PATH_STYLE": "true",
	}
	st := &stack{t: t, env: env}
	cfg := st.config(nil)
	ctx := context.Background()
	var err error
	st.clients, err = wiring.NewAWSClients(ctx, cfg, awsconfig.WithRegion(testenv.Region),
		awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("local", "local", "")))
	if err != nil {
		t.Fatal(err)
	}
	if err := dynamostore.CreateTable(ctx, st.clients.DynamoDB, table); err != nil {
		t.Fatal(err)
	}
	out, err := st.clients.DynamoDB.UpdateTable(ctx, &dynamodb.UpdateTableInput{TableName: aws.String(table), StreamSpecification: &ddbtypes.StreamSpecification{
		StreamEnabled: aws.Bool(true), StreamViewType: ddbtypes.StreamViewTypeKeysOnly,
	}})
	if err != nil {
		t.Fatal(err)
	}
	st.fwd = &rtfanout.Forwarder{Registry: &rtfanout.Registry{DB: st.clients.DynamoDB, Table: table}, Timeout: 500 * time.Millisecond}
	st.poller = &rtfanout.Poller{
		Streams:   dynamodbstreams.NewFromConfig(st.clients.Config, func(o *dynamodbstreams.Options) { o.BaseEndpoint = aws.String(ddb.Endpoint) }),
		StreamARN: aws.ToString(out.TableDescription.LatestStreamArn),
	}

	// The push and pull functions, built as their Lambda mains build them
	// (no in-process hint: their commits reach the tier by the stream).
	sch, err := wiring.LoadSchema(cfg)
	if err != nil {
		t.Fatal(err)
	}
	deps, err := wiring.AWSDeps(ctx, cfg, slog.New(slog.DiscardHandler), sch, st.clients)
	if err != nil {
		t.Fatal(err)
	}
	fns := map[string]interface {
		Invoke(context.Context, []byte) ([]byte, error)
	}{}
	for _, fn := range []app.Function{app.Push, app.Pull} {
		h, err := app.Build(cfg, fn, deps)
		if err != nil {
			t.Fatal(err)
		}
		fns[fn.Name] = h
	}
	st.d = &apptest.Deployment{
		Schema: deps.Schema,
		Invoke: func(t testing.TB, fn string, ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
			t.Helper()
			b, err := fns[fn].Invoke(context.Background(), apptest.MustJSON(t, ev))
			if err != nil {
				t.Fatal(err)
			}
			var resp events.APIGatewayV2HTTPResponse
			if err := json.Unmarshal(b, &resp); err != nil {
				t.Fatal(err)
			}
			return resp
		},
		Token: func(t testing.TB, actor string, scopes map[string][]string) string {
			tok, err := auth.MintHS256([]byte(testSecret), auth.Claims{"sub": actor, "syncular_scopes": scopes}, time.Hour, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			return tok
		},
	}
	return st
}

func (st *stack) config(extra map[string]string) *config.Config {
	st.t.Helper()
	cfg, err := config.Load(func(k string) string {
		if v, ok := extra[k]; ok {
			return v
		}
		return st.env[k]
	})
	if err != nil {
		st.t.Fatal(err)
	}
	return cfg
}

func (st *stack) token(actor string) string {
	return st.d.Token(st.t, actor, map[string][]string{"project_id": {"p1"}})
}

// pump reads the stream once and hands every batch to handle (the
// fanout function's place); forward is the real one.
func (st *stack) pump(handle func(context.Context, []rtfanout.Record) error) {
	st.t.Helper()
	st.poller.Handle = handle
	if _, err := st.poller.Poll(context.Background()); err != nil {
		st.t.Fatal(err)
	}
}

func (st *stack) forward(ctx context.Context, recs []rtfanout.Record) error {
	_, err := st.fwd.Forward(ctx, recs)
	return err
}

// instance is one running tier instance on loopback.
type instance struct {
	*Tier
	url    string
	client *http.Client // nil: the default (plain ws://)
	cancel context.CancelFunc
	done   chan struct{}
}

func (st *stack) start(id string) *instance {
	st.t.Helper()
	hintLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		st.t.Fatal(err)
	}
	adv := "http://" + hintLn.Addr().String()
	extra := map[string]string{"SYNC_INSTANCE_ID": id, "SYNC_HINT_ADVERTISE": adv, "SYNC_REALTIME_ADDR": "127.0.0.1:0"}
	scheme, awsCfg := "http://", st.clients.Config
	if st.tls != nil {
		extra["SYNC_TLS_CERT_REF"], scheme, awsCfg = testCertRef, "https://", st.tls.store.awsConfig()
	}
	cfg := st.config(extra)
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("instance", id)
	if st.logs != nil {
		logger = slog.New(slog.NewJSONHandler(st.logs, nil)).With("instance", id)
	}
	ctx, cancel := context.WithCancel(context.Background())
	// The realtime port as main opens it (TLS with SYNC_TLS_CERT_REF).
	rtLn, err := ListenRealtime(ctx, ctx, cfg, awsCfg, logger)
	if err != nil {
		cancel()
		st.t.Fatal(err)
	}
	tr, err := New(context.Background(), cfg, st.clients, logger, adv)
	if err != nil {
		cancel()
		st.t.Fatal(err)
	}
	in := &instance{Tier: tr, url: scheme + rtLn.Addr().String(), cancel: cancel, done: make(chan struct{})}
	if st.tls != nil {
		in.client = st.tls.client
	}
	go func() {
		defer close(in.done)
		if err := Serve(ctx, tr, rtLn, hintLn, st.drain); err != nil {
			st.t.Errorf("instance %s: %v", id, err)
		}
	}()
	st.t.Cleanup(in.stop)
	// Serving once the registry lists it.
	for end := time.Now().Add(10 * time.Second); ; {
		live, err := st.fwd.Registry.Live(context.Background())
		if err == nil && slicesHasID(live, id) {
			break
		}
		if time.Now().After(end) {
			st.t.Fatalf("instance %s never registered (%v)", id, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return in
}

func slicesHasID(live []rtfanout.Instance, id string) bool {
	for _, in := range live {
		if in.ID == id {
			return true
		}
	}
	return false
}

func (in *instance) stop() {
	in.cancel()
	<-in.done
}

// client is one stock-protocol socket.
type client struct {
	t  *testing.T
	ws *websocket.Conn
}

func (in *instance) dial(t *testing.T, token, clientID string) *client {
	t.Helper()
	u := "ws" + strings.TrimPrefix(in.url, "http") + "/realtime?clientId=" + url.QueryEscape(clientID) + "&token=" + url.QueryEscape(token)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: in.client})
	if err != nil {
		t.Fatal(err)
	}
	ws.SetReadLimit(64 << 20)
	t.Cleanup(func() { ws.CloseNow() })
	c := &client{t: t, ws: ws}
	if m, err := realtime.Parse(c.nextText()); err != nil {
		t.Fatal(err)
	} else if _, ok := m.(*realtime.Hello); !ok {
		t.Fatalf("first message %T, want hello", m)
	}
	return c
}

func (c *client) read() (websocket.MessageType, []byte) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	typ, b, err := c.ws.Read(ctx)
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return typ, b
}

func (c *client) nextText() []byte {
	c.t.Helper()
	for {
		typ, b := c.read()
		if typ == websocket.MessageText {
			return b
		}
	}
}

// nextDelta skips heartbeats and presence and returns the row ids of the
// next 0x00 delta; a wake-up fails the test (these paths must deliver).
func (c *client) nextDelta() []string {
	c.t.Helper()
	for {
		typ, b := c.read()
		if typ == websocket.MessageText {
			m, _ := realtime.Parse(b)
			if w, ok := m.(*realtime.Wake); ok {
				c.t.Fatalf("wake-up %q instead of a delta", w.Reason)
			}
			continue
		}
		if b[0] != realtime.TagDelta {
			c.t.Fatalf("binary tag 0x%02x outside a round", b[0])
		}
		m, err := wire.Decode(b[1:])
		if err != nil {
			c.t.Fatal(err)
		}
		secs, err := enginetest.ParseSections(m)
		if err != nil {
			c.t.Fatal(err)
		}
		var ids []string
		for _, s := range secs {
			for _, cm := range s.Commits {
				for _, ch := range cm.Changes {
					ids = append(ids, ch.RowID)
				}
			}
		}
		return ids
	}
}

// nextPresence returns the next presence fanout.
func (c *client) nextPresence() *realtime.PresenceFanout {
	c.t.Helper()
	for {
		m, _ := realtime.Parse(c.nextText())
		if p, ok := m.(*realtime.PresenceFanout); ok {
			return p
		}
	}
}

// round runs one §8.7 socket round and returns the response.
func (c *client) round(body []byte) *wire.Message {
	c.t.Helper()
	ctx := context.Background()
	for i := 0; i < len(body); i += 16 << 10 {
		if err := c.ws.Write(ctx, websocket.MessageBinary, append([]byte{realtime.TagRound}, body[i:min(i+16<<10, len(body))]...)); err != nil {
			c.t.Fatal(err)
		}
	}
	var stream []byte
	for {
		typ, b := c.read()
		if typ != websocket.MessageBinary {
			continue
		}
		if b[0] != realtime.TagRound {
			c.t.Fatalf("tag 0x%02x inside a round", b[0])
		}
		stream = append(stream, b[1:]...)
		if m, err := wire.Decode(stream); err == nil {
			return m
		}
	}
}

func tasksSub() wire.Subscription {
	return wire.Subscription{ID: "tasks", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1}
}

// reader registers (HTTP pull, as a stock client boots) and connects to in.
func (st *stack) reader(t *testing.T, in *instance, actor, clientID string) *client {
	t.Helper()
	tok := st.token(actor)
	epoch := st.d.Epoch(t, "pull", "/pull", tok, clientID)
	st.d.Pull(t, tok, clientID, epoch, wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows}, tasksSub())
	return in.dial(t, tok, clientID)
}

// reader3 registers over the socket itself, as a wire-3 stock client
// syncs once connected (§8.7): epoch round, then a pull round.
func (st *stack) reader3(t *testing.T, in *instance, actor, clientID string) *client {
	t.Helper()
	c := in.dial(t, st.token(actor), clientID)
	hdr := wire.ReqHeader{ClientID: clientID, SchemaVersion: st.d.Schema.Latest}
	pull := &wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows}
	m := c.round(apptest.Request(t, wire.Version3, hdr, pull))
	hdr.LogEpoch = wire.Some(apptest.Find[*wire.RespHeader](m)[0].LogEpoch)
	sub := tasksSub()
	m = c.round(apptest.Request(t, wire.Version3, hdr, pull, &sub))
	secs, err := enginetest.ParseSections(m)
	if err != nil || len(secs) != 1 || secs[0].Start.Status != wire.SubActive {
		t.Fatalf("pull round: %v %+v", err, secs)
	}
	if err := c.ws.Write(context.Background(), websocket.MessageText, realtime.EncodeAck(secs[0].End.NextCursor)); err != nil {
		t.Fatal(err)
	}
	return c
}

func (st *stack) pushHTTP(t *testing.T, id string) {
	t.Helper()
	tok := st.token("writer")
	epoch := st.d.Epoch(t, "push", "/sync", tok, "w-http")
	st.d.Push(t, tok, "w-http", epoch, wire.PushCommit{ClientCommitID: id, Operations: []wire.Operation{apptest.Upsert("tasks", id, -1, st.d.Task(t, id, "p1", id))}})
}

// A commit pushed through one instance's socket round and a commit pushed
// through the HTTP push function (no in-process hint anywhere) both reach
// sockets on the other instance as deltas, by the stream → Forwarder →
// hint path: a wire-2 client registered by HTTP pull and a wire-3 client
// that synced over its socket.
func TestTierCommitsReachOtherInstance(t *testing.T) {
	st := newStack(t)
	a, b := st.start("inst-a"), st.start("inst-b")
	rd := st.reader(t, b, "reader", "r1")
	rd3 := st.reader3(t, b, "reader3", "r3")

	// The writer syncs over a's socket (wire 2): epoch, then the push.
	wtok := st.token("writer")
	w := a.dial(t, wtok, "w-sock")
	hdr := wire.ReqHeader{ClientID: "w-sock", SchemaVersion: st.d.Schema.Latest}
	m := w.round(apptest.Request(t, wire.Version2, hdr, &wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows}))
	hdr.LogEpoch = wire.Some(apptest.Find[*wire.RespHeader](m)[0].LogEpoch)
	start := time.Now()
	m = w.round(apptest.Request(t, wire.Version2, hdr, &wire.PushCommit{ClientCommitID: "c1",
		Operations: []wire.Operation{apptest.Upsert("tasks", "t1", -1, st.d.Task(t, "t1", "p1", "one"))}}))
	if rs := apptest.Find[*wire.PushResult](m); len(rs) != 1 || rs[0].Status != wire.PushApplied {
		t.Fatalf("socket push: %d results, first %+v", len(rs), *rs[0])
	}
	st.pump(st.forward)
	for i, c := range []*client{rd, rd3} {
		if got := c.nextDelta(); strings.Join(got, ",") != "t1" {
			t.Fatalf("reader %d: delta on b after a socket push on a: %v", i, got)
		}
	}
	t.Logf("socket push on a → stream → forwarder → delta on b: %v", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	st.pushHTTP(t, "t2")
	st.pump(st.forward)
	for i, c := range []*client{rd, rd3} {
		if got := c.nextDelta(); strings.Join(got, ",") != "t2" {
			t.Fatalf("reader %d: delta on b after an HTTP push: %v", i, got)
		}
	}
	t.Logf("HTTP push → stream → forwarder → delta on b: %v", time.Since(start).Round(time.Millisecond))
}

// Faults on the fanout path: a dropped batch (given up on, sent to the
// on-failure destination), a replayed batch (a stream retry) and an
// unreachable instance still in the registry. Each ends in the right
// deltas, in order, with no gap and no duplicate.
func TestTierFanoutFaults(t *testing.T) {
	st := newStack(t)
	st.start("inst-a")
	b := st.start("inst-b")
	rd := st.reader(t, b, "reader", "r1")
	// An instance that died without deregistering: its entry is live.
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	if err := st.fwd.Registry.(*rtfanout.Registry).Register(context.Background(), "inst-dead", dead.URL); err != nil {
		t.Fatal(err)
	}

	// t1's batch is dropped: nothing is hinted.
	st.pushHTTP(t, "t1")
	var dropped []rtfanout.Record
	st.pump(func(_ context.Context, recs []rtfanout.Record) error { dropped = append(dropped, recs...); return nil })
	if len(rtfanout.HintsOf(dropped)) == 0 {
		t.Fatal("the dropped batch held no commit")
	}
	// t2's batch is forwarded: b reads the log from what it last
	// delivered, so t1 arrives before t2.
	st.pushHTTP(t, "t2")
	var res rtfanout.Result
	st.pump(func(ctx context.Context, recs []rtfanout.Record) error {
		var err error
		res, err = st.fwd.Forward(ctx, recs)
		return err
	})
	if res.Instances != 3 || res.Failed != 1 {
		t.Fatalf("forward %+v: want 3 instances, the dead one failed, and no batch error", res)
	}
	var got []string
	for len(got) < 2 {
		got = append(got, rd.nextDelta()...)
	}
	if strings.Join(got, ",") != "t1,t2" {
		t.Fatalf("after a dropped batch: deltas %v, want t1,t2", got)
	}

	// The dropped batch comes back late, then again (a retry): already
	// delivered, nothing is sent twice; t3 is the next delta.
	for range 2 {
		if err := st.forward(context.Background(), dropped); err != nil {
			t.Fatal(err)
		}
	}
	st.pushHTTP(t, "t3")
	st.pump(st.forward)
	if got := rd.nextDelta(); strings.Join(got, ",") != "t3" {
		t.Fatalf("after replays: delta %v, want t3 (a replay delivered twice)", got)
	}
}

// Presence between sockets on different instances (§8.6): join, update
// and leave cross over the hint port; when an instance leaves the
// registry, its documents leave at its peers (DropOrigin).
func TestTierPresenceAcrossInstances(t *testing.T) {
	st := newStack(t)
	a, b := st.start("inst-a"), st.start("inst-b")
	for _, in := range []*instance{a, b} {
		if err := in.peers.refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	ca := st.reader(t, a, "alice", "ca")
	cb := st.reader(t, b, "bob", "cb")
	ctx := context.Background()
	publish := func(c *client, doc string) {
		t.Helper()
		if err := c.ws.Write(ctx, websocket.MessageText, []byte(`{"event":"presence","data":{"scopeKey":"project:p1","doc":`+doc+`}}`)); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(c *client, kind, actor, doc string) {
		t.Helper()
		p := c.nextPresence()
		if p.Kind != kind || p.ActorID != actor || string(p.Doc) != doc {
			t.Fatalf("presence %s %s %s, want %s %s %s", p.Kind, p.ActorID, p.Doc, kind, actor, doc)
		}
	}
	publish(ca, `{"cursor":1}`)
	expect(cb, realtime.KindJoin, "alice", `{"cursor":1}`)
	publish(cb, `{"cursor":7}`)
	expect(ca, realtime.KindJoin, "bob", `{"cursor":7}`)
	time.Sleep(150 * time.Millisecond) // past the per-key rate cap (10/s)
	publish(ca, `{"cursor":2}`)
	expect(cb, realtime.KindUpdate, "alice", `{"cursor":2}`)
	time.Sleep(150 * time.Millisecond)
	publish(ca, `null`)
	expect(cb, realtime.KindLeave, "alice", "")
	time.Sleep(150 * time.Millisecond)
	publish(ca, `{"cursor":3}`)
	expect(cb, realtime.KindJoin, "alice", `{"cursor":3}`)

	// c starts later (scale-out): carol, on c, sees the documents alice
	// and bob published before c existed.
	c := st.start("inst-c")
	cc := st.reader(t, c, "carol", "cc")
	for _, in := range []*instance{a, b, c} {
		if err := in.peers.refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	joined := map[string]string{}
	for len(joined) < 2 {
		p := cc.nextPresence()
		if p.Kind != realtime.KindJoin {
			t.Fatalf("carol got %s from %s, want the joins of alice and bob", p.Kind, p.ActorID)
		}
		joined[p.ActorID] = string(p.Doc)
	}
	if joined["alice"] != `{"cursor":3}` || joined["bob"] != `{"cursor":7}` {
		t.Fatalf("carol's join burst %v", joined)
	}

	// a goes away (scale-in: it deregisters and closes its sockets
	// without telling its peers); b's next look at the registry drops
	// a's documents with a leave to bob.
	a.stop()
	if err := b.peers.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	expect(cb, realtime.KindLeave, "alice", "")
}

// An epoch rotation (syncular-admin rotate-epoch, a restore) reaches open
// sockets at once: RotateEpoch's epoch event crosses the stream, the
// forwarder hints every instance's head, and each session of the
// partition gets reset-required (§8.3) and is closed.
func TestTierEpochRotation(t *testing.T) {
	st := newStack(t)
	a, b := st.start("inst-a"), st.start("inst-b")
	ca := st.reader(t, a, "alice", "ca")
	cb := st.reader3(t, b, "bob", "cb")
	st.pump(st.forward) // what the stream holds so far (registrations)
	store := dynamostore.New(st.clients.DynamoDB, st.env["SYNC_TABLE_NAME"], dynamostore.Options{})
	if err := store.RotateEpoch(context.Background(), "default", "rotated-1", time.Now().UnixMilli()); err != nil {
		t.Fatal(err)
	}
	var res rtfanout.Result
	st.pump(func(ctx context.Context, recs []rtfanout.Record) error {
		r, err := st.fwd.Forward(ctx, recs)
		res.Hints += r.Hints
		return err
	})
	if res.Hints == 0 {
		t.Fatal("the rotation gave no hint")
	}
	for i, c := range []*client{ca, cb} {
		var wake *realtime.Wake
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		for {
			typ, b, err := c.ws.Read(ctx)
			if err != nil {
				if wake == nil || wake.Reason != realtime.ReasonResetRequired {
					t.Fatalf("client %d closed (%v) without a reset-required wake-up", i, err)
				}
				break
			}
			if typ == websocket.MessageText {
				if m, _ := realtime.Parse(b); m != nil {
					if w, ok := m.(*realtime.Wake); ok {
						wake = w
					}
				}
			}
		}
		cancel()
	}
}

// /healthz answers 200 while serving and 503 once the instance drains;
// the drain closes sockets with going-away (1001), so clients reconnect
// elsewhere and catch up, and only then leaves the registry: while it
// still serves sockets (it reads the log for them) its entry holds the
// store-format level at what its build reads (dynamostore tierlevel.go).
func TestTierDrain(t *testing.T) {
	st := newStack(t)
	st.drain = 2 * time.Second
	in := st.start("inst-a")
	health := func() int {
		resp, err := http.Get(in.url + "/healthz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if h := health(); h != http.StatusOK {
		t.Fatalf("healthz %d", h)
	}
	c := st.reader(t, in, "reader", "r1")
	// The drain starts after stop is called and closes no socket before
	// its delay has passed, so a registry read that returns before
	// stopped+drain is one made while the instance still serves.
	stopped := time.Now()
	go in.stop()
	for end := time.Now().Add(10 * time.Second); health() != http.StatusServiceUnavailable; {
		if time.Now().After(end) {
			t.Fatal("healthz never answered 503 while draining")
		}
		time.Sleep(10 * time.Millisecond)
	}
	reads := 0
	for {
		live, err := st.fwd.Registry.Live(context.Background())
		if time.Since(stopped) >= st.drain {
			break
		}
		if err != nil || !slicesHasID(live, "inst-a") {
			t.Fatalf("a draining instance that still serves sockets left the registry: %v %v", live, err)
		}
		reads++
		time.Sleep(50 * time.Millisecond)
	}
	if reads == 0 {
		t.Fatal("no registry read during the drain delay")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		_, _, err := c.ws.Read(ctx)
		if err != nil {
			if cs := websocket.CloseStatus(err); cs != websocket.StatusGoingAway {
				t.Fatalf("drain closed the socket with %v (%v), want 1001 going away", cs, err)
			}
			break
		}
	}
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		live, err := st.fwd.Registry.Live(context.Background())
		if err == nil && !slicesHasID(live, "inst-a") {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("a drained instance is still registered: %v %v", live, err)
		}
	}
}

// Every socket ends with one log line: partition, actor, client,
// duration and bytes each way, and never the token.
func TestTierCloseLine(t *testing.T) {
	st := newStack(t)
	st.logs = &syncBuffer{}
	in := st.start("inst-a")
	tok := st.token("reader")
	c := in.dial(t, tok, "r1")
	if err := c.ws.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Fatal(err)
	}
	var line map[string]any
	for end := time.Now().Add(10 * time.Second); line == nil; {
		for _, l := range strings.Split(st.logs.String(), "\n") {
			if strings.Contains(l, `"msg":"realtime close"`) {
				if err := json.Unmarshal([]byte(l), &line); err != nil {
					t.Fatal(err)
				}
			}
		}
		if line == nil && time.Now().After(end) {
			t.Fatal("no close line")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if line["partition"] != "default" || line["actor"] != "reader" || line["client"] != "r1" {
		t.Errorf("close line %v", line)
	}
	for _, k := range []string{"durationMs", "bytesIn", "bytesOut"} {
		if v, ok := line[k].(float64); !ok || v <= 0 {
			t.Errorf("close line %s = %v", k, line[k])
		}
	}
	if strings.Contains(st.logs.String(), tok) {
		t.Error("a log line holds the token")
	}
}

// Without SYNC_HINT_ADVERTISE the instance registers the private IP the
// ECS task metadata endpoint v4 reports, with the hint port's number.
func TestAdvertiseFromTaskMetadata(t *testing.T) {
	md := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"DockerId":"x","Networks":[{"NetworkMode":"awsvpc","IPv4Addresses":["10.42.3.17"]}]}`))
	}))
	defer md.Close()
	cfg := &config.Config{HintAddr: ":8081"}
	env := map[string]string{"ECS_CONTAINER_METADATA_URI_V4": md.URL}
	got, err := Advertise(context.Background(), cfg, func(k string) string { return env[k] }, md.Client())
	if err != nil || got != "http://10.42.3.17:8081" {
		t.Fatalf("advertise %q %v", got, err)
	}
	cfg.HintAdvertise = "http://peer.internal:9000/"
	if got, _ := Advertise(context.Background(), cfg, func(string) string { return "" }, md.Client()); got != "http://peer.internal:9000" {
		t.Fatalf("explicit advertise %q", got)
	}
	if _, err := Advertise(context.Background(), &config.Config{HintAddr: ":8081"}, func(string) string { return "" }, md.Client()); err == nil {
		t.Fatal("no advertise address and no task metadata must fail the start")
	}
}

// The connections metric the autoscaling policy tracks is an EMF
// document: namespace, metric "connections", dimension function=realtime.
func TestConnectionsMetricLine(t *testing.T) {
	st := newStack(t)
	in := st.start("inst-a")
	st.reader(t, in, "reader", "r1")
	var buf syncBuffer
	in.writeMetrics(context.Background(), slog.New(metrics.NewJSONHandler(&buf, nil)).With("function", "realtime"))
	var line struct {
		Function    string `json:"function"`
		Connections int    `json:"connections"`
		AWS         struct {
			CloudWatchMetrics []struct {
				Namespace  string
				Dimensions [][]string
				Metrics    []struct{ Name string }
			}
		} `json:"_aws"`
	}
	if err := json.Unmarshal([]byte(buf.String()), &line); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	if line.Function != "realtime" || line.Connections != 1 || len(line.AWS.CloudWatchMetrics) != 1 {
		t.Fatalf("metric line %s", buf.String())
	}
	d := line.AWS.CloudWatchMetrics[0]
	if d.Namespace != st.config(nil).MetricsNamespace || len(d.Metrics) != 1 || d.Metrics[0].Name != metrics.Connections.Name ||
		len(d.Dimensions) != 1 || strings.Join(d.Dimensions[0], ",") != metrics.DimFunction {
		t.Fatalf("EMF directive %+v", d)
	}
}

// A socket round larger than Lambda's 6 MB event is accepted (the tier's
// cap is 32 MiB, SYNC_REALTIME_MAX_ROUND_BYTES), so a client with a large
// offline queue is never wedged by the HTTP path's 413; the commit then
// reaches a socket on the other instance.
func TestTierLargeRound(t *testing.T) {
	st := newStack(t)
	a, b := st.start("inst-a"), st.start("inst-b")
	rd := st.reader(t, b, "reader", "r1")
	w := a.dial(t, st.token("writer"), "w-big")
	hdr := wire.ReqHeader{ClientID: "w-big", SchemaVersion: st.d.Schema.Latest}
	m := w.round(apptest.Request(t, wire.Version2, hdr, &wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows}))
	hdr.LogEpoch = wire.Some(apptest.Find[*wire.RespHeader](m)[0].LogEpoch)
	// Two commits of 50 rows of 70 KiB (one commit stores at most
	// 3.75 MiB), in one round.
	var frames []wire.Frame
	for c := range 2 {
		var ops []wire.Operation
		for i := range 50 {
			id := fmt.Sprintf("big%d-%02d", c, i)
			ops = append(ops, apptest.Upsert("tasks", id, -1, st.d.Task(t, id, "p1", strings.Repeat("x", 70<<10))))
		}
		frames = append(frames, &wire.PushCommit{ClientCommitID: fmt.Sprintf("big%d", c), Operations: ops})
	}
	body := apptest.Request(t, wire.Version2, hdr, frames...)
	if len(body) <= 6<<20 {
		t.Fatalf("round of %d bytes is not over Lambda's 6 MB", len(body))
	}
	m = w.round(body)
	rs := apptest.Find[*wire.PushResult](m)
	if len(rs) != 2 {
		t.Fatalf("a %d-byte round: %d results", len(body), len(rs))
	}
	for _, r := range rs {
		if r.Status != wire.PushApplied {
			t.Fatalf("a %d-byte round: %+v", len(body), *r)
		}
	}
	st.pump(st.forward)
	// The commit is over the 128 KiB message limit: a delta-too-large
	// wake-up, and the client pulls.
	for {
		m, _ := realtime.Parse(rd.nextText())
		if wk, ok := m.(*realtime.Wake); ok {
			if wk.Reason != realtime.ReasonDeltaTooLarge {
				t.Fatalf("wake-up %q, want delta-too-large", wk.Reason)
			}
			break
		}
	}
	t.Logf("a %.1f MiB round applied over the socket", float64(len(body))/(1<<20))
}

// An instance that dies without deregistering (a crash) stops refreshing
// its registry entry; once the entry lapses its peers drop its presence
// documents (DropOrigin) with a leave to their sockets.
func TestTierPeerLapse(t *testing.T) {
	st := newStack(t)
	a, b := st.start("inst-a"), st.start("inst-b")
	ctx := context.Background()
	for _, in := range []*instance{a, b} {
		if err := in.peers.refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ca := st.reader(t, a, "alice", "ca")
	cb := st.reader(t, b, "bob", "cb")
	if err := ca.ws.Write(ctx, websocket.MessageText, []byte(`{"event":"presence","data":{"scopeKey":"project:p1","doc":{"here":true}}}`)); err != nil {
		t.Fatal(err)
	}
	if p := cb.nextPresence(); p.Kind != realtime.KindJoin || p.ActorID != "alice" {
		t.Fatalf("presence %+v", p)
	}
	// b's view of time moves past a's entry's lifetime; a (alive here,
	// standing for a crashed task) has not refreshed in that time.
	b.registry.Now = func() time.Time { return time.Now().Add(rtfanout.Lifetime + time.Minute) }
	if err := b.peers.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if p := cb.nextPresence(); p.Kind != realtime.KindLeave || p.ActorID != "alice" {
		t.Fatalf("after a's entry lapsed: %+v, want alice's leave", p)
	}
}
