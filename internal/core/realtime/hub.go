package realtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
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

// WebSocket close codes the hub asks for (RFC 6455 §7.4.1).
const (
	CloseNormal          = 1000 // the log epoch rotated, the partition is gone
	CloseGoingAway       = 1001 // Drain: the instance scales in
	ClosePolicyViolation = 1008 // a protocol violation, an expired token
	CloseMessageTooBig   = 1009 // a round request over the connection's cap
	CloseTryAgainLater   = 1013 // the actor's or the hub's round buffer is full
)

// CodeCloser is implemented by a Conn that can carry a close code; the
// hub uses it when present, Close otherwise.
type CodeCloser interface {
	CloseCode(code int, reason string)
}

// RoundSender is implemented by a Conn that can apply backpressure to a
// round's response (§8.7 Backpressure) and say when a message leaves.
// SendRound queues msg, waiting for room instead of refusing it (false
// only when the connection is gone); writing, when not nil, is called by
// the transport's writer right before it writes msg to the socket (not
// after: a quick client's reply to the final chunk could otherwise reach
// the read loop before the writer got round to saying it had written).
type RoundSender interface {
	SendRound(msg []byte, writing func()) bool
}

func closeConn(c Conn, code int, reason string) {
	if cc, ok := c.(CodeCloser); ok {
		cc.CloseCode(code, reason)
		return
	}
	c.Close(reason)
}

// Limits of a hub. Zero fields take the defaults.
type Limits struct {
	// MaxMessageBytes is the largest binary message, channel tag
	// included: a delta over it becomes a delta-too-large wake-up
	// (§8.2, §8.3).
	MaxMessageBytes int
	// RoundChunkBytes is the largest 0x01 chunk of a round response,
	// tag included (§8.7).
	RoundChunkBytes int
	// MaxRoundRequestBytes caps one connection's buffered round request
	// (close 1009 past it).
	MaxRoundRequestBytes int
	// MaxActorRoundBytes caps the round bytes one actor's connections
	// buffer together (default 2 × MaxRoundRequestBytes), and
	// MaxHubRoundBytes those of every connection of the hub (default
	// 64 × MaxRoundRequestBytes); a round that would pass either closes
	// its connection with 1013 (try again later).
	MaxActorRoundBytes int
	MaxHubRoundBytes   int
	// MaxPresenceBytes caps a published presence document (§8.6.2).
	MaxPresenceBytes int
	// PresencePerSecond caps how often one connection's document on one
	// scope key fans out; publishes in between coalesce, only the latest
	// goes out when the next slot opens (default 10).
	PresencePerSecond int
}

// Defaults of Limits and Options.
const (
	DefaultMaxMessageBytes      = 128 << 10
	DefaultRoundChunkBytes      = 32 << 10
	DefaultMaxRoundRequestBytes = 6 << 20
	DefaultMaxPresenceBytes     = 16 << 10
	DefaultPresencePerSecond    = 10
	DefaultReconcileInterval    = 30 * time.Second
	DefaultAuthInterval         = 30 * time.Second
	DefaultHeartbeatInterval    = 30 * time.Second
	DefaultPipelineHold         = 2 * time.Millisecond
)

// Options configure a Hub.
type Options struct {
	Limits Limits
	// SegmentBaseURL is passed to socket rounds like the HTTP binding's
	// (native signed segment URLs, §5.4).
	SegmentBaseURL string
	Logger         *slog.Logger
	// ReconcileInterval: how often Run reads the head of every partition
	// with sessions and delivers what hints missed (default 30 s).
	ReconcileInterval time.Duration
	// AuthInterval: how often Run re-resolves the grants of every
	// connected (partition, actor) (default 30 s).
	AuthInterval time.Duration
	// HeartbeatInterval: how often Run sends §8.5 heartbeats (default
	// 30 s).
	HeartbeatInterval time.Duration
	// PipelineHold is the shortest time between a round request's END
	// and its response's END (default 2 ms; negative: none). A client
	// that sends two requests back to back (§8.7 forbids it) has its
	// second one arrive inside that time, while the response is
	// provably in flight, so it is always refused — also when the round
	// itself is faster than the client's two sends.
	PipelineHold time.Duration
	// InstanceID is this hub's origin in PresenceEvent (default random).
	InstanceID string
	// OnPresence, when set, receives every presence change of this hub's
	// sessions after the local fanout, for peer instances. It is called
	// with the hub's lock held: it must not block and must not call the
	// hub.
	OnPresence func(PresenceEvent)
}

// Hub holds the realtime sessions of one process. It is safe for
// concurrent use.
type Hub struct {
	e   *engine.Engine
	lim Limits
	seg string
	log *slog.Logger

	reconcileEvery, authEvery, heartbeatEvery time.Duration
	pipelineHold                              time.Duration
	instanceID                                string
	onPresence                                func(PresenceEvent)

	mu    sync.Mutex
	parts map[string]*part
	// remote holds peer instances' presence documents (§8.6 across
	// instances): partition → scope key → origin+session → document.
	remote map[string]map[string]map[string]remoteDoc

	// Round buffer accounting (Limits), guarded by bmu.
	bmu        sync.Mutex
	actorBytes map[string]int
	hubBytes   int

	// Pending hints: partition → work, guarded by hmu; kick wakes Run.
	hmu   sync.Mutex
	hints map[string]hint
	kick  chan struct{}
}

// part is one partition's sessions, fanout index and presence registry.
type part struct {
	name string
	// dmu serializes delivery (log reads and decisions in commit order).
	dmu sync.Mutex

	// Guarded by h.mu.
	sessions map[*Session]struct{}
	// byKey indexes sessions by registered scope key (§8.2 fanout, §8.6.3
	// presence grant).
	byKey map[string]map[*Session]struct{}
	// present is the presence registry: scope key → publishing sessions
	// (§8.6.4). Pure memory, never storage.
	present map[string]map[*Session]json.RawMessage
	// delivered: every commit ≤ delivered was decided for every session
	// of the partition (the hub's feed position).
	delivered int64
	// epoch is the log epoch of the last head this hub saw for the
	// partition (a connect's or a head read's).
	epoch  string
	closed bool
}

// NewHub returns a hub serving e. Call Run for hints, reconciliation,
// authorization re-checks and heartbeats.
func NewHub(e *engine.Engine, o Options) *Hub {
	l := o.Limits
	l.MaxMessageBytes = orDefault(l.MaxMessageBytes, DefaultMaxMessageBytes)
	if l.RoundChunkBytes <= 1 {
		l.RoundChunkBytes = DefaultRoundChunkBytes
	}
	l.MaxRoundRequestBytes = orDefault(l.MaxRoundRequestBytes, DefaultMaxRoundRequestBytes)
	l.MaxActorRoundBytes = orDefault(l.MaxActorRoundBytes, 2*l.MaxRoundRequestBytes)
	l.MaxHubRoundBytes = orDefault(l.MaxHubRoundBytes, 64*l.MaxRoundRequestBytes)
	l.MaxPresenceBytes = orDefault(l.MaxPresenceBytes, DefaultMaxPresenceBytes)
	l.PresencePerSecond = orDefault(l.PresencePerSecond, DefaultPresencePerSecond)
	lg := o.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	h := &Hub{
		e: e, lim: l, seg: o.SegmentBaseURL, log: lg,
		reconcileEvery: orDefault(o.ReconcileInterval, DefaultReconcileInterval),
		authEvery:      orDefault(o.AuthInterval, DefaultAuthInterval),
		heartbeatEvery: orDefault(o.HeartbeatInterval, DefaultHeartbeatInterval),
		pipelineHold:   o.PipelineHold,
		instanceID:     o.InstanceID, onPresence: o.OnPresence,
		parts: map[string]*part{}, remote: map[string]map[string]map[string]remoteDoc{},
		actorBytes: map[string]int{}, hints: map[string]hint{}, kick: make(chan struct{}, 1),
	}
	if o.PipelineHold == 0 {
		h.pipelineHold = DefaultPipelineHold
	}
	if h.instanceID == "" {
		h.instanceID = newSessionID()
	}
	return h
}

// Limits returns the hub's limits, defaults applied.
func (h *Hub) Limits() Limits { return h.lim }

// InstanceID is this hub's origin id in presence events.
func (h *Hub) InstanceID() string { return h.instanceID }

// ConnectOptions carry transport facts of one connect.
type ConnectOptions struct {
	// ExpiresAt is the token's expiry, epoch ms (engine clock); 0 = none.
	// The session closes then (§8.1: the client reconnects with a fresh
	// token), and its rounds and publishes from then on are refused.
	ExpiresAt int64
}

// Session is one registered connection (§8.1).
type Session struct {
	h        *Hub
	conn     Conn
	id       string
	auth     engine.Auth
	clientID string
	// authCtx carries the connect request's values (verified claims for
	// the claim resolver) to later re-checks, without its cancellation.
	authCtx   context.Context
	expiresAt int64
	expiry    *time.Timer

	// Guarded by h.mu.
	epoch         string
	version       uint16
	schemaVersion int32
	regs          []engine.Registration
	keys          map[string]bool
	deltaKey      string
	// since: every commit ≤ since is accounted for (observed at connect
	// or acked); the session observed max(since, part.delivered).
	since int64
	// stamp is the last commit seq decided for this session (a commit
	// reaches a session through several keys at most once).
	stamp int64
	// suppressed: behind at connect, a gap, a drop or a round in flight;
	// matching commits get catchup-required wake-ups until an ack reaches
	// what it observed (§8.2).
	suppressed bool
	inRound    bool
	roundGen   uint64
	closed     bool
	docs       map[string]json.RawMessage
	pres       map[string]*presenceSlot

	// Round input, touched only by the goroutine feeding HandleBinary.
	roundBuf []byte
	// roundHeld: bytes reserved in the hub's round accounting, incoming
	// the part of them the transport reserved for the message it is
	// reading (h.bmu).
	roundHeld, incoming int
	// gone mirrors closed for the transport's goroutine: input after
	// the session closed is dropped.
	gone atomic.Bool
	// roundBusy is set from a request's END until its response's final
	// chunk goes to the socket (§8.7: round bytes then are pipelining).
	roundBusy atomic.Bool
}

// ID is the session id sent in hello.
func (s *Session) ID() string { return s.id }

func newSessionID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// partLocked returns p's state, creating it (fed from delivered) when
// absent; created reports that.
func (h *Hub) partLocked(p string, delivered int64) (pt *part, created bool) {
	pt = h.parts[p]
	if pt == nil {
		pt = &part{name: p, sessions: map[*Session]struct{}{}, byKey: map[string]map[*Session]struct{}{}, present: map[string]map[*Session]json.RawMessage{}, delivered: delivered}
		h.parts[p] = pt
		created = true
	}
	return pt, created
}

// Connect registers conn for (auth, clientID) and sends hello (§8.1). An
// error means nothing was registered; the transport refuses the connect.
func (h *Hub) Connect(ctx context.Context, auth engine.Auth, clientID string, conn Conn, o ConnectOptions) (*Session, error) {
	if o.ExpiresAt > 0 && o.ExpiresAt <= h.e.Now() {
		return nil, syncerr.New(syncerr.AuthRequired, "the token has expired")
	}
	a, err := h.e.Attach(ctx, auth, clientID)
	if err != nil {
		return nil, err
	}
	s := &Session{h: h, conn: conn, id: newSessionID(), auth: auth, clientID: clientID, authCtx: context.WithoutCancel(ctx), expiresAt: o.ExpiresAt, docs: map[string]json.RawMessage{}}
	cursor := int64(-1)
	if a.Client != nil {
		cursor = a.Client.Cursor
	}
	h.mu.Lock()
	pt, created := h.partLocked(auth.Partition, a.Head.MaxCommitSeq)
	// A connect that saw another epoch than the partition's sessions
	// did: the epoch rotated (§2.1); the head read settles who is stale.
	rotated := !created && pt.epoch != a.Head.LogEpoch
	pt.epoch = a.Head.LogEpoch
	// The hub may already have fed commits past the head this connect
	// read: those were never decided for this session, so its latest is
	// the later of the two.
	latest := max(a.Head.MaxCommitSeq, pt.delivered)
	// §8.1/§8.2: a client that never pulled, or is behind, must run a
	// round first; until an ack reaches latest, matching commits wake.
	requiresSync := a.Client == nil || a.Client.Registration == "" || cursor < latest
	s.epoch, s.version, s.schemaVersion = a.Head.LogEpoch, a.WireVersion, a.SchemaVersion
	s.since, s.stamp, s.suppressed = latest, latest, requiresSync
	pt.sessions[s] = struct{}{}
	conn.SendText(EncodeHello(Hello{
		ProtocolVersion: 1, SessionID: s.id, ActorID: auth.ActorID, ClientID: clientID,
		Cursor: cursor, LatestCursor: latest, RequiresSync: requiresSync, Timestamp: h.e.Now(),
	}))
	h.setRegistrationsLocked(pt, s, a.SchemaVersion, a.Registrations)
	if o.ExpiresAt > 0 {
		s.expiry = time.AfterFunc(time.Duration(o.ExpiresAt-h.e.Now())*time.Millisecond, s.expire)
	}
	h.mu.Unlock()
	if created || rotated {
		// A commit hinted before this partition had a session was not
		// fed; read the head once so it is (§8.2, no gap).
		h.HintHead(auth.Partition)
	}
	return s, nil
}

// setRegistrationsLocked replaces s's registrations and re-derives its
// index entries and presence grant (§8.6.3): keys it lost leave its own
// documents there; keys it gained deliver the snapshot join-burst, local
// and remote documents alike.
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
		for _, rd := range h.remote[pt.name][k] {
			s.conn.SendText(EncodePresence(PresenceFanout{ScopeKey: k, Kind: KindJoin, ActorID: rd.actorID, ClientID: rd.clientID, Doc: rd.doc, Timestamp: now}))
		}
	}
	s.keys, s.regs, s.schemaVersion = keys, regs, schemaVersion
	s.deltaKey = DeltaKey(s.epoch, s.version, schemaVersion, regs)
}

// observedLocked is the highest commit seq s has been notified about.
func (s *Session) observedLocked(pt *part) int64 { return max(s.since, pt.delivered) }

func (s *Session) wakeLocked(pt *part, reason string, now int64) {
	s.conn.SendText(EncodeWake(s.observedLocked(pt), reason, now))
}

// Sessions counts the registered sessions of partition ("" = all).
func (h *Hub) Sessions(partition string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if partition == "" {
		n := 0
		for _, pt := range h.parts {
			n += len(pt.sessions)
		}
		return n
	}
	if pt := h.parts[partition]; pt != nil {
		return len(pt.sessions)
	}
	return 0
}

// Drain closes every session with a going-away close (1001): the
// instance is scaling in and clients reconnect elsewhere.
func (h *Hub) Drain(reason string) {
	for _, s := range h.allSessions() {
		s.closeWith(CloseGoingAway, reason)
	}
}

func (h *Hub) allSessions() []*Session {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*Session
	for _, pt := range h.parts {
		for s := range pt.sessions {
			out = append(out, s)
		}
	}
	return out
}

// closeWith closes the connection with code and unregisters the session.
func (s *Session) closeWith(code int, reason string) {
	closeConn(s.conn, code, reason)
	s.Close()
}

// Close unregisters the session: its presence leaves (§8.6.1) and its
// buffered round bytes are released. Safe to call more than once.
func (s *Session) Close() {
	h := s.h
	// Every call releases: the read loop may have buffered more after
	// a close from elsewhere.
	s.releaseRound()
	h.mu.Lock()
	if s.closed {
		h.mu.Unlock()
		return
	}
	s.closed = true
	s.gone.Store(true)
	if s.expiry != nil {
		s.expiry.Stop()
	}
	for _, sl := range s.pres {
		if sl.timer != nil {
			sl.timer.Stop()
		}
	}
	if pt := h.parts[s.auth.Partition]; pt != nil {
		h.setRegistrationsLocked(pt, s, s.schemaVersion, nil)
		delete(pt.sessions, s)
		if len(pt.sessions) == 0 {
			pt.closed = true
			delete(h.parts, s.auth.Partition)
		}
	}
	h.mu.Unlock()
}

// expired reports whether the session's token has expired.
func (s *Session) expired() bool {
	return s.expiresAt > 0 && s.h.e.Now() >= s.expiresAt
}

// expire closes the session at its token's expiry (§8.1: the client
// reconnects and authenticates again).
func (s *Session) expire() {
	s.h.log.Info("realtime: closing a connection whose token expired", "partition", s.auth.Partition, "client", s.clientID)
	s.closeWith(ClosePolicyViolation, "token expired")
}

// violation closes the connection for a protocol violation (§8.7).
func (s *Session) violation(why string) {
	s.h.log.Info("realtime: closing a connection for a protocol violation", "partition", s.auth.Partition, "client", s.clientID, "reason", why)
	s.closeWith(ClosePolicyViolation, why)
}

// HandleText handles one client→server text message by the one input
// rule, ClassifyText: an ack (§8.2) or a presence publish (§8.6.2);
// tolerated input is ignored, malformed input closes the connection. A
// message after the token expired closes it too.
func (s *Session) HandleText(ctx context.Context, msg []byte) {
	if s.gone.Load() {
		return
	}
	if s.expired() {
		s.expire()
		return
	}
	m, verdict, err := ClassifyText(msg)
	switch verdict {
	case Reject:
		se := syncerr.As(err)
		why := err.Error()
		if se != nil {
			why = string(se.Code) + ": " + se.Message
		}
		s.violation(why)
	case Handle:
		switch m := m.(type) {
		case *Ack:
			s.ack(ctx, m.Cursor)
		case *PresencePublish:
			s.publish(m)
		}
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
	if pt := h.parts[s.auth.Partition]; pt != nil && cursor >= s.observedLocked(pt) {
		s.since = cursor
		s.suppressed = false
	}
	epoch := s.epoch
	h.mu.Unlock()
	if _, err := h.e.Ack(ctx, s.auth, s.clientID, epoch, cursor); err != nil {
		h.log.Warn("realtime: ack not persisted", "partition", s.auth.Partition, "client", s.clientID, "error", err.Error())
	}
}
