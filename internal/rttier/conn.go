package rttier

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// connInfo collects what one socket's close line reports.
type connInfo struct {
	start             time.Time
	partition, actor  string
	upgraded          bool
	bytesIn, bytesOut atomic.Int64
}

type connInfoKey struct{}

func connInfoOf(ctx context.Context) *connInfo {
	ci, _ := ctx.Value(connInfoKey{}).(*connInfo)
	return ci
}

// serveRealtime is <mount>/realtime: the shared handler, wrapped so that
// every socket ends with one log line (partition, actor, client,
// duration, bytes each way; never a token or payload).
func (t *Tier) serveRealtime(w http.ResponseWriter, r *http.Request) {
	if t.draining.Load() {
		// The load balancer still routes here until it sees /healthz fail.
		w.Header().Set("Retry-After", "1")
		http.Error(w, "draining", http.StatusServiceUnavailable)
		return
	}
	ci := &connInfo{start: time.Now()}
	r = r.WithContext(context.WithValue(r.Context(), connInfoKey{}, ci))
	t.ws.ServeHTTP(&countingWriter{ResponseWriter: w, ci: ci}, r)
	if !ci.upgraded {
		return
	}
	t.log.LogAttrs(r.Context(), slog.LevelInfo, "realtime close",
		slog.String("partition", ci.partition), slog.String("actor", ci.actor),
		slog.String("client", r.URL.Query().Get("clientId")),
		slog.Float64("durationMs", float64(time.Since(ci.start).Microseconds())/1000),
		slog.Int64("bytesIn", ci.bytesIn.Load()), slog.Int64("bytesOut", ci.bytesOut.Load()))
}

// countingWriter lends the upgrade a connection that counts its bytes.
type countingWriter struct {
	http.ResponseWriter
	ci *connInfo
}

func (c *countingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := c.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("realtime: the connection cannot be taken over")
	}
	nc, brw, err := hj.Hijack()
	if err != nil {
		return nil, nil, err
	}
	c.ci.upgraded = true
	// Bytes the server already buffered (a client may send its first
	// round right after the upgrade request) are the start of the
	// stream: the connection itself serves them first, so they survive
	// whatever the WebSocket library does with the returned reader (it
	// re-wraps the connection, keeping only that reader's own buffer).
	cc := &countingConn{Conn: nc, ci: c.ci}
	if n := brw.Reader.Buffered(); n > 0 {
		pre, _ := brw.Reader.Peek(n)
		cc.pre = append([]byte(nil), pre...)
		c.ci.bytesIn.Add(int64(n))
	}
	return cc, bufio.NewReadWriter(bufio.NewReader(cc), bufio.NewWriter(cc)), nil
}

type countingConn struct {
	net.Conn
	ci  *connInfo
	pre []byte // read before the takeover, served first (already counted)
}

func (c *countingConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	n, err := c.Conn.Read(p)
	c.ci.bytesIn.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.ci.bytesOut.Add(int64(n))
	return n, err
}
