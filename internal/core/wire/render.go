package wire

import (
	"encoding/base64"
	"strconv"

	"github.com/skyfold/syncular-lambda/internal/core/canonjson"
)

// Render produces the canonical JSON debug rendering of §11.1: one object
// {"magic","wireVersion","msgKind","frames"} with frames in wire order
// (END omitted), fields in spec-table order, absent opt() fields omitted,
// binary fields as standard base64, enums by name, json fields embedded
// as the JSON they contain, unknown frames as {"type":"UNKNOWN",
// "frameType":n,"payload":b64}. Each frame is first checked as the
// encoder would check it, so the rendering always describes a message
// that can exist on the wire.
//
// Rendering is a developer and golden-vector tool; no production path may
// parse it (§11).
func Render(m *Message) ([]byte, error) {
	if m == nil {
		return nil, encErrf("nil message")
	}
	if err := checkVersionKind(m.WireVersion, m.Kind); err != nil {
		return nil, err
	}
	chk := enc{version: m.WireVersion}
	w := jw{b: make([]byte, 0, 1024)}
	w.raw(`{"magic":"SSP2","wireVersion":`)
	w.int(int64(m.WireVersion))
	w.raw(`,"msgKind":`)
	w.str(m.Kind.String())
	w.raw(`,"frames":[`)
	for i, f := range m.Frames {
		chk.b = chk.b[:0]
		if err := chk.frame(f); err != nil {
			return nil, withFrame(i, err)
		}
		w.sep(i)
		w.frame(m.WireVersion, f)
	}
	w.raw(`]}`)
	return w.b, nil
}

// jw appends compact JSON. Field order is the caller's statement order.
type jw struct {
	b     []byte
	first bool // no member written yet in the current object
}

func (w *jw) raw(s string) { w.b = append(w.b, s...) }

func (w *jw) int(v int64) { w.b = strconv.AppendInt(w.b, v, 10) }

// str writes s as a JSON string the way JSON.stringify does.
func (w *jw) str(s string) { w.b = canonjson.AppendString(w.b, s) }

func (w *jw) open(frameType string) {
	w.raw(`{"type":`)
	w.str(frameType)
	w.first = false
}

func (w *jw) begin() { w.b = append(w.b, '{'); w.first = true }
func (w *jw) end()   { w.b = append(w.b, '}'); w.first = false }

// sep writes the comma before every element but the first.
func (w *jw) sep(i int) {
	if i > 0 {
		w.b = append(w.b, ',')
	}
}

// list writes member k as a JSON array of n elements; elem(i) writes the
// i-th.
func (w *jw) list(k string, n int, elem func(i int)) {
	w.key(k)
	w.b = append(w.b, '[')
	for i := range n {
		w.sep(i)
		elem(i)
	}
	w.b = append(w.b, ']')
}

func (w *jw) key(k string) {
	if !w.first {
		w.b = append(w.b, ',')
	}
	w.first = false
	w.b = append(w.b, '"')
	w.b = append(w.b, k...)
	w.b = append(w.b, '"', ':')
}

func (w *jw) fStr(k, v string) { w.key(k); w.str(v) }
func (w *jw) fInt(k string, v int64) {
	w.key(k)
	w.int(v)
}
func (w *jw) fBool(k string, v bool) {
	w.key(k)
	w.raw(strconv.FormatBool(v))
}
func (w *jw) fB64(k string, v []byte) {
	w.key(k)
	w.b = append(w.b, '"')
	w.b = base64.StdEncoding.AppendEncode(w.b, v)
	w.b = append(w.b, '"')
}

// fJSON embeds a json field's text as is: it was validated as one JSON
// value, and rule 7 wants the value, not a re-escaped string.
func (w *jw) fJSON(k string, v JSON) {
	w.key(k)
	w.raw(string(v))
}

func (w *jw) optStr(k string, v Opt[string]) {
	if v.Present {
		w.fStr(k, v.Value)
	}
}

func (w *jw) optInt(k string, v Opt[int64]) {
	if v.Present {
		w.fInt(k, v.Value)
	}
}

func (w *jw) optI32(k string, v Opt[int32]) {
	if v.Present {
		w.fInt(k, int64(v.Value))
	}
}

func (w *jw) optJSON(k string, v Opt[JSON]) {
	if v.Present {
		w.fJSON(k, v.Value)
	}
}

func (w *jw) scopeMap(k string, m ScopeMap) {
	w.key(k)
	w.begin()
	for i, e := range m {
		w.sep(i)
		w.str(e.Key)
		w.b = append(w.b, ':', '[')
		for j, v := range e.Values {
			w.sep(j)
			w.str(v)
		}
		w.b = append(w.b, ']')
	}
	w.end()
}

func (w *jw) storedScopes(k string, m StoredScopes) {
	w.key(k)
	w.begin()
	for i, e := range m {
		w.sep(i)
		w.str(e.Key)
		w.b = append(w.b, ':')
		w.str(e.Value)
	}
	w.end()
}

func (w *jw) frame(version uint16, f Frame) {
	switch v := f.(type) {
	case *ReqHeader:
		w.open("REQ_HEADER")
		w.fStr("clientId", v.ClientID)
		w.fInt("schemaVersion", int64(v.SchemaVersion))
		if version >= Version2 {
			w.optStr("logEpoch", v.LogEpoch)
		}
	case *PushCommit:
		w.open("PUSH_COMMIT")
		w.fStr("clientCommitId", v.ClientCommitID)
		w.list("operations", len(v.Operations), func(i int) {
			o := &v.Operations[i]
			w.begin()
			w.fStr("table", o.Table)
			w.fStr("rowId", o.RowID)
			w.fStr("op", o.Op.String())
			w.optInt("baseVersion", o.BaseVersion)
			if o.Payload.Present {
				w.fB64("payload", o.Payload.Value)
			}
			w.end()
		})
	case *PullHeader:
		w.open("PULL_HEADER")
		w.fInt("limitCommits", int64(v.LimitCommits))
		w.fInt("limitSnapshotRows", int64(v.LimitSnapshotRows))
		w.fInt("maxSnapshotPages", int64(v.MaxSnapshotPages))
		w.fInt("accept", int64(v.Accept))
	case *Subscription:
		w.open("SUBSCRIPTION")
		w.fStr("id", v.ID)
		w.fStr("table", v.Table)
		w.scopeMap("scopes", v.Scopes)
		w.optJSON("params", v.Params)
		w.fInt("cursor", v.Cursor)
		w.optJSON("bootstrapState", v.BootstrapState)
	case *RespHeader:
		w.open("RESP_HEADER")
		w.optI32("requiredSchemaVersion", v.RequiredSchemaVersion)
		w.optI32("latestSchemaVersion", v.LatestSchemaVersion)
		if version >= Version2 {
			w.fStr("logEpoch", v.LogEpoch)
			w.fBool("resetRequired", v.ResetRequired)
		}
	case *Lease:
		w.open("LEASE")
		w.fStr("leaseId", v.LeaseID)
		w.fInt("expiresAtMs", v.ExpiresAtMs)
	case *PushResult:
		w.open("PUSH_RESULT")
		w.fStr("clientCommitId", v.ClientCommitID)
		w.fStr("status", v.Status.String())
		w.optInt("commitSeq", v.CommitSeq)
		w.list("results", len(v.Results), func(i int) {
			r := &v.Results[i]
			w.begin()
			w.fInt("opIndex", int64(r.OpIndex))
			w.fStr("status", r.Status.String())
			switch r.Status {
			case OpConflict:
				w.fStr("code", r.Code)
				w.fStr("message", r.Message)
				w.fInt("serverVersion", r.ServerVersion)
				w.fB64("serverRow", r.ServerRow)
				if version >= Version3 {
					w.fB64("conflictColumns", r.ConflictColumns)
				}
			case OpError:
				w.fStr("code", r.Code)
				w.fStr("message", r.Message)
				w.fBool("retryable", r.Retryable)
			}
			w.end()
		})
	case *PushResultDetails:
		// Rendered like the reference tooling: each entry's details as the
		// normalized object under "details".
		w.open("PUSH_RESULT_DETAILS")
		w.fStr("clientCommitId", v.ClientCommitID)
		w.list("entries", len(v.Entries), func(i int) {
			w.begin()
			w.fInt("opIndex", int64(v.Entries[i].OpIndex))
			w.key("details")
			norm, _ := NormalizeDetailsJSON(v.Entries[i].DetailsJSON) // checked by Render
			w.raw(norm)
			w.end()
		})
	case *SubStart:
		w.open("SUB_START")
		w.fStr("id", v.ID)
		w.fStr("status", v.Status.String())
		w.fStr("reasonCode", v.ReasonCode)
		w.scopeMap("effectiveScopes", v.EffectiveScopes)
		w.fBool("bootstrap", v.Bootstrap)
	case *Commit:
		w.open("COMMIT")
		w.fInt("commitSeq", v.CommitSeq)
		w.fInt("createdAtMs", v.CreatedAtMs)
		w.fStr("actorId", v.ActorID)
		w.list("tables", len(v.Tables), func(i int) { w.str(v.Tables[i]) })
		w.list("changes", len(v.Changes), func(i int) {
			c := &v.Changes[i]
			w.begin()
			w.fInt("tableIndex", int64(c.TableIndex))
			w.fStr("rowId", c.RowID)
			w.fStr("op", c.Op.String())
			w.optInt("rowVersion", c.RowVersion)
			w.storedScopes("scopes", c.Scopes)
			if c.Row.Present {
				w.fB64("row", c.Row.Value)
			}
			w.end()
		})
	case *SegmentRef:
		w.open("SEGMENT_REF")
		w.fStr("segmentId", v.SegmentID)
		w.fStr("mediaType", v.MediaType.String())
		w.fStr("table", v.Table)
		w.fInt("byteLength", v.ByteLength)
		w.fInt("rowCount", v.RowCount)
		w.fInt("asOfCommitSeq", v.AsOfCommitSeq)
		w.fStr("scopeDigest", v.ScopeDigest)
		w.optStr("rowCursor", v.RowCursor)
		w.optStr("nextRowCursor", v.NextRowCursor)
		w.optStr("url", v.URL)
		w.optInt("urlExpiresAtMs", v.URLExpiresAtMs)
	case *SegmentInline:
		// §11.1 rule 4: the whole payload as base64, never the nested
		// rows-segment rendering.
		w.open("SEGMENT_INLINE")
		w.fB64("payload", v.Payload)
	case *SubEnd:
		w.open("SUB_END")
		w.fInt("nextCursor", v.NextCursor)
		w.optJSON("bootstrapState", v.BootstrapState)
	case *ErrorFrame:
		w.open("ERROR")
		w.fStr("code", v.Code)
		w.fStr("message", v.Message)
		w.fStr("category", v.Category)
		w.fBool("retryable", v.Retryable)
		w.fStr("recommendedAction", v.RecommendedAction)
		w.optJSON("details", v.Details)
	case *Unknown:
		w.open("UNKNOWN")
		w.fInt("frameType", int64(v.FrameType))
		w.fB64("payload", v.Payload)
	}
	w.end()
}
