package wire

import "strconv"

// frameNames are the §1.2 registry names, also used by the §11.1
// rendering.
var frameNames = [...]string{
	FrameEnd:               "END",
	FrameReqHeader:         "REQ_HEADER",
	FramePushCommit:        "PUSH_COMMIT",
	FramePullHeader:        "PULL_HEADER",
	FrameSubscription:      "SUBSCRIPTION",
	FrameRespHeader:        "RESP_HEADER",
	FramePushResult:        "PUSH_RESULT",
	FrameSubStart:          "SUB_START",
	FrameCommit:            "COMMIT",
	FrameSegmentRef:        "SEGMENT_REF",
	FrameSegmentInline:     "SEGMENT_INLINE",
	FrameSubEnd:            "SUB_END",
	FrameLease:             "LEASE",
	FramePushResultDetails: "PUSH_RESULT_DETAILS",
	FrameError:             "ERROR",
}

// String is the registry name, or "UNKNOWN(0xNN)" for a type without a
// layout.
func (t FrameType) String() string {
	if int(t) < len(frameNames) && frameNames[t] != "" {
		return frameNames[t]
	}
	return "UNKNOWN(0x" + strconv.FormatUint(uint64(t), 16) + ")"
}

// frameKind is the message kind a frame type is registered for (§1.2
// registry); 0 means no layout in wire versions 1 to 3, i.e. unknown and
// skippable. END is registered for both and handled by the framing code.
func frameKind(t FrameType) MsgKind {
	switch t {
	case FrameReqHeader, FramePushCommit, FramePullHeader, FrameSubscription:
		return KindRequest
	case FrameRespHeader, FramePushResult, FrameSubStart, FrameCommit,
		FrameSegmentRef, FrameSegmentInline, FrameSubEnd, FrameLease,
		FramePushResultDetails, FrameError:
		return KindResponse
	}
	return 0
}

// registered reports whether t has a layout (or is END) in the wire
// versions this codec speaks; an encoder refuses *Unknown frames of such
// types (§1.2 rule 2).
func registered(t FrameType) bool { return t == FrameEnd || frameKind(t) != 0 }

// String is the §11.1 rendering name of the kind.
func (k MsgKind) String() string {
	switch k {
	case KindRequest:
		return "request"
	case KindResponse:
		return "response"
	}
	return "msgKind(" + strconv.Itoa(int(k)) + ")"
}

func (o Op) String() string {
	switch o {
	case OpUpsert:
		return "upsert"
	case OpDelete:
		return "delete"
	}
	return ""
}

func (s PushStatus) String() string {
	switch s {
	case PushApplied:
		return "applied"
	case PushCached:
		return "cached"
	case PushRejected:
		return "rejected"
	}
	return ""
}

func (s OpResultStatus) String() string {
	switch s {
	case OpApplied:
		return "applied"
	case OpConflict:
		return "conflict"
	case OpError:
		return "error"
	}
	return ""
}

func (s SubStatus) String() string {
	switch s {
	case SubActive:
		return "active"
	case SubRevoked:
		return "revoked"
	case SubReset:
		return "reset"
	}
	return ""
}

func (m MediaType) String() string {
	switch m {
	case MediaRows:
		return "rows"
	case MediaSQLite:
		return "sqlite"
	}
	return ""
}
