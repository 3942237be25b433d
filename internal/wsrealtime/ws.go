// Package wsrealtime serves the realtime hub (internal/core/realtime)
// over a real WebSocket (github.com/coder/websocket): the local runner's
// and the conformance host's <mount>/realtime. Each connection gets a
// bounded send queue drained by its own writer goroutine, so a slow
// client never blocks the hub's fanout (§8.2 flow control: a full queue
// is a dropped delta, answered by a wake-up).
package wsrealtime

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/realtime"
)

// Options configure Serve.
type Options struct {
	// QueueMessages bounds a connection's send queue (default 1024).
	QueueMessages int
	// MaxReadBytes caps one inbound message (default 1 MiB).
	MaxReadBytes int64
	// OriginPatterns are passed to websocket.Accept (browser origins).
	OriginPatterns []string
	// InsecureSkipVerify disables the origin check (local development).
	InsecureSkipVerify bool
}

type msg struct {
	typ  websocket.MessageType
	data []byte
}

// conn adapts a websocket.Conn to realtime.Conn.
type conn struct {
	ws     *websocket.Conn
	out    chan msg
	once   sync.Once
	done   chan struct{}
	reason string
	mu     sync.Mutex
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

func (c *conn) SendText(b []byte) bool   { return c.send(msg{websocket.MessageText, b}) }
func (c *conn) SendBinary(b []byte) bool { return c.send(msg{websocket.MessageBinary, b}) }

func (c *conn) Close(reason string) {
	c.once.Do(func() {
		c.mu.Lock()
		c.reason = reason
		c.mu.Unlock()
		close(c.done)
	})
}

// Serve upgrades r, registers the connection with hub for (auth,
// clientID) and runs it until either side closes. The caller has
// authenticated the request (§8.1: same authentication as /sync). A
// refused connect (bad clientId, foreign actor binding, resolver outage)
// is passed to refuse before any upgrade (the caller answers it like
// /sync answers errors).
func Serve(w http.ResponseWriter, r *http.Request, hub *realtime.Hub, auth engine.Auth, clientID string, o Options, refuse func(http.ResponseWriter, error)) {
	if o.QueueMessages <= 0 {
		o.QueueMessages = 1024
	}
	if o.MaxReadBytes <= 0 {
		o.MaxReadBytes = 1 << 20
	}
	// Register before upgrading, so a refused connect is a plain HTTP
	// error; hello waits in the send queue until the socket exists.
	c := &conn{out: make(chan msg, o.QueueMessages), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	s, err := hub.Connect(ctx, auth, clientID, c)
	if err != nil {
		refuse(w, err)
		return
	}
	defer s.Close()
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: o.OriginPatterns, InsecureSkipVerify: o.InsecureSkipVerify, CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return
	}
	ws.SetReadLimit(o.MaxReadBytes)
	c.ws = ws
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for {
			select {
			case m := <-c.out:
				wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
				err := ws.Write(wctx, m.typ, m.data)
				wcancel()
				if err != nil {
					c.Close("write failed")
					cancel()
					return
				}
			case <-c.done:
				// Flush what is queued (e.g. a final error round), then close.
				for {
					select {
					case m := <-c.out:
						wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
						_ = ws.Write(wctx, m.typ, m.data)
						wcancel()
						continue
					default:
					}
					break
				}
				c.mu.Lock()
				reason := c.reason
				c.mu.Unlock()
				_ = ws.Close(websocket.StatusPolicyViolation, truncate(reason))
				cancel()
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		typ, data, err := ws.Read(ctx)
		if err != nil {
			break
		}
		if typ == websocket.MessageText {
			s.HandleText(ctx, data)
		} else {
			s.HandleBinary(ctx, data)
		}
	}
	c.Close("")
	cancel()
	<-writerDone
	_ = ws.CloseNow()
}

// truncate keeps a close reason within the 123 bytes a close frame holds.
func truncate(s string) string {
	if len(s) > 120 {
		return s[:120]
	}
	return s
}

// ErrNoClientID is returned by ClientID for a request without one.
var ErrNoClientID = errors.New("realtime: the clientId query parameter is required (§8.1)")

// ClientID returns the §8.1 clientId query parameter.
func ClientID(r *http.Request) (string, error) {
	id := r.URL.Query().Get("clientId")
	if id == "" {
		return "", ErrNoClientID
	}
	return id, nil
}
