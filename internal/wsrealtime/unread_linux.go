package wsrealtime

import (
	"net"

	"golang.org/x/sys/unix"
)

// tcpFD runs fn with the socket of c when c is a TCP connection (not
// TLS: its byte counts would not match the library's).
func tcpFD(c net.Conn, fn func(fd int)) bool {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return false
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return false
	}
	return rc.Control(func(fd uintptr) { fn(int(fd)) }) == nil
}

// unreadBytes is what the kernel holds unread on the connection
// (FIONREAD, alias TIOCINQ); 0 when unknown.
func unreadBytes(c net.Conn) int64 {
	var n int
	tcpFD(c, func(fd int) {
		if v, err := unix.IoctlGetInt(fd, unix.TIOCINQ); err == nil {
			n = v
		}
	})
	return int64(max(n, 0))
}

// sentOffsets returns how many bytes of the server's stream the peer's
// kernel has acknowledged and, read after it, how many are queued unacked
// (so an acknowledgement in between makes their sum smaller, never
// larger); ok false when unknown.
func sentOffsets(c net.Conn) (acked, queued int64, ok bool) {
	ok = tcpFD(c, func(fd int) {
		info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			return
		}
		q, err := unix.IoctlGetInt(fd, unix.SIOCOUTQ)
		if err != nil {
			return
		}
		acked, queued = int64(info.Bytes_acked), int64(q)
	}) && acked+queued > 0
	return acked, queued, ok
}

// ackedBytes is how many bytes of the server's stream the peer's kernel
// has acknowledged; -1 when unknown.
func ackedBytes(c net.Conn) int64 {
	n := int64(-1)
	tcpFD(c, func(fd int) {
		if info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			n = int64(info.Bytes_acked)
		}
	})
	return n
}
