package wsrealtime

import (
	"bufio"
	"net"
	"net/http"
	"sync/atomic"
)

// inflow lets the transport tell where a client message sits in the
// connection's byte stream relative to the moment a round response's END
// went to the socket (§8.7 no pipelining): every byte that had reached
// the server by then — already read into the process, or waiting in the
// kernel's receive buffer — was sent before the client could have seen
// END, however late the read loop gets to it.
type inflow struct {
	conn net.Conn
	// read counts the bytes read from the kernel (and the ones the HTTP
	// server had buffered past the upgrade request).
	read atomic.Int64
	// br is the reader the WebSocket library parses frames from; its
	// Buffered bytes are read but not yet consumed. Touched only by the
	// read loop.
	br *bufio.Reader
	// endMark is the stream offset the client had reached when the last
	// round response's final chunk went to the socket.
	endMark atomic.Int64
	// endAcked is the offset in the server's byte stream (as the kernel
	// counts it, handshake included) of that chunk's last byte: until the
	// client's kernel acknowledged it, the client cannot have seen END.
	endAcked atomic.Int64
}

// countingConn counts what Read takes from the kernel.
type countingConn struct {
	net.Conn
	in *inflow
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.read.Add(int64(n))
	return n, err
}

// hijackCounter hands websocket.Accept the hijacked connection wrapped
// in countingConn.
type hijackCounter struct {
	http.ResponseWriter
	in *inflow
}

func (h hijackCounter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	h.in.conn = c
	h.in.br = brw.Reader
	h.in.read.Store(int64(brw.Reader.Buffered()))
	return countingConn{Conn: c, in: h.in}, brw, nil
}

// markEnd is called right before a round's final chunk of size n is
// written. It records the client's stream offset reached by then — the
// bytes read so far, then the kernel's unread ones (in this order, so a
// read in between is never counted twice) — and where the chunk's last
// byte will sit in the server's stream: what the kernel has sent (acked
// plus queued) plus the frame (a server frame's header is 2, 4 or 10
// bytes, RFC 6455 §5.2). Anything else written first (a pong) only moves
// END later, so the offset errs early, toward not flagging.
func (in *inflow) markEnd(n int) {
	r := in.read.Load()
	in.endMark.Store(r + unreadBytes(in.conn))
	if acked, queued, ok := sentOffsets(in.conn); ok {
		hdr := int64(2)
		switch {
		case n > 65535:
			hdr = 10
		case n > 125:
			hdr = 4
		}
		in.endAcked.Store(acked + queued + hdr + int64(n))
	}
}

// minClientFrameHeader is the shortest header of a client frame (2 bytes
// plus the 4-byte mask, RFC 6455 §5.2).
const minClientFrameHeader = 6

// beforeLastEnd reports whether the message of payload length n that the
// library just returned was sent before the client could have seen the
// last round's END: its first byte had reached the server before END
// went to the socket, or the client's kernel had not yet acknowledged
// END when the message arrived. Call it from the read loop right after
// the read.
func (in *inflow) beforeLastEnd(n int) bool {
	if in.br == nil {
		return false
	}
	end := in.read.Load() - int64(in.br.Buffered())
	// The message's first byte is at most here (its headers are at least
	// minClientFrameHeader long).
	start := end - int64(n) - minClientFrameHeader
	if start < in.endMark.Load() {
		return true
	}
	// Every TCP segment acknowledges all the sender's kernel received: a
	// reply the client sent after its kernel got END arrives carrying
	// that acknowledgement (processed before its data is readable). Still
	// unacknowledged now, END had not reached the client when it sent
	// this. (Behind a proxy the proxy acknowledges, and this finds
	// nothing: it never flags a reply.)
	if target := in.endAcked.Load(); target > 0 {
		if acked := ackedBytes(in.conn); acked >= 0 && acked < target {
			return true
		}
	}
	return false
}
