package wire

import (
	"strings"
	"testing"
)

func TestPeekClientID(t *testing.T) {
	req := func(v uint16, id string) []byte {
		t.Helper()
		b, err := Encode(&Message{WireVersion: v, Kind: KindRequest, Frames: []Frame{
			&ReqHeader{ClientID: id, SchemaVersion: 1},
			&PushCommit{ClientCommitID: "c1", Operations: []Operation{{Table: "tasks", RowID: "r1", Op: OpDelete}}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, v := range []uint16{Version1, Version2, Version3} {
		b := req(v, "device-7")
		// The whole message, and the shortest prefix that holds the id
		// (8-byte envelope, 5-byte frame header, u32 length, 8 bytes).
		for _, n := range []int{len(b), 8 + 5 + 4 + 8} {
			if id, ok := PeekClientID(b[:n], 256); !ok || id != "device-7" {
				t.Errorf("v%d, %d bytes: %q %v", v, n, id, ok)
			}
		}
		if id, ok := PeekClientID(b[:8+5+4+7], 256); ok {
			t.Errorf("v%d: a cut clientId was read as %q", v, id)
		}
	}
	long := req(Version3, strings.Repeat("x", 300))
	if _, ok := PeekClientID(long, 256); ok {
		t.Error("a clientId over the limit was read")
	}
	resp, err := Encode(&Message{WireVersion: Version3, Kind: KindResponse, Frames: []Frame{&RespHeader{}}})
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"response": resp, "empty": nil, "not SSP2": []byte("PK\x03\x04 hello world, not a request"),
		"gzip": {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff},
	} {
		if id, ok := PeekClientID(b, 256); ok {
			t.Errorf("%s: read %q", name, id)
		}
	}
	bad := req(Version3, "ab")
	bad[8+5+4] = 0xff // not UTF-8
	if _, ok := PeekClientID(bad, 256); ok {
		t.Error("a clientId that is not UTF-8 was read")
	}
}
