package wire

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

func reqMsg(frames ...Frame) *Message {
	return &Message{WireVersion: Version1, Kind: KindRequest, Frames: frames}
}

func respMsg(frames ...Frame) *Message {
	return &Message{WireVersion: Version1, Kind: KindResponse, Frames: frames}
}

func hdr() *ReqHeader   { return &ReqHeader{ClientID: "c", SchemaVersion: 1} }
func rhdr() *RespHeader { return &RespHeader{} }
func pull() *PullHeader { return &PullHeader{Accept: 3} }
func sub() *SubStart    { return &SubStart{ID: "s", Status: SubActive} }
func del() Operation    { return Operation{Table: "t", RowID: "r", Op: OpDelete} }

func TestEncodeRefuses(t *testing.T) {
	tests := []struct {
		name string
		m    *Message
	}{
		{"unknown under END type", reqMsg(hdr(), pull(), &Unknown{FrameType: FrameEnd})},
		{"unknown under COMMIT type", respMsg(rhdr(), &Unknown{FrameType: FrameCommit})},
		{"unknown under request type in response", respMsg(rhdr(), &Unknown{FrameType: FrameReqHeader})},
		{"unknown under LEASE type", respMsg(rhdr(), &Unknown{FrameType: FrameLease})},
		{"unknown under PUSH_RESULT_DETAILS type", respMsg(rhdr(), &Unknown{FrameType: FramePushResultDetails})},
		{"unknown under ERROR type", respMsg(rhdr(), &Unknown{FrameType: FrameError})},
		{"unknown first", reqMsg(&Unknown{FrameType: 0x17}, hdr(), pull())},
		{"nil frame", reqMsg(hdr(), nil)},
		{"typed nil frame", reqMsg(hdr(), (*PullHeader)(nil))},
		{"bad version", &Message{WireVersion: 4, Kind: KindRequest, Frames: []Frame{hdr(), pull()}}},
		{"bad kind", &Message{WireVersion: 1, Kind: 7, Frames: []Frame{hdr(), pull()}}},
		{"empty clientId", reqMsg(&ReqHeader{SchemaVersion: 1}, pull())},
		{"schemaVersion 0", reqMsg(&ReqHeader{ClientID: "c"}, pull())},
		{"v1 logEpoch", reqMsg(&ReqHeader{ClientID: "c", SchemaVersion: 1, LogEpoch: Some("e")}, pull())},
		{"v1 resetRequired", respMsg(&RespHeader{ResetRequired: true})},
		{"v1 resp logEpoch", respMsg(&RespHeader{LogEpoch: "e"})},
		{"empty clientCommitId", reqMsg(hdr(), &PushCommit{Operations: []Operation{del()}})},
		{"empty commit", reqMsg(hdr(), &PushCommit{ClientCommitID: "c1"})},
		{"upsert without payload", reqMsg(hdr(), &PushCommit{ClientCommitID: "c1", Operations: []Operation{{Table: "t", RowID: "r", Op: OpUpsert}}})},
		{"delete with payload", reqMsg(hdr(), &PushCommit{ClientCommitID: "c1", Operations: []Operation{{Op: OpDelete, Payload: Some([]byte{1})}}})},
		{"op 3", reqMsg(hdr(), &PushCommit{ClientCommitID: "c1", Operations: []Operation{{Op: 3}}})},
		{"baseVersion 2^53", reqMsg(hdr(), &PushCommit{ClientCommitID: "c1", Operations: []Operation{{Op: OpDelete, BaseVersion: Some(int64(1 << 53))}}})},
		{"accept bit 4", reqMsg(hdr(), &PullHeader{Accept: 0x10})},
		{"bad UTF-8", reqMsg(hdr(), pull(), &Subscription{ID: "\xff"})},
		{"invalid params", reqMsg(hdr(), pull(), &Subscription{Params: Some(JSON("{"))})},
		{"empty json", reqMsg(hdr(), pull(), &Subscription{BootstrapState: Some(JSON(""))})},
		{"duplicate scope key", reqMsg(hdr(), pull(), &Subscription{Scopes: ScopeMap{{Key: "a"}, {Key: "a"}}})},
		{"duplicate scope key unsorted", reqMsg(hdr(), pull(), &Subscription{Scopes: ScopeMap{{Key: "b"}, {Key: "a"}, {Key: "b"}}})},
		{"cursor -2^53", reqMsg(hdr(), pull(), &Subscription{Cursor: -(1 << 53)})},
		{"subscription before pull", reqMsg(hdr(), &Subscription{}, pull())},
		{"push after pull", reqMsg(hdr(), pull(), &PushCommit{ClientCommitID: "c", Operations: []Operation{del()}})},
		{"no content", reqMsg(hdr())},
		{"no frames", reqMsg()},
		{"response frame in request", reqMsg(hdr(), pull(), sub())},
		{"request frame in response", respMsg(rhdr(), pull())},
		{"commitSeq on rejected", respMsg(rhdr(), &PushResult{ClientCommitID: "c", Status: PushRejected, CommitSeq: Some(int64(1))})},
		{"applied without commitSeq", respMsg(rhdr(), &PushResult{ClientCommitID: "c", Status: PushApplied})},
		{"push status 0", respMsg(rhdr(), &PushResult{ClientCommitID: "c"})},
		{"result status 0", respMsg(rhdr(), &PushResult{Status: PushRejected, Results: []OpResult{{}}})},
		{"details without error record", respMsg(rhdr(), &PushResult{ClientCommitID: "c", Status: PushRejected},
			&PushResultDetails{ClientCommitID: "c", Entries: []DetailEntry{{0, `{"reason":"x"}`}}})},
		{"details bad shape", respMsg(rhdr(), &PushResult{ClientCommitID: "c", Status: PushRejected, Results: []OpResult{{Status: OpError}}},
			&PushResultDetails{ClientCommitID: "c", Entries: []DetailEntry{{0, `{"reason":"X"}`}}})},
		{"details no entries", respMsg(rhdr(), &PushResult{ClientCommitID: "c", Status: PushRejected}, &PushResultDetails{ClientCommitID: "c"})},
		{"two leases", respMsg(rhdr(), &Lease{}, &Lease{})},
		{"sub status 0", respMsg(rhdr(), &SubStart{}, &SubEnd{})},
		{"tableIndex out of range", respMsg(rhdr(), sub(), &Commit{Changes: []Change{{Op: OpDelete}}}, &SubEnd{})},
		{"upsert change without rowVersion", respMsg(rhdr(), sub(), &Commit{Tables: []string{"t"}, Changes: []Change{{Op: OpUpsert, Row: Some([]byte{})}}}, &SubEnd{})},
		{"duplicate stored scope", respMsg(rhdr(), sub(), &Commit{Tables: []string{"t"}, Changes: []Change{{Op: OpDelete, Scopes: StoredScopes{{"a", "1"}, {"a", "2"}}}}}, &SubEnd{})},
		{"commit and segment mixed", respMsg(rhdr(), sub(), &Commit{}, &SegmentInline{}, &SubEnd{})},
		{"segment then commit", respMsg(rhdr(), sub(), &SegmentRef{MediaType: MediaRows}, &Commit{}, &SubEnd{})},
		{"url without expiry", respMsg(rhdr(), sub(), &SegmentRef{MediaType: MediaRows, URL: Some("u")}, &SubEnd{})},
		{"media type 0", respMsg(rhdr(), sub(), &SegmentRef{}, &SubEnd{})},
		{"open subscription", respMsg(rhdr(), sub())},
		{"nested subscription", respMsg(rhdr(), sub(), sub(), &SubEnd{}, &SubEnd{})},
		{"frame after ERROR", respMsg(rhdr(), &ErrorFrame{}, sub(), &SubEnd{})},
		{"unknown after ERROR", respMsg(rhdr(), &ErrorFrame{}, &Unknown{FrameType: 0x17})},
		{"ERROR details invalid", respMsg(rhdr(), &ErrorFrame{Details: Some(JSON("nul"))})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Encode(tc.m)
			if err == nil {
				t.Fatalf("Encode accepted: %x", b)
			}
			if syncerr.As(err) != nil {
				t.Fatalf("encoder error %v is a catalog error; encode failures are producer bugs", err)
			}
			if _, err := Render(tc.m); err == nil && !strings.Contains(tc.name, "frames") && !isOrderOnly(tc.name) {
				t.Fatalf("Render accepted a frame the encoder refuses")
			}
			// The streaming encoder refuses it too, at WriteFrame or Close.
			var buf bytes.Buffer
			e := NewEncoder(&buf, tc.m.WireVersion, tc.m.Kind)
			failed := false
			for _, f := range tc.m.Frames {
				if e.WriteFrame(f) != nil {
					failed = true
					break
				}
			}
			if !failed && e.Close() == nil {
				t.Fatalf("Encoder accepted: %x", buf.Bytes())
			}
		})
	}
}

// Render checks frames, not their order.
func isOrderOnly(name string) bool {
	switch name {
	case "unknown first", "subscription before pull", "push after pull", "no content", "response frame in request",
		"request frame in response", "details without error record", "two leases", "commit and segment mixed",
		"segment then commit", "open subscription", "nested subscription", "frame after ERROR", "unknown after ERROR":
		return true
	}
	return false
}

func TestEncoderStreamsFrameByFrame(t *testing.T) {
	var buf bytes.Buffer
	e := NewEncoder(&buf, Version1, KindResponse)
	if buf.Len() != 0 {
		t.Fatal("header written before the first frame")
	}
	if err := e.WriteFrame(rhdr()); err != nil {
		t.Fatal(err)
	}
	if got := buf.Len(); got != 8+5+2 {
		t.Fatalf("after RESP_HEADER %d bytes buffered out, want 15", got)
	}
	// A refused frame writes nothing and the message can go on.
	if err := e.WriteFrame(&SubEnd{}); err == nil {
		t.Fatal("SUB_END without SUB_START accepted")
	}
	if got := buf.Len(); got != 15 {
		t.Fatalf("refused frame wrote %d bytes", got-15)
	}
	big := bytes.Repeat([]byte{7}, 3*inlineDirect)
	for _, f := range []Frame{sub(), &SegmentInline{Payload: big}, &SubEnd{NextCursor: 3}} {
		if err := e.WriteFrame(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.WriteFrame(rhdr()); err == nil {
		t.Fatal("WriteFrame after Close accepted")
	}
	m, err := Decode(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Frames[2].(*SegmentInline).Payload; !bytes.Equal(got, big) {
		t.Fatal("large inline payload mangled")
	}
	enc, _ := Encode(m)
	if !bytes.Equal(enc, buf.Bytes()) {
		t.Fatal("Encoder and Encode disagree")
	}
}

func TestEncoderWriteErrorIsSticky(t *testing.T) {
	boom := errors.New("disk full")
	e := NewEncoder(failWriter{boom}, Version1, KindResponse)
	if err := e.WriteFrame(rhdr()); !errors.Is(err, boom) {
		t.Fatalf("got %v", err)
	}
	if err := e.Close(); !errors.Is(err, boom) {
		t.Fatalf("Close after write failure: %v", err)
	}
}

type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }

func TestEncoderReuseDoesNotAllocate(t *testing.T) {
	m := respMsg(rhdr(), sub(), &Commit{CommitSeq: 1, Tables: []string{"t"}, Changes: []Change{
		{Op: OpUpsert, RowVersion: Some(int64(1)), Row: Some([]byte("row")), Scopes: StoredScopes{{"b", "1"}, {"a", "2"}}},
	}}, &SubEnd{})
	var buf bytes.Buffer
	e := NewEncoder(&buf, Version1, KindResponse)
	run := func() {
		buf.Reset()
		e.Reset(&buf, Version1, KindResponse)
		for _, f := range m.Frames {
			if err := e.WriteFrame(f); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
	run()
	if n := testing.AllocsPerRun(50, run); n > 1 {
		// Sorting the unsorted stored-scope keys may allocate the sort
		// closure; nothing per frame.
		t.Fatalf("%.1f allocations per message", n)
	}
}

func TestEncodeSortsMapsWithoutMutatingInput(t *testing.T) {
	scopes := ScopeMap{{Key: "b", Values: []string{"2"}}, {Key: "\uE000"}, {Key: "\U00010000"}, {Key: "a", Values: []string{"1", "0"}}}
	orig := append(ScopeMap(nil), scopes...)
	b, err := Encode(reqMsg(hdr(), pull(), &Subscription{ID: "s", Table: "t", Scopes: scopes}))
	if err != nil {
		t.Fatal(err)
	}
	for i := range scopes {
		if scopes[i].Key != orig[i].Key {
			t.Fatal("encoder reordered the caller's map")
		}
	}
	m := mustDecode(t, b)
	var keys []string
	for _, e := range m.Frames[2].(*Subscription).Scopes {
		keys = append(keys, e.Key)
	}
	want := []string{"a", "b", "\U00010000", "\uE000"}
	if strings.Join(keys, ",") != strings.Join(want, ",") {
		t.Fatalf("keys %q, want %q", keys, want)
	}
	if v := m.Frames[2].(*Subscription).Scopes[0].Values; v[0] != "1" || v[1] != "0" {
		t.Fatalf("values reordered: %q", v)
	}
}

func TestAppendFrame(t *testing.T) {
	dst := []byte("prefix")
	out, err := AppendFrame(dst, Version1, &Lease{LeaseID: "l", ExpiresAtMs: 5})
	if err != nil {
		t.Fatal(err)
	}
	want := append([]byte("prefix"), append([]byte{byte(FrameLease), 13, 0, 0, 0}, pb{}.str("l").i64(5)...)...)
	if !bytes.Equal(out, want) {
		t.Fatalf("got %x\nwant %x", out, want)
	}
	out, err = AppendFrame(dst, Version1, &Lease{ExpiresAtMs: 1 << 60})
	if err == nil || !bytes.Equal(out, dst) {
		t.Fatalf("failed append must return dst unchanged: %x %v", out, err)
	}
}

func TestV2HeaderFields(t *testing.T) {
	m := &Message{WireVersion: Version2, Kind: KindResponse, Frames: []Frame{&RespHeader{LogEpoch: "", ResetRequired: false}}}
	b, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	got := mustDecode(t, b)
	r, _ := Render(got)
	if !strings.Contains(string(r), `{"type":"RESP_HEADER","logEpoch":"","resetRequired":false}`) {
		t.Fatalf("v2 header rendering %s", r)
	}
	m1 := reqMsg(&ReqHeader{ClientID: "c", SchemaVersion: 3}, pull())
	b, _ = Encode(m1)
	if got := mustDecode(t, b).Frames[0].(*ReqHeader); got.LogEpoch.Present {
		t.Fatal("v1 decoded a logEpoch")
	}
}

// FrameSize is the length WriteFrame writes for the frame (envelope
// header aside), refuses what WriteFrame refuses, and leaves the message
// as it was.
func TestEncoderFrameSize(t *testing.T) {
	frames := []Frame{
		&SubStart{ID: "s", Status: SubActive, EffectiveScopes: ScopeMap{{Key: "project_id", Values: []string{"p1", "p2"}}}},
		&SubStart{ID: "sub-ü", Status: SubReset, ReasonCode: "sync.cursor_expired", EffectiveScopes: ScopeMap{}, Bootstrap: true},
		&Commit{CommitSeq: 7, Tables: []string{"t"}, Changes: []Change{{Op: OpUpsert, RowVersion: Some(int64(1)), Row: Some([]byte("row")), Scopes: StoredScopes{{"a", "1"}}}}},
	}
	for _, v := range []uint16{Version1, Version2, Version3} {
		for _, f := range frames {
			var buf bytes.Buffer
			e := AcquireEncoder(&buf, v, KindResponse)
			h := &RespHeader{}
			if v >= Version2 {
				h.LogEpoch = "e"
			}
			if err := e.WriteFrame(h); err != nil {
				t.Fatal(err)
			}
			before := buf.Len()
			n, err := e.FrameSize(f)
			if err != nil {
				t.Fatalf("v%d %T: %v", v, f, err)
			}
			if buf.Len() != before {
				t.Fatalf("v%d %T: FrameSize wrote %d bytes", v, f, buf.Len()-before)
			}
			want, err := AppendFrame(nil, v, f)
			if err != nil || n != len(want) {
				t.Fatalf("v%d %T: FrameSize %d, AppendFrame %d bytes (%v)", v, f, n, len(want), err)
			}
			e.Release()
		}
	}
	e := AcquireEncoder(io.Discard, Version2, KindResponse)
	defer e.Release()
	if _, err := e.FrameSize(&SubStart{ID: "s", Status: 9}); err == nil {
		t.Fatal("FrameSize accepted a status WriteFrame refuses")
	}
}
