package wire

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// mustDecode decodes b, checks the streaming Reader agrees and that the
// message re-encodes byte for byte.
func mustDecode(t *testing.T, b []byte) *Message {
	t.Helper()
	m, err := Decode(b)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	sm, err := readAll(b, 1<<20)
	if err != nil {
		t.Fatalf("Reader: %v", err)
	}
	if !reflect.DeepEqual(m, sm) {
		t.Fatalf("Reader and Decode disagree")
	}
	enc, err := Encode(m)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	if !bytes.Equal(enc, b) {
		t.Fatalf("re-encoding differs\n got %x\nwant %x", enc, b)
	}
	if _, err := Render(m); err != nil {
		t.Fatalf("Render: %v", err)
	}
	return m
}

// rejects asserts that both Decode and the streaming Reader refuse b with
// code want.
func rejects(t *testing.T, b []byte, want syncerr.Code) {
	t.Helper()
	_, err := Decode(b)
	assertCode(t, err, want)
	_, err = readAll(b, 1<<20)
	assertCode(t, err, want)
}

func TestDecodeRejects(t *testing.T) {
	bad := syncerr.InvalidRequest
	withHeader := func(h []byte) []byte { return append(h, 0x01, 0, 0, 0, 0) }
	tests := []struct {
		name string
		in   []byte
		code syncerr.Code
	}{
		// §1.2 envelope and framing.
		{"empty input", nil, bad},
		{"short header", []byte("SSP2\x01\x00"), bad},
		{"wire version 0", withHeader([]byte("SSP2\x00\x00\x01\x00")), bad},
		{"wire version 4", withHeader([]byte("SSP2\x04\x00\x01\x00")), bad},
		{"wire version 999", withHeader([]byte("SSP2\xe7\x03\x01\x00")), bad},
		{"msgKind 0", withHeader([]byte("SSP2\x01\x00\x00\x00")), bad},
		{"msgKind 3", withHeader([]byte("SSP2\x01\x00\x03\x00")), bad},
		{"flags 0x80", withHeader([]byte("SSP2\x01\x00\x01\x80")), bad},
		{"header only", []byte("SSP2\x01\x00\x01\x00"), bad},
		{"partial frame header", []byte("SSP2\x01\x00\x01\x00\x00\x00"), bad},
		{"END with length", append(bytes.TrimSuffix(req(fr(FrameReqHeader, pReqHeader), fr(FramePullHeader, pPull)), []byte{0, 0, 0, 0, 0}), 0, 1, 0, 0, 0, 0xAA), bad},
		{"byte after END", append(req(fr(FrameReqHeader, pReqHeader), fr(FramePullHeader, pPull)), 0), bad},
		{"second END", append(req(fr(FrameReqHeader, pReqHeader), fr(FramePullHeader, pPull)), 0, 0, 0, 0, 0), bad},
		{"missing END", bytes.TrimSuffix(req(fr(FrameReqHeader, pReqHeader), fr(FramePullHeader, pPull)), []byte{0, 0, 0, 0, 0}), bad},
		{"frame longer than input", append(appendHeader(nil, Version1, KindRequest), 0x01, 0xFF, 0, 0, 0, 'a', 'b', 0, 0, 0, 0, 0), bad},
		{"frame length 2^32-1", append(appendHeader(nil, Version1, KindRequest), 0x01, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 0), bad},
		{"only END", req(), bad},
		{"trailing byte in known frame", req(fr(FrameReqHeader, pReqHeader.raw(0)), fr(FramePullHeader, pPull)), bad},
		{"truncated known frame", req(fr(FrameReqHeader, pReqHeader[:len(pReqHeader)-1]), fr(FramePullHeader, pPull)), bad},

		// §1.5 request grammar.
		{"unknown first frame (request)", req(fr(0x17, pb("x")), fr(FrameReqHeader, pReqHeader), fr(FramePullHeader, pPull)), bad},
		{"PULL_HEADER first", req(fr(FramePullHeader, pPull), fr(FrameReqHeader, pReqHeader)), bad},
		{"duplicate REQ_HEADER", req(fr(FrameReqHeader, pReqHeader), fr(FrameReqHeader, pReqHeader), fr(FramePullHeader, pPull)), bad},
		{"no-content request", req(fr(FrameReqHeader, pReqHeader)), bad},
		{"no-content request with unknown frame", req(fr(FrameReqHeader, pReqHeader), fr(0x20, nil)), bad},
		{"PUSH_COMMIT after PULL_HEADER", req(fr(FrameReqHeader, pReqHeader), fr(FramePullHeader, pPull), fr(FramePushCommit, pushCommit("c1"))), bad},
		{"duplicate PULL_HEADER", req(fr(FrameReqHeader, pReqHeader), fr(FramePullHeader, pPull), fr(FramePullHeader, pPull)), bad},
		{"SUBSCRIPTION without PULL_HEADER", req(fr(FrameReqHeader, pReqHeader), fr(FramePushCommit, pushCommit("c1")), fr(FrameSubscription, pSub)), bad},
		{"response frame in request", req(fr(FrameReqHeader, pReqHeader), fr(FramePullHeader, pPull), fr(FrameSubStart, pSubStart)), bad},
		{"ERROR frame in request", req(fr(FrameReqHeader, pReqHeader), fr(FramePullHeader, pPull), fr(FrameError, pError)), bad},
		{"RESP_HEADER first in request", req(fr(FrameRespHeader, pRespHeader)), bad},

		// §1.6 response grammar.
		{"unknown first frame (response)", resp(fr(0x2F, nil), fr(FrameRespHeader, pRespHeader)), bad},
		{"REQ_HEADER in response", resp(fr(FrameRespHeader, pRespHeader), fr(FrameReqHeader, pReqHeader)), bad},
		{"PUSH_COMMIT in response", resp(fr(FrameRespHeader, pRespHeader), fr(FramePushCommit, pushCommit("c1"))), bad},
		{"duplicate RESP_HEADER", resp(fr(FrameRespHeader, pRespHeader), fr(FrameRespHeader, pRespHeader)), bad},
		{"LEASE twice", resp(fr(FrameRespHeader, pRespHeader), fr(FrameLease, pLease), fr(FrameLease, pLease)), bad},
		{"LEASE after PUSH_RESULT", resp(fr(FrameRespHeader, pRespHeader), fr(FramePushResult, pushResult("c1", PushApplied, 0)), fr(FrameLease, pLease)), bad},
		{"LEASE after SUB_END", resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pSubStart), fr(FrameSubEnd, pSubEnd), fr(FrameLease, pLease)), bad},
		{"PUSH_RESULT after SUB_END", resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pSubStart), fr(FrameSubEnd, pSubEnd), fr(FramePushResult, pushResult("c1", PushApplied, 0))), bad},
		{"nested SUB_START", resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pSubStart), fr(FrameSubStart, pSubStart), fr(FrameSubEnd, pSubEnd), fr(FrameSubEnd, pSubEnd)), bad},
		{"COMMIT outside subscription", resp(fr(FrameRespHeader, pRespHeader), fr(FrameCommit, commitFrame())), bad},
		{"SEGMENT_REF outside subscription", resp(fr(FrameRespHeader, pRespHeader), fr(FrameSegmentRef, pSegRef)), bad},
		{"SEGMENT_INLINE outside subscription", resp(fr(FrameRespHeader, pRespHeader), fr(FrameSegmentInline, pInline)), bad},
		{"SUB_END without SUB_START", resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubEnd, pSubEnd)), bad},
		{"COMMIT then SEGMENT_REF", resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pSubStart), fr(FrameCommit, commitFrame()), fr(FrameSegmentRef, pSegRef), fr(FrameSubEnd, pSubEnd)), bad},
		{"SEGMENT_INLINE then COMMIT", resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pSubStart), fr(FrameSegmentInline, pInline), fr(FrameCommit, commitFrame()), fr(FrameSubEnd, pSubEnd)), bad},
		{"COMMIT, unknown, SEGMENT_REF", resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pSubStart), fr(FrameCommit, commitFrame()), fr(0x18, nil), fr(FrameSegmentRef, pSegRef), fr(FrameSubEnd, pSubEnd)), bad},
		{"subscription left open", resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pSubStart)), bad},
		{"frame after ERROR", resp(fr(FrameRespHeader, pRespHeader), fr(FrameError, pError), fr(FrameSubStart, pSubStart), fr(FrameSubEnd, pSubEnd)), bad},
		{"unknown frame after ERROR", resp(fr(FrameRespHeader, pRespHeader), fr(FrameError, pError), fr(0x17, pb("x"))), bad},
		{"ERROR twice", resp(fr(FrameRespHeader, pRespHeader), fr(FrameError, pError), fr(FrameError, pError)), bad},

		// Primitives (Conventions).
		{"opt presence byte 2", resp(fr(FrameRespHeader, pb{}.u8(2).i32(1).u8(0))), bad},
		{"bool byte 0xFF", resp(fr(FrameRespHeader, pRespHeader), fr(FrameError, pb{}.str("c").str("m").str("k").u8(0xFF).str("a").u8(0))), bad},
		{"i64 above 2^53-1", resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pSubStart), fr(FrameSubEnd, pb{}.i64(1<<53).u8(0))), bad},
		{"i64 below -(2^53-1)", resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pSubStart), fr(FrameSubEnd, pb{}.i64(-(1<<53)).u8(0))), bad},
		{"i64 min", resp(fr(FrameRespHeader, pRespHeader), fr(FrameLease, pb{}.str("l").i64(-1<<63))), bad},
		{"invalid UTF-8", req(fr(FrameReqHeader, pb{}.str("client\xff").i32(1)), fr(FramePullHeader, pPull)), bad},
		{"surrogate in UTF-8", req(fr(FrameReqHeader, pb{}.str("a\xed\xa0\x80").i32(1)), fr(FramePullHeader, pPull)), bad},
		{"overlong UTF-8", req(fr(FrameReqHeader, pb{}.str("\xc0\xaf").i32(1)), fr(FramePullHeader, pPull)), bad},
		{"string length past frame", req(fr(FrameReqHeader, pb{}.u32(100).raw('a')), fr(FramePullHeader, pPull)), bad},
		{"list count past frame", resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pSubStart), fr(FrameCommit, pb{}.i64(1).i64(1).str("a").u32(0xFFFFFFFF)), fr(FrameSubEnd, pSubEnd)), bad},
		{"params not JSON", req(fr(FrameReqHeader, pReqHeader), fr(FramePullHeader, pPull),
			fr(FrameSubscription, pb{}.str("s1").str("t").u32(0).u8(1).str("{a:1}").i64(-1).u8(0))), bad},
		{"bootstrapState two values", resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pSubStart), fr(FrameSubEnd, pb{}.i64(1).u8(1).str("1 2"))), bad},
		{"ERROR.details empty", resp(fr(FrameRespHeader, pRespHeader), fr(FrameError, pb{}.str("c").str("m").str("k").u8(0).str("a").u8(1).str(""))), bad},
		{"scope keys out of order", req(fr(FrameReqHeader, pReqHeader), fr(FramePullHeader, pPull),
			fr(FrameSubscription, pb{}.str("s1").str("t").u32(2).str("b").u32(0).str("a").u32(0).u8(0).i64(-1).u8(0))), bad},
		{"scope keys duplicated", req(fr(FrameReqHeader, pReqHeader), fr(FramePullHeader, pPull),
			fr(FrameSubscription, pb{}.str("s1").str("t").u32(2).str("a").u32(0).str("a").u32(0).u8(0).i64(-1).u8(0))), bad},
		{"stored scope keys out of order", resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pSubStart),
			fr(FrameCommit, pb{}.i64(1).i64(1).str("a").u32(1).str("t").u32(1).u16(0).str("r").u8(2).u8(0).u32(2).str("z").str("1").str("y").str("2").u8(0)),
			fr(FrameSubEnd, pSubEnd)), bad},
		{"stored scope keys duplicated", resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pSubStart),
			fr(FrameCommit, pb{}.i64(1).i64(1).str("a").u32(1).str("t").u32(1).u16(0).str("r").u8(2).u8(0).u32(2).str("y").str("1").str("y").str("2").u8(0)),
			fr(FrameSubEnd, pSubEnd)), bad},

		// Enums.
		{"PUSH_RESULT status 0", resp(fr(FrameRespHeader, pRespHeader), fr(FramePushResult, pb{}.str("c").u8(0).u8(0).u32(0))), bad},
		{"PUSH_RESULT status 4", resp(fr(FrameRespHeader, pRespHeader), fr(FramePushResult, pb{}.str("c").u8(4).u8(0).u32(0))), bad},
		{"result record status 4", resp(fr(FrameRespHeader, pRespHeader), fr(FramePushResult, pb{}.str("c").u8(3).u8(0).u32(1).i32(0).u8(4))), bad},
		{"SUB_START status 4", resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pb{}.str("s").u8(4).str("").u32(0).u8(0)), fr(FrameSubEnd, pSubEnd)), bad},
		{"SUB_START status 0", resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pb{}.str("s").u8(0).str("").u32(0).u8(0)), fr(FrameSubEnd, pSubEnd)), bad},
		{"change op 0", resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pSubStart),
			fr(FrameCommit, pb{}.i64(1).i64(1).str("a").u32(1).str("t").u32(1).u16(0).str("r").u8(0).u8(0).u32(0).u8(0)), fr(FrameSubEnd, pSubEnd)), bad},
		{"mediaType 3", resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pSubStart),
			fr(FrameSegmentRef, pb{}.str("s").u8(3).str("t").i64(1).i64(1).i64(1).str("d").u8(0).u8(0).u8(0).u8(0)), fr(FrameSubEnd, pSubEnd)), bad},

		// The four opt() ties.
		{"delete with payload", req(fr(FrameReqHeader, pReqHeader), fr(FramePushCommit, pb{}.str("c1").u32(1).str("t").str("r").u8(2).u8(0).u8(1).str("p"))), bad},
		{"upsert change without rowVersion", resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pSubStart),
			fr(FrameCommit, pb{}.i64(1).i64(1).str("a").u32(1).str("t").u32(1).u16(0).str("r").u8(1).u8(0).u32(0).u8(1).str("row")), fr(FrameSubEnd, pSubEnd)), bad},
		{"upsert change without row", resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pSubStart),
			fr(FrameCommit, pb{}.i64(1).i64(1).str("a").u32(1).str("t").u32(1).u16(0).str("r").u8(1).u8(1).i64(1).u32(0).u8(0)), fr(FrameSubEnd, pSubEnd)), bad},
		{"delete change with rowVersion", resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pSubStart),
			fr(FrameCommit, pb{}.i64(1).i64(1).str("a").u32(1).str("t").u32(1).u16(0).str("r").u8(2).u8(1).i64(1).u32(0).u8(0)), fr(FrameSubEnd, pSubEnd)), bad},
		{"delete change with row", resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pSubStart),
			fr(FrameCommit, pb{}.i64(1).i64(1).str("a").u32(1).str("t").u32(1).u16(0).str("r").u8(2).u8(0).u32(0).u8(1).str("x")), fr(FrameSubEnd, pSubEnd)), bad},
		{"commitSeq on rejected", resp(fr(FrameRespHeader, pRespHeader), fr(FramePushResult, pb{}.str("c").u8(3).u8(1).i64(5).u32(0))), bad},
		{"applied without commitSeq", resp(fr(FrameRespHeader, pRespHeader), fr(FramePushResult, pb{}.str("c").u8(1).u8(0).u32(0))), bad},
		{"cached without commitSeq", resp(fr(FrameRespHeader, pRespHeader), fr(FramePushResult, pb{}.str("c").u8(2).u8(0).u32(0))), bad},
		{"url without urlExpiresAtMs", resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pSubStart),
			fr(FrameSegmentRef, pb{}.str("s").u8(1).str("t").i64(1).i64(1).i64(1).str("d").u8(0).u8(0).u8(1).str("https://x").u8(0)), fr(FrameSubEnd, pSubEnd)), bad},
		{"urlExpiresAtMs without url", resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pSubStart),
			fr(FrameSegmentRef, pb{}.str("s").u8(1).str("t").i64(1).i64(1).i64(1).str("d").u8(0).u8(0).u8(0).u8(1).i64(9)), fr(FrameSubEnd, pSubEnd)), bad},

		// §1.7 single-frame field constraints.
		{"empty clientId", req(fr(FrameReqHeader, pb{}.str("").i32(1)), fr(FramePullHeader, pPull)), bad},
		{"schemaVersion 0", req(fr(FrameReqHeader, pb{}.str("c").i32(0)), fr(FramePullHeader, pPull)), bad},
		{"schemaVersion -1", req(fr(FrameReqHeader, pb{}.str("c").i32(-1)), fr(FramePullHeader, pPull)), bad},
		{"empty clientCommitId", req(fr(FrameReqHeader, pReqHeader), fr(FramePushCommit, pushCommit(""))), bad},
		{"empty commit", req(fr(FrameReqHeader, pReqHeader), fr(FramePushCommit, pb{}.str("c1").u32(0))), syncerr.EmptyCommit},
		{"tableIndex out of range", resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pSubStart),
			fr(FrameCommit, pb{}.i64(1).i64(1).str("a").u32(1).str("t").u32(1).u16(1).str("r").u8(2).u8(0).u32(0).u8(0)), fr(FrameSubEnd, pSubEnd)), bad},
		{"tableIndex with no tables", resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pSubStart),
			fr(FrameCommit, pb{}.i64(1).i64(1).str("a").u32(0).u32(1).u16(0).str("r").u8(2).u8(0).u32(0).u8(0)), fr(FrameSubEnd, pSubEnd)), bad},
		{"accept bit 4", req(fr(FrameReqHeader, pReqHeader), fr(FramePullHeader, pb{}.i32(0).i32(0).i32(0).u8(0x13))), bad},
		{"accept bit 7", req(fr(FrameReqHeader, pReqHeader), fr(FramePullHeader, pb{}.i32(0).i32(0).i32(0).u8(0x80))), bad},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { rejects(t, tc.in, tc.code) })
	}
}

// Things §1.7 does not list must decode: the boundary is normative.
func TestDecodeAccepts(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
	}{
		{"push only", req(fr(FrameReqHeader, pReqHeader), fr(FramePushCommit, pushCommit("c1")), fr(FramePushCommit, pushCommit("c1")))},
		{"pull without subscriptions", req(fr(FrameReqHeader, pReqHeader), fr(FramePullHeader, pPull))},
		{"accept 0 (request validation, not decode)", req(fr(FrameReqHeader, pReqHeader), fr(FramePullHeader, pb{}.i32(-5).i32(0).i32(99999).u8(0)))},
		{"unknown frames everywhere between header and END", req(fr(FrameReqHeader, pReqHeader), fr(0x17, nil), fr(FramePushCommit, pushCommit("c1")),
			fr(0x1A, pb("a")), fr(FramePullHeader, pPull), fr(0xFF, pb("b")), fr(FrameSubscription, pSub), fr(0x05, nil))},
		{"duplicate subscription ids (request validation)", req(fr(FrameReqHeader, pReqHeader), fr(FramePullHeader, pPull), fr(FrameSubscription, pSub), fr(FrameSubscription, pSub))},
		{"delete with baseVersion", req(fr(FrameReqHeader, pReqHeader), fr(FramePushCommit, pb{}.str("c1").u32(1).str("t").str("r").u8(2).u8(1).i64(3).u8(0)))},
		{"scalar JSON params", req(fr(FrameReqHeader, pReqHeader), fr(FramePullHeader, pPull),
			fr(FrameSubscription, pb{}.str("s1").str("t").u32(0).u8(1).str(" 7 ").i64(-1).u8(1).str(`"x"`)))},
		{"i64 bounds", resp(fr(FrameRespHeader, pRespHeader), fr(FrameLease, pb{}.str("").i64(MaxSafeInt)),
			fr(FrameSubStart, pSubStart), fr(FrameSubEnd, pb{}.i64(-MaxSafeInt).u8(0)))},
		{"LEASE then push then subs", resp(fr(FrameRespHeader, pRespHeader), fr(FrameLease, pLease), fr(FramePushResult, pushResult("c1", PushApplied, 0)),
			fr(FrameSubStart, pSubStart), fr(FrameCommit, commitFrame()), fr(FrameCommit, commitFrame()), fr(FrameSubEnd, pSubEnd),
			fr(FrameSubStart, pSubStart), fr(FrameSegmentRef, pSegRef), fr(FrameSegmentInline, pInline), fr(FrameSubEnd, pSubEnd))},
		{"unknown frame between RESP_HEADER and LEASE (unknowns are order-transparent)", resp(fr(FrameRespHeader, pRespHeader), fr(0x17, nil), fr(FrameLease, pLease))},
		{"ERROR right after RESP_HEADER", resp(fr(FrameRespHeader, pRespHeader), fr(FrameError, pError))},
		{"ERROR inside open subscription", resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pSubStart), fr(FrameCommit, commitFrame()), fr(FrameError, pError))},
		{"empty subscription section", resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pSubStart), fr(FrameSubEnd, pSubEnd))},
		{"revoked with reason and scopes (producer rule only)", resp(fr(FrameRespHeader, pRespHeader),
			fr(FrameSubStart, pb{}.str("s").u8(2).str("x").u32(1).str("k").u32(0).u8(1)), fr(FrameSubEnd, pSubEnd))},
		{"result opIndex negative in PUSH_RESULT", resp(fr(FrameRespHeader, pRespHeader), fr(FramePushResult, pb{}.str("c").u8(3).u8(0).u32(1).i32(-4).u8(1)))},
		{"empty strings", resp(fr(FrameRespHeader, pRespHeader), fr(FramePushResult, pb{}.str("").u8(3).u8(0).u32(0)))},
		{"reserved type 0x1C-0x1E and 0x20-0x2F", resp(fr(FrameRespHeader, pRespHeader), fr(0x1C, nil), fr(0x1D, pb("x")), fr(0x1E, nil), fr(0x20, nil), fr(0x2F, nil))},
		{"non-BMP string", req(fr(FrameReqHeader, pb{}.str("c\U0001F600").i32(1)), fr(FramePullHeader, pPull))},
		{"v2 request without logEpoch", rawMsg(Version2, KindRequest, fr(FrameReqHeader, pReqHeader.u8(0)), fr(FramePullHeader, pPull))},
		{"v2 response header", rawMsg(Version2, KindResponse, fr(FrameRespHeader, pb{}.u8(1).i32(2).u8(0).str("e").u8(0)))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { mustDecode(t, tc.in) })
	}
}

func TestUnknownFramesPreservedInPosition(t *testing.T) {
	in := req(fr(FrameReqHeader, pReqHeader), fr(0x17, pb("one")), fr(FramePullHeader, pPull), fr(0x2A, nil), fr(FrameSubscription, pSub))
	m := mustDecode(t, in)
	want := []FrameType{FrameReqHeader, 0x17, FramePullHeader, 0x2A, FrameSubscription}
	if len(m.Frames) != len(want) {
		t.Fatalf("%d frames, want %d", len(m.Frames), len(want))
	}
	for i, f := range m.Frames {
		if f.Type() != want[i] {
			t.Fatalf("frame %d type %s, want %s", i, f.Type(), want[i])
		}
	}
	u := m.Frames[1].(*Unknown)
	if string(u.Payload) != "one" {
		t.Fatalf("unknown payload %q", u.Payload)
	}
	r, err := m.Request()
	if err != nil {
		t.Fatal(err)
	}
	if r.Pull == nil || len(r.Subscriptions) != 1 || r.Header.ClientID != "client-a" || len(r.Commits) != 0 {
		t.Fatalf("request view %+v", r)
	}
}

func TestTruncationAtEveryOffset(t *testing.T) {
	in := resp(fr(FrameRespHeader, pRespHeader), fr(FrameLease, pLease), fr(FramePushResult, pushResult("c1", PushRejected, 0)),
		fr(FramePushResultDetails, detailsFrame("c1", DetailEntry{0, `{"reason":"x"}`})),
		fr(FrameSubStart, pSubStart), fr(FrameCommit, commitFrame()), fr(FrameSubEnd, pSubEnd))
	mustDecode(t, in)
	for n := range len(in) {
		rejects(t, in[:n], syncerr.InvalidRequest)
	}
}

func TestSegmentInlineHook(t *testing.T) {
	in := resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pSubStart), fr(FrameSegmentInline, pInline), fr(FrameSubEnd, pSubEnd))
	var seen []byte
	old := ValidateRowsSegment
	t.Cleanup(func() { ValidateRowsSegment = old })

	ValidateRowsSegment = func(p []byte) error { seen = p; return nil }
	mustDecode(t, in)
	if string(seen) != "SSG2" {
		t.Fatalf("hook saw %q", seen)
	}

	ValidateRowsSegment = func([]byte) error { return errors.New("missing end marker") }
	rejects(t, in, syncerr.InvalidRequest)
	_, err := Decode(in)
	if !strings.Contains(err.Error(), "missing end marker") || !strings.Contains(err.Error(), "SEGMENT_INLINE") {
		t.Fatalf("error lacks context: %v", err)
	}
	// A catalog error of another code from the hook is still a decode
	// error of the envelope: sync.invalid_request (§5.7).
	ValidateRowsSegment = func([]byte) error { return syncerr.New(syncerr.SchemaMismatch, "x") }
	rejects(t, in, syncerr.InvalidRequest)
	if _, err := Encode(&Message{WireVersion: 1, Kind: KindResponse, Frames: []Frame{&RespHeader{}, &SubStart{Status: SubActive}, &SegmentInline{Payload: []byte("x")}, &SubEnd{}}}); err == nil {
		t.Fatal("encoder accepted a segment the hook rejects")
	}
}

func TestErrorMessagesLocateTheFrame(t *testing.T) {
	in := resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pSubStart),
		fr(FrameCommit, pb{}.i64(1).i64(1).str("a").u32(1).str("t").u32(2).u16(0).str("r").u8(2).u8(0).u32(0).u8(0).
			u16(3).str("r").u8(2).u8(0).u32(0).u8(0)), fr(FrameSubEnd, pSubEnd))
	_, err := Decode(in)
	for _, want := range []string{"frame 2", "COMMIT", "changes[1]", "tableIndex 3"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v does not mention %q", err, want)
		}
	}
}

func TestReaderLimitsAndStickiness(t *testing.T) {
	in := req(fr(FrameReqHeader, pReqHeader), fr(FramePushCommit, pushCommit("c1")))
	// A frame above the bound is refused before its payload is read.
	_, err := readAll(in, 8)
	assertCode(t, err, syncerr.InvalidRequest)
	if !strings.Contains(err.Error(), "frame limit") {
		t.Fatalf("error %v", err)
	}
	if _, err := readAll(in, len(pushCommit("c1"))); err != nil {
		t.Fatalf("frame exactly at the bound: %v", err)
	}

	r := NewReader(bytes.NewReader(in), 0)
	for {
		_, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("Next after END: %v", err)
	}
	v, k, err := r.Header()
	if v != 1 || k != KindRequest || err != nil {
		t.Fatalf("Header after EOF: %d %s %v", v, k, err)
	}

	// Transport errors surface as they are, not as decode errors.
	boom := errors.New("connection reset")
	r = NewReader(io.MultiReader(bytes.NewReader(in[:12]), errReader{boom}), 0)
	if _, err := r.Next(); !errors.Is(err, boom) {
		t.Fatalf("want transport error, got %v", err)
	}
	if _, err := r.Next(); !errors.Is(err, boom) {
		t.Fatalf("error not sticky: %v", err)
	}

	// Bad header: Header and Next both fail.
	r = NewReader(bytes.NewReader([]byte("SSP1\x01\x00\x01\x00")), 0)
	if _, _, err := r.Header(); err == nil {
		t.Fatal("bad magic accepted")
	}
	_, err = r.Next()
	assertCode(t, err, syncerr.InvalidRequest)
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// The Reader hands out frames one at a time; a frame's binary fields must
// survive later reads.
func TestReaderFramesOwnTheirBuffers(t *testing.T) {
	in := resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pSubStart), fr(FrameCommit, commitFrame()), fr(FrameCommit, commitFrame()), fr(FrameSubEnd, pSubEnd))
	r := NewReader(bytes.NewReader(in), 0)
	var commits []*Commit
	for {
		f, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if c, ok := f.(*Commit); ok {
			commits = append(commits, c)
		}
	}
	for _, c := range commits {
		if string(c.Changes[0].Row.Value) != "row" {
			t.Fatalf("row bytes %q", c.Changes[0].Row.Value)
		}
	}
}

func TestDecodedBinaryAliasesInputWithClippedCapacity(t *testing.T) {
	in := resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pSubStart), fr(FrameCommit, commitFrame()), fr(FrameSubEnd, pSubEnd))
	m := mustDecode(t, in)
	row := m.Frames[2].(*Commit).Changes[0].Row.Value
	if cap(row) != len(row) {
		t.Fatalf("binary field capacity %d > length %d: an append would overwrite the input", cap(row), len(row))
	}
	_ = append(row, 'X')
	if _, err := Decode(in); err != nil {
		t.Fatalf("input modified by append: %v", err)
	}
}

func TestRequestView(t *testing.T) {
	in := rawMsg(Version2, KindRequest, fr(FrameReqHeader, pReqHeader.u8(1).str("epoch-1")),
		fr(FramePushCommit, pushCommit("c1")), fr(FramePushCommit, pushCommit("c2")), fr(FramePullHeader, pPull), fr(FrameSubscription, pSub))
	m := mustDecode(t, in)
	r, err := m.Request()
	if err != nil {
		t.Fatal(err)
	}
	if r.WireVersion != 2 || r.Header.LogEpoch != Some("epoch-1") || len(r.Commits) != 2 || r.Commits[1].ClientCommitID != "c2" ||
		r.Pull == nil || r.Pull.Accept != 3 || len(r.Subscriptions) != 1 || r.Subscriptions[0].Cursor != 5 {
		t.Fatalf("view %+v", r)
	}
	if _, err := (&Message{WireVersion: 1, Kind: KindResponse}).Request(); err == nil {
		t.Fatal("Request on a response")
	}
	if _, err := (&Message{WireVersion: 1, Kind: KindRequest, Frames: []Frame{&ReqHeader{ClientID: "c", SchemaVersion: 1}}}).Request(); err == nil {
		t.Fatal("Request on a no-content request")
	}
	if _, err := (&Message{WireVersion: 1, Kind: KindRequest, Frames: []Frame{(*ReqHeader)(nil)}}).Request(); err == nil {
		t.Fatal("Request with a nil frame")
	}
}

// Short reads and data-with-EOF reads must not change what the Reader sees.
func TestReaderShortReads(t *testing.T) {
	in := resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, pSubStart), fr(FrameCommit, commitFrame()), fr(0x17, pb("u")), fr(FrameSubEnd, pSubEnd))
	want := mustDecode(t, in)
	for name, src := range map[string]io.Reader{
		"one byte":     iotest.OneByteReader(bytes.NewReader(in)),
		"half":         iotest.HalfReader(bytes.NewReader(in)),
		"data + EOF":   iotest.DataErrReader(bytes.NewReader(in)),
		"one byte+EOF": iotest.DataErrReader(iotest.OneByteReader(bytes.NewReader(in))),
	} {
		r := NewReader(src, 0)
		var frames []Frame
		for {
			f, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			frames = append(frames, f)
		}
		if !reflect.DeepEqual(frames, want.Frames) {
			t.Fatalf("%s: frames differ", name)
		}
	}
	// Bytes after END arriving in a later read are still caught.
	r := NewReader(iotest.OneByteReader(bytes.NewReader(append(in, 0))), 0)
	for {
		_, err := r.Next()
		if err == io.EOF {
			t.Fatal("trailing byte after END accepted")
		}
		if err != nil {
			assertCode(t, err, syncerr.InvalidRequest)
			break
		}
	}
}
