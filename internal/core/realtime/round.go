package realtime

import (
	"context"
	"encoding/binary"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// Sync rounds over the socket (§8.7). One round at a time: from the
// moment a request's END arrives until its response's final chunk goes
// to the socket, any round byte is pipelining (the client sent it before
// it could have seen END) and closes the connection.

// HandleBinary handles one client→server binary message: a chunk of a
// sync round (§8.7). Another tag, an invalid envelope header, bytes past
// the request's END (pipelining), round bytes while a response is in
// flight, a token past its expiry or a round over the buffer caps close
// the connection. A complete request runs in its own goroutine, so
// control messages keep flowing during the round. Call it from one
// goroutine per session (the transport's read loop).
func (s *Session) HandleBinary(ctx context.Context, msg []byte) {
	s.HandleBinaryArrival(ctx, msg, false)
}

// HandleBinaryArrival is HandleBinary for a transport that can tell that
// msg's first byte reached the server before the previous round's final
// response chunk had been written (beforeLastEnd): the client sent it
// before it could have seen that END, so a message that begins a new
// round is pipelining (§8.7) even when the read loop got to it only
// after the round finished.
func (s *Session) HandleBinaryArrival(ctx context.Context, msg []byte, beforeLastEnd bool) {
	if s.gone.Load() {
		return // closed: nothing it sends is applied
	}
	if s.expired() {
		s.expire()
		return
	}
	if len(msg) == 0 || msg[0] != TagRound {
		s.violation("client→server binary message without the 0x01 round tag (§8.7)")
		return
	}
	if s.roundBusy.Load() {
		s.violation("round bytes while a response is in flight (§8.7 no pipelining)")
		return
	}
	if beforeLastEnd && len(s.roundBuf) == 0 {
		s.violation("a new round sent before the previous response's END (§8.7 no pipelining)")
		return
	}
	if !s.settleIncoming(len(msg) - 1) {
		return
	}
	s.roundBuf = append(s.roundBuf, msg[1:]...)
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
	s.roundGen++
	gen := s.roundGen
	s.h.mu.Unlock()
	go s.runRound(context.WithoutCancel(ctx), body, gen, time.Now())
}

// ReserveIncoming accounts n more bytes of the binary message the
// transport is reading against the round caps (Limits) before it buffers
// them, so a cap holds while a large message is still arriving. False:
// a cap refused them and the connection is closed; stop reading. The
// message then goes to HandleBinary(Arrival), which settles the count.
func (s *Session) ReserveIncoming(n int) bool {
	if code, why := s.reserveRound(n); code != 0 {
		s.refuseRound(code, why)
		return false
	}
	s.h.bmu.Lock()
	s.incoming += n
	s.h.bmu.Unlock()
	return true
}

// settleIncoming makes the reservation of the message being handled
// exactly need bytes (the transport reserved s.incoming of it while
// reading); false when a cap refused the rest (connection closed).
func (s *Session) settleIncoming(need int) bool {
	s.h.bmu.Lock()
	pre := s.incoming
	s.incoming = 0
	s.h.bmu.Unlock()
	if pre > need {
		s.release(pre - need)
		return true
	}
	if code, why := s.reserveRound(need - pre); code != 0 {
		s.refuseRound(code, why)
		return false
	}
	return true
}

func (s *Session) refuseRound(code int, why string) {
	s.h.log.Info("realtime: closing a connection over a round buffer cap", "partition", s.auth.Partition, "client", s.clientID, "reason", why)
	s.closeWith(code, why)
}

// reserveRound accounts n more buffered round bytes of s against the
// connection's, its actor's and the hub's caps (Limits); a nonzero close
// code says which one refused them.
func (s *Session) reserveRound(n int) (code int, why string) {
	h := s.h
	k := s.auth.Partition + "\x00" + s.auth.ActorID
	h.bmu.Lock()
	defer h.bmu.Unlock()
	switch {
	case s.roundHeld+n > h.lim.MaxRoundRequestBytes:
		return CloseMessageTooBig, "round request exceeds the connection's size limit"
	case h.actorBytes[k]+n > h.lim.MaxActorRoundBytes:
		return CloseTryAgainLater, "the actor's connections buffer too many round bytes"
	case h.hubBytes+n > h.lim.MaxHubRoundBytes:
		return CloseTryAgainLater, "the server buffers too many round bytes"
	}
	h.actorBytes[k] += n
	h.hubBytes += n
	s.roundHeld += n
	return 0, ""
}

// releaseRound returns all of s's reserved round bytes.
func (s *Session) releaseRound() { s.release(-1) }

// release returns n of s's reserved round bytes (all when n < 0).
func (s *Session) release(n int) {
	h := s.h
	k := s.auth.Partition + "\x00" + s.auth.ActorID
	h.bmu.Lock()
	defer h.bmu.Unlock()
	if n < 0 || n > s.roundHeld {
		n = s.roundHeld
		s.incoming = 0
	}
	s.roundHeld -= n
	h.hubBytes -= n
	if h.actorBytes[k] -= n; h.actorBytes[k] <= 0 {
		delete(h.actorBytes, k)
	}
}

// RoundBytes reports the round bytes buffered by the hub and by one
// (partition, actor).
func (h *Hub) RoundBytes(partition, actorID string) (hub, actor int) {
	h.bmu.Lock()
	defer h.bmu.Unlock()
	return h.hubBytes, h.actorBytes[partition+"\x00"+actorID]
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
// With a RoundSender transport a full queue waits instead of failing.
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
			w.send(w.buf, nil)
			w.buf = nil
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

// send hands one chunk to the transport; writing runs when it goes to
// the socket (at once after the hand-over when the transport cannot
// tell).
func (w *roundWriter) send(msg []byte, writing func()) {
	if len(msg) <= 1 {
		if writing != nil {
			writing()
		}
		return
	}
	if rs, ok := w.conn.(RoundSender); ok {
		if !rs.SendRound(msg, writing) {
			w.err = true
			if writing != nil {
				writing()
			}
		}
		return
	}
	if !w.conn.SendBinary(msg) {
		w.err = true
	}
	if writing != nil {
		writing()
	}
}

func (s *Session) runRound(ctx context.Context, body []byte, gen uint64, received time.Time) {
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
	s.releaseRound() // the request is consumed
	if rep != nil && rep.CommittedSeq > 0 {
		// The round's own commits were only hinted: decide them now,
		// while the round is in flight, so this session gets the §8.7
		// wake-up rather than a delta after END.
		h.feedThrough(ctx, s.auth.Partition, rep.CommittedSeq)
	}
	// §8.7 registration at round end: a successful round with a pull
	// replaces the registrations (effective scopes as this round
	// resolved them) and the version, before the final chunk goes out,
	// so a commit after END is fanned out by them.
	h.mu.Lock()
	if !s.closed && err == nil && rep != nil && rep.ErrorCode == "" && rep.Pulled {
		if rep.LogEpoch != "" {
			s.epoch = rep.LogEpoch
		}
		s.version = rep.WireVersion
		if pt := h.parts[s.auth.Partition]; pt != nil {
			h.setRegistrationsLocked(pt, s, rep.SchemaVersion, rep.Registrations)
		}
	}
	h.mu.Unlock()
	// The round stays busy until its final chunk goes to the socket:
	// round bytes read before then were sent before the client could see
	// END, and are pipelining. (A transport that knows when bytes arrived
	// also catches those the read loop gets to later: HandleBinaryArrival.)
	final := w.buf
	w.buf = nil
	if d := h.pipelineHold - time.Since(received); h.pipelineHold > 0 && d > 0 {
		time.Sleep(d) // Options.PipelineHold
	}
	w.send(final, func() { s.roundBusy.Store(false) })
	// Deltas resume only once END is queued (§8.7 interleaving); a commit
	// meanwhile got a wake-up.
	h.mu.Lock()
	if s.roundGen == gen {
		s.inRound = false
	}
	h.mu.Unlock()
	if w.err {
		s.violation("round response could not be delivered")
	}
}
