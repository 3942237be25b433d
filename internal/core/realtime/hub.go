package realtime

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// Conn is one client connection as the transport exposes it. Sends
// queue one whole message and must not block for long; they report false
// when the connection cannot take it (closed, or its bounded send queue
// is full), which the hub treats as a dropped delta (§8.2 flow control).
type Conn interface {
	SendText(msg []byte) bool
	SendBinary(msg []byte) bool
	// Close ends the connection; reason is for logs and the close frame.
	Close(reason string)
}

// Limits of a hub. Zero fields take the defaults.
type Limits struct {
	// MaxMessageBytes is the largest binary message, channel tag
	// included: a delta over it becomes a delta-too-large wake-up
	// (§8.2, §8.3). API Gateway WebSocket messages hold 128 KiB.
	MaxMessageBytes int
	// RoundChunkBytes is the largest 0x01 chunk of a round response,
	// tag included (§8.7). API Gateway frames hold 32 KiB.
	RoundChunkBytes int
	// MaxRoundRequestBytes caps one round's request stream.
	MaxRoundRequestBytes int
	// MaxPresenceBytes caps a published presence document (§8.6.2).
	MaxPresenceBytes int
}

// Defaults of Limits.
const (
	DefaultMaxMessageBytes      = 128 << 10
	DefaultRoundChunkBytes      = 32 << 10
	DefaultMaxRoundRequestBytes = 6 << 20
	DefaultMaxPresenceBytes     = 16 << 10
)

// Options configure a Hub.
type Options struct {
	Limits Limits
	// SegmentBaseURL is passed to socket rounds like the HTTP binding's
	// (native signed segment URLs, §5.4).
	SegmentBaseURL string
	Logger         *slog.Logger
}

// Hub holds the realtime sessions of one process. It is safe for
// concurrent use.
type Hub struct {
	e   *engine.Engine
	lim Limits
	seg string
	log *slog.Logger

	mu    sync.Mutex
	parts map[string]*part
}

// part is one partition's sessions, fanout index and presence registry.
type part struct {
	sessions map[*Session]struct{}
	// byKey indexes sessions by registered scope key (§8.2 fanout, §8.6.3
	// presence grant).
	byKey map[string]map[*Session]struct{}
	// present is the presence registry: scope key → publishing sessions
	// (§8.6.4). Pure memory, never storage.
	present map[string]map[*Session]json.RawMessage
}

// NewHub returns a hub serving e.
func NewHub(e *engine.Engine, o Options) *Hub {
	l := o.Limits
	if l.MaxMessageBytes <= 0 {
		l.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if l.RoundChunkBytes <= 1 {
		l.RoundChunkBytes = DefaultRoundChunkBytes
	}
	if l.MaxRoundRequestBytes <= 0 {
		l.MaxRoundRequestBytes = DefaultMaxRoundRequestBytes
	}
	if l.MaxPresenceBytes <= 0 {
		l.MaxPresenceBytes = DefaultMaxPresenceBytes
	}
	lg := o.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	return &Hub{e: e, lim: l, seg: o.SegmentBaseURL, log: lg, parts: map[string]*part{}}
}

// Session is one registered connection (§8.1).
type Session struct {
	h        *Hub
	conn     Conn
	id       string
	auth     engine.Auth
	clientID string

	// Guarded by h.mu.
	epoch         string
	version       uint16
	schemaVersion int32
	regs          []engine.Registration
	keys          map[string]bool
	fingerprint   string
	// observed is the highest notification sequence seen (newer §8.2).
	observed int64
	// suppressed: behind at connect, a gap, a drop or a round in flight;
	// matching commits get catchup-required wake-ups until an ack reaches
	// observed (§8.2).
	suppressed bool
	inRound    bool
	closed     bool
	docs       map[string]json.RawMessage

	// Round input, touched only by the goroutine feeding HandleBinary.
	roundBuf []byte
	// roundBusy is set while a round's response streams (§8.7).
	roundBusy atomic.Bool
}

// ID is the session id sent in hello.
func (s *Session) ID() string { return s.id }

func newSessionID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (h *Hub) part(p string) *part {
	pt := h.parts[p]
	if pt == nil {
		pt = &part{sessions: map[*Session]struct{}{}, byKey: map[string]map[*Session]struct{}{}, present: map[string]map[*Session]json.RawMessage{}}
		h.parts[p] = pt
	}
	return pt
}

// Connect registers conn for (auth, clientID) and sends hello (§8.1). An
// error means nothing was registered; the transport refuses the connect.
func (h *Hub) Connect(ctx context.Context, auth engine.Auth, clientID string, conn Conn) (*Session, error) {
	a, err := h.e.Attach(ctx, auth, clientID)
	if err != nil {
		return nil, err
	}
	s := &Session{h: h, conn: conn, id: newSessionID(), auth: auth, clientID: clientID, docs: map[string]json.RawMessage{}}
	cursor := int64(-1)
	if a.Client != nil {
		cursor = a.Client.Cursor
	}
	latest := a.Head.MaxCommitSeq
	// §8.1/§8.2: a client that never pulled, or is behind, must run a
	// round first; until an ack reaches latest, matching commits wake.
	requiresSync := a.Client == nil || a.Client.Registration == "" || cursor < latest
	h.mu.Lock()
	s.epoch, s.version, s.schemaVersion = a.Head.LogEpoch, a.WireVersion, a.SchemaVersion
	s.observed, s.suppressed = latest, requiresSync
	pt := h.part(auth.Partition)
	pt.sessions[s] = struct{}{}
	conn.SendText(EncodeHello(Hello{
		ProtocolVersion: 1, SessionID: s.id, ActorID: auth.ActorID, ClientID: clientID,
		Cursor: cursor, LatestCursor: latest, RequiresSync: requiresSync, Timestamp: h.e.Now(),
	}))
	h.setRegistrationsLocked(pt, s, a.SchemaVersion, a.Registrations)
	h.mu.Unlock()
	return s, nil
}

// setRegistrationsLocked replaces s's registrations and re-derives its
// index entries and presence grant (§8.6.3): keys it lost leave its own
// documents there; keys it gained deliver the snapshot join-burst.
func (h *Hub) setRegistrationsLocked(pt *part, s *Session, schemaVersion int32, regs []engine.Registration) {
	keys := map[string]bool{}
	for _, k := range h.e.ScopeKeys(schemaVersion, regs) {
		keys[k] = true
	}
	now := h.e.Now()
	for k := range s.keys {
		if keys[k] {
			continue
		}
		h.leaveLocked(pt, s, k, now)
		if set := pt.byKey[k]; set != nil {
			delete(set, s)
			if len(set) == 0 {
				delete(pt.byKey, k)
			}
		}
	}
	for k := range keys {
		if s.keys[k] {
			continue
		}
		set := pt.byKey[k]
		if set == nil {
			set = map[*Session]struct{}{}
			pt.byKey[k] = set
		}
		set[s] = struct{}{}
		for peer, doc := range pt.present[k] {
			if peer != s {
				s.conn.SendText(EncodePresence(PresenceFanout{ScopeKey: k, Kind: KindJoin, ActorID: peer.auth.ActorID, ClientID: peer.clientID, Doc: doc, Timestamp: now}))
			}
		}
	}
	s.keys, s.regs, s.schemaVersion = keys, regs, schemaVersion
	s.fingerprint = fingerprint(s.version, schemaVersion, regs)
}

// fingerprint identifies what a delta for a session depends on, so one
// encoding serves every session with the same registrations.
func fingerprint(v uint16, sv int32, regs []engine.Registration) string {
	var b strings.Builder
	b.Grow(64)
	var n [8]byte
	binary.LittleEndian.PutUint16(n[:], v)
	binary.LittleEndian.PutUint32(n[2:], uint32(sv))
	b.Write(n[:6])
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

// Notify feeds one durably committed commit of partition to the hub
// (§8.2): every session advances its notification sequence; a
// non-adjacent sequence (a gap or a reordering, newer §8.2) forces a
// catchup-required wake-up; a session whose registrations the commit
// touches gets the delta, or a wake-up when it is suppressed, mid-round,
// or the delta exceeds the message limit (§8.3). Sends never block on a
// slow connection: a refused send is a drop.
func (h *Hub) Notify(partition string, c *store.Commit) {
	keys := h.e.CommitScopeKeys(c)
	h.mu.Lock()
	defer h.mu.Unlock()
	pt := h.parts[partition]
	if pt == nil {
		return
	}
	candidates := map[*Session]struct{}{}
	for _, k := range keys {
		for s := range pt.byKey[k] {
			candidates[s] = struct{}{}
		}
	}
	now := h.e.Now()
	deltas := map[string][]byte{}
	for s := range pt.sessions {
		adjacent := c.Seq == s.observed+1
		s.observed = max(s.observed, c.Seq)
		_, touched := candidates[s]
		if !adjacent {
			// A gap or a reordering: something may have been missed.
			s.suppressed = true
			if len(s.regs) > 0 {
				s.wake(ReasonCatchupRequired, now)
			}
			continue
		}
		if !touched {
			continue
		}
		msg, ok := deltas[s.fingerprint]
		if !ok {
			d, err := h.e.EncodeDelta(s.version, s.schemaVersion, s.epoch, s.regs, c)
			if err != nil {
				h.log.Error("realtime: encode delta", "partition", partition, "seq", c.Seq, "error", err.Error())
				d = nil
				msg = []byte{}
			} else if d != nil {
				msg = make([]byte, 1+len(d))
				msg[0] = TagDelta
				copy(msg[1:], d)
			}
			deltas[s.fingerprint] = msg
		}
		if msg == nil {
			continue // stored scope keys overlap but no registration matches all its scopes
		}
		switch {
		case len(msg) == 0:
			s.suppressed = true
			s.wake(ReasonCatchupRequired, now)
		case s.suppressed || s.inRound:
			// §8.2/§8.7: no delta while behind or while a response streams.
			s.suppressed = true
			s.wake(ReasonCatchupRequired, now)
		case len(msg) > h.lim.MaxMessageBytes:
			s.suppressed = true
			s.wake(ReasonDeltaTooLarge, now)
		case !s.conn.SendBinary(msg):
			s.suppressed = true
			s.wake(ReasonCatchupRequired, now)
		}
	}
}

func (s *Session) wake(reason string, now int64) {
	s.conn.SendText(EncodeWake(s.observed, reason, now))
}

// Heartbeat sends §8.5 heartbeats to every session.
func (h *Hub) Heartbeat() {
	h.mu.Lock()
	defer h.mu.Unlock()
	msg := EncodeHeartbeat(h.e.Now())
	for _, pt := range h.parts {
		for s := range pt.sessions {
			s.conn.SendText(msg)
		}
	}
}

// RunHeartbeats sends heartbeats every interval until ctx ends.
func (h *Hub) RunHeartbeats(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			h.Heartbeat()
		}
	}
}

// RefreshScopes re-resolves the registrations of partition's sessions
// (all, or actorID's) — a decision point of §3.3: a revoked scope stops
// deltas and drops presence on its keys from here on. A resolver that
// cannot answer fails closed: the session keeps no registration and is
// told to sync.
func (h *Hub) RefreshScopes(ctx context.Context, partition, actorID string) {
	h.mu.Lock()
	pt := h.parts[partition]
	var list []*Session
	if pt != nil {
		for s := range pt.sessions {
			if actorID == "" || s.auth.ActorID == actorID {
				list = append(list, s)
			}
		}
	}
	h.mu.Unlock()
	for _, s := range list {
		h.mu.Lock()
		regs, sv := s.regs, s.schemaVersion
		h.mu.Unlock()
		next, err := h.e.Reresolve(ctx, s.auth, s.clientID, sv, regs)
		h.mu.Lock()
		if !s.closed {
			if err != nil {
				h.log.Warn("realtime: scope refresh failed; registrations dropped", "partition", partition, "actor", s.auth.ActorID, "error", err.Error())
				next = nil
				s.suppressed = true
				s.wake(ReasonCatchupRequired, h.e.Now())
			}
			h.setRegistrationsLocked(pt, s, sv, next)
		}
		h.mu.Unlock()
	}
}

// Sessions counts the registered sessions of partition.
func (h *Hub) Sessions(partition string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if pt := h.parts[partition]; pt != nil {
		return len(pt.sessions)
	}
	return 0
}

// Close unregisters the session: its presence leaves (§8.6.1). Safe to
// call more than once.
func (s *Session) Close() {
	h := s.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	pt := h.parts[s.auth.Partition]
	if pt == nil {
		return
	}
	h.setRegistrationsLocked(pt, s, s.schemaVersion, nil)
	delete(pt.sessions, s)
	if len(pt.sessions) == 0 {
		delete(h.parts, s.auth.Partition)
	}
}

// violation closes the connection for a protocol violation (§8.7).
func (s *Session) violation(why string) {
	s.h.log.Info("realtime: closing a connection for a protocol violation", "partition", s.auth.Partition, "client", s.clientID, "reason", why)
	s.conn.Close(why)
	s.Close()
}

// HandleText handles one client→server text message: an ack (§8.2) or a
// presence publish (§8.6.2). Unknown or unparsable JSON is tolerated
// (§8.1); a known message with a wrong shape closes the connection.
func (s *Session) HandleText(ctx context.Context, msg []byte) {
	m, err := Parse(msg)
	if err != nil {
		if strings.Contains(string(msg), `"presence"`) || strings.Contains(string(msg), `"ack"`) {
			s.violation(string(syncerr.InvalidRequest) + ": " + syncerr.As(err).Message)
		}
		return
	}
	switch m := m.(type) {
	case *Ack:
		s.ack(ctx, m.Cursor)
	case *PresencePublish:
		s.publish(m)
	}
}

func (s *Session) ack(ctx context.Context, cursor int64) {
	h := s.h
	h.mu.Lock()
	if s.closed {
		h.mu.Unlock()
		return
	}
	// Newer §8.2: a catch-up ack advances the notification sequence; an
	// ack that reaches everything observed lifts suppression.
	if cursor >= s.observed {
		s.observed = cursor
		s.suppressed = false
	}
	epoch := s.epoch
	h.mu.Unlock()
	if _, err := h.e.Ack(ctx, s.auth, s.clientID, epoch, cursor); err != nil {
		h.log.Warn("realtime: ack not persisted", "partition", s.auth.Partition, "client", s.clientID, "error", err.Error())
	}
}

func (s *Session) publish(p *PresencePublish) {
	h := s.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.closed {
		return
	}
	now := h.e.Now()
	if !s.keys[p.ScopeKey] {
		s.conn.SendText(EncodePresenceError(p.ScopeKey, PresenceForbidden, now))
		return
	}
	pt := h.parts[s.auth.Partition]
	if p.Doc == nil {
		h.leaveLocked(pt, s, p.ScopeKey, now)
		return
	}
	if len(p.Doc) > h.lim.MaxPresenceBytes {
		s.conn.SendText(EncodePresenceError(p.ScopeKey, PresenceTooLarge, now))
		return
	}
	doc := append(json.RawMessage(nil), p.Doc...)
	kind := KindUpdate
	if _, ok := s.docs[p.ScopeKey]; !ok {
		kind = KindJoin
	}
	s.docs[p.ScopeKey] = doc
	set := pt.present[p.ScopeKey]
	if set == nil {
		set = map[*Session]json.RawMessage{}
		pt.present[p.ScopeKey] = set
	}
	set[s] = doc
	h.fanPresenceLocked(pt, s, PresenceFanout{ScopeKey: p.ScopeKey, Kind: kind, ActorID: s.auth.ActorID, ClientID: s.clientID, Doc: doc, Timestamp: now})
}

// leaveLocked removes s's document on key and fans a leave (§8.6.4).
func (h *Hub) leaveLocked(pt *part, s *Session, key string, now int64) {
	if _, ok := s.docs[key]; !ok {
		return
	}
	delete(s.docs, key)
	if set := pt.present[key]; set != nil {
		delete(set, s)
		if len(set) == 0 {
			delete(pt.present, key)
		}
	}
	h.fanPresenceLocked(pt, s, PresenceFanout{ScopeKey: key, Kind: KindLeave, ActorID: s.auth.ActorID, ClientID: s.clientID, Timestamp: now})
}

// fanPresenceLocked delivers ev to every other session registered on its
// key — exactly the scope-mates (§8.6.3 privacy floor).
func (h *Hub) fanPresenceLocked(pt *part, from *Session, ev PresenceFanout) {
	msg := EncodePresence(ev)
	for peer := range pt.byKey[ev.ScopeKey] {
		if peer != from {
			peer.conn.SendText(msg)
		}
	}
}

// HandleBinary handles one client→server binary message: a chunk of a
// sync round (§8.7). Another tag, an invalid envelope header, bytes past
// the request's END (pipelining) or round bytes while a response streams
// close the connection. A complete request runs in its own goroutine, so
// control messages keep flowing during the round.
func (s *Session) HandleBinary(ctx context.Context, msg []byte) {
	if len(msg) == 0 || msg[0] != TagRound {
		s.violation("client→server binary message without the 0x01 round tag (§8.7)")
		return
	}
	if s.roundBusy.Load() {
		s.violation("round bytes while a response is in flight (§8.7 no pipelining)")
		return
	}
	s.roundBuf = append(s.roundBuf, msg[1:]...)
	if len(s.roundBuf) > s.h.lim.MaxRoundRequestBytes {
		s.violation("round request exceeds the size limit")
		return
	}
	n, err := requestLength(s.roundBuf)
	if err != nil {
		s.violation(err.Error())
		return
	}
	if n < 0 {
		return // incomplete
	}
	if n != len(s.roundBuf) {
		s.violation("bytes past the request's END frame (§8.7 no pipelining)")
		return
	}
	body := s.roundBuf
	s.roundBuf = nil
	s.roundBusy.Store(true)
	s.h.mu.Lock()
	s.inRound = true
	s.h.mu.Unlock()
	go s.runRound(context.WithoutCancel(ctx), body)
}

// requestLength returns the length of the complete request message at
// the start of b, -1 when b is a valid but incomplete prefix, or an error
// when the envelope header is not an SSP2 request header (§8.7: fatal).
func requestLength(b []byte) (int, error) {
	if len(b) >= 8 {
		if [4]byte(b[:4]) != wire.Magic || !wire.SupportedVersion(binary.LittleEndian.Uint16(b[4:])) || wire.MsgKind(b[6]) != wire.KindRequest || b[7] != 0 {
			return 0, errHeader
		}
	} else {
		for i := 0; i < len(b) && i < 4; i++ {
			if b[i] != wire.Magic[i] {
				return 0, errHeader
			}
		}
		return -1, nil
	}
	off := 8
	for {
		if len(b)-off < 5 {
			return -1, nil
		}
		t := b[off]
		n := int(binary.LittleEndian.Uint32(b[off+1:]))
		off += 5
		if t == byte(wire.FrameEnd) {
			return off, nil
		}
		if n > len(b)-off {
			return -1, nil
		}
		off += n
	}
}

var errHeader = syncerr.New(syncerr.InvalidRequest, "round stream does not start with an SSP2 request header (§8.7)")

// roundWriter streams a round response as 0x01 messages of at most the
// chunk limit (§8.7; frames are concatenated, boundaries carry nothing).
type roundWriter struct {
	conn  Conn
	limit int
	buf   []byte
	n     int64
	err   bool
}

func (w *roundWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	for len(p) > 0 {
		// A full chunk goes out only once more bytes follow, so the
		// final chunk stays held until the round's work is done.
		if len(w.buf) >= w.limit {
			w.flush()
		}
		if len(w.buf) == 0 {
			w.buf = append(w.buf, TagRound)
		}
		k := min(w.limit-len(w.buf), len(p))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
	}
	return int(w.n), nil
}

func (w *roundWriter) flush() {
	if len(w.buf) > 1 && !w.conn.SendBinary(w.buf) {
		w.err = true
	}
	w.buf = nil
}

func (s *Session) runRound(ctx context.Context, body []byte) {
	h := s.h
	w := &roundWriter{conn: s.conn, limit: h.lim.RoundChunkBytes}
	var rep *engine.Report
	var err error
	version := binary.LittleEndian.Uint16(body[4:])
	if m, derr := wire.Decode(body); derr != nil {
		err = derr
	} else if req, rerr := m.Request(); rerr != nil {
		err = rerr
	} else if req.Header.ClientID != s.clientID {
		err = syncerr.New(syncerr.InvalidClientID, "the round's clientId differs from the connection's (§8.7)")
	} else {
		rep, err = h.e.HandleSync(ctx, s.auth, body, engine.SyncOptions{Mode: engine.ModeSync, SegmentBaseURL: h.seg}, w)
	}
	if err != nil && (rep == nil || rep.BytesOut == 0) {
		// §8.7 Failures: RESP_HEADER, ERROR, END on the socket.
		h.mu.Lock()
		epoch := s.epoch
		h.mu.Unlock()
		if rep != nil && rep.LogEpoch != "" {
			epoch = rep.LogEpoch
		}
		_, _ = w.Write(h.e.ErrorResponse(version, epoch, err))
	}
	// §8.7: the round is complete at its END. Registration and the
	// round flags change before the final chunk goes out, so the next
	// 0x01 message the client sends after END is a new round.
	h.mu.Lock()
	s.inRound = false
	if !s.closed && err == nil && rep != nil && rep.ErrorCode == "" && rep.Pulled {
		// A successful round with a pull replaces the registrations
		// (effective scopes as this round resolved them) and the version.
		if rep.LogEpoch != "" {
			s.epoch = rep.LogEpoch
		}
		s.version = rep.WireVersion
		h.setRegistrationsLocked(h.part(s.auth.Partition), s, rep.SchemaVersion, rep.Registrations)
	}
	h.mu.Unlock()
	s.roundBusy.Store(false)
	w.flush()
	if w.err {
		s.violation("round response could not be delivered")
	}
}
