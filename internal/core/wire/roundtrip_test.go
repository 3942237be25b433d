package wire

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// genFrame draws a frame of either kind with field values that are
// usually, but not always, valid, so both the accept and refuse paths of
// the encoder are exercised.
func genFrame(r *rand.Rand) Frame {
	str := func() string {
		return []string{"", "a", "notes", "é", "\U0001F600", "\uE000", "\xff", "sync.x"}[r.IntN(8)]
	}
	i64 := func() int64 {
		return []int64{0, 1, -1, 42, MaxSafeInt, -MaxSafeInt, MaxSafeInt + 1}[r.IntN(7)]
	}
	js := func() Opt[JSON] {
		if r.IntN(2) == 0 {
			return Opt[JSON]{}
		}
		return Some(JSON([]string{`{}`, ` [1, "x"] `, `7`, `null`, `{`, `"\u00e9"`}[r.IntN(6)]))
	}
	optStr := func() Opt[string] {
		if r.IntN(2) == 0 {
			return Opt[string]{}
		}
		return Some(str())
	}
	optI64 := func() Opt[int64] {
		if r.IntN(2) == 0 {
			return Opt[int64]{}
		}
		return Some(i64())
	}
	optBytes := func() Opt[[]byte] {
		if r.IntN(2) == 0 {
			return Opt[[]byte]{}
		}
		return Some([]byte(str()))
	}
	scopes := func() ScopeMap {
		var m ScopeMap
		for range r.IntN(3) {
			m = append(m, ScopeEntry{Key: str(), Values: []string{str()}})
		}
		return m
	}
	stored := func() StoredScopes {
		var m StoredScopes
		for range r.IntN(3) {
			m = append(m, StoredScope{Key: str(), Value: str()})
		}
		return m
	}
	switch r.IntN(16) {
	case 0:
		return &ReqHeader{ClientID: str(), SchemaVersion: int32(r.IntN(3)), LogEpoch: optStr()}
	case 1:
		c := &PushCommit{ClientCommitID: str()}
		for range r.IntN(3) {
			c.Operations = append(c.Operations, Operation{Table: str(), RowID: str(), Op: Op(r.IntN(3) + 1), BaseVersion: optI64(), Payload: optBytes()})
		}
		return c
	case 2:
		return &PullHeader{LimitCommits: int32(r.Int32()), Accept: uint8(r.IntN(20))}
	case 3:
		return &Subscription{ID: str(), Table: str(), Scopes: scopes(), Params: js(), Cursor: i64(), BootstrapState: js()}
	case 4:
		return &RespHeader{LogEpoch: "e", ResetRequired: r.IntN(2) == 0}
	case 5:
		return &Lease{LeaseID: str(), ExpiresAtMs: i64()}
	case 6:
		p := &PushResult{ClientCommitID: "c", Status: PushStatus(r.IntN(4)), CommitSeq: optI64()}
		for i := range r.IntN(3) {
			p.Results = append(p.Results, OpResult{OpIndex: int32(i), Status: OpResultStatus(r.IntN(4)), Code: str(), ServerRow: []byte(str()), ConflictColumns: []byte(str())})
		}
		return p
	case 7:
		d := &PushResultDetails{ClientCommitID: "c"}
		for i := range r.IntN(3) {
			d.Entries = append(d.Entries, DetailEntry{OpIndex: int32(i), DetailsJSON: []string{`{"reason":"r"}`, `{"x":1}`, `{"fieldPaths":["a"]}`}[r.IntN(3)]})
		}
		return d
	case 8:
		return &SubStart{ID: str(), Status: SubStatus(r.IntN(4)), ReasonCode: str(), EffectiveScopes: scopes(), Bootstrap: r.IntN(2) == 0}
	case 9:
		c := &Commit{CommitSeq: i64(), ActorID: str()}
		for range r.IntN(3) {
			c.Tables = append(c.Tables, str())
		}
		for range r.IntN(3) {
			c.Changes = append(c.Changes, Change{TableIndex: uint16(r.IntN(3)), RowID: str(), Op: Op(r.IntN(3) + 1), RowVersion: optI64(), Scopes: stored(), Row: optBytes()})
		}
		return c
	case 10:
		return &SegmentRef{SegmentID: str(), MediaType: MediaType(r.IntN(3)), ByteLength: i64(), RowCursor: optStr(), URL: optStr(), URLExpiresAtMs: optI64()}
	case 11:
		return &SegmentInline{Payload: []byte(str())}
	case 12:
		return &SubEnd{NextCursor: i64(), BootstrapState: js()}
	case 13:
		return &ErrorFrame{Code: str(), Message: str(), Retryable: r.IntN(2) == 0, Details: js()}
	case 14:
		return &Unknown{FrameType: FrameType(r.IntN(0x40)), Payload: []byte(str())}
	}
	return &Unknown{FrameType: 0x17}
}

// TestEncoderOutputAlwaysDecodes: whatever the encoder accepts, the
// decoder accepts and re-encodes to the same bytes; the encoder can never
// emit a message the decoder rejects.
func TestEncoderOutputAlwaysDecodes(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	accepted := 0
	for range 100000 {
		kind := KindRequest
		first := Frame(&ReqHeader{ClientID: "c", SchemaVersion: 1})
		if r.IntN(2) == 0 {
			kind, first = KindResponse, &RespHeader{LogEpoch: "e"}
		}
		m := &Message{WireVersion: uint16(1 + r.IntN(3)), Kind: kind, Frames: []Frame{first}}
		if m.WireVersion == Version1 {
			if h, ok := first.(*RespHeader); ok {
				h.LogEpoch = ""
			}
		}
		for range r.IntN(6) {
			m.Frames = append(m.Frames, genFrame(r))
		}
		b, err := Encode(m)
		if err != nil {
			continue
		}
		accepted++
		d, err := Decode(b)
		if err != nil {
			t.Fatalf("encoder produced bytes the decoder rejects: %v\n%x", err, b)
		}
		b2, err := Encode(d)
		if err != nil || !bytes.Equal(b, b2) {
			t.Fatalf("round trip differs: %v", err)
		}
	}
	if accepted < 1000 {
		t.Fatalf("only %d generated messages were valid; generator too hostile", accepted)
	}
	t.Logf("%d of 100000 random messages accepted and round-tripped", accepted)
}
