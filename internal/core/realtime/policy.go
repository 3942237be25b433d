package realtime

import (
	"encoding/binary"
	"encoding/json"
	"strings"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// This file is the one realtime policy: every transport (the hub behind
// the local runner, the conformance host and the realtime tier) decides
// through these functions what a connection gets for a commit (delta,
// wake-up and which reason, or nothing), how a delta is keyed for the
// shared encoding, and how client input is answered. They are pure: no
// session state, no I/O.

// Action is what one connection gets for one commit.
type Action uint8

// Actions of Decide.
const (
	// Skip: nothing for this connection (not touched, already covered).
	Skip Action = iota
	// SendDelta: the 0x00 delta (§8.2); a refused send becomes
	// AfterRefusedSend's wake-up.
	SendDelta
	// WakeUp: a §8.3 wake-up with Decision.Reason; the connection is
	// suppressed until an ack reaches what it observed (§8.2).
	WakeUp
)

// Decision is Decide's answer.
type Decision struct {
	Action Action
	Reason string // for WakeUp
}

// SessionFacts are what Decide needs of one connection.
type SessionFacts struct {
	// Registered: the connection has at least one registration.
	Registered bool
	// Suppressed: behind at connect, after a drop or a gap, until an ack
	// reaches what it observed (§8.2).
	Suppressed bool
	// InRound: a socket round's response is in flight (§8.7
	// interleaving: no 0x00 message then).
	InRound bool
}

// CommitFacts are what Decide needs of one commit for one connection.
type CommitFacts struct {
	// Gap: the commits between the connection's last observed one and
	// this one could not all be fed to it (a log hole below the horizon,
	// a delivery that failed): the §8.2 contiguity rule forbids a delta.
	Gap bool
	// Touched: the commit's stored scope keys meet the connection's.
	Touched bool
	// DeltaBytes is the encoded delta message's length (channel tag
	// included): 0 when no registration matches every scope of a change,
	// -1 when encoding failed.
	DeltaBytes int
	// MaxMessageBytes is the transport's message limit.
	MaxMessageBytes int
}

// Decide is the delivery decision of §8.2/§8.3/§8.7 for one connection
// and one commit, taken in commit order.
func Decide(s SessionFacts, c CommitFacts) Decision {
	switch {
	case c.Gap:
		if !s.Registered {
			return Decision{Action: Skip}
		}
		return Decision{Action: WakeUp, Reason: ReasonCatchupRequired}
	case !c.Touched || c.DeltaBytes == 0:
		return Decision{Action: Skip}
	case c.DeltaBytes < 0, s.Suppressed, s.InRound:
		// Behind, mid-round or unencodable: only a pull can bridge it.
		return Decision{Action: WakeUp, Reason: ReasonCatchupRequired}
	case c.DeltaBytes > c.MaxMessageBytes:
		return Decision{Action: WakeUp, Reason: ReasonDeltaTooLarge}
	}
	return Decision{Action: SendDelta}
}

// AfterRefusedSend is the decision when the transport refused a delta
// (a full bounded queue, a closed connection): it was never delivered,
// so the connection is told to catch up (§8.2 flow control).
func AfterRefusedSend() Decision {
	return Decision{Action: WakeUp, Reason: ReasonCatchupRequired}
}

// DeltaKey identifies everything an encoded delta depends on besides the
// commit: the log epoch its header carries (§2.1), the wire version, the
// schema version whose codec encodes rows (§2.4) and the registrations
// with their effective scopes. Connections with equal keys share one
// encoding of a commit; any difference gets its own.
func DeltaKey(logEpoch string, version uint16, schemaVersion int32, regs []engine.Registration) string {
	var b strings.Builder
	b.Grow(64 + len(logEpoch))
	var n [8]byte
	binary.LittleEndian.PutUint16(n[:], version)
	binary.LittleEndian.PutUint32(n[2:], uint32(schemaVersion))
	b.Write(n[:6])
	b.WriteString(logEpoch)
	b.WriteByte(0)
	for _, r := range regs {
		b.WriteString(r.ID)
		b.WriteByte(0)
		b.WriteString(r.Table)
		b.WriteByte(0)
		for _, k := range sortedKeys(r.Effective) {
			b.WriteString(k)
			b.WriteByte(1)
			for _, v := range r.Effective[k] {
				b.WriteString(v)
				b.WriteByte(2)
			}
		}
		b.WriteByte(3)
	}
	return b.String()
}

// Verdict is how a client→server text message is answered.
type Verdict uint8

// Verdicts of ClassifyText.
const (
	// Ignore: tolerated and dropped (§8.1: an unknown event or type, or
	// a server→client event echoed back).
	Ignore Verdict = iota
	// Handle: a well-formed ack or presence publish.
	Handle
	// Reject: malformed; the connection closes with a policy violation.
	Reject
)

// ClassifyText applies §8.1's input rule to one client→server text
// message. Text that is not a JSON object, and a JSON object whose event
// or type names no client→server message of §8, is tolerated and ignored
// (forward compatibility; a client never needs an answer to it). A known
// client message — an ack (§8.2, "type":"ack") or a presence publish
// (§8.6.2, "event":"presence") — with missing or wrong-shape data is
// malformed: sync.invalid_request, and the connection closes (a broken
// client, surfaced loudly). msg is the parsed *Ack or *PresencePublish
// for Handle; err explains a Reject.
func ClassifyText(b []byte) (msg any, v Verdict, err error) {
	var top map[string]json.RawMessage
	if strictUnmarshal(b, &top) != nil || top == nil {
		return nil, Ignore, nil
	}
	m, err := Parse(b)
	if err != nil {
		return nil, Reject, err
	}
	switch m := m.(type) {
	case *Ack:
		return m, Handle, nil
	case *PresencePublish:
		return m, Handle, nil
	case *PresenceFanout, *PresenceError:
		// A server→client presence shape from a client: not a publish.
		return nil, Reject, syncerr.New(syncerr.InvalidRequest, "realtime control message: a client's presence event carries scopeKey and doc only (§8.6.2)")
	}
	return nil, Ignore, nil
}
