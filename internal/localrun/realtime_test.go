package localrun

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/coder/websocket"

	"github.com/skyfold/syncular-lambda/internal/app/apptest"
	"github.com/skyfold/syncular-lambda/internal/auth"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/realtime"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

type rtRig struct {
	t   testing.TB
	srv string
	d   *apptest.Deployment
}

func newRTRig(t testing.TB) *rtRig {
	r, _ := newRTRigOpts(t, testOptions())
	return r
}

func newRTRigOpts(t testing.TB, o options) (*rtRig, *runner) {
	rn, srv := startRunner(t, o)
	c := noDecompress()
	return &rtRig{t: t, srv: srv.URL, d: &apptest.Deployment{
		Schema: rn.schema,
		Invoke: func(t testing.TB, _ string, ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
			return apptest.OverHTTP(t, c, srv.URL, ev)
		},
		Token: func(t testing.TB, actor string, scopes map[string][]string) string {
			tok, err := auth.MintHS256([]byte(testSecret), auth.Claims{"sub": actor, "syncular_scopes": scopes}, time.Hour, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			return tok
		},
	}}, rn
}

func (r *rtRig) token(actor string) string {
	return r.d.Token(r.t, actor, map[string][]string{"project_id": {"p1"}})
}

// dial opens <mount>/realtime the way a browser can: token in the query.
func (r *rtRig) dial(token, clientID string) (*websocket.Conn, *http.Response, error) {
	u := "ws" + strings.TrimPrefix(r.srv, "http") + "/realtime?clientId=" + url.QueryEscape(clientID)
	if token != "" {
		u += "&token=" + url.QueryEscape(token)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return websocket.Dial(ctx, u, nil)
}

func read(t *testing.T, ws *websocket.Conn) (websocket.MessageType, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	typ, b, err := ws.Read(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return typ, b
}

// nextBinary skips text control messages (heartbeats, presence) and
// returns the next binary message.
func nextBinary(t *testing.T, ws *websocket.Conn) []byte {
	t.Helper()
	for {
		typ, b := read(t, ws)
		if typ == websocket.MessageBinary {
			return b
		}
	}
}

func tasksSub() wire.Subscription {
	return wire.Subscription{ID: "tasks", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1}
}

// A stock-protocol client over a real socket: registered by its HTTP
// pull, it gets hello (JSON text), then a 0x00 binary delta — an SSP2
// response in its wire version — for another device's commit, and acks.
func TestRealtimeDeltaOverWebSocket(t *testing.T) {
	r := newRTRig(t)
	wtok, rtok := r.token("writer"), r.token("reader")
	wepoch := r.d.Epoch(t, "push", "/sync", wtok, "w1")
	repoch := r.d.Epoch(t, "pull", "/pull", rtok, "r1")
	sec := r.d.Pull(t, rtok, "r1", repoch, wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows}, tasksSub())

	// Unauthenticated: refused before the upgrade, like /sync.
	if _, resp, err := r.dial("", "r1"); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("unauthenticated dial: %v %+v", err, resp)
	}
	ws, _, err := r.dial(rtok, "r1")
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	typ, b := read(t, ws)
	m, err := realtime.Parse(b)
	hello, ok := m.(*realtime.Hello)
	if typ != websocket.MessageText || err != nil || !ok || hello.RequiresSync || hello.ClientID != "r1" || hello.Cursor != sec.End.NextCursor {
		t.Fatalf("hello: %s %v", b, err)
	}
	start := time.Now()
	r.d.Push(t, wtok, "w1", wepoch, wire.PushCommit{ClientCommitID: "c1", Operations: []wire.Operation{apptest.Upsert("tasks", "t1", -1, r.d.Task(t, "t1", "p1", "live"))}})
	d := nextBinary(t, ws)
	t.Logf("commit → delta over the socket: %v", time.Since(start))
	if d[0] != realtime.TagDelta {
		t.Fatalf("tag 0x%02x", d[0])
	}
	msg, err := wire.Decode(d[1:])
	if err != nil || msg.Kind != wire.KindResponse || msg.WireVersion != wire.Version2 {
		t.Fatalf("delta: %v %+v", err, msg)
	}
	secs, err := enginetest.ParseSections(msg)
	if err != nil || len(secs) != 1 || len(secs[0].Commits) != 1 || secs[0].Commits[0].Changes[0].RowID != "t1" {
		t.Fatalf("delta sections: %v %+v", err, secs)
	}
	ctx := context.Background()
	if err := ws.Write(ctx, websocket.MessageText, realtime.EncodeAck(secs[0].End.NextCursor)); err != nil {
		t.Fatal(err)
	}
	// A malformed known event closes the connection with a policy error.
	_ = ws.Write(ctx, websocket.MessageText, []byte(`{"event":"presence","data":{"scopeKey":"project:p1","doc":"x"}}`))
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		if _, _, err := ws.Read(rctx); err != nil {
			if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
				t.Fatalf("close: %v", err)
			}
			break
		}
	}
}

// §8.7 over a real socket: a never-synced client connects, runs its
// rounds as 0x01 chunks (epoch acquisition, then a pull) and is then
// registered for deltas on the same connection.
func TestRealtimeSocketRound(t *testing.T) {
	r := newRTRig(t)
	tok := r.token("sock")
	ws, _, err := r.dial(tok, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	_, b := read(t, ws)
	if m, _ := realtime.Parse(b); m.(*realtime.Hello).RequiresSync != true {
		t.Fatalf("hello %s", b)
	}
	ctx := context.Background()
	round := func(body []byte) *wire.Message {
		t.Helper()
		// Arbitrary chunk boundaries carry no meaning (§8.7).
		for i := 0; i < len(body); i += 5 {
			if err := ws.Write(ctx, websocket.MessageBinary, append([]byte{realtime.TagRound}, body[i:min(i+5, len(body))]...)); err != nil {
				t.Fatal(err)
			}
		}
		var stream []byte
		for {
			b := nextBinary(t, ws)
			if b[0] != realtime.TagRound {
				t.Fatalf("tag 0x%02x inside a round", b[0])
			}
			stream = append(stream, b[1:]...)
			if m, err := wire.Decode(stream); err == nil {
				return m
			}
		}
	}
	hdr := wire.ReqHeader{ClientID: "s1", SchemaVersion: r.d.Schema.Latest}
	pull := &wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows}
	m := round(apptest.Request(t, wire.Version3, hdr, pull))
	epoch := apptest.Find[*wire.RespHeader](m)[0].LogEpoch
	hdr.LogEpoch = wire.Some(epoch)
	sub := tasksSub()
	m = round(apptest.Request(t, wire.Version3, hdr, pull, &sub))
	secs, err := enginetest.ParseSections(m)
	if err != nil || len(secs) != 1 || secs[0].Start.Status != wire.SubActive {
		t.Fatalf("round: %v %+v", err, secs)
	}
	if err := ws.Write(ctx, websocket.MessageText, realtime.EncodeAck(secs[0].End.NextCursor)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the ack is processed in order, before the next commit
	wtok := r.token("writer")
	wepoch := r.d.Epoch(t, "push", "/sync", wtok, "w1")
	r.d.Push(t, wtok, "w1", wepoch, wire.PushCommit{ClientCommitID: "c1", Operations: []wire.Operation{apptest.Upsert("tasks", "t9", -1, r.d.Task(t, "t9", "p1", "x"))}})
	d := nextBinary(t, ws)
	msg, err := wire.Decode(d[1:])
	if d[0] != realtime.TagDelta || err != nil || msg.WireVersion != wire.Version3 {
		t.Fatalf("delta after the socket round: %v", err)
	}
	var ids []string
	s, _ := enginetest.ParseSections(msg)
	for _, c := range s[0].Commits {
		for _, ch := range c.Changes {
			ids = append(ids, ch.RowID)
		}
	}
	sort.Strings(ids)
	if strings.Join(ids, ",") != "t9" {
		t.Fatalf("delta rows %v", ids)
	}
	_ = json.Valid
}

// Decision 5 on the runner: the socket of a token that expires is closed
// at its exp (policy violation, "token expired"), so nothing sent on it
// afterwards — a push round included — reaches the engine; the client
// reconnects with a fresh token.
func TestRealtimeTokenExpiryClosesSocket(t *testing.T) {
	r := newRTRig(t)
	tok, err := auth.MintHS256([]byte(testSecret), auth.Claims{"sub": "short", "syncular_scopes": map[string][]string{"project_id": {"p1"}}}, 2*time.Second, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ws, _, err := r.dial(tok, "short-lived")
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		_, _, err := ws.Read(ctx)
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			t.Fatal("the socket outlived its token")
		}
		var ce websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation || !strings.Contains(ce.Reason, "expired") {
			t.Fatalf("close: %v", err)
		}
		break
	}
	t.Logf("closed %v after connect (token valid for up to 2 s, exp in whole seconds)", time.Since(start).Round(time.Millisecond))
}
