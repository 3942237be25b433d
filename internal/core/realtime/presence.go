package realtime

import (
	"encoding/json"
	"time"
)

// Presence (§8.6): pure memory, scoped to scope keys a session is
// registered on (§8.6.3), with peer instances' documents kept for join
// bursts (RemotePresence) and a per-connection, per-key rate cap.

// PresenceEvent is one presence change of a session of this hub, for
// peers (Options.OnPresence), or a peer's change (RemotePresence).
type PresenceEvent struct {
	Partition string
	// Origin is the instance id of the publishing hub.
	Origin string
	// Session is the publishing session id (unique per origin).
	Session string
	Fanout  PresenceFanout
}

type remoteDoc struct {
	actorID, clientID string
	doc               json.RawMessage
}

// presenceSlot is the rate cap state of one session's key.
type presenceSlot struct {
	last    time.Time
	pending json.RawMessage
	timer   *time.Timer
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
	if pt == nil {
		return
	}
	sl := s.pres[p.ScopeKey]
	if p.Doc == nil {
		if sl != nil {
			sl.pending = nil // a leave overtakes a coalesced update
		}
		h.leaveLocked(pt, s, p.ScopeKey, now)
		return
	}
	if len(p.Doc) > h.lim.MaxPresenceBytes {
		s.conn.SendText(EncodePresenceError(p.ScopeKey, PresenceTooLarge, now))
		return
	}
	doc := append(json.RawMessage(nil), p.Doc...)
	if sl == nil {
		sl = &presenceSlot{}
		if s.pres == nil {
			s.pres = map[string]*presenceSlot{}
		}
		s.pres[p.ScopeKey] = sl
	}
	gap := time.Second / time.Duration(h.lim.PresencePerSecond)
	wall := time.Now()
	if wait := sl.last.Add(gap).Sub(wall); wait > 0 {
		// Over the rate: keep only the latest document; it goes out when
		// the slot opens.
		sl.pending = doc
		if sl.timer == nil {
			key := p.ScopeKey
			sl.timer = time.AfterFunc(wait, func() { s.flushPresence(key) })
		}
		return
	}
	sl.last = wall
	h.setDocLocked(pt, s, p.ScopeKey, doc, now)
}

// flushPresence sends a coalesced document once its slot opens.
func (s *Session) flushPresence(key string) {
	h := s.h
	h.mu.Lock()
	defer h.mu.Unlock()
	sl := s.pres[key]
	if sl == nil {
		return
	}
	sl.timer = nil
	doc := sl.pending
	sl.pending = nil
	pt := h.parts[s.auth.Partition]
	if s.closed || doc == nil || pt == nil || !s.keys[key] {
		return
	}
	sl.last = time.Now()
	h.setDocLocked(pt, s, key, doc, h.e.Now())
}

// setDocLocked stores s's document on key and fans a join or update.
func (h *Hub) setDocLocked(pt *part, s *Session, key string, doc json.RawMessage, now int64) {
	kind := KindUpdate
	if _, ok := s.docs[key]; !ok {
		kind = KindJoin
	}
	s.docs[key] = doc
	set := pt.present[key]
	if set == nil {
		set = map[*Session]json.RawMessage{}
		pt.present[key] = set
	}
	set[s] = doc
	h.fanPresenceLocked(pt, s, PresenceFanout{ScopeKey: key, Kind: kind, ActorID: s.auth.ActorID, ClientID: s.clientID, Doc: doc, Timestamp: now})
}

// leaveLocked removes s's document on key and fans a leave (§8.6.4).
func (h *Hub) leaveLocked(pt *part, s *Session, key string, now int64) {
	if sl := s.pres[key]; sl != nil {
		sl.pending = nil
	}
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
// key — exactly the scope-mates (§8.6.3 privacy floor) — then hands it
// to OnPresence for peers.
func (h *Hub) fanPresenceLocked(pt *part, from *Session, ev PresenceFanout) {
	msg := EncodePresence(ev)
	for peer := range pt.byKey[ev.ScopeKey] {
		if peer != from {
			peer.conn.SendText(msg)
		}
	}
	if h.onPresence != nil {
		h.onPresence(PresenceEvent{Partition: pt.name, Origin: h.instanceID, Session: from.id, Fanout: ev})
	}
}

func remoteID(origin, session string) string { return origin + "\x00" + session }

// RemotePresence applies a peer instance's presence change: it fans it to
// the local sessions registered on the key and keeps the document for
// join bursts (§8.6.3). An event of this hub's own origin is ignored.
func (h *Hub) RemotePresence(ev PresenceEvent) {
	if ev.Origin == h.instanceID || ev.Fanout.ScopeKey == "" {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	k := ev.Fanout.ScopeKey
	id := remoteID(ev.Origin, ev.Session)
	byKey := h.remote[ev.Partition]
	if ev.Fanout.Kind == KindLeave || ev.Fanout.Doc == nil {
		if byKey[k] == nil {
			return
		}
		if _, ok := byKey[k][id]; !ok {
			return
		}
		delete(byKey[k], id)
		if len(byKey[k]) == 0 {
			delete(byKey, k)
		}
		if len(byKey) == 0 {
			delete(h.remote, ev.Partition)
		}
		ev.Fanout.Kind, ev.Fanout.Doc = KindLeave, nil
	} else {
		if byKey == nil {
			byKey = map[string]map[string]remoteDoc{}
			h.remote[ev.Partition] = byKey
		}
		if byKey[k] == nil {
			byKey[k] = map[string]remoteDoc{}
		}
		byKey[k][id] = remoteDoc{actorID: ev.Fanout.ActorID, clientID: ev.Fanout.ClientID, doc: append(json.RawMessage(nil), ev.Fanout.Doc...)}
	}
	h.fanRemoteLocked(ev.Partition, ev.Fanout)
}

func (h *Hub) fanRemoteLocked(partition string, f PresenceFanout) {
	pt := h.parts[partition]
	if pt == nil {
		return
	}
	msg := EncodePresence(f)
	for s := range pt.byKey[f.ScopeKey] {
		s.conn.SendText(msg)
	}
}

// DropOrigin forgets a peer instance that is gone: each of its documents
// leaves, with a leave event to the local scope-mates (§8.6.4).
func (h *Hub) DropOrigin(origin string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	prefix := origin + "\x00"
	now := h.e.Now()
	for p, byKey := range h.remote {
		for k, docs := range byKey {
			for id, rd := range docs {
				if len(id) < len(prefix) || id[:len(prefix)] != prefix {
					continue
				}
				delete(docs, id)
				h.fanRemoteLocked(p, PresenceFanout{ScopeKey: k, Kind: KindLeave, ActorID: rd.actorID, ClientID: rd.clientID, Timestamp: now})
			}
			if len(docs) == 0 {
				delete(byKey, k)
			}
		}
		if len(byKey) == 0 {
			delete(h.remote, p)
		}
	}
}
