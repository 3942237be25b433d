package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

const (
	headerLen      = 8
	frameHeaderLen = 5
)

// DefaultMaxFrameBytes is the frame bound NewReader uses when given a
// non-positive one.
const DefaultMaxFrameBytes = 64 << 20

// parseHeader checks the 8-byte envelope header (§1.2): magic, a wire
// version this codec reads (1, 2 or 3), a known msgKind and zero flags,
// all before any frame is read. Any other version is sync.invalid_request
// before a frame is looked at (§1.2, §9).
func parseHeader(h []byte) (uint16, MsgKind, error) {
	if len(h) < headerLen {
		return 0, 0, invalidf("truncated envelope header (%d of 8 bytes)", len(h))
	}
	if [4]byte(h[:4]) != Magic {
		return 0, 0, invalidf("bad magic %q (want \"SSP2\")", h[:4])
	}
	v := binary.LittleEndian.Uint16(h[4:])
	if !SupportedVersion(v) {
		return 0, 0, invalidf("unsupported wire version %d", v)
	}
	k := MsgKind(h[6])
	if k != KindRequest && k != KindResponse {
		return 0, 0, invalidf("unknown msgKind 0x%02x", h[6])
	}
	if h[7] != 0 {
		return 0, 0, invalidf("flags byte 0x%02x must be 0x00", h[7])
	}
	return v, k, nil
}

// Decode decodes a whole SSP2 message, enforcing every §1.7 decode rule.
// The returned binary fields ([]byte) alias b; string fields are copies.
// Every error is a *syncerr.Error (sync.invalid_request, or
// sync.empty_commit for a PUSH_COMMIT without operations).
func Decode(b []byte) (*Message, error) {
	v, k, err := parseHeader(b)
	if err != nil {
		return nil, err
	}
	m := &Message{WireVersion: v, Kind: k, Frames: make([]Frame, 0, 8)}
	err = decodeFrames(b, k,
		func(t FrameType, payload []byte, _ int) (Frame, error) { return parseFrame(v, k, t, payload) },
		func(f Frame) { m.Frames = append(m.Frames, f) })
	if err != nil {
		return nil, err
	}
	return m, nil
}

// decodeFrames runs the frames of message b (of kind k) up to END through
// parse (given each payload and its offset in b) and the §1.2 grammar,
// handing each admitted frame to keep when it is set: the one frame loop
// of Decode and DecodeRequest.
func decodeFrames(b []byte, k MsgKind, parse func(t FrameType, payload []byte, off int) (Frame, error), keep func(Frame)) error {
	g := newGrammar(k)
	c := frameCursor{b: b, off: headerLen}
	for {
		i, t, payload, end, err := c.next()
		if err != nil {
			return err
		}
		if end {
			if err := g.finish(); err != nil { // a *syncerr.Error: no typed nil
				return err
			}
			return nil
		}
		f, err := admitFrame(&g, i, t, func() (Frame, error) { return parse(t, payload, c.off-len(payload)) })
		if err != nil {
			return err
		}
		if keep != nil {
			keep(f)
		}
	}
}

// frameCursor walks the frames of a whole message held in b, from off
// (just after the envelope header) for decodeFrames.
type frameCursor struct {
	b      []byte
	off, i int
}

// next returns frame i's type and payload and moves past it; end reports
// the END frame, once its §1.2 rule 1 checks passed. A message that ends
// before END, or a frame longer than what remains, is an error.
func (c *frameCursor) next() (i int, t FrameType, payload []byte, end bool, err error) {
	b := c.b
	if len(b)-c.off < frameHeaderLen {
		return 0, 0, nil, false, invalidf("truncated message: no END frame (§1.2 rule 1)")
	}
	t = FrameType(b[c.off])
	n := binary.LittleEndian.Uint32(b[c.off+1:])
	c.off += frameHeaderLen
	if t == FrameEnd {
		if err := checkEnd(n, len(b)-c.off); err != nil {
			return 0, 0, nil, false, err
		}
		return 0, t, nil, true, nil
	}
	i = c.i
	if uint64(n) > uint64(len(b)-c.off) {
		return 0, 0, nil, false, frameErr(i, t, invalidf("frame length %d exceeds the %d remaining bytes (truncated)", n, len(b)-c.off))
	}
	payload = b[c.off : c.off+int(n)]
	c.off += int(n)
	c.i++
	return i, t, payload, false, nil
}

// checkEnd applies the END rules of §1.2 rule 1: zero length and nothing
// after it (rest is the number of bytes following END's header, or -1 if
// unknown yet).
func checkEnd(length uint32, rest int) error {
	if length != 0 {
		return invalidf("END frame with non-zero length %d", length)
	}
	if rest > 0 {
		return invalidf("%d bytes after the END frame", rest)
	}
	return nil
}

// nextFrame parses frame i and admits it into the grammar (Reader).
func nextFrame(g *grammar, v uint16, k MsgKind, i int, t FrameType, payload []byte) (Frame, error) {
	return admitFrame(g, i, t, func() (Frame, error) { return parseFrame(v, k, t, payload) })
}

// admitFrame admits frame i of type t into the grammar around parsing it
// with parse: its type first, then the parsed frame (§1.2 rule 2).
func admitFrame(g *grammar, i int, t FrameType, parse func() (Frame, error)) (Frame, error) {
	if err := g.admitType(t); err != nil {
		return nil, frameErr(i, t, err)
	}
	f, err := parse()
	if err != nil {
		return nil, frameErr(i, t, err)
	}
	if err := g.step(f); err != nil {
		return nil, frameErr(i, t, err)
	}
	return f, nil
}

// Reader decodes a message incrementally from a stream (§1.4): it keeps
// the header, the grammar state and one frame at a time, so memory is
// bounded by the largest frame it accepts. Each returned frame owns its
// buffer: binary fields stay valid after later Next calls.
type Reader struct {
	r       io.Reader
	max     int
	started bool
	done    bool
	err     error
	version uint16
	kind    MsgKind
	g       grammar
	index   int
	hdr     [headerLen]byte
}

// NewReader returns a Reader of r that rejects any frame longer than
// maxFrameBytes (sync.invalid_request); a non-positive bound selects
// DefaultMaxFrameBytes.
func NewReader(r io.Reader, maxFrameBytes int) *Reader {
	if maxFrameBytes <= 0 {
		maxFrameBytes = DefaultMaxFrameBytes
	}
	return &Reader{r: r, max: maxFrameBytes}
}

// Header reads and checks the envelope header if not done yet and returns
// the wire version and message kind.
func (d *Reader) Header() (uint16, MsgKind, error) {
	if !d.started {
		d.started = true
		n, err := io.ReadFull(d.r, d.hdr[:])
		if err != nil && !isEOF(err) {
			d.err = fmt.Errorf("wire: reading envelope header: %w", err)
		} else {
			d.version, d.kind, d.err = parseHeader(d.hdr[:n])
			d.g = newGrammar(d.kind)
		}
	}
	if d.err != nil && d.version == 0 {
		return 0, 0, d.err
	}
	return d.version, d.kind, nil
}

// Next returns the next frame, or io.EOF once END was read and verified
// (zero length, nothing after it, grammar complete). Verifying that
// nothing follows END reads until the underlying reader reports EOF, so
// the stream must end with the message (one HTTP body or one socket
// message stream, §8.7). Decode errors are *syncerr.Error; transport
// errors are returned wrapped as they are. Errors are sticky.
func (d *Reader) Next() (Frame, error) {
	if _, _, err := d.Header(); err != nil {
		return nil, err
	}
	if d.err != nil {
		return nil, d.err
	}
	if d.done {
		return nil, io.EOF
	}
	f, err := d.next()
	if err != nil {
		if err == io.EOF {
			d.done = true
		} else {
			d.err = err
		}
		return nil, err
	}
	d.index++
	return f, nil
}

func (d *Reader) next() (Frame, error) {
	var fh [frameHeaderLen]byte
	if _, err := io.ReadFull(d.r, fh[:]); err != nil {
		if isEOF(err) {
			return nil, invalidf("truncated message: no END frame (§1.2 rule 1)")
		}
		return nil, fmt.Errorf("wire: reading frame %d: %w", d.index, err)
	}
	t := FrameType(fh[0])
	n := binary.LittleEndian.Uint32(fh[1:])
	if t == FrameEnd {
		if n != 0 {
			return nil, checkEnd(n, 0)
		}
		var one [1]byte
		switch k, err := io.ReadFull(d.r, one[:]); {
		case k > 0:
			return nil, invalidf("bytes after the END frame")
		case err != nil && !isEOF(err):
			return nil, fmt.Errorf("wire: reading after END: %w", err)
		}
		if err := d.g.finish(); err != nil {
			return nil, err
		}
		return nil, io.EOF
	}
	if uint64(n) > uint64(d.max) {
		return nil, frameErr(d.index, t, invalidf("frame length %d exceeds the %d-byte frame limit", n, d.max))
	}
	if err := d.g.admitType(t); err != nil {
		return nil, frameErr(d.index, t, err)
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(d.r, payload); err != nil {
		if isEOF(err) {
			return nil, frameErr(d.index, t, invalidf("frame length %d exceeds the remaining bytes (truncated)", n))
		}
		return nil, fmt.Errorf("wire: reading frame %d: %w", d.index, err)
	}
	return nextFrame(&d.g, d.version, d.kind, d.index, t, payload)
}

func isEOF(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// Request returns the typed view of a request message (§1.5): the header,
// the push commits in order, the pull header if any and the
// subscriptions. Unknown frames are skipped. The frames are re-checked
// against the grammar so a hand-built Message cannot yield a view the
// wire could not carry. The view shares the frames' slices.
func (m *Message) Request() (*Request, error) {
	if m == nil {
		return nil, invalidf("nil message")
	}
	if m.Kind != KindRequest {
		return nil, invalidf("message kind is %s, not request", m.Kind)
	}
	g := newGrammar(KindRequest)
	req := &Request{WireVersion: m.WireVersion}
	for i, f := range m.Frames {
		if isNilFrame(f) {
			return nil, invalidf("frame %d is nil", i)
		}
		if err := g.step(f); err != nil {
			return nil, frameErr(i, f.Type(), err)
		}
		switch v := f.(type) {
		case *ReqHeader:
			req.Header = *v
		case *PushCommit:
			req.Commits = append(req.Commits, *v)
		case *PullHeader:
			p := *v
			req.Pull = &p
		case *Subscription:
			req.Subscriptions = append(req.Subscriptions, *v)
		}
	}
	if err := g.finish(); err != nil {
		return nil, err
	}
	return req, nil
}

// ensure the error type of decode paths stays the catalog one.
var _ error = (*syncerr.Error)(nil)

// ErrNotRequest is DecodeRequest's answer for a well-formed response
// message.
var ErrNotRequest = errors.New("wire: the message is a response, not a request")

// requestAlloc is a decoded request with room for its usual frames, so
// the common request (one commit or one subscription) is one allocation;
// more grow by append.
type requestAlloc struct {
	req    Request
	pull   PullHeader
	commit [1]PushCommit
	sub    [1]Subscription
	op     [1]Operation // the first commit's operation, when it has one

	// body is a small request as one string: every frame's str fields
	// are sliced from it (one copy for the request, not one per frame).
	body string
}

// maxSharedBody bounds body: a string kept from one frame (a clientId in
// a cache) keeps the whole of body alive, so a larger request is copied
// frame by frame as Decode does.
const maxSharedBody = 512

// DecodeRequest is Decode followed by Message.Request for a request
// message, with the same checks in the same order and the same errors,
// but without the intermediate frame list: frames are decoded straight
// into the Request. A response message is decoded by Decode (its error,
// if any, is returned) and then answered with ErrNotRequest.
func DecodeRequest(b []byte) (*Request, error) {
	v, k, err := parseHeader(b)
	if err != nil {
		return nil, err
	}
	if k != KindRequest {
		if _, err := Decode(b); err != nil {
			return nil, err
		}
		return nil, ErrNotRequest
	}
	a := &requestAlloc{}
	req := &a.req
	req.WireVersion = v
	req.Commits = a.commit[:0:len(a.commit)]
	req.Subscriptions = a.sub[:0:len(a.sub)]
	if len(b) <= maxSharedBody {
		a.body = string(b)
	}
	err = decodeFrames(b, KindRequest, func(t FrameType, payload []byte, off int) (Frame, error) {
		return a.parse(v, t, payload, off)
	}, nil)
	if err != nil {
		return nil, err
	}
	if len(req.Commits) == 0 {
		req.Commits = nil // as Message.Request leaves it
	}
	if len(req.Subscriptions) == 0 {
		req.Subscriptions = nil
	}
	return req, nil
}

// parse is parseFrame for a request's frames (payload at off in the
// message), decoding the known ones into a's Request (a frame the grammar then refuses fails the whole
// decode, so what it overwrote is never seen).
func (a *requestAlloc) parse(version uint16, t FrameType, payload []byte, off int) (Frame, error) {
	switch t {
	case FrameReqHeader, FramePushCommit, FramePullHeader, FrameSubscription:
	default:
		return parseFrame(version, KindRequest, t, payload)
	}
	r := rd{b: payload}
	if a.body != "" {
		r.s = a.body[off : off+len(payload)] // payload's own bytes, as a string
	}
	var f Frame
	switch t {
	case FrameReqHeader:
		r.reqHeader(&a.req.Header, version)
		f = &a.req.Header
	case FramePushCommit:
		a.req.Commits = append(a.req.Commits, PushCommit{})
		c := &a.req.Commits[len(a.req.Commits)-1]
		var opBuf []Operation
		if len(a.req.Commits) == 1 {
			opBuf = a.op[:]
		}
		r.pushCommit(c, opBuf)
		f = c
	case FramePullHeader:
		r.pullHeader(&a.pull)
		a.req.Pull = &a.pull
		f = &a.pull
	case FrameSubscription:
		a.req.Subscriptions = append(a.req.Subscriptions, Subscription{})
		s := &a.req.Subscriptions[len(a.req.Subscriptions)-1]
		r.subscription(s)
		f = s
	}
	if r.err != nil {
		return nil, r.err
	}
	if r.off != len(payload) {
		// §1.2 rule 3: frames are versioned, never extended in place.
		return nil, invalidf("%d trailing bytes inside the frame", len(payload)-r.off)
	}
	return f, nil
}
