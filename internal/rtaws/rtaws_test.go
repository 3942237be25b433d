package rtaws_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/realtime"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/memstore"
	"github.com/skyfold/syncular-lambda/internal/rtaws"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// mgmtServer speaks the management API's PostToConnection: it records
// the bodies per connection and answers 410 (GoneException) for gone ids.
type mgmtServer struct {
	mu    sync.Mutex
	posts map[string][][]byte
	gone  map[string]bool
}

func (m *mgmtServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, ok := strings.CutPrefix(r.URL.Path, "/stage/@connections/")
	if !ok || r.Method != http.MethodPost || !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ") {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	body, _ := io.ReadAll(r.Body)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gone[id] {
		w.WriteHeader(http.StatusGone)
		_, _ = w.Write([]byte(`{"message":"GoneException"}`))
		return
	}
	m.posts[id] = append(m.posts[id], body)
}

func (m *mgmtServer) of(id string) [][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([][]byte(nil), m.posts[id]...)
}

type env struct {
	h      *enginetest.Harness
	svc    *rtaws.Service
	poller *rtaws.Poller
	mgmt   *mgmtServer
	db     *dynamodb.Client
	table  string
	reads  atomic.Int64
}

func newEnv(t *testing.T) *env {
	ctx := context.Background()
	dl := testenv.DynamoDB(t)
	db := dl.Client(t)
	table := testenv.UniqueName(t, "rt")
	if err := dynamostore.CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	// The template's StreamSpecification: keys are all the fanout reads.
	out, err := db.UpdateTable(ctx, &dynamodb.UpdateTableInput{TableName: aws.String(table), StreamSpecification: &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeKeysOnly}})
	if err != nil {
		t.Fatal(err)
	}
	st := dynamostore.New(db, table, dynamostore.Options{})
	segs := memstore.NewSegments()
	e := &env{db: db, table: table, mgmt: &mgmtServer{posts: map[string][][]byte{}, gone: map[string]bool{}}}
	e.h = enginetest.New(t, st, segs, enginetest.Options{})
	// Start at the wall clock: connection items carry a TTL from the
	// engine's clock, and DynamoDB Local's TTL sweeper deletes items whose
	// TTL is behind the machine's time (the harness's fixed start lies in
	// the past), which removed connections in the middle of a test.
	e.h.Clock.Advance(time.Now().UnixMilli() - e.h.Clock.Now())
	e.h.Grants.Set("actor-a", engine.ScopeMap{"project_id": {"p1", "p2"}})
	e.h.Grants.Set("actor-b", engine.ScopeMap{"project_id": {"p1"}})
	e.h.Grants.Set("actor-d", engine.ScopeMap{"project_id": {"p2"}})
	srv := httptest.NewServer(e.mgmt)
	t.Cleanup(srv.Close)
	e.svc = &rtaws.Service{
		DB: db, Table: table, Engine: e.h.Engine, Store: st,
		Posts: rtaws.NewMgmt(srv.URL+"/stage", "us-east-1", credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")),
		Reads: func(n int) { e.reads.Add(int64(n)) },
	}
	streams := dynamodbstreams.New(dynamodbstreams.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(dl.Endpoint),
		Credentials: credentials.NewStaticCredentialsProvider("local", "local", ""),
	})
	e.poller = &rtaws.Poller{Streams: streams, StreamARN: aws.ToString(out.TableDescription.LatestStreamArn), Handle: func(ctx context.Context, recs []rtaws.Record) error {
		_, err := e.svc.HandleStream(ctx, recs)
		return err
	}}
	return e
}

// pollUntil polls the stream until cond holds: DynamoDB Local publishes
// a write's stream record a moment after the write returns, and in
// pieces, so one Poll may see only part of what was written. It fails
// the test after a bounded deadline.
func (e *env) pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := e.poller.Poll(context.Background()); err != nil {
			t.Fatal(err)
		}
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream: gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// posted reports whether every id got n messages or more.
func (e *env) posted(n int, ids ...string) func() bool {
	return func() bool {
		for _, id := range ids {
			if len(e.mgmt.of(id)) < n {
				return false
			}
		}
		return true
	}
}

func sub(project string) wire.Subscription {
	return wire.Subscription{ID: "tasks", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{project}}}, Cursor: -1}
}

func (e *env) synced(t *testing.T, actor, id, project string) *enginetest.Client {
	c := e.h.ClientV(wire.Version3, "part", actor, id)
	if _, err := c.Pull(wire.PullHeader{Accept: c.Accept}, sub(project)); err != nil {
		t.Fatal(err)
	}
	return c
}

func (e *env) connect(t *testing.T, connID, actor, client string) {
	t.Helper()
	if err := e.svc.Connect(context.Background(), connID, engine.Auth{Partition: "part", ActorID: actor}, client); err != nil {
		t.Fatal(err)
	}
}

func (e *env) push(t *testing.T, c *enginetest.Client, id, project, title string) {
	t.Helper()
	if r := c.Push(id, enginetest.Upsert("tasks", id, c.Task(id, project, title, false), -1)); r.Status != wire.PushApplied {
		t.Fatalf("push %s: %+v", id, r)
	}
}

func (e *env) exists(t *testing.T, pk, sk string) bool {
	out, err := e.db.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(e.table), Key: dynamostore.Key(pk, sk), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item != nil
}

func deltaRows(t *testing.T, b []byte) []string {
	t.Helper()
	if len(b) == 0 || b[0] != realtime.TagDelta {
		t.Fatalf("not a 0x00 delta: %q", b)
	}
	m, err := wire.Decode(b[1:])
	if err != nil {
		t.Fatal(err)
	}
	secs, err := enginetest.ParseSections(m)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range secs {
		for _, c := range s.Commits {
			for _, ch := range c.Changes {
				ids = append(ids, ch.RowID)
			}
		}
	}
	return ids
}

// §8.1/§8.2 on AWS: DynamoDB Local's stream drives hello for each new
// connection and the delta of a commit to exactly the connections
// registered on its scope; a gone connection is deleted with its index
// entries; a replayed stream record delivers nothing twice; the reads
// per fanned-out commit do not grow with unrelated connections.
func TestStreamFanout(t *testing.T) {
	e := newEnv(t)
	writer := e.synced(t, "actor-a", "writer", "p1")
	e.synced(t, "actor-b", "reader", "p1")
	e.synced(t, "actor-d", "other", "p2")
	e.synced(t, "actor-b", "lost", "p1")
	e.connect(t, "c-reader", "actor-b", "reader")
	e.connect(t, "c-other", "actor-d", "other")
	e.connect(t, "c-lost", "actor-b", "lost")
	e.pollUntil(t, "three hellos", e.posted(1, "c-reader", "c-other", "c-lost"))
	for _, id := range []string{"c-reader", "c-other", "c-lost"} {
		got := e.mgmt.of(id)
		if len(got) != 1 {
			t.Fatalf("%s: want one hello, got %q", id, got)
		}
		m, err := realtime.Parse(got[0])
		if h, ok := m.(*realtime.Hello); err != nil || !ok || h.SessionID != id || h.RequiresSync {
			t.Fatalf("%s hello: %s (%v)", id, got[0], err)
		}
	}
	e.mgmt.mu.Lock()
	e.mgmt.gone["c-lost"] = true
	e.mgmt.mu.Unlock()

	e.reads.Store(0)
	e.push(t, writer, "t1", "p1", "first")
	e.pollUntil(t, "the delta of t1", e.posted(2, "c-reader"))
	if got := e.mgmt.of("c-reader"); len(got) != 2 || strings.Join(deltaRows(t, got[1]), ",") != "t1" {
		t.Fatalf("reader: want hello + delta of t1, got %d messages", len(got))
	}
	if got := e.mgmt.of("c-other"); len(got) != 1 {
		t.Fatalf("other (p2) got a p1 commit: %q", got[1:])
	}
	if e.exists(t, "RTC#c-lost", "C") || e.exists(t, dynamostore.PartitionPK("part")+"#RK#project:p1", "c-lost") {
		t.Fatal("a gone connection's items survived")
	}
	base := e.reads.Load()

	// A replayed record (Lambda retries a batch) posts nothing twice.
	seq := func() int64 { h, _, _ := e.svc.Store.Head(context.Background(), "part"); return h.MaxCommitSeq }()
	if n, err := e.svc.Fanout(context.Background(), "part", seq); err != nil || n != 0 {
		t.Fatalf("replay posted %d (%v)", n, err)
	}
	if got := e.mgmt.of("c-reader"); len(got) != 2 {
		t.Fatalf("replay delivered again: %d messages", len(got))
	}

	// 40 unrelated connections on p2 do not change the cost of a p1 commit.
	var unrelated []string
	for i := range 40 {
		id := "u" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		e.synced(t, "actor-d", id, "p2")
		e.connect(t, "c-"+id, "actor-d", id)
		unrelated = append(unrelated, "c-"+id)
	}
	// Their hellos read connection items: all of them are out before
	// the reads of the next commit are counted.
	e.pollUntil(t, "40 hellos", e.posted(1, unrelated...))
	e.reads.Store(0)
	e.push(t, writer, "t2", "p1", "second")
	e.pollUntil(t, "the delta of t2", e.posted(3, "c-reader"))
	if got := e.reads.Load(); got != base {
		t.Fatalf("reads per fanned-out commit: %d with 40 unrelated connections, %d without", got, base)
	}
	t.Logf("DynamoDB reads per fanned-out commit: %d", base)
	if got := e.mgmt.of("c-reader"); len(got) != 3 || strings.Join(deltaRows(t, got[2]), ",") != "t2" {
		t.Fatalf("reader: want the delta of t2, got %d messages", len(got))
	}
}

// §8.3: a delta over API Gateway's message limit is a delta-too-large
// wake-up, never a truncated message; later commits wake until an ack.
func TestOversizeDeltaWakes(t *testing.T) {
	e := newEnv(t)
	e.svc.MaxMessageBytes = 64
	writer := e.synced(t, "actor-a", "writer", "p1")
	e.synced(t, "actor-b", "reader", "p1")
	e.connect(t, "c-reader", "actor-b", "reader")
	e.pollUntil(t, "hello", e.posted(1, "c-reader"))
	e.push(t, writer, "t1", "p1", strings.Repeat("x", 200))
	e.pollUntil(t, "the wake-up of t1", e.posted(2, "c-reader"))
	got := e.mgmt.of("c-reader")
	if len(got) != 2 {
		t.Fatalf("want hello + wake, got %q", got)
	}
	m, err := realtime.Parse(got[1])
	if w, ok := m.(*realtime.Wake); err != nil || !ok || w.Reason != realtime.ReasonDeltaTooLarge || !w.RequiresPull {
		t.Fatalf("want a delta-too-large wake-up, got %s", got[1])
	}
	// Suppressed until an ack reaches the delivered seq.
	e.svc.MaxMessageBytes = 0
	e.push(t, writer, "t2", "p1", "small")
	e.pollUntil(t, "the wake-up of t2", e.posted(3, "c-reader"))
	if m, _ := realtime.Parse(e.mgmt.of("c-reader")[2]); m.(*realtime.Wake).Reason != realtime.ReasonCatchupRequired {
		t.Fatal("a suppressed connection got a delta")
	}
	h, _, _ := e.svc.Store.Head(context.Background(), "part")
	if err := e.svc.Message(context.Background(), "c-reader", realtime.EncodeAck(h.MaxCommitSeq)); err != nil {
		t.Fatal(err)
	}
	e.push(t, writer, "t3", "p1", "after ack")
	e.pollUntil(t, "the delta of t3", e.posted(4, "c-reader"))
	if got := e.mgmt.of("c-reader"); len(got) != 4 || strings.Join(deltaRows(t, got[3]), ",") != "t3" {
		t.Fatalf("after the ack: want the delta of t3, got %d messages", len(got))
	}
}

// A connection item and its index entries expire by DynamoDB TTL, which
// compares against wall time: their expiry counts from the real clock
// even when the engine's clock is far behind it (a test harness, a
// replay), so DynamoDB never sweeps a live connection away before its
// hello or its deltas go out.
func TestConnectionTTLIsWallTime(t *testing.T) {
	e := newEnv(t)
	e.h.Clock.Advance(time.Now().Add(-365*24*time.Hour).UnixMilli() - e.h.Clock.Now())
	e.synced(t, "actor-b", "reader", "p1")
	before := time.Now()
	e.connect(t, "c-reader", "actor-b", "reader")
	for _, k := range [][2]string{{"RTC#c-reader", "C"}, {dynamostore.PartitionPK("part") + "#RK#project:p1", "c-reader"}} {
		out, err := e.db.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(e.table), Key: dynamostore.Key(k[0], k[1]), ConsistentRead: aws.Bool(true)})
		if err != nil || out.Item == nil {
			t.Fatalf("%v: missing (%v)", k, err)
		}
		n, ok := out.Item[dynamostore.TTLAttribute].(*types.AttributeValueMemberN)
		if !ok {
			t.Fatalf("%v: no ttl attribute", k)
		}
		ttl, _ := strconv.ParseInt(n.Value, 10, 64)
		// API Gateway closes a connection after 2 hours at most.
		if ttl < before.Add(2*time.Hour).Unix() || ttl > time.Now().Add(3*time.Hour).Unix() {
			t.Fatalf("%v: ttl %d is not about 2h after the wall clock %d", k, ttl, before.Unix())
		}
	}
}
