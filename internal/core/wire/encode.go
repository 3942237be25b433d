package wire

import (
	"encoding/binary"
	"io"
	"math"
	"slices"
	"sync"
	"unicode/utf8"

	"github.com/skyfold/syncular-lambda/internal/core/canonjson"
)

// enc appends frame payloads. It mirrors rd: every value the decoder
// would reject is refused here, so an Encoder can never emit bytes that
// fail to decode. Errors are sticky within one frame.
type enc struct {
	b       []byte
	version uint16
	err     error
	perm    []int // scratch for sorting map keys without touching the caller's slice
}

func (e *enc) fail(format string, args ...any) {
	if e.err == nil {
		e.err = encErrf(format, args...)
	}
}

func (e *enc) u8(v uint8)   { e.b = append(e.b, v) }
func (e *enc) u16(v uint16) { e.b = binary.LittleEndian.AppendUint16(e.b, v) }
func (e *enc) u32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *enc) i32(v int32)  { e.u32(uint32(v)) }

func (e *enc) i64(what string, v int64) {
	if v > MaxSafeInt || v < -MaxSafeInt {
		e.fail("%s: i64 %d outside ±(2^53−1)", what, v)
	}
	e.b = binary.LittleEndian.AppendUint64(e.b, uint64(v))
}

func (e *enc) boolean(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

func (e *enc) length(what string, n int) {
	if uint64(n) > math.MaxUint32 {
		e.fail("%s: length %d does not fit a u32", what, n)
	}
	e.u32(uint32(n))
}

func (e *enc) str(what, s string) {
	if !utf8.ValidString(s) {
		e.fail("%s: string is not well-formed UTF-8", what)
	}
	e.length(what, len(s))
	e.b = append(e.b, s...)
}

func (e *enc) bytes(what string, v []byte) {
	e.length(what, len(v))
	e.b = append(e.b, v...)
}

func (e *enc) json(what string, v JSON) {
	if !canonjson.Valid(string(v)) {
		e.fail("%s: not a JSON document", what)
	}
	e.length(what, len(v))
	e.b = append(e.b, v...)
}

func (e *enc) optStr(what string, v Opt[string]) {
	e.boolean(v.Present)
	if v.Present {
		e.str(what, v.Value)
	}
}

func (e *enc) optI64(what string, v Opt[int64]) {
	e.boolean(v.Present)
	if v.Present {
		e.i64(what, v.Value)
	}
}

func (e *enc) optI32(v Opt[int32]) {
	e.boolean(v.Present)
	if v.Present {
		e.i32(v.Value)
	}
}

func (e *enc) optJSON(what string, v Opt[JSON]) {
	e.boolean(v.Present)
	if v.Present {
		e.json(what, v.Value)
	}
}

func (e *enc) optBytes(what string, v Opt[[]byte]) {
	e.boolean(v.Present)
	if v.Present {
		e.bytes(what, v.Value)
	}
}

// keyOrder returns the order in which to emit n map keys: ascending by
// UTF-16 code units (Conventions `map` row). Already-canonical maps (every
// decoded one) need no sort; otherwise the permutation is sorted, never
// the caller's slice. Duplicate keys are refused.
func (e *enc) keyOrder(what string, n int, key func(int) string) []int {
	sorted := true
	for i := 1; i < n; i++ {
		c := canonjson.CompareUTF16(key(i-1), key(i))
		if c == 0 {
			e.fail("%s: duplicate map key %q", what, key(i))
			return nil
		}
		if c > 0 {
			sorted = false
			break
		}
	}
	if sorted {
		return nil
	}
	p := e.perm[:0]
	for i := range n {
		p = append(p, i)
	}
	slices.SortFunc(p, func(a, b int) int { return canonjson.CompareUTF16(key(a), key(b)) })
	for i := 1; i < n; i++ {
		if key(p[i-1]) == key(p[i]) {
			e.fail("%s: duplicate map key %q", what, key(p[i]))
			return nil
		}
	}
	e.perm = p
	return p
}

func (e *enc) scopeMap(what string, m ScopeMap) {
	e.length(what, len(m))
	p := e.keyOrder(what, len(m), func(i int) string { return m[i].Key })
	for i := range m {
		en := &m[i]
		if p != nil {
			en = &m[p[i]]
		}
		e.str(what, en.Key)
		e.length(what, len(en.Values))
		for _, v := range en.Values {
			e.str(what, v)
		}
	}
}

func (e *enc) storedScopes(what string, m StoredScopes) {
	e.length(what, len(m))
	p := e.keyOrder(what, len(m), func(i int) string { return m[i].Key })
	for i := range m {
		en := &m[i]
		if p != nil {
			en = &m[p[i]]
		}
		e.str(what, en.Key)
		e.str(what, en.Value)
	}
}

func (e *enc) op(what string, o Op) {
	if o != OpUpsert && o != OpDelete {
		e.fail("%s: op %d is not upsert or delete", what, o)
	}
	e.u8(uint8(o))
}

func appendHeader(b []byte, version uint16, kind MsgKind) []byte {
	b = append(b, Magic[:]...)
	b = binary.LittleEndian.AppendUint16(b, version)
	return append(b, byte(kind), 0)
}

func checkVersionKind(version uint16, kind MsgKind) error {
	if !SupportedVersion(version) {
		return encErrf("unsupported wire version %d", version)
	}
	if kind != KindRequest && kind != KindResponse {
		return encErrf("unknown message kind %d", kind)
	}
	return nil
}

// AppendFrame appends frame f (5-byte frame header and payload) as wire
// version `version` encodes it. It checks every field rule the decoder
// enforces — enums, i64 range, UTF-8, JSON validity, the opt() ties,
// the §1.7 field constraints, canonical map keys — but not the frame
// order, which needs message state (Encoder does that). On error dst is
// returned unchanged.
func AppendFrame(dst []byte, version uint16, f Frame) ([]byte, error) {
	e := enc{b: dst, version: version}
	if err := e.frame(f); err != nil {
		return dst, err
	}
	return e.b, nil
}

// frame appends f to e.b, restoring e.b on failure.
func (e *enc) frame(f Frame) error {
	start := len(e.b)
	e.err = nil
	if isNilFrame(f) {
		return encErrf("nil frame")
	}
	t := f.Type()
	e.b = append(e.b, byte(t), 0, 0, 0, 0)
	switch v := f.(type) {
	case *ReqHeader:
		e.reqHeader(v)
	case *PushCommit:
		e.pushCommit(v)
	case *PullHeader:
		if v.Accept&0xF0 != 0 {
			e.fail("PULL_HEADER.accept 0x%02x sets reserved bits 4-7", v.Accept)
		}
		e.i32(v.LimitCommits)
		e.i32(v.LimitSnapshotRows)
		e.i32(v.MaxSnapshotPages)
		e.u8(v.Accept)
	case *Subscription:
		e.str("SUBSCRIPTION.id", v.ID)
		e.str("SUBSCRIPTION.table", v.Table)
		e.scopeMap("SUBSCRIPTION.scopes", v.Scopes)
		e.optJSON("SUBSCRIPTION.params", v.Params)
		e.i64("SUBSCRIPTION.cursor", v.Cursor)
		e.optJSON("SUBSCRIPTION.bootstrapState", v.BootstrapState)
	case *RespHeader:
		e.respHeader(v)
	case *Lease:
		e.str("LEASE.leaseId", v.LeaseID)
		e.i64("LEASE.expiresAtMs", v.ExpiresAtMs)
	case *PushResult:
		e.pushResult(v)
	case *PushResultDetails:
		if err := checkDetailEntries(v.Entries); err != nil {
			e.fail("PUSH_RESULT_DETAILS: %s", err.Message)
		}
		e.str("PUSH_RESULT_DETAILS.clientCommitId", v.ClientCommitID)
		e.length("PUSH_RESULT_DETAILS.entries", len(v.Entries))
		for i := range v.Entries {
			e.i32(v.Entries[i].OpIndex)
			e.str("PUSH_RESULT_DETAILS.detailsJson", v.Entries[i].DetailsJSON)
		}
	case *SubStart:
		if v.Status < SubActive || v.Status > SubReset {
			e.fail("SUB_START.status %d is not active, revoked or reset", v.Status)
		}
		e.str("SUB_START.id", v.ID)
		e.u8(uint8(v.Status))
		e.str("SUB_START.reasonCode", v.ReasonCode)
		e.scopeMap("SUB_START.effectiveScopes", v.EffectiveScopes)
		e.boolean(v.Bootstrap)
	case *Commit:
		e.commit(v)
	case *SegmentRef:
		e.segmentRef(v)
	case *SegmentInline:
		if h := ValidateRowsSegment; h != nil {
			if err := h(v.Payload); err != nil {
				e.fail("SEGMENT_INLINE payload is not a valid rows segment: %v", err)
			}
		}
		e.b = append(e.b, v.Payload...)
	case *SubEnd:
		e.i64("SUB_END.nextCursor", v.NextCursor)
		e.optJSON("SUB_END.bootstrapState", v.BootstrapState)
	case *ErrorFrame:
		e.str("ERROR.code", v.Code)
		e.str("ERROR.message", v.Message)
		e.str("ERROR.category", v.Category)
		e.boolean(v.Retryable)
		e.str("ERROR.recommendedAction", v.RecommendedAction)
		e.optJSON("ERROR.details", v.Details)
	case *Unknown:
		// §1.2 rule 2: preservation is the only source of unknown frames;
		// a registered type must never be smuggled through *Unknown.
		if registered(v.FrameType) {
			e.fail("refusing an unknown frame under registered type 0x%02x (%s)", uint8(v.FrameType), v.FrameType)
		}
		e.b = append(e.b, v.Payload...)
	default:
		e.fail("unsupported frame type %T", f)
	}
	n := len(e.b) - start - frameHeaderLen
	if e.err == nil && uint64(n) > math.MaxUint32 {
		e.fail("%s payload of %d bytes does not fit a u32 length", t, n)
	}
	if e.err != nil {
		e.b = e.b[:start]
		return e.err
	}
	binary.LittleEndian.PutUint32(e.b[start+1:], uint32(n))
	return nil
}

func (e *enc) reqHeader(v *ReqHeader) {
	if v.ClientID == "" {
		e.fail("REQ_HEADER.clientId must be non-empty")
	}
	if v.SchemaVersion < 1 {
		e.fail("REQ_HEADER.schemaVersion %d must be >= 1", v.SchemaVersion)
	}
	e.str("REQ_HEADER.clientId", v.ClientID)
	e.i32(v.SchemaVersion)
	if e.version >= Version2 {
		e.optStr("REQ_HEADER.logEpoch", v.LogEpoch)
	} else if v.LogEpoch.Present {
		e.fail("REQ_HEADER.logEpoch needs wire version 2")
	}
}

func (e *enc) pushCommit(v *PushCommit) {
	if v.ClientCommitID == "" {
		e.fail("PUSH_COMMIT.clientCommitId must be non-empty")
	}
	if len(v.Operations) == 0 {
		e.fail("PUSH_COMMIT %q has no operations (sync.empty_commit)", v.ClientCommitID)
	}
	e.str("PUSH_COMMIT.clientCommitId", v.ClientCommitID)
	e.length("PUSH_COMMIT.operations", len(v.Operations))
	for i := range v.Operations {
		o := &v.Operations[i]
		if o.Payload.Present != (o.Op == OpUpsert) {
			e.fail("PUSH_COMMIT.operations[%d]: payload must be present iff op is upsert", i)
		}
		e.str("operation.table", o.Table)
		e.str("operation.rowId", o.RowID)
		e.op("operation.op", o.Op)
		e.optI64("operation.baseVersion", o.BaseVersion)
		e.optBytes("operation.payload", o.Payload)
	}
}

func (e *enc) respHeader(v *RespHeader) {
	e.optI32(v.RequiredSchemaVersion)
	e.optI32(v.LatestSchemaVersion)
	if e.version >= Version2 {
		e.str("RESP_HEADER.logEpoch", v.LogEpoch)
		e.boolean(v.ResetRequired)
	} else if v.LogEpoch != "" || v.ResetRequired {
		e.fail("RESP_HEADER.logEpoch/resetRequired need wire version 2")
	}
}

func (e *enc) pushResult(v *PushResult) {
	if v.Status < PushApplied || v.Status > PushRejected {
		e.fail("PUSH_RESULT.status %d is not applied, cached or rejected", v.Status)
	}
	if v.CommitSeq.Present != (v.Status != PushRejected) {
		e.fail("PUSH_RESULT.commitSeq must be present iff status is applied or cached")
	}
	e.str("PUSH_RESULT.clientCommitId", v.ClientCommitID)
	e.u8(uint8(v.Status))
	e.optI64("PUSH_RESULT.commitSeq", v.CommitSeq)
	e.length("PUSH_RESULT.results", len(v.Results))
	for i := range v.Results {
		r := &v.Results[i]
		e.i32(r.OpIndex)
		e.u8(uint8(r.Status))
		switch r.Status {
		case OpApplied:
		case OpConflict:
			e.str("result.code", r.Code)
			e.str("result.message", r.Message)
			e.i64("result.serverVersion", r.ServerVersion)
			e.bytes("result.serverRow", r.ServerRow)
			if e.version >= Version3 {
				e.bytes("result.conflictColumns", r.ConflictColumns)
			}
		case OpError:
			e.str("result.code", r.Code)
			e.str("result.message", r.Message)
			e.boolean(r.Retryable)
		default:
			e.fail("PUSH_RESULT.results[%d]: status %d is not applied, conflict or error", i, r.Status)
		}
	}
}

func (e *enc) commit(v *Commit) {
	e.i64("COMMIT.commitSeq", v.CommitSeq)
	e.i64("COMMIT.createdAtMs", v.CreatedAtMs)
	e.str("COMMIT.actorId", v.ActorID)
	e.length("COMMIT.tables", len(v.Tables))
	for _, t := range v.Tables {
		e.str("COMMIT.tables", t)
	}
	e.length("COMMIT.changes", len(v.Changes))
	for i := range v.Changes {
		c := &v.Changes[i]
		if int(c.TableIndex) >= len(v.Tables) {
			e.fail("COMMIT.changes[%d]: tableIndex %d out of range (%d tables)", i, c.TableIndex, len(v.Tables))
		}
		up := c.Op == OpUpsert
		if c.RowVersion.Present != up || c.Row.Present != up {
			e.fail("COMMIT.changes[%d]: rowVersion and row must each be present iff op is upsert", i)
		}
		e.u16(c.TableIndex)
		e.str("change.rowId", c.RowID)
		e.op("change.op", c.Op)
		e.optI64("change.rowVersion", c.RowVersion)
		e.storedScopes("change.scopes", c.Scopes)
		e.optBytes("change.row", c.Row)
	}
}

func (e *enc) segmentRef(v *SegmentRef) {
	if v.MediaType != MediaRows && v.MediaType != MediaSQLite {
		e.fail("SEGMENT_REF.mediaType %d is not rows or sqlite", v.MediaType)
	}
	if v.URL.Present != v.URLExpiresAtMs.Present {
		e.fail("SEGMENT_REF.urlExpiresAtMs must be present iff url is")
	}
	e.str("SEGMENT_REF.segmentId", v.SegmentID)
	e.u8(uint8(v.MediaType))
	e.str("SEGMENT_REF.table", v.Table)
	e.i64("SEGMENT_REF.byteLength", v.ByteLength)
	e.i64("SEGMENT_REF.rowCount", v.RowCount)
	e.i64("SEGMENT_REF.asOfCommitSeq", v.AsOfCommitSeq)
	e.str("SEGMENT_REF.scopeDigest", v.ScopeDigest)
	e.optStr("SEGMENT_REF.rowCursor", v.RowCursor)
	e.optStr("SEGMENT_REF.nextRowCursor", v.NextRowCursor)
	e.optStr("SEGMENT_REF.url", v.URL)
	e.optI64("SEGMENT_REF.urlExpiresAtMs", v.URLExpiresAtMs)
}

// isNilFrame reports a nil interface or a typed nil pointer, which the
// codec refuses instead of dereferencing.
func isNilFrame(f Frame) bool {
	switch v := f.(type) {
	case nil:
		return true
	case *ReqHeader:
		return v == nil
	case *PushCommit:
		return v == nil
	case *PullHeader:
		return v == nil
	case *Subscription:
		return v == nil
	case *RespHeader:
		return v == nil
	case *Lease:
		return v == nil
	case *PushResult:
		return v == nil
	case *PushResultDetails:
		return v == nil
	case *SubStart:
		return v == nil
	case *Commit:
		return v == nil
	case *SegmentRef:
		return v == nil
	case *SegmentInline:
		return v == nil
	case *SubEnd:
		return v == nil
	case *ErrorFrame:
		return v == nil
	case *Unknown:
		return v == nil
	}
	return false
}

// Encoder writes one SSP2 message frame by frame (§1.4: a response is
// never buffered whole). The 8-byte header goes out with the first frame,
// END with Close. Frames are checked field by field (AppendFrame) and
// against the §1.5/§1.6 grammar before any byte of them is written, so a
// refused frame leaves the stream as it was and the caller may go on;
// a write error is sticky. One scratch buffer is reused for all frames.
type Encoder struct {
	w       io.Writer
	kind    MsgKind
	e       enc
	g       grammar
	started bool
	closed  bool
	err     error // sticky: setup or write failure
}

// NewEncoder returns an Encoder of a `kind` message in wire version
// `version` writing to w.
func NewEncoder(w io.Writer, version uint16, kind MsgKind) *Encoder {
	enc := &Encoder{}
	enc.Reset(w, version, kind)
	return enc
}

// encoderPool holds released Encoders with their scratch buffers, so a
// server's per-request encoder costs no allocation once warm.
var encoderPool = sync.Pool{New: func() any { return new(Encoder) }}

// maxPooledScratch bounds the scratch a pooled Encoder keeps: one large
// frame must not pin its buffer in the pool.
const maxPooledScratch = 64 << 10

// AcquireEncoder is NewEncoder taking a released Encoder from a pool.
// Pair it with Release once the message is written.
func AcquireEncoder(w io.Writer, version uint16, kind MsgKind) *Encoder {
	e := encoderPool.Get().(*Encoder)
	e.Reset(w, version, kind)
	return e
}

// Release returns e to AcquireEncoder's pool. e must not be used after
// it; nothing written is retained (the writer reference is dropped).
func (e *Encoder) Release() {
	if cap(e.e.b) > maxPooledScratch || cap(e.e.perm) > maxPooledScratch/8 || cap(e.g.pr.errIdx) > maxPooledScratch/4 {
		return
	}
	e.Reset(nil, Version1, KindResponse)
	encoderPool.Put(e)
}

// Reset makes e write a new message to w, keeping its scratch buffers.
func (e *Encoder) Reset(w io.Writer, version uint16, kind MsgKind) {
	errIdx := e.g.pr.errIdx[:0]
	*e = Encoder{
		w:    w,
		kind: kind,
		e:    enc{b: e.e.b[:0], perm: e.e.perm[:0], version: version},
		g:    newGrammar(kind),
		err:  checkVersionKind(version, kind),
	}
	e.g.pr.errIdx = errIdx
}

// FrameSize returns the length f's frame would take in this message
// (frame header included, envelope header not), checking its fields as
// WriteFrame does but not its order; nothing is written. It measures in
// the encoder's scratch, so it costs no allocation once that is grown.
func (e *Encoder) FrameSize(f Frame) (int, error) {
	e.e.b = e.e.b[:0]
	if err := e.e.frame(f); err != nil {
		return 0, err
	}
	return len(e.e.b), nil
}

// inlineDirect is the SEGMENT_INLINE size above which WriteFrame sends
// the payload from the caller's slice instead of copying it.
const inlineDirect = 4096

// WriteFrame checks f and writes it. Refused frames (field or order
// violations) return an error and write nothing.
func (e *Encoder) WriteFrame(f Frame) error {
	if e.err != nil {
		return e.err
	}
	if e.closed {
		return encErrf("WriteFrame after Close")
	}
	b := e.e.b[:0]
	if !e.started {
		b = appendHeader(b, e.e.version, e.kind)
	}
	var tail []byte
	if si, ok := f.(*SegmentInline); ok && si != nil && len(si.Payload) > inlineDirect {
		if uint64(len(si.Payload)) > math.MaxUint32 {
			return encErrf("SEGMENT_INLINE payload of %d bytes does not fit a u32 length", len(si.Payload))
		}
		if h := ValidateRowsSegment; h != nil {
			if err := h(si.Payload); err != nil {
				return encErrf("SEGMENT_INLINE payload is not a valid rows segment: %v", err)
			}
		}
		b = append(b, byte(FrameSegmentInline))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(si.Payload)))
		e.e.b = b
		tail = si.Payload
	} else {
		e.e.b = b
		if err := e.e.frame(f); err != nil {
			return err
		}
	}
	if gerr := e.g.step(f); gerr != nil {
		return encErrf("%s frame refused: %s", f.Type(), gerr.Message)
	}
	if _, err := e.w.Write(e.e.b); err != nil {
		e.err = err
		return err
	}
	e.started = true
	if tail != nil {
		if _, err := e.w.Write(tail); err != nil {
			e.err = err
			return err
		}
	}
	return nil
}

// Close checks that the message is complete (§1.5 content rule, open
// subscriptions) and writes END. It does not close the underlying writer.
func (e *Encoder) Close() error {
	if e.err != nil {
		return e.err
	}
	if e.closed {
		return nil
	}
	if gerr := e.g.finish(); gerr != nil {
		return encErrf("%s", gerr.Message)
	}
	b := e.e.b[:0]
	if !e.started {
		b = appendHeader(b, e.e.version, e.kind)
	}
	b = append(b, byte(FrameEnd), 0, 0, 0, 0)
	e.e.b = b
	if _, err := e.w.Write(b); err != nil {
		e.err = err
		return err
	}
	e.closed = true
	return nil
}

// Encode encodes a whole message with the same checks as Encoder.
func Encode(m *Message) ([]byte, error) {
	if m == nil {
		return nil, encErrf("nil message")
	}
	if err := checkVersionKind(m.WireVersion, m.Kind); err != nil {
		return nil, err
	}
	e := enc{b: make([]byte, 0, 512), version: m.WireVersion}
	e.b = appendHeader(e.b, m.WireVersion, m.Kind)
	g := newGrammar(m.Kind)
	for i, f := range m.Frames {
		if err := e.frame(f); err != nil {
			return nil, withFrame(i, err)
		}
		if gerr := g.step(f); gerr != nil {
			return nil, encErrf("frame %d (%s): %s", i, f.Type(), gerr.Message)
		}
	}
	if gerr := g.finish(); gerr != nil {
		return nil, encErrf("%s", gerr.Message)
	}
	return append(e.b, byte(FrameEnd), 0, 0, 0, 0), nil
}
