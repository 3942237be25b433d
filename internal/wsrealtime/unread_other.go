//go:build !linux

package wsrealtime

import "net"

// unreadBytes is 0 where FIONREAD is not wired: only bytes already read
// count as arrived before a round's END.
func unreadBytes(net.Conn) int64 { return 0 }

// sentOffsets is unknown where TCP_INFO is not wired.
func sentOffsets(net.Conn) (acked, queued int64, ok bool) { return 0, 0, false }

// ackedBytes is unknown where TCP_INFO is not wired.
func ackedBytes(net.Conn) int64 { return -1 }
