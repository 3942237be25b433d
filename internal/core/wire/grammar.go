package wire

import (
	"slices"

	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// grammar is the frame-order state machine of §1.5 (requests) and §1.6
// (responses). The decoder, the streaming reader, the encoder and
// Message.Request all drive this one implementation, so the rules cannot
// drift between reading and writing. It holds only the state §1.4 lists
// plus what the PUSH_RESULT_DETAILS pairing of §6.3.1 needs.
type grammar struct {
	kind   MsgKind
	frames int // frames accepted so far, unknown included, END excluded

	// request (§1.5)
	pushes int
	pull   bool

	// response (§1.6)
	lease      bool // a LEASE was seen (at most one, §7.3.2)
	body       bool // a known frame other than RESP_HEADER/LEASE was seen
	subSeen    bool // some SUB_START was seen: push results are over
	inSub      bool // a SUB_START is open
	subCommits bool // the open subscription carried COMMIT frames
	subSegs    bool // … or segment frames (never both, §1.6)
	errSeen    bool // ERROR was seen: only END may follow

	// the latest PUSH_RESULT, for its optional details companion (§6.3.1)
	pr struct {
		valid      bool
		id         string
		rejected   bool
		hasDetails bool
		errIdx     []int32 // opIndex of its error records, sorted
	}
}

func newGrammar(kind MsgKind) grammar { return grammar{kind: kind} }

func headerType(kind MsgKind) FrameType {
	if kind == KindRequest {
		return FrameReqHeader
	}
	return FrameRespHeader
}

// step admits frame f at the next position or explains why it may not be
// there. Unknown frames are transparent to the ordering rules (§1.2 rule
// 2: the constraints apply to known frame types only) except that none
// may be first and none may follow ERROR.
func (g *grammar) step(f Frame) *syncerr.Error {
	t := f.Type()
	if err := g.admitType(t); err != nil {
		return err
	}
	hdr := headerType(g.kind)
	if g.frames == 0 {
		if t != hdr {
			if _, unknown := f.(*Unknown); unknown {
				return invalidf("first frame is an unknown frame type 0x%02x; %s must be first", uint8(t), hdr)
			}
			return invalidf("first frame is %s; %s must be first", t, hdr)
		}
		g.frames++
		return nil
	}
	if _, unknown := f.(*Unknown); unknown {
		g.frames++
		return nil
	}
	if t == hdr {
		return invalidf("duplicate %s frame", t)
	}
	var err *syncerr.Error
	if g.kind == KindRequest {
		err = g.stepRequest(f)
	} else {
		err = g.stepResponse(f)
	}
	if err == nil {
		g.frames++
	}
	return err
}

// admitType is the part of step that needs only the frame type: after
// ERROR no frame of any type, unknown included, may follow (§1.6). The
// decoder calls it before parsing a payload so the error names the real
// problem rather than whatever the payload's bytes happen to violate.
func (g *grammar) admitType(t FrameType) *syncerr.Error {
	if g.errSeen {
		return invalidf("%s frame after ERROR (only END may follow ERROR, §1.6)", t)
	}
	return nil
}

// stepRequest: REQ_HEADER PUSH_COMMIT* PULL_HEADER? SUBSCRIPTION*.
func (g *grammar) stepRequest(f Frame) *syncerr.Error {
	switch f.(type) {
	case *PushCommit:
		if g.pull {
			return invalidf("PUSH_COMMIT after PULL_HEADER")
		}
		g.pushes++
	case *PullHeader:
		if g.pull {
			return invalidf("duplicate PULL_HEADER frame")
		}
		g.pull = true
	case *Subscription:
		if !g.pull {
			return invalidf("SUBSCRIPTION without a preceding PULL_HEADER")
		}
	default:
		return invalidf("%s frame is illegal in a request message", f.Type())
	}
	return nil
}

// stepResponse: RESP_HEADER LEASE? (PUSH_RESULT PUSH_RESULT_DETAILS?)*
// (SUB_START (COMMIT* | segment*) SUB_END)* with ERROR allowed anywhere
// after the header.
func (g *grammar) stepResponse(f Frame) *syncerr.Error {
	switch v := f.(type) {
	case *Lease:
		if g.lease {
			return invalidf("second LEASE frame (at most one, §7.3.2)")
		}
		if g.body {
			return invalidf("LEASE must immediately follow RESP_HEADER")
		}
		g.lease = true
		return nil
	case *PushResult:
		if g.subSeen {
			return invalidf("PUSH_RESULT after the subscription sections began")
		}
		g.pr.valid = true
		g.pr.id = v.ClientCommitID
		g.pr.rejected = v.Status == PushRejected
		g.pr.hasDetails = false
		g.pr.errIdx = g.pr.errIdx[:0]
		sorted := true
		for i := range v.Results {
			if v.Results[i].Status == OpError {
				n := len(g.pr.errIdx)
				if n > 0 && g.pr.errIdx[n-1] > v.Results[i].OpIndex {
					sorted = false
				}
				g.pr.errIdx = append(g.pr.errIdx, v.Results[i].OpIndex)
			}
		}
		if !sorted {
			slices.Sort(g.pr.errIdx)
		}
	case *PushResultDetails:
		if g.subSeen || !g.pr.valid {
			return invalidf("PUSH_RESULT_DETAILS must immediately follow a rejected PUSH_RESULT")
		}
		if g.pr.hasDetails {
			return invalidf("second PUSH_RESULT_DETAILS for PUSH_RESULT %q", g.pr.id)
		}
		if !g.pr.rejected {
			return invalidf("PUSH_RESULT_DETAILS follows a PUSH_RESULT that is not rejected")
		}
		if v.ClientCommitID != g.pr.id {
			return invalidf("PUSH_RESULT_DETAILS clientCommitId %q does not match the preceding PUSH_RESULT %q", v.ClientCommitID, g.pr.id)
		}
		for i := range v.Entries {
			if _, ok := slices.BinarySearch(g.pr.errIdx, v.Entries[i].OpIndex); !ok {
				return invalidf("PUSH_RESULT_DETAILS entries[%d]: opIndex %d is not an error record of the preceding PUSH_RESULT", i, v.Entries[i].OpIndex)
			}
		}
		g.pr.hasDetails = true
	case *SubStart:
		if g.inSub {
			return invalidf("SUB_START while a subscription is open (subscriptions never nest)")
		}
		g.inSub, g.subSeen = true, true
		g.subCommits, g.subSegs = false, false
		g.pr.valid = false
	case *Commit:
		if !g.inSub {
			return invalidf("COMMIT outside a subscription")
		}
		if g.subSegs {
			return invalidf("COMMIT after segment frames in one subscription (no mixing, §1.6)")
		}
		g.subCommits = true
	case *SegmentRef, *SegmentInline:
		if !g.inSub {
			return invalidf("%s outside a subscription", f.Type())
		}
		if g.subCommits {
			return invalidf("%s after COMMIT frames in one subscription (no mixing, §1.6)", f.Type())
		}
		g.subSegs = true
	case *SubEnd:
		if !g.inSub {
			return invalidf("SUB_END without an open SUB_START")
		}
		g.inSub = false
	case *ErrorFrame:
		g.errSeen = true
	default:
		return invalidf("%s frame is illegal in a response message", f.Type())
	}
	g.body = true
	return nil
}

// finish checks the end of the message (at END): a header was seen, a
// request has content (§1.5), and no subscription is left open unless an
// ERROR cut the stream short (§1.4 rule 5).
func (g *grammar) finish() *syncerr.Error {
	if g.frames == 0 {
		return invalidf("message has no %s frame", headerType(g.kind))
	}
	if g.kind == KindRequest {
		if g.pushes == 0 && !g.pull {
			return invalidf("request has neither PUSH_COMMIT nor PULL_HEADER frames (§1.5)")
		}
		return nil
	}
	if g.inSub && !g.errSeen {
		return invalidf("subscription not closed by SUB_END before END")
	}
	return nil
}
