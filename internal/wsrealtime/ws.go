// Package wsrealtime serves the realtime hub (internal/core/realtime)
// over a real WebSocket (github.com/coder/websocket): the one
// <mount>/realtime handler of the local runner, the conformance host and
// the realtime tier. It authenticates the upgrade like /sync (§8.1),
// validates the clientId with /sync's rule, enforces the connection caps
// and passes the token's expiry to the hub. Each connection gets a
// bounded send queue drained by its own writer goroutine, so a slow
// client never blocks the hub's fanout (§8.2 flow control: a full queue
// is a dropped delta, answered by a wake-up); a round's response waits
// for room instead (§8.7 backpressure). For the §8.7 pipelining rule the
// transport tells the hub whether a new round's first message was sent
// before the client could have seen the previous END: its bytes reached
// the server before END went to the socket, or the client's kernel had
// not acknowledged END when it arrived (inflow.go).
package wsrealtime

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/skyfold/syncular-lambda/internal/auth"
	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/httpapi"
	"github.com/skyfold/syncular-lambda/internal/core/realtime"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// Options configure the handler.
type Options struct {
	// QueueMessages bounds a connection's send queue (default 1024).
	QueueMessages int
	// MaxReadBytes caps one inbound text (control) message (default 1
	// MiB; past it the connection closes with 1009). Binary round
	// messages are bounded by the hub's round caps instead
	// (realtime.Limits), counted while they arrive: a stock client sends
	// a whole round request as one message.
	MaxReadBytes int64
	// OriginPatterns are passed to websocket.Accept (browser origins).
	OriginPatterns []string
	// InsecureSkipVerify disables the origin check (local development).
	InsecureSkipVerify bool
	// MaxConnections caps the handler's open connections (default
	// 50,000) and MaxConnectionsPerActor those of one (partition, actor)
	// (default 1,000); a connect past either is refused before the
	// upgrade with 429 sync.websocket_connection_limit.
	MaxConnections         int
	MaxConnectionsPerActor int
	// WriteTimeout bounds one message write (default 30 s).
	WriteTimeout time.Duration
}

// Defaults of Options.
const (
	DefaultQueueMessages          = 1024
	DefaultMaxReadBytes           = 1 << 20
	DefaultMaxConnections         = 50_000
	DefaultMaxConnectionsPerActor = 1_000
	DefaultWriteTimeout           = 30 * time.Second
)

// Handler is GET <mount>/realtime?clientId=… (§8.1).
type Handler struct {
	Hub *realtime.Hub
	// Auth authenticates the upgrade like /sync: Authorization: Bearer,
	// or (browsers cannot set headers on a WebSocket) the token or
	// access_token query parameter.
	Auth    auth.Authenticator
	Options Options
	Logger  *slog.Logger
	// Identify, when set, replaces Auth (a host whose callers are
	// identified otherwise, e.g. the conformance host's actor
	// parameter).
	Identify func(*http.Request) (engine.Auth, auth.Claims, error)
	// WriteError, when set, renders a refused connect; the default is
	// the §10.1 JSON error body with the code's status.
	WriteError func(http.ResponseWriter, error)

	mu       sync.Mutex
	total    int
	perActor map[string]int
}

// ServeHTTP authenticates, validates and admits the connect, then runs
// the connection until either side closes.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o := h.options()
	a, claims, err := h.authenticate(r)
	if err != nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="syncular"`)
		h.refuse(w, syncerr.New(syncerr.AuthRequired, "authentication failed: %v", err))
		return
	}
	clientID := r.URL.Query().Get("clientId")
	if err := engine.CheckClientID(clientID); err != nil {
		h.refuse(w, err) // the same code and 400 as /sync (§1.5)
		return
	}
	expiresAt, err := expiryOf(claims)
	if err != nil {
		h.refuse(w, syncerr.New(syncerr.AuthRequired, "authentication failed: %v", err))
		return
	}
	actorKey := a.Partition + "\x00" + a.ActorID
	if err := h.admit(actorKey, o); err != nil {
		h.refuse(w, err)
		return
	}
	defer h.leave(actorKey)
	if claims != nil {
		r = r.WithContext(auth.WithClaims(r.Context(), claims))
	}
	if h.Logger != nil {
		h.Logger.Info("realtime connect", "partition", a.Partition, "actor", a.ActorID, "client", clientID)
	}
	serve(w, r, h.Hub, a, clientID, realtime.ConnectOptions{ExpiresAt: expiresAt}, o, h.refuse)
}

func (h *Handler) options() Options {
	o := h.Options
	o.QueueMessages = orDefault(o.QueueMessages, DefaultQueueMessages)
	o.MaxReadBytes = orDefault(o.MaxReadBytes, DefaultMaxReadBytes)
	o.MaxConnections = orDefault(o.MaxConnections, DefaultMaxConnections)
	o.MaxConnectionsPerActor = orDefault(o.MaxConnectionsPerActor, DefaultMaxConnectionsPerActor)
	o.WriteTimeout = orDefault(o.WriteTimeout, DefaultWriteTimeout)
	return o
}

// orDefault is v, or d when v is not positive (an unset option).
func orDefault[T int | int64 | time.Duration](v, d T) T {
	if v <= 0 {
		return d
	}
	return v
}

func (h *Handler) authenticate(r *http.Request) (engine.Auth, auth.Claims, error) {
	if h.Identify != nil {
		return h.Identify(r)
	}
	if h.Auth == nil {
		return engine.Auth{}, nil, errors.New("no authenticator configured")
	}
	return h.Auth.Authenticate(r.Context(), Credentials(r))
}

// Credentials are an upgrade request's credentials as /sync takes them
// (§8.1): Authorization: Bearer, or the token / access_token query
// parameter that browsers must use (they cannot set headers on a
// WebSocket).
func Credentials(r *http.Request) auth.Credentials {
	authz := r.Header.Get("Authorization")
	if authz == "" {
		q := r.URL.Query()
		tok := q.Get("token")
		if tok == "" {
			tok = q.Get("access_token")
		}
		if tok != "" {
			authz = "Bearer " + tok
		}
	}
	return auth.Credentials{Authorization: authz}
}

// expiryOf reads the verified exp claim (seconds since the epoch, RFC
// 7519) as epoch ms; 0 when there is none.
func expiryOf(c auth.Claims) (int64, error) {
	v, ok := c["exp"]
	if !ok || v == nil {
		return 0, nil
	}
	var f float64
	switch t := v.(type) {
	case float64:
		f = t
	case int64:
		f = float64(t)
	case int:
		f = float64(t)
	case json.Number:
		n, err := t.Float64()
		if err != nil {
			return 0, errors.New("exp claim is not a number")
		}
		f = n
	case string: // behind API Gateway's authorizer every claim is text
		n, err := strconv.ParseFloat(t, 64)
		if err != nil {
			return 0, errors.New("exp claim is not a number")
		}
		f = n
	default:
		return 0, errors.New("exp claim is not a number")
	}
	if math.IsNaN(f) || f <= 0 || f > math.MaxInt64/1000 {
		return 0, errors.New("exp claim is out of range")
	}
	return int64(f * 1000), nil
}

// admit counts a connection against the caps.
func (h *Handler) admit(actorKey string, o Options) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.total >= o.MaxConnections {
		return syncerr.New(syncerr.WebsocketConnectionLimit, "this server holds its maximum of %d realtime connections; retry later", o.MaxConnections)
	}
	if h.perActor[actorKey] >= o.MaxConnectionsPerActor {
		return syncerr.New(syncerr.WebsocketConnectionLimit, "this actor holds its maximum of %d realtime connections; close one or retry later", o.MaxConnectionsPerActor)
	}
	if h.perActor == nil {
		h.perActor = map[string]int{}
	}
	h.total++
	h.perActor[actorKey]++
	return nil
}

func (h *Handler) leave(actorKey string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.total--
	if h.perActor[actorKey]--; h.perActor[actorKey] <= 0 {
		delete(h.perActor, actorKey)
	}
}

// Connections reports the handler's open connections.
func (h *Handler) Connections() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total
}

func (h *Handler) refuse(w http.ResponseWriter, err error) {
	if h.WriteError != nil {
		h.WriteError(w, err)
		return
	}
	WriteError(w, err)
}

// WriteError renders err as the §10.1 JSON error body with its status.
func WriteError(w http.ResponseWriter, err error) {
	resp := httpapi.ErrorResponse(err)
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

type msg struct {
	typ  websocket.MessageType
	data []byte
	// writing runs right before the write (a round's final chunk).
	writing func()
}

// conn adapts a websocket.Conn to realtime.Conn (and CodeCloser,
// RoundSender).
type conn struct {
	out    chan msg
	once   sync.Once
	done   chan struct{}
	mu     sync.Mutex
	code   websocket.StatusCode
	reason string
}

func (c *conn) send(m msg) bool {
	select {
	case <-c.done:
		return false
	default:
	}
	select {
	case c.out <- m:
		return true
	default:
		return false
	}
}

func (c *conn) SendText(b []byte) bool   { return c.send(msg{typ: websocket.MessageText, data: b}) }
func (c *conn) SendBinary(b []byte) bool { return c.send(msg{typ: websocket.MessageBinary, data: b}) }

// SendRound waits for room in the queue (§8.7 backpressure).
func (c *conn) SendRound(b []byte, writing func()) bool {
	select {
	case c.out <- msg{typ: websocket.MessageBinary, data: b, writing: writing}:
		return true
	case <-c.done:
		return false
	}
}

func (c *conn) Close(reason string) { c.CloseCode(realtime.ClosePolicyViolation, reason) }

func (c *conn) CloseCode(code int, reason string) {
	c.once.Do(func() {
		c.mu.Lock()
		c.code, c.reason = websocket.StatusCode(code), reason
		c.mu.Unlock()
		close(c.done)
	})
}

// serve registers the connection with hub for (a, clientID), upgrades
// and runs it until either side closes. A refused connect (foreign actor
// binding, resolver outage, expired token) is answered before any
// upgrade.
func serve(w http.ResponseWriter, r *http.Request, hub *realtime.Hub, a engine.Auth, clientID string, co realtime.ConnectOptions, o Options, refuse func(http.ResponseWriter, error)) {
	// Register before upgrading, so a refused connect is a plain HTTP
	// error; hello waits in the send queue until the socket exists.
	c := &conn{out: make(chan msg, o.QueueMessages), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	s, err := hub.Connect(ctx, a, clientID, c, co)
	if err != nil {
		refuse(w, err)
		return
	}
	defer s.Close()
	in := &inflow{}
	ws, err := websocket.Accept(hijackCounter{ResponseWriter: w, in: in}, r, &websocket.AcceptOptions{
		OriginPatterns: o.OriginPatterns, InsecureSkipVerify: o.InsecureSkipVerify, CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		return
	}
	// The library's own limit only backs ours up: the hub's caps refuse
	// a round message first, while it arrives (readBinary).
	ws.SetReadLimit(max(o.MaxReadBytes, int64(hub.Limits().MaxRoundRequestBytes)+64))
	sk := &socket{ws: ws, c: c, in: in, s: s, o: o, cancel: cancel}
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		sk.writeLoop(ctx)
	}()
	sk.readLoop(ctx)
	c.CloseCode(realtime.CloseNormal, "")
	cancel()
	<-writerDone
	_ = ws.CloseNow()
	sk.runQueuedCallbacks()
}

// socket is one upgraded connection's read and write sides.
type socket struct {
	ws     *websocket.Conn
	c      *conn
	in     *inflow
	s      *realtime.Session
	o      Options
	cancel context.CancelFunc
}

// write sends one queued message. A round's final chunk first records
// what reached us by now: it was sent before the client could see END.
func (k *socket) write(ctx context.Context, m msg, timeout time.Duration) error {
	if m.writing != nil {
		k.in.markEnd(len(m.data))
		m.writing()
	}
	wctx, wcancel := context.WithTimeout(ctx, timeout)
	err := k.ws.Write(wctx, m.typ, m.data)
	wcancel()
	return err
}

// writeLoop drains the send queue until the connection closes; on close
// it flushes what is queued (e.g. a final error round) and sends the
// close frame.
func (k *socket) writeLoop(ctx context.Context) {
	for {
		select {
		case m := <-k.c.out:
			if k.write(ctx, m, k.o.WriteTimeout) != nil {
				k.c.CloseCode(realtime.CloseGoingAway, "write failed")
				k.cancel()
				return
			}
		case <-k.c.done:
			for {
				select {
				case m := <-k.c.out:
					_ = k.write(ctx, m, 5*time.Second)
					continue
				default:
				}
				break
			}
			k.c.mu.Lock()
			code, reason := k.c.code, k.c.reason
			k.c.mu.Unlock()
			_ = k.ws.Close(code, truncate(reason))
			k.cancel()
			return
		case <-ctx.Done():
			return
		}
	}
}

// readLoop hands every inbound message to the session until the client
// closes, a read fails or a cap refuses a message.
func (k *socket) readLoop(ctx context.Context) {
	for {
		typ, rd, err := k.ws.Reader(ctx)
		if err != nil {
			return
		}
		if typ == websocket.MessageText {
			data, err := io.ReadAll(io.LimitReader(rd, k.o.MaxReadBytes+1))
			if err != nil {
				return
			}
			if int64(len(data)) > k.o.MaxReadBytes {
				k.c.CloseCode(realtime.CloseMessageTooBig, "control message too large")
				return
			}
			k.s.HandleText(ctx, data)
			continue
		}
		data, ok := readBinary(rd, k.s)
		if !ok {
			return
		}
		k.s.HandleBinaryArrival(ctx, data, k.in.beforeLastEnd(len(data)))
	}
}

// runQueuedCallbacks runs the round callbacks of messages still queued
// when the connection ended (the session is closed; nothing waits on the
// flag but its state stays consistent).
func (k *socket) runQueuedCallbacks() {
	for {
		select {
		case m := <-k.c.out:
			if m.writing != nil {
				m.writing()
			}
			continue
		default:
		}
		return
	}
}

// readBinary reads one binary message, reserving its bytes with the hub
// as they arrive (so the per-connection, per-actor and per-hub round
// caps hold before the bytes are buffered, not after); false when a cap
// refused them (the session closed the connection) or the read failed.
func readBinary(rd io.Reader, s *realtime.Session) ([]byte, bool) {
	var buf []byte
	for {
		buf = slices.Grow(buf, readStep)
		n, err := rd.Read(buf[len(buf):cap(buf)])
		if n > 0 {
			if !s.ReserveIncoming(n) {
				return nil, false
			}
			buf = buf[:len(buf)+n]
		}
		if err == io.EOF {
			return buf, true
		}
		if err != nil {
			return nil, false
		}
	}
}

// readStep is the least room readBinary offers each read.
const readStep = 16 << 10

// truncate keeps a close reason within the 123 bytes a close frame holds.
func truncate(s string) string {
	if len(s) > 120 {
		return s[:120]
	}
	return s
}
