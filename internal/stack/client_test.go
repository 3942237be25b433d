package stack

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/coder/websocket"

	"github.com/skyfold/syncular-lambda/internal/app/apptest"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/realtime"
	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// waitFor bounds every wait of these tests. It is generous (a busy shared
// machine): a test that needs it has failed anyway.
const waitFor = 20 * time.Second

// deployment drives the stack's HTTP API as a client would, through the
// gateway's real sockets.
func deployment(s *Stack) *apptest.Deployment {
	hc := &http.Client{Transport: &http.Transport{DisableCompression: true, Proxy: nil}, Timeout: time.Minute}
	return &apptest.Deployment{
		Schema: s.Schema,
		Invoke: func(t testing.TB, _ string, ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
			t.Helper()
			return apptest.OverHTTP(t, hc, s.BaseURL, ev)
		},
		Token: func(t testing.TB, actor string, scopes map[string][]string) string {
			tok, err := s.Token(actor, scopes, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			return tok
		},
		FetchURL: func(t testing.TB, rawURL string) []byte {
			t.Helper()
			resp, err := hc.Get(rawURL)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: HTTP %d %v %s", rawURL, resp.StatusCode, err, b)
			}
			return b
		},
	}
}

// sockClient is a stock-protocol realtime client over a real WebSocket:
// it connects, then syncs over the socket (§8.7 rounds as 0x01 chunks),
// acks deltas and publishes presence, in wire version 2 or 3.
type sockClient struct {
	t        testing.TB
	s        *Stack
	version  uint16
	actor    string
	clientID string
	token    string
	project  string
	epoch    string
	cursor   int64 // the subscription's cursor: what this client has
	instance string

	ws     *websocket.Conn
	text   chan []byte // control messages other than heartbeats
	binary chan []byte // 0x00 deltas and 0x01 round chunks
	closed chan struct{}
	mu     sync.Mutex
	err    error
}

func newSockClient(t testing.TB, s *Stack, version uint16, actor, clientID, project string) *sockClient {
	tok, err := s.Token(actor, map[string][]string{"project_id": {project}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &sockClient{t: t, s: s, version: version, actor: actor, clientID: clientID, token: tok, project: project, cursor: -1}
}

// connect dials <base>/realtime (pin names the instance to ask the proxy
// for; "" takes the next one) and reads the hello.
func (c *sockClient) connect(pin string) *realtime.Hello {
	c.t.Helper()
	u := c.s.RealtimeURL + "?clientId=" + url.QueryEscape(c.clientID) + "&token=" + url.QueryEscape(c.token)
	h := http.Header{}
	if pin != "" {
		h.Set(instanceHeader, pin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		c.t.Fatalf("%s: dial: %v", c.clientID, err)
	}
	ws.SetReadLimit(64 << 20)
	c.ws, c.instance = ws, resp.Header.Get(instanceHeader)
	c.text, c.binary, c.closed = make(chan []byte, 4096), make(chan []byte, 4096), make(chan struct{})
	go c.readLoop(ws, c.text, c.binary, c.closed)
	c.t.Cleanup(func() { ws.CloseNow() })
	b := c.nextText(func(m any) bool { _, ok := m.(*realtime.Hello); return ok })
	m, _ := realtime.Parse(b)
	return m.(*realtime.Hello)
}

func (c *sockClient) readLoop(ws *websocket.Conn, text, binary chan []byte, closed chan struct{}) {
	defer close(closed)
	for {
		typ, b, err := ws.Read(context.Background())
		if err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
			return
		}
		if typ == websocket.MessageBinary {
			binary <- b
			continue
		}
		if m, err := realtime.Parse(b); err == nil {
			if _, hb := m.(*realtime.Heartbeat); hb {
				continue
			}
		}
		text <- b
	}
}

// nextText returns the next control message that match accepts; others
// are dropped.
func (c *sockClient) nextText(match func(any) bool) []byte {
	c.t.Helper()
	deadline := time.After(waitFor)
	for {
		select {
		case b := <-c.text:
			m, err := realtime.Parse(b)
			if err != nil {
				c.t.Fatalf("%s: unparsable control message %s: %v", c.clientID, b, err)
			}
			if match(m) {
				return b
			}
		case <-c.closed:
			c.t.Fatalf("%s: socket closed while waiting for a control message: %v", c.clientID, c.readErr())
		case <-deadline:
			c.t.Fatalf("%s: no matching control message in %v", c.clientID, waitFor)
		}
	}
}

func (c *sockClient) readErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *sockClient) nextBinary() []byte {
	c.t.Helper()
	select {
	case b := <-c.binary:
		return b
	case <-c.closed:
		c.t.Fatalf("%s: socket closed while waiting for a binary message: %v", c.clientID, c.readErr())
	case <-time.After(waitFor):
		c.t.Fatalf("%s: no binary message in %v", c.clientID, waitFor)
	}
	return nil
}

// sendRound writes body as 0x01 chunks of chunk bytes (their boundaries
// carry no meaning, §8.7).
func (c *sockClient) sendRound(body []byte, chunk int) {
	c.t.Helper()
	for i := 0; i < len(body); i += chunk {
		msg := append([]byte{realtime.TagRound}, body[i:min(i+chunk, len(body))]...)
		if err := c.ws.Write(context.Background(), websocket.MessageBinary, msg); err != nil {
			c.t.Fatalf("%s: write round chunk: %v", c.clientID, err)
		}
	}
}

// round runs one §8.7 round and returns the decoded response.
func (c *sockClient) round(frames ...wire.Frame) *wire.Message {
	c.t.Helper()
	hdr := wire.ReqHeader{ClientID: c.clientID, SchemaVersion: c.s.Schema.Latest}
	if c.epoch != "" {
		hdr.LogEpoch = wire.Some(c.epoch)
	}
	c.sendRound(apptest.Request(c.t, c.version, hdr, frames...), 700)
	var stream []byte
	for {
		b := c.nextBinary()
		if len(b) == 0 || b[0] != realtime.TagRound {
			c.t.Fatalf("%s: a 0x%02x message inside a round", c.clientID, b[0])
		}
		stream = append(stream, b[1:]...)
		if m, err := wire.Decode(stream); err == nil {
			if m.WireVersion != c.version {
				c.t.Fatalf("%s: round answered in wire %d", c.clientID, m.WireVersion)
			}
			if errs := apptest.Find[*wire.ErrorFrame](m); len(errs) > 0 {
				c.t.Fatalf("%s: round error %+v", c.clientID, errs[0])
			}
			return m
		}
	}
}

func (c *sockClient) sub() *wire.Subscription {
	return &wire.Subscription{ID: "tasks", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{c.project}}}, Cursor: c.cursor}
}

var pullHeader = &wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows}

// sync acquires the log epoch if needed and pulls the subscription over
// the socket, acks, and returns the row ids of the commits it received.
func (c *sockClient) sync() []string {
	c.t.Helper()
	if c.epoch == "" {
		m := c.round(pullHeader)
		c.epoch = apptest.Find[*wire.RespHeader](m)[0].LogEpoch
	}
	m := c.round(pullHeader, c.sub())
	secs, err := enginetest.ParseSections(m)
	if err != nil || len(secs) != 1 || secs[0].Start.Status != wire.SubActive {
		c.t.Fatalf("%s: pull round: %v %+v", c.clientID, err, secs)
	}
	c.cursor = secs[0].End.NextCursor
	c.ack()
	return rowIDs(secs[0].Commits)
}

func (c *sockClient) ack() {
	c.t.Helper()
	if err := c.ws.Write(context.Background(), websocket.MessageText, realtime.EncodeAck(c.cursor)); err != nil {
		c.t.Fatalf("%s: ack: %v", c.clientID, err)
	}
}

// push commits one task row over the socket.
func (c *sockClient) push(d *apptest.Deployment, commitID, rowID string) {
	c.t.Helper()
	m := c.round(&wire.PushCommit{ClientCommitID: commitID, Operations: []wire.Operation{
		apptest.Upsert("tasks", rowID, 0, c.task(rowID)),
	}})
	res := apptest.Find[*wire.PushResult](m)
	if len(res) != 1 || res[0].Status != wire.PushApplied {
		if len(res) == 1 {
			c.t.Fatalf("%s: push %s: %s %+v", c.clientID, commitID, res[0].Status, res[0].Results)
		}
		c.t.Fatalf("%s: push %s: %d results", c.clientID, commitID, len(res))
	}
	// A commit during the connection's own round is answered by a
	// wake-up, not a delta (§8.7); the client pulls, as stock clients do.
	b := c.nextText(func(m any) bool { _, ok := m.(*realtime.Wake); return ok })
	if m, _ := realtime.Parse(b); m.(*realtime.Wake).Reason != realtime.ReasonCatchupRequired {
		c.t.Fatalf("%s: wake-up after its own push: %s", c.clientID, b)
	}
	if got := c.sync(); joined(got) != rowID {
		c.t.Fatalf("%s: the pull after its own push brought %v, want its own %s", c.clientID, got, rowID)
	}
}

// delta waits for the next 0x00 delta, checks it is in the client's wire
// version and continues from its cursor, acks it and returns its rows.
func (c *sockClient) delta() []string {
	c.t.Helper()
	b := c.nextBinary()
	if b[0] != realtime.TagDelta {
		c.t.Fatalf("%s: 0x%02x where a delta was expected", c.clientID, b[0])
	}
	m, err := wire.Decode(b[1:])
	if err != nil || m.Kind != wire.KindResponse || m.WireVersion != c.version {
		c.t.Fatalf("%s: delta: %v (wire %d)", c.clientID, err, m.WireVersion)
	}
	secs, err := enginetest.ParseSections(m)
	if err != nil || len(secs) != 1 {
		c.t.Fatalf("%s: delta sections: %v %d", c.clientID, err, len(secs))
	}
	for _, cm := range secs[0].Commits {
		if cm.CommitSeq <= c.cursor {
			c.t.Fatalf("%s: a delta repeats commit %d, the client is at %d", c.clientID, cm.CommitSeq, c.cursor)
		}
	}
	c.cursor = secs[0].End.NextCursor
	c.ack()
	return rowIDs(secs[0].Commits)
}

func (c *sockClient) presence(doc string) {
	c.t.Helper()
	msg := `{"event":"presence","data":{"scopeKey":"project:` + c.project + `","doc":` + doc + `}}`
	if err := c.ws.Write(context.Background(), websocket.MessageText, []byte(msg)); err != nil {
		c.t.Fatalf("%s: presence: %v", c.clientID, err)
	}
}

// nextPresence waits for a presence fanout event about another client.
func (c *sockClient) nextPresence() *realtime.PresenceFanout {
	c.t.Helper()
	b := c.nextText(func(m any) bool { _, ok := m.(*realtime.PresenceFanout); return ok })
	m, _ := realtime.Parse(b)
	return m.(*realtime.PresenceFanout)
}

// task encodes a tasks row (todo example) the way this client's wire
// version carries rows: dense up to wire 2, sparse with every column
// present from wire 3 (§1.7).
func (c *sockClient) task(id string) []byte {
	c.t.Helper()
	tb, ok := c.s.Schema.Versions[c.s.Schema.Latest].Table("tasks")
	if !ok {
		c.t.Fatal("the schema has no tasks table")
	}
	vals := map[string]any{"id": id, "project_id": c.project, "title": "from " + c.clientID, "done": false, "updated_at": 1}
	if c.version < wire.Version3 {
		return apptest.Row(c.t, tb, vals)
	}
	row := make([]rowcodec.Value, len(tb.Columns))
	present := make([]bool, len(tb.Columns))
	for i, col := range tb.Columns {
		present[i] = true
		switch v := vals[col.Name].(type) {
		case string:
			row[i] = rowcodec.Value{Str: v}
		case bool:
			row[i] = rowcodec.Value{Bool: v}
		case int:
			row[i] = rowcodec.Value{Int: int64(v)}
		default:
			row[i] = rowcodec.Value{Null: true}
		}
	}
	b, err := tb.Codec.AppendSparse(nil, row, present)
	if err != nil {
		c.t.Fatalf("encode a sparse row: %v", err)
	}
	return b
}

func rowIDs(commits []*wire.Commit) []string {
	var ids []string
	for _, cm := range commits {
		for _, ch := range cm.Changes {
			ids = append(ids, ch.RowID)
		}
	}
	return ids
}

func joined(ids []string) string { return strings.Join(ids, ",") }
