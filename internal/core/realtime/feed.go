package realtime

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// The feed: the log is the truth, notifications are hints (§8.2). Per
// partition with sessions the hub keeps the last commit it decided
// (part.delivered); a hint only says "the log reached seq", and the hub
// reads the log from delivered to there, in order, deciding each commit
// for every session. A lost, late, duplicated or reordered hint cannot
// make a gap: the next hint, or the periodic reconciliation's head read,
// delivers what was missed, in order.

type hint struct {
	seq  int64
	head bool // re-read the head: epoch rotation, removal, reconciliation
}

// Hint says partition's log reached seq. Non-blocking, safe from any
// goroutine; Run does the work.
func (h *Hub) Hint(partition string, seq int64) {
	h.addHint(partition, hint{seq: seq})
}

// HintHead says partition's head changed other than by a commit (epoch
// rotation, removal): Run re-reads it now. Non-blocking.
func (h *Hub) HintHead(partition string) {
	h.addHint(partition, hint{head: true})
}

func (h *Hub) addHint(p string, x hint) {
	h.hmu.Lock()
	cur := h.hints[p]
	cur.seq = max(cur.seq, x.seq)
	cur.head = cur.head || x.head
	h.hints[p] = cur
	h.hmu.Unlock()
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// Notify hands one durably committed commit of partition to the hub and
// delivers it before returning (tests, and a caller that holds the
// commit): commits the feed has not decided before it are read from the
// log first, so order and contiguity hold; a commit already decided is a
// duplicate and ignored. Production callers use Hint.
func (h *Hub) Notify(partition string, c *store.Commit) {
	ctx := context.Background()
	pt := h.lockFeed(partition)
	if pt == nil {
		return
	}
	defer pt.dmu.Unlock()
	h.readLogLocked(ctx, pt, c.Seq-1)
	h.deliver(pt, c)
}

// feedThrough delivers partition's log through seq before returning.
func (h *Hub) feedThrough(ctx context.Context, partition string, seq int64) {
	h.feed(ctx, partition, hint{seq: seq})
}

// lockFeed returns partition's state with its feed lock held, nil when
// it has no session.
func (h *Hub) lockFeed(p string) *part {
	h.mu.Lock()
	pt := h.parts[p]
	h.mu.Unlock()
	if pt == nil {
		return nil
	}
	pt.dmu.Lock()
	return pt
}

// Run does the hub's background work until ctx ends: hints (log reads),
// reconciliation every ReconcileInterval, authorization re-checks every
// AuthInterval and heartbeats every HeartbeatInterval (§8.5).
func (h *Hub) Run(ctx context.Context) {
	rec := time.NewTicker(h.reconcileEvery)
	defer rec.Stop()
	au := time.NewTicker(h.authEvery)
	defer au.Stop()
	hb := time.NewTicker(h.heartbeatEvery)
	defer hb.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.kick:
			h.processHints(ctx)
		case <-rec.C:
			h.Reconcile(ctx)
		case <-au.C:
			h.RecheckAuth(ctx)
		case <-hb.C:
			h.Heartbeat()
		}
	}
}

// processHints takes the pending hints and works them, one partition
// after another.
func (h *Hub) processHints(ctx context.Context) {
	h.hmu.Lock()
	work := h.hints
	h.hints = make(map[string]hint, len(work))
	h.hmu.Unlock()
	parallel(ctx, work, func(p string, x hint) { h.feed(ctx, p, x) })
}

// workers bounds the partitions (or actors) the hub works on at once: a
// slow log read or resolver call for one does not hold up the others;
// one partition's feed stays in order (part.dmu).
const workers = 16

// parallel runs fn for every entry of m, at most workers at a time, and
// returns when all are done or ctx ended.
func parallel[K comparable, V any](ctx context.Context, m map[K]V, fn func(K, V)) {
	sem := make(chan struct{}, workers)
	var wg sync.WaitGroup
	for k, v := range m {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(k, v)
		}()
	}
	wg.Wait()
}

// Reconcile reads the head of every partition with sessions and delivers
// what hints missed, detects an epoch rotation and a removed partition
// (the backstop of HintHead).
func (h *Hub) Reconcile(ctx context.Context) {
	h.mu.Lock()
	names := make(map[string]hint, len(h.parts))
	for p := range h.parts {
		names[p] = hint{head: true}
	}
	h.mu.Unlock()
	parallel(ctx, names, func(p string, x hint) { h.feed(ctx, p, x) })
}

// feed works one partition's hint: a head read when asked, then the log
// up to the hinted (or head) seq, in order.
func (h *Hub) feed(ctx context.Context, p string, x hint) {
	pt := h.lockFeed(p)
	if pt == nil {
		return // no session here: nothing to deliver
	}
	defer pt.dmu.Unlock()
	through := x.seq
	if x.head {
		head, ok, err := h.e.PartitionHead(ctx, p)
		if err != nil {
			h.log.Warn("realtime: head read failed; retried at the next hint or reconciliation", "partition", p, "error", err.Error())
			return
		}
		if !h.checkHead(pt, head, ok) {
			return
		}
		through = max(through, head.MaxCommitSeq)
	}
	h.readLogLocked(ctx, pt, through)
}

// checkHead applies a fresh head to the partition's sessions: a removed
// partition closes them; a session on another log epoch than the head's
// gets reset-required (§8.3) and is closed (§2.1: its cursors mean
// nothing in the new epoch). It reports whether the feed goes on.
func (h *Hub) checkHead(pt *part, head store.Head, ok bool) bool {
	var gone []*Session
	h.mu.Lock()
	now := h.e.Now()
	for s := range pt.sessions {
		if !ok {
			gone = append(gone, s)
			continue
		}
		if s.epoch != head.LogEpoch {
			s.wakeLocked(pt, ReasonResetRequired, now)
			gone = append(gone, s)
		}
	}
	if ok {
		pt.epoch = head.LogEpoch
	}
	if ok && head.MaxCommitSeq < pt.delivered {
		// The log went back (a restore): feed from its head.
		pt.delivered = head.MaxCommitSeq
	}
	h.mu.Unlock()
	why := "log epoch rotated"
	if !ok {
		why = "partition removed"
	}
	for _, s := range gone {
		h.log.Info("realtime: closing a session", "partition", pt.name, "client", s.clientID, "reason", why)
		s.closeWith(CloseNormal, why)
	}
	return ok
}

// readLogLocked reads (delivered, through] and delivers each commit; the
// caller holds pt.dmu. A failed read leaves delivered where it got to:
// the next hint or reconciliation goes on from there.
func (h *Hub) readLogLocked(ctx context.Context, pt *part, through int64) {
	h.mu.Lock()
	from := pt.delivered
	h.mu.Unlock()
	if through <= from {
		return
	}
	err := h.e.ReadLog(ctx, pt.name, from, through, func(c *store.Commit) bool {
		h.deliver(pt, c)
		return ctx.Err() == nil
	})
	if err != nil {
		h.log.Warn("realtime: log read failed; retried at the next hint or reconciliation", "partition", pt.name, "after", from, "through", through, "error", err.Error())
	}
}

// deliver decides commit c for every session of pt (Decide) and sends
// what it says. Sessions that joined after c (since ≥ c.Seq) are skipped;
// a commit seq that is not the next of the feed (a hole in the log) is a
// gap for every earlier session. One encoded delta per DeltaKey is
// shared by every session with that key.
func (h *Hub) deliver(pt *part, c *store.Commit) {
	keys := h.e.CommitScopeKeys(c)
	h.mu.Lock()
	defer h.mu.Unlock()
	if c.Seq <= pt.delivered || pt.closed {
		return // a duplicate, or the partition lost its sessions
	}
	prev := pt.delivered
	pt.delivered = c.Seq
	f := fanout{pt: pt, now: h.e.Now()}
	if c.Seq != prev+1 {
		for s := range pt.sessions {
			if s.since < c.Seq-1 && s.stamp < c.Seq {
				s.stamp = c.Seq
				f.apply(s, Decide(h.factsLocked(s), CommitFacts{Gap: true}), nil)
			}
		}
	}
	var deltas map[string][]byte
	for _, k := range keys {
		for s := range pt.byKey[k] {
			if s.stamp >= c.Seq || s.since >= c.Seq {
				continue
			}
			s.stamp = c.Seq
			msg, ok := deltas[s.deltaKey]
			if !ok {
				msg = h.encodeDelta(pt.name, s, c)
				if deltas == nil {
					deltas = map[string][]byte{}
				}
				deltas[s.deltaKey] = msg
			}
			n := len(msg)
			if msg != nil && n == 0 {
				n = -1
			}
			d := Decide(h.factsLocked(s), CommitFacts{Touched: true, DeltaBytes: n, MaxMessageBytes: h.lim.MaxMessageBytes})
			f.apply(s, d, msg)
		}
	}
}

func (h *Hub) factsLocked(s *Session) SessionFacts {
	return SessionFacts{Registered: len(s.regs) > 0, Suppressed: s.suppressed, InRound: s.inRound}
}

// encodeDelta returns the tagged delta for s's key: nil when no
// registration matches, empty when encoding failed.
func (h *Hub) encodeDelta(p string, s *Session, c *store.Commit) []byte {
	d, err := h.e.EncodeDelta(s.version, s.schemaVersion, s.epoch, s.regs, c)
	if errors.Is(err, engine.ErrDeltaFromNewerBuild) {
		return []byte{} // a wake-up: the session's pull meets the serve gate
	}
	if err != nil {
		h.log.Error("realtime: encode delta", "partition", p, "seq", c.Seq, "error", err.Error())
		return []byte{}
	}
	if d == nil {
		return nil
	}
	msg := make([]byte, 1+len(d))
	msg[0] = TagDelta
	copy(msg[1:], d)
	return msg
}

// fanout carries out one commit's decisions; equal wake-ups (same
// cursor and reason) are encoded once per commit, like deltas, so a
// reconnect storm of suppressed sessions costs no message per session.
type fanout struct {
	pt    *part
	now   int64
	wakes map[wakeKey][]byte
}

type wakeKey struct {
	cursor int64
	reason string
}

// apply carries out d for s (h.mu held). A delta counts as delivered
// only once the transport accepted it; a refused one is a wake-up.
func (f *fanout) apply(s *Session, d Decision, msg []byte) {
	switch d.Action {
	case SendDelta:
		if s.conn.SendBinary(msg) {
			return
		}
		d = AfterRefusedSend()
		fallthrough
	case WakeUp:
		s.suppressed = true
		k := wakeKey{s.observedLocked(f.pt), d.Reason}
		w, ok := f.wakes[k]
		if !ok {
			w = EncodeWake(k.cursor, k.reason, f.now)
			if f.wakes == nil {
				f.wakes = map[wakeKey][]byte{}
			}
			f.wakes[k] = w
		}
		s.conn.SendText(w)
	}
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

// RecheckAuth re-resolves the grants of every connected (partition,
// actor), one resolver call each, shared by that actor's sessions (§3.3
// decision point, decision 5 of the realtime design): a revoked scope
// drops the registration and the presence on it and wakes the session
// with catchup-required, so its next pull sees the revocation; a resolver
// that cannot answer drops every registration the same way (fail closed).
func (h *Hub) RecheckAuth(ctx context.Context) {
	h.mu.Lock()
	type pa struct{ p, actor string }
	todo := map[pa]bool{}
	for p, pt := range h.parts {
		for s := range pt.sessions {
			todo[pa{p, s.auth.ActorID}] = true
		}
	}
	h.mu.Unlock()
	parallel(ctx, todo, func(k pa, _ bool) { h.RefreshScopes(ctx, k.p, k.actor) })
}

// RefreshScopes re-resolves the registrations of partition's sessions
// of actorID (all actors when empty) — a decision point of §3.3, with one
// resolver call per actor. See RecheckAuth.
func (h *Hub) RefreshScopes(ctx context.Context, partition, actorID string) {
	h.mu.Lock()
	byActor := map[string][]*Session{}
	if pt := h.parts[partition]; pt != nil {
		for s := range pt.sessions {
			if actorID == "" || s.auth.ActorID == actorID {
				byActor[s.auth.ActorID] = append(byActor[s.auth.ActorID], s)
			}
		}
	}
	h.mu.Unlock()
	for _, list := range byActor {
		first := list[0]
		allowed, err := h.e.ResolveScopes(mergeValues(ctx, first.authCtx), first.auth, first.clientID)
		if err != nil {
			h.log.Warn("realtime: scope re-check failed; registrations dropped (fail closed)", "partition", partition, "actor", first.auth.ActorID, "error", err.Error())
		}
		h.mu.Lock()
		for _, s := range list {
			pt := h.parts[partition]
			if s.closed || pt == nil {
				continue
			}
			var next []engine.Registration
			if err == nil {
				next = h.e.Restrict(s.schemaVersion, s.regs, allowed)
			}
			before := s.deltaKey
			h.setRegistrationsLocked(pt, s, s.schemaVersion, next)
			if s.deltaKey != before {
				s.suppressed = true
				s.wakeLocked(pt, ReasonCatchupRequired, h.e.Now())
			}
		}
		h.mu.Unlock()
	}
}

// mergeValues is ctx with the values of vals (the connect request's
// claims) and ctx's deadline and cancellation.
func mergeValues(ctx, vals context.Context) context.Context {
	return valuesCtx{ctx, vals}
}

type valuesCtx struct {
	context.Context
	vals context.Context
}

func (c valuesCtx) Value(k any) any {
	if v := c.vals.Value(k); v != nil {
		return v
	}
	return c.Context.Value(k)
}
