// Package realtime is the transport-neutral realtime hub of SPEC §8: it
// registers connections with their client, actor, wire version and scope
// keys (§8.1), delivers commits as binary deltas or wake-ups (§8.2,
// §8.3), records acks, sends heartbeats (§8.5), keeps ephemeral presence
// (§8.6, across instances through PresenceEvent) and runs sync rounds
// over the socket through the same engine as POST /sync (§8.7).
//
// The policy, in one place (policy.go) for every transport:
//
//   - The log is the truth; notifications are hints. Hub.Hint(p, seq)
//     only says "p's log reached seq"; the hub reads the log from the
//     last commit it decided for p, in order, and decides each commit
//     for every session (Decide). A lost, late, duplicated or reordered
//     hint cannot make a gap: the next hint or the periodic
//     reconciliation (a head read per partition with sessions) delivers
//     what was missed. A delta counts as delivered only once the
//     transport accepted it; otherwise the session gets catchup-required
//     and stays suppressed until an ack reaches what it observed.
//   - One encoded delta per DeltaKey (log epoch, wire version, schema
//     version, registrations) per commit, shared by every session with
//     that key.
//   - A session on another log epoch than the head's gets
//     reset-required and is closed; a removed partition closes its
//     sessions; a token's expiry closes its session; grants are
//     re-resolved every AuthInterval, one resolver call per (partition,
//     actor): a revoked scope drops its registration and presence and
//     wakes catchup-required, and a resolver error drops everything
//     (fail closed).
//   - Client text is answered by ClassifyText: unknown or non-object
//     input is ignored, a malformed ack or presence publish closes.
//     Client binary is a round (0x01) or closes. One round at a time
//     (§8.7): round bytes from a request's END until its response's
//     final chunk goes to the socket are pipelining and close; END is
//     held at least PipelineHold after the request, so a request sent
//     right behind another always lands in that window; a transport
//     that sees arrival times (wsrealtime) also refuses a new round
//     whose bytes reached the server before END did leave.
//   - Limits: buffered round bytes per connection (close 1009), per
//     actor and per hub (1013); presence size (presence.too_large) and
//     rate (publishes past PresencePerSecond coalesce to the latest);
//     connections per actor and per instance in the transport (429
//     sync.websocket_connection_limit); the clientId rule of /sync.
//
// A transport (package wsrealtime's handler) supplies a Conn per
// connection and feeds inbound messages to the Session; committed
// commits reach the hub as hints, from the engine's in-process OnCommit
// hook or from a stream of the commit log.
package realtime

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// Channel tags of binary messages (§8.7).
const (
	TagDelta byte = 0x00
	TagRound byte = 0x01
)

// Wake-up reasons: a closed set (§8.3).
const (
	ReasonDeltaTooLarge   = "delta-too-large"
	ReasonCatchupRequired = "catchup-required"
	ReasonResetRequired   = "reset-required"
)

// Presence kinds and error codes: closed sets (§8.6.2).
const (
	KindJoin   = "join"
	KindUpdate = "update"
	KindLeave  = "leave"

	PresenceTooLarge  = "presence.too_large"
	PresenceForbidden = "presence.forbidden"
)

// maxSafe is 2^53−1: realtime numbers are integers within it (§8.1).
const maxSafe = 1<<53 - 1

// Hello is the connect handshake (§8.1).
type Hello struct {
	ProtocolVersion int64  `json:"protocolVersion"`
	SessionID       string `json:"sessionId"`
	ActorID         string `json:"actorId"`
	ClientID        string `json:"clientId"`
	Cursor          int64  `json:"cursor"`
	LatestCursor    int64  `json:"latestCursor"`
	RequiresSync    bool   `json:"requiresSync"`
	Timestamp       int64  `json:"timestamp"`
}

// Wake is the §8.3 wake-up. RequiresPull is always true.
type Wake struct {
	Cursor       int64  `json:"cursor"`
	RequiresPull bool   `json:"requiresPull"`
	Reason       string `json:"reason"`
	Timestamp    int64  `json:"timestamp"`
}

// Heartbeat is the §8.5 keep-alive.
type Heartbeat struct {
	Timestamp int64 `json:"timestamp"`
}

// PresenceFanout is a server→client presence change (§8.6.2). Doc is
// null for a leave.
type PresenceFanout struct {
	ScopeKey  string          `json:"scopeKey"`
	Kind      string          `json:"kind"`
	ActorID   string          `json:"actorId"`
	ClientID  string          `json:"clientId"`
	Doc       json.RawMessage `json:"doc"`
	Timestamp int64           `json:"timestamp"`
}

// PresenceError answers a refused publish to the publisher (§8.6.2).
type PresenceError struct {
	ScopeKey  string `json:"scopeKey"`
	Error     string `json:"error"`
	Timestamp int64  `json:"timestamp"`
}

// PresencePublish is a client→server publish; Doc nil means leave.
type PresencePublish struct {
	ScopeKey string          `json:"scopeKey"`
	Doc      json.RawMessage `json:"doc"`
}

// Ack is the client→server ack (§8.2).
type Ack struct {
	Cursor int64 `json:"cursor"`
}

// Unknown is a control message whose event (or type) this section does
// not define: tolerated, never an error (§8.1).
type Unknown struct {
	Name string
}

type envelope struct {
	Event string `json:"event"`
	Data  any    `json:"data"`
}

// encode renders a server→client event.
func encode(event string, data any) []byte {
	b, err := json.Marshal(envelope{Event: event, Data: data})
	if err != nil {
		panic(fmt.Sprintf("realtime: encode %s: %v", event, err)) // fixed shapes
	}
	return b
}

// EncodeHello, EncodeWake, EncodeHeartbeat and EncodePresence render
// server→client control messages.
func EncodeHello(h Hello) []byte { return encode("hello", h) }

// EncodeWake renders a §8.3 wake-up.
func EncodeWake(cursor int64, reason string, ts int64) []byte {
	return encode("sync", Wake{Cursor: cursor, RequiresPull: true, Reason: reason, Timestamp: ts})
}

// EncodeHeartbeat renders a §8.5 heartbeat.
func EncodeHeartbeat(ts int64) []byte { return encode("heartbeat", Heartbeat{Timestamp: ts}) }

// EncodePresence renders a §8.6.2 fanout event.
func EncodePresence(p PresenceFanout) []byte {
	if p.Doc == nil {
		p.Doc = json.RawMessage("null")
	}
	return encode("presence", p)
}

// EncodePresenceError renders a §8.6.2 refusal.
func EncodePresenceError(scopeKey, code string, ts int64) []byte {
	return encode("presence", PresenceError{ScopeKey: scopeKey, Error: code, Timestamp: ts})
}

// EncodeAck renders a client→server ack (for tests and clients).
func EncodeAck(cursor int64) []byte {
	b, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Cursor int64  `json:"cursor"`
	}{"ack", cursor})
	return b
}

func invalid(format string, args ...any) error {
	return syncerr.New(syncerr.InvalidRequest, "realtime control message: "+format, args...)
}

// Parse decodes one realtime JSON control message in either direction
// and applies the §8.1–§8.6 shape rules: a known event with missing or
// wrong-shape data, a fractional, non-finite or out-of-range number, a
// wake-up whose requiresPull is not literally true or whose reason is
// outside the closed set, a presence kind outside join|update|leave or a
// publish whose doc is neither an object nor null are all
// sync.invalid_request. An unknown event or type is *Unknown, not an
// error. The result is one of *Hello, *Wake, *Heartbeat,
// *PresenceFanout, *PresenceError, *PresencePublish, *Ack, *Unknown.
func Parse(b []byte) (any, error) {
	var top map[string]json.RawMessage
	if err := strictUnmarshal(b, &top); err != nil || top == nil {
		return nil, invalid("not a JSON object")
	}
	if raw, ok := top["event"]; ok {
		var ev string
		if json.Unmarshal(raw, &ev) != nil {
			return nil, invalid("event is not a string")
		}
		data, hasData := top["data"]
		var obj map[string]json.RawMessage
		known := ev == "hello" || ev == "sync" || ev == "heartbeat" || ev == "presence"
		if !known {
			return &Unknown{Name: ev}, nil
		}
		if !hasData || strictUnmarshal(data, &obj) != nil || obj == nil {
			return nil, invalid("%s event without an object data", ev)
		}
		f := fields{obj: obj, ev: ev}
		switch ev {
		case "hello":
			h := &Hello{}
			f.int("protocolVersion", &h.ProtocolVersion)
			f.str("sessionId", &h.SessionID, false)
			f.str("actorId", &h.ActorID, false)
			f.str("clientId", &h.ClientID, false)
			f.int("cursor", &h.Cursor)
			f.int("latestCursor", &h.LatestCursor)
			f.boolean("requiresSync", &h.RequiresSync)
			f.int("timestamp", &h.Timestamp)
			return h, f.err
		case "sync":
			w := &Wake{}
			f.int("cursor", &w.Cursor)
			f.boolean("requiresPull", &w.RequiresPull)
			f.str("reason", &w.Reason, false)
			f.int("timestamp", &w.Timestamp)
			if f.err == nil && !w.RequiresPull {
				return nil, invalid("sync event requiresPull must be the literal true (§8.3)")
			}
			if f.err == nil && w.Reason != ReasonDeltaTooLarge && w.Reason != ReasonCatchupRequired && w.Reason != ReasonResetRequired {
				return nil, invalid("sync event reason %q is outside the closed set (§8.3)", w.Reason)
			}
			return w, f.err
		case "heartbeat":
			h := &Heartbeat{}
			f.int("timestamp", &h.Timestamp)
			return h, f.err
		case "presence":
			return parsePresence(&f)
		}
	}
	if raw, ok := top["type"]; ok {
		var ty string
		if json.Unmarshal(raw, &ty) != nil {
			return nil, invalid("type is not a string")
		}
		if ty != "ack" {
			return &Unknown{Name: ty}, nil
		}
		f := fields{obj: top, ev: "ack"}
		a := &Ack{}
		f.int("cursor", &a.Cursor)
		return a, f.err
	}
	return &Unknown{}, nil
}

func parsePresence(f *fields) (any, error) {
	var key string
	f.str("scopeKey", &key, true)
	if f.err != nil {
		return nil, f.err
	}
	doc, hasDoc := f.obj["doc"]
	switch {
	case f.has("error"):
		pe := &PresenceError{ScopeKey: key}
		f.str("error", &pe.Error, true)
		f.int("timestamp", &pe.Timestamp)
		if f.err == nil && pe.Error != PresenceTooLarge && pe.Error != PresenceForbidden {
			return nil, invalid("presence error %q is outside the closed set (§8.6.2)", pe.Error)
		}
		return pe, f.err
	case f.has("kind"):
		p := &PresenceFanout{ScopeKey: key}
		f.str("kind", &p.Kind, true)
		f.str("actorId", &p.ActorID, false)
		f.str("clientId", &p.ClientID, false)
		f.int("timestamp", &p.Timestamp)
		if f.err != nil {
			return nil, f.err
		}
		if p.Kind != KindJoin && p.Kind != KindUpdate && p.Kind != KindLeave {
			return nil, invalid("presence kind %q is outside the closed set (§8.6.2)", p.Kind)
		}
		isNull := hasDoc && bytes.Equal(bytes.TrimSpace(doc), []byte("null"))
		if !hasDoc || (p.Kind == KindLeave) != isNull || (!isNull && !isObject(doc)) {
			return nil, invalid("presence %s must carry %s (§8.6.2)", p.Kind, map[bool]string{true: "doc: null", false: "a doc object"}[p.Kind == KindLeave])
		}
		if !isNull {
			p.Doc = doc
		}
		return p, nil
	default:
		p := &PresencePublish{ScopeKey: key}
		if !hasDoc {
			return nil, invalid("presence publish without doc (§8.6.2)")
		}
		if bytes.Equal(bytes.TrimSpace(doc), []byte("null")) {
			return p, nil
		}
		if !isObject(doc) {
			return nil, invalid("presence doc must be a JSON object or null (§8.6.2)")
		}
		p.Doc = doc
		return p, nil
	}
}

func isObject(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return strictUnmarshal(raw, &m) == nil && m != nil
}

// strictUnmarshal decodes keeping numbers as literals.
func strictUnmarshal(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return fmt.Errorf("trailing data")
	}
	return nil
}

// fields reads typed members of a known event, keeping the first error.
type fields struct {
	obj map[string]json.RawMessage
	ev  string
	err error
}

func (f *fields) has(k string) bool { _, ok := f.obj[k]; return ok }

func (f *fields) fail(format string, args ...any) {
	if f.err == nil {
		f.err = invalid(f.ev+": "+format, args...)
	}
}

func (f *fields) int(k string, dst *int64) {
	raw, ok := f.obj[k]
	if !ok {
		f.fail("missing %s", k)
		return
	}
	lit := string(bytes.TrimSpace(raw))
	if lit == "" || strings.ContainsAny(lit, ".eE\"tfn[{") {
		f.fail("%s must be an integer (§8.1)", k)
		return
	}
	var n json.Number = json.Number(lit)
	v, err := n.Int64()
	if err != nil || v > maxSafe || v < -maxSafe {
		f.fail("%s must be an integer within ±(2^53−1) (§8.1)", k)
		return
	}
	*dst = v
}

func (f *fields) str(k string, dst *string, nonEmpty bool) {
	raw, ok := f.obj[k]
	if !ok || json.Unmarshal(raw, dst) != nil {
		f.fail("%s must be a string", k)
		return
	}
	if nonEmpty && *dst == "" {
		f.fail("%s must be non-empty", k)
	}
}

func (f *fields) boolean(k string, dst *bool) {
	raw, ok := f.obj[k]
	if !ok || json.Unmarshal(raw, dst) != nil {
		f.fail("%s must be a boolean", k)
	}
}
