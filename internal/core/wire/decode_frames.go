package wire

import (
	"slices"

	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// ValidateRowsSegment, when set, checks that a SEGMENT_INLINE payload is a
// structurally valid SSG2 rows segment (§5.7; structural only, the column
// table's schema check stays with the receiver, §5.2). The segment package
// (internal/core/segment) registers it from its init so that wire need not
// import it; any error it returns becomes sync.invalid_request. It must be
// safe for concurrent use and set only during initialization.
var ValidateRowsSegment func(payload []byte) error

// parseFrame decodes one frame payload of a message of the given kind and
// version (§1.2 rules 2 and 3). Frame types registered for the other kind
// are errors; types with no layout at all become *Unknown, preserving the
// payload (which aliases the input). Whether the frame may appear where it
// does is the grammar's business (grammar.step).
func parseFrame(version uint16, kind MsgKind, t FrameType, payload []byte) (Frame, error) {
	fk := frameKind(t)
	if fk == 0 {
		return &Unknown{FrameType: t, Payload: payload[:len(payload):len(payload)]}, nil
	}
	if fk != kind {
		return nil, invalidf("%s frame is registered for %s messages and is illegal in a %s", t, fk, kind)
	}
	r := rd{b: payload}
	var f Frame
	switch t {
	case FrameSegmentInline:
		// No str field: skip the string copy; the payload aliases the input.
		p := payload[:len(payload):len(payload)]
		if v := ValidateRowsSegment; v != nil {
			if err := v(p); err != nil {
				if se := syncerr.As(err); se != nil && se.Code == syncerr.InvalidRequest {
					return nil, se
				}
				return nil, syncerr.Wrap(err, syncerr.InvalidRequest, "SEGMENT_INLINE payload is not a valid rows segment")
			}
		}
		return &SegmentInline{Payload: p}, nil
	case FramePullHeader:
		h := &PullHeader{}
		r.pullHeader(h)
		f = h
	case FrameReqHeader:
		h := &ReqHeader{}
		r.reqHeader(h, version)
		f = h
	case FramePushCommit:
		c := &PushCommit{}
		r.pushCommit(c, nil)
		f = c
	case FrameSubscription:
		sub := &Subscription{}
		r.subscription(sub)
		f = sub
	case FrameRespHeader:
		f = r.respHeader(version)
	case FrameLease:
		f = r.lease()
	case FramePushResult:
		f = r.pushResult(version)
	case FramePushResultDetails:
		f = r.pushResultDetails()
	case FrameSubStart:
		f = r.subStart()
	case FrameCommit:
		f = r.commit()
	case FrameSegmentRef:
		f = r.segmentRef()
	case FrameSubEnd:
		f = r.subEnd()
	case FrameError:
		f = r.errorFrame()
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

// reqHeader: §1.5. clientId non-empty and schemaVersion ≥ 1 are decode
// errors (§1.7); logEpoch exists from wire version 2.
func (r *rd) reqHeader(h *ReqHeader, version uint16) {
	h.ClientID = r.str("clientId")
	if r.err == nil && h.ClientID == "" {
		r.fail("clientId must be non-empty")
	}
	h.SchemaVersion = r.i32("schemaVersion")
	if r.err == nil && h.SchemaVersion < 1 {
		r.fail("schemaVersion %d must be >= 1", h.SchemaVersion)
	}
	if version >= Version2 {
		h.LogEpoch = r.optStr("logEpoch")
	}
}

// pushCommit: §6.1. An empty operation list is sync.empty_commit.
// opBuf, when it fits, holds the operations (see readListBuf).
func (r *rd) pushCommit(c *PushCommit, opBuf []Operation) {
	c.ClientCommitID = r.str("clientCommitId")
	if r.err == nil && c.ClientCommitID == "" {
		r.fail("clientCommitId must be non-empty")
	}
	c.Operations = readListBuf(r, "operations", 4+4+1+1+1, opBuf, r.operation)
	if r.err == nil && len(c.Operations) == 0 {
		r.err = syncerr.New(syncerr.EmptyCommit, "PUSH_COMMIT %q carries no operations", c.ClientCommitID)
	}
}

// operation: the payload ⇔ upsert presence tie (Conventions, §6.1).
// baseVersion is deliberately not tied to op.
func (r *rd) operation(o *Operation) {
	o.Table = r.str("table")
	o.RowID = r.str("rowId")
	o.Op = r.op()
	o.BaseVersion = r.optI64("baseVersion")
	o.Payload = r.optBytes("payload")
	if r.err == nil && o.Payload.Present != (o.Op == OpUpsert) {
		r.fail("payload must be present iff op is upsert (op %s, payload present %t)", o.Op, o.Payload.Present)
	}
}

func (r *rd) op() Op {
	v := Op(r.u8("op"))
	if r.err == nil && v != OpUpsert && v != OpDelete {
		r.fail("op byte %d is not upsert(1) or delete(2)", v)
	}
	return v
}

// pullHeader: §4.2; accept bits 4–7 set is a decode error.
func (r *rd) pullHeader(h *PullHeader) {
	h.LimitCommits = r.i32("limitCommits")
	h.LimitSnapshotRows = r.i32("limitSnapshotRows")
	h.MaxSnapshotPages = r.i32("maxSnapshotPages")
	h.Accept = r.u8("accept")
	if r.err == nil && h.Accept&0xF0 != 0 {
		r.fail("accept 0x%02x sets reserved bits 4-7", h.Accept)
	}
}

// subscription: §4.3.
func (r *rd) subscription(s *Subscription) {
	s.ID = r.str("id")
	s.Table = r.str("table")
	s.Scopes = r.scopeMap("scopes")
	s.Params = r.optJSON("params")
	s.Cursor = r.i64("cursor")
	s.BootstrapState = r.optJSON("bootstrapState")
}

// respHeader: §1.6; logEpoch and resetRequired exist from version 2.
func (r *rd) respHeader(version uint16) *RespHeader {
	h := &RespHeader{}
	h.RequiredSchemaVersion = r.optI32("requiredSchemaVersion")
	h.LatestSchemaVersion = r.optI32("latestSchemaVersion")
	if version >= Version2 {
		h.LogEpoch = r.str("logEpoch")
		h.ResetRequired = r.boolean("resetRequired")
	}
	return h
}

// lease: §7.3.2.
func (r *rd) lease() *Lease {
	l := &Lease{}
	l.LeaseID = r.str("leaseId")
	l.ExpiresAtMs = r.i64("expiresAtMs")
	return l
}

// pushResult: §6.3; commitSeq is present iff status is applied or cached.
// From version 3 a conflict record ends with conflictColumns.
func (r *rd) pushResult(version uint16) *PushResult {
	p := &PushResult{}
	p.ClientCommitID = r.str("clientCommitId")
	p.Status = PushStatus(r.u8("status"))
	if r.err == nil && (p.Status < PushApplied || p.Status > PushRejected) {
		r.fail("status byte %d is not applied(1), cached(2) or rejected(3)", p.Status)
	}
	p.CommitSeq = r.optI64("commitSeq")
	if r.err == nil && p.CommitSeq.Present != (p.Status != PushRejected) {
		r.fail("commitSeq must be present iff status is applied or cached (status %s, commitSeq present %t)", p.Status, p.CommitSeq.Present)
	}
	p.Results = readList(r, "results", 5, func(res *OpResult) { r.opResult(version, res) })
	return p
}

// opResult: one §6.3 result; which fields follow depends on its status.
func (r *rd) opResult(version uint16, res *OpResult) {
	res.OpIndex = r.i32("opIndex")
	res.Status = OpResultStatus(r.u8("status"))
	switch res.Status {
	case OpApplied:
	case OpConflict:
		res.Code = r.str("code")
		res.Message = r.str("message")
		res.ServerVersion = r.i64("serverVersion")
		res.ServerRow = r.bytes("serverRow")
		if version >= Version3 {
			// §6.3 (v3): presence-bitmap layout over the table's columns;
			// its length and padding are checked by whoever knows the
			// table (rowcodec.DecodePresence), not by the envelope codec.
			res.ConflictColumns = r.bytes("conflictColumns")
		}
	case OpError:
		res.Code = r.str("code")
		res.Message = r.str("message")
		res.Retryable = r.boolean("retryable")
	default:
		r.fail("status byte %d is not applied(1), conflict(2) or error(3)", res.Status)
	}
}

// pushResultDetails: §6.3.1. Entries non-empty, opIndex unique and
// non-negative, each detailsJson within the bounded shape. Matching the
// preceding rejected PUSH_RESULT is checked by the grammar.
func (r *rd) pushResultDetails() *PushResultDetails {
	d := &PushResultDetails{}
	d.ClientCommitID = r.str("clientCommitId")
	d.Entries = readList(r, "entries", 8, func(e *DetailEntry) {
		e.OpIndex = r.i32("opIndex")
		e.DetailsJSON = r.str("detailsJson")
	})
	if r.err == nil {
		r.err = checkDetailEntries(d.Entries)
	}
	return d
}

// checkDetailEntries is the §6.3.1 single-frame check, shared by decoder
// and encoder: entries non-empty, every opIndex non-negative and unique,
// every detailsJson within the bounded shape.
func checkDetailEntries(entries []DetailEntry) *syncerr.Error {
	if len(entries) == 0 {
		return invalidf("entries must be non-empty")
	}
	for i := range entries {
		e := &entries[i]
		if e.OpIndex < 0 {
			return invalidf("entries[%d]: opIndex %d is negative", i, e.OpIndex)
		}
		if err := validateDetailsJSON(e.DetailsJSON); err != nil {
			return syncerr.New(syncerr.InvalidRequest, "entries[%d]: %s", i, syncerr.As(err).Message)
		}
	}
	if dup, ok := duplicateIndex(entries); ok {
		return invalidf("duplicate opIndex %d", dup)
	}
	return nil
}

// duplicateIndex finds a repeated opIndex in O(n log n) so a hostile
// frame with many entries cannot make the check quadratic.
func duplicateIndex(entries []DetailEntry) (int32, bool) {
	if len(entries) <= 16 {
		for i := range entries {
			for j := range i {
				if entries[j].OpIndex == entries[i].OpIndex {
					return entries[i].OpIndex, true
				}
			}
		}
		return 0, false
	}
	idx := make([]int32, len(entries))
	for i := range entries {
		idx[i] = entries[i].OpIndex
	}
	slices.Sort(idx)
	for i := 1; i < len(idx); i++ {
		if idx[i] == idx[i-1] {
			return idx[i], true
		}
	}
	return 0, false
}

// subStart: §4.4.
func (r *rd) subStart() *SubStart {
	s := &SubStart{}
	s.ID = r.str("id")
	s.Status = SubStatus(r.u8("status"))
	if r.err == nil && (s.Status < SubActive || s.Status > SubReset) {
		r.fail("status byte %d is not active(1), revoked(2) or reset(3)", s.Status)
	}
	s.ReasonCode = r.str("reasonCode")
	s.EffectiveScopes = r.scopeMap("effectiveScopes")
	s.Bootstrap = r.boolean("bootstrap")
	return s
}

// commit: §4.5. tableIndex must index tables; rowVersion and row are each
// present iff op is upsert.
func (r *rd) commit() *Commit {
	c := &Commit{}
	c.CommitSeq = r.i64("commitSeq")
	c.CreatedAtMs = r.i64("createdAtMs")
	c.ActorID = r.str("actorId")
	c.Tables = readList(r, "tables", 4, func(t *string) { *t = r.str("tables") })
	c.Changes = readList(r, "changes", 2+4+1+1+4+1, func(ch *Change) { r.change(ch, len(c.Tables)) })
	return c
}

// change: one §4.5 change of a COMMIT with the given number of tables.
func (r *rd) change(ch *Change, tables int) {
	ch.TableIndex = r.u16("tableIndex")
	if r.err == nil && int(ch.TableIndex) >= tables {
		r.fail("tableIndex %d out of range (%d tables)", ch.TableIndex, tables)
	}
	ch.RowID = r.str("rowId")
	ch.Op = r.op()
	ch.RowVersion = r.optI64("rowVersion")
	ch.Scopes = r.storedScopes("scopes")
	ch.Row = r.optBytes("row")
	if r.err == nil {
		up := ch.Op == OpUpsert
		if ch.RowVersion.Present != up || ch.Row.Present != up {
			r.fail("rowVersion and row must each be present iff op is upsert (op %s, rowVersion present %t, row present %t)", ch.Op, ch.RowVersion.Present, ch.Row.Present)
		}
	}
}

// segmentRef: §5.4; urlExpiresAtMs present iff url is.
func (r *rd) segmentRef() *SegmentRef {
	s := &SegmentRef{}
	s.SegmentID = r.str("segmentId")
	s.MediaType = MediaType(r.u8("mediaType"))
	if r.err == nil && s.MediaType != MediaRows && s.MediaType != MediaSQLite {
		r.fail("mediaType byte %d is not rows(1) or sqlite(2)", s.MediaType)
	}
	s.Table = r.str("table")
	s.ByteLength = r.i64("byteLength")
	s.RowCount = r.i64("rowCount")
	s.AsOfCommitSeq = r.i64("asOfCommitSeq")
	s.ScopeDigest = r.str("scopeDigest")
	s.RowCursor = r.optStr("rowCursor")
	s.NextRowCursor = r.optStr("nextRowCursor")
	s.URL = r.optStr("url")
	s.URLExpiresAtMs = r.optI64("urlExpiresAtMs")
	if r.err == nil && s.URL.Present != s.URLExpiresAtMs.Present {
		r.fail("urlExpiresAtMs must be present iff url is (url present %t)", s.URL.Present)
	}
	return s
}

// subEnd: §4.4.
func (r *rd) subEnd() *SubEnd {
	s := &SubEnd{}
	s.NextCursor = r.i64("nextCursor")
	s.BootstrapState = r.optJSON("bootstrapState")
	return s
}

// errorFrame: §1.6.
func (r *rd) errorFrame() *ErrorFrame {
	e := &ErrorFrame{}
	e.Code = r.str("code")
	e.Message = r.str("message")
	e.Category = r.str("category")
	e.Retryable = r.boolean("retryable")
	e.RecommendedAction = r.str("recommendedAction")
	e.Details = r.optJSON("details")
	return e
}
