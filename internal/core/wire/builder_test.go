package wire

import (
	"encoding/binary"
)

// pb builds a frame payload byte by byte, so tests can express inputs the
// encoder refuses to produce.
type pb []byte

func (p pb) u8(v uint8) pb   { return append(p, v) }
func (p pb) u16(v uint16) pb { return binary.LittleEndian.AppendUint16(p, v) }
func (p pb) u32(v uint32) pb { return binary.LittleEndian.AppendUint32(p, v) }
func (p pb) i32(v int32) pb  { return p.u32(uint32(v)) }
func (p pb) i64(v int64) pb  { return binary.LittleEndian.AppendUint64(p, uint64(v)) }
func (p pb) str(s string) pb { return append(p.u32(uint32(len(s))), s...) }
func (p pb) raw(b ...byte) pb {
	return append(p, b...)
}

type rawFrame struct {
	t FrameType
	p []byte
}

func fr(t FrameType, p pb) rawFrame { return rawFrame{t, p} }

// rawMsg assembles header, frames and END.
func rawMsg(version uint16, kind MsgKind, frames ...rawFrame) []byte {
	b := appendHeader(nil, version, kind)
	for _, f := range frames {
		b = append(b, byte(f.t))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(f.p)))
		b = append(b, f.p...)
	}
	return append(b, 0, 0, 0, 0, 0)
}

func req(frames ...rawFrame) []byte  { return rawMsg(Version1, KindRequest, frames...) }
func resp(frames ...rawFrame) []byte { return rawMsg(Version1, KindResponse, frames...) }

// Payloads of valid frames, reused as building blocks.
var (
	pReqHeader  = pb{}.str("client-a").i32(1)
	pPull       = pb{}.i32(0).i32(0).i32(0).u8(3)
	pSub        = pb{}.str("s1").str("notes").u32(1).str("project").u32(1).str("p1").u8(0).i64(5).u8(0)
	pRespHeader = pb{}.u8(0).u8(0)
	pSubStart   = pb{}.str("s1").u8(1).str("").u32(0).u8(0)
	pSubEnd     = pb{}.i64(7).u8(0)
	pLease      = pb{}.str("lease-1").i64(1000)
	pError      = pb{}.str("sync.rate_limited").str("slow down").str("rate-limited").u8(1).str("retryLater").u8(0)
	pSegRef     = pb{}.str("sha256:x").u8(1).str("notes").i64(10).i64(1).i64(5).str("d").u8(0).u8(0).u8(0).u8(0)
	pInline     = pb{}.raw('S', 'S', 'G', '2')
)

// pushCommit builds a PUSH_COMMIT with one delete operation.
func pushCommit(id string) pb {
	return pb{}.str(id).u32(1).str("notes").str("n-1").u8(2).u8(0).u8(0)
}

// commitFrame builds a COMMIT with one upsert change.
func commitFrame() pb {
	return pb{}.i64(9).i64(1000).str("actor").u32(1).str("notes").
		u32(1).u16(0).str("n-1").u8(1).u8(1).i64(2).u32(1).str("project").str("p1").u8(1).str("row")
}

// pushResult builds a PUSH_RESULT; rejected ones carry one error record
// at opIndex errIdx.
func pushResult(id string, status PushStatus, errIdx int32) pb {
	p := pb{}.str(id).u8(uint8(status))
	if status == PushRejected {
		return p.u8(0).u32(1).i32(errIdx).u8(3).str("app.bad").str("no").u8(0)
	}
	return p.u8(1).i64(3).u32(1).i32(0).u8(1)
}

func detailsFrame(id string, entries ...DetailEntry) pb {
	p := pb{}.str(id).u32(uint32(len(entries)))
	for _, e := range entries {
		p = p.i32(e.OpIndex).str(e.DetailsJSON)
	}
	return p
}
