package wire

import (
	"bytes"
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// conflictRecord is a PUSH_RESULT with one conflict record, written from
// the §6.3 layout; v3 appends conflictColumns after serverRow.
func conflictRecord(withCols bool) pb {
	p := pb{}.str("c1").u8(3).u8(0). // clientCommitId, rejected, no commitSeq
						u32(1).i32(0).u8(2). // one result: opIndex 0, conflict
						str("sync.version_conflict").str("m").i64(7).
						str("\x00row") // serverRow (bytes: u32 length + raw)
	if withCols {
		p = p.str("\x02") // conflictColumns: column 1
	}
	return p
}

// TestConflictColumnsByVersion: §6.3 — the conflictColumns field exists in
// wire version 3 only; versions 1 and 2 keep their byte layout and never
// carry it, even when the struct holds one.
func TestConflictColumnsByVersion(t *testing.T) {
	v2Header := pb{}.u8(0).u8(0).str("e").u8(0)
	v3 := rawMsg(Version3, KindResponse, fr(FrameRespHeader, v2Header), fr(FramePushResult, conflictRecord(true)))
	m, err := Decode(v3)
	if err != nil {
		t.Fatal(err)
	}
	res := m.Frames[1].(*PushResult).Results[0]
	if !bytes.Equal(res.ConflictColumns, []byte{0x02}) || string(res.ServerRow) != "\x00row" {
		t.Fatalf("decoded %+v", res)
	}
	if out, err := Encode(m); err != nil || !bytes.Equal(out, v3) {
		t.Fatalf("v3 re-encode: %v\n got % x\nwant % x", err, out, v3)
	}
	js, err := Render(m)
	if err != nil || !strings.Contains(string(js), `"conflictColumns":"Ag=="`) {
		t.Fatalf("v3 render lacks conflictColumns: %v %s", err, js)
	}

	// Without the field a v3 record is truncated.
	if _, err := Decode(rawMsg(Version3, KindResponse, fr(FrameRespHeader, v2Header), fr(FramePushResult, conflictRecord(false)))); !syncerr.HasCode(err, syncerr.InvalidRequest) {
		t.Fatalf("v3 record without conflictColumns: %v", err)
	}
	// With it a v2 record has trailing bytes.
	if _, err := Decode(rawMsg(Version2, KindResponse, fr(FrameRespHeader, v2Header), fr(FramePushResult, conflictRecord(true)))); !syncerr.HasCode(err, syncerr.InvalidRequest) {
		t.Fatalf("v2 record with conflictColumns: %v", err)
	}

	// The same message at version 2 is the v2 layout: no conflictColumns.
	m.WireVersion = Version2
	out, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	want := rawMsg(Version2, KindResponse, fr(FrameRespHeader, v2Header), fr(FramePushResult, conflictRecord(false)))
	if !bytes.Equal(out, want) {
		t.Fatalf("v2 encode:\n got % x\nwant % x", out, want)
	}
	js, err = Render(m)
	if err != nil || strings.Contains(string(js), "conflictColumns") {
		t.Fatalf("v2 render shows conflictColumns: %v %s", err, js)
	}
	var buf bytes.Buffer
	e := NewEncoder(&buf, Version2, KindResponse)
	for _, f := range m.Frames {
		if err := e.WriteFrame(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Close(); err != nil || !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("v2 streaming encode: %v\n got % x\nwant % x", err, buf.Bytes(), want)
	}
}
