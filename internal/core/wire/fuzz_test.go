package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// fuzzSeeds returns every golden vector .bin plus hand-built messages that
// reach the rarer frames (details, lease, v2 headers, unknown frames).
func fuzzSeeds(f *testing.F) [][]byte {
	var seeds [][]byte
	dir := os.Getenv("SSP2_VECTORS")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "..", "shared", "ssp2-vectors")
	}
	for _, kind := range []string{"request", "response"} {
		for _, sub := range []string{"*.bin", "invalid/*.bin"} {
			files, _ := filepath.Glob(filepath.Join(dir, kind, sub))
			for _, p := range files {
				seeds = append(seeds, readFile(f, p))
			}
		}
	}
	if os.Getenv("SSP2_VECTORS") != "" && len(seeds) == 0 {
		f.Fatalf("SSP2_VECTORS=%s has no .bin vectors", dir)
	}
	return append(seeds,
		req(fr(FrameReqHeader, pReqHeader), fr(FramePushCommit, pushCommit("c1")), fr(0x17, pb("x")), fr(FramePullHeader, pPull), fr(FrameSubscription, pSub)),
		rawMsg(Version2, KindRequest, fr(FrameReqHeader, pReqHeader.u8(1).str("e")), fr(FramePullHeader, pPull)),
		rawMsg(Version2, KindResponse, fr(FrameRespHeader, pb{}.u8(1).i32(2).u8(1).i32(3).str("e").u8(1))),
		resp(fr(FrameRespHeader, pRespHeader), fr(FrameLease, pLease), fr(FramePushResult, pushResult("c1", PushRejected, 0)),
			fr(FramePushResultDetails, detailsFrame("c1", DetailEntry{0, `{"fieldPaths":["a.b"],"reason":"r","references":{"k":"v"}}`})),
			fr(FrameSubStart, pSubStart), fr(FrameCommit, commitFrame()), fr(FrameSubEnd, pSubEnd),
			fr(FrameSubStart, pSubStart), fr(FrameSegmentRef, pSegRef), fr(FrameSegmentInline, pInline), fr(FrameSubEnd, pSubEnd),
			fr(FrameError, pError)),
	)
}

// FuzzDecodeMessage: Decode never panics and only fails with catalog
// errors; whatever it accepts, Encode reproduces byte for byte (canonical
// encoding), Render accepts, and the streaming Reader agrees with Decode.
func FuzzDecodeMessage(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := Decode(in)
		sm, serr := readAll(in, 1<<16)
		if err != nil {
			se := syncerr.As(err)
			if se == nil || (se.Code != syncerr.InvalidRequest && se.Code != syncerr.EmptyCommit) {
				t.Fatalf("Decode error %v is not a decode catalog error", err)
			}
			if serr == nil {
				t.Fatalf("Reader accepted what Decode rejects (%v)", err)
			}
			if ss := syncerr.As(serr); ss == nil || ss.Code != se.Code {
				// Both must refuse with the same code; messages may differ
				// (e.g. the Reader's frame bound).
				if !(ss != nil && ss.Code == syncerr.InvalidRequest) {
					t.Fatalf("Reader error %v, Decode error %v", serr, err)
				}
			}
			return
		}
		if serr != nil {
			if !syncerr.HasCode(serr, syncerr.InvalidRequest) || len(in) <= 1<<16 {
				t.Fatalf("Reader rejects what Decode accepts: %v", serr)
			}
		} else if !reflect.DeepEqual(m, sm) {
			t.Fatalf("Reader and Decode disagree")
		}
		out, err := Encode(m)
		if err != nil {
			t.Fatalf("Encode of a decoded message: %v", err)
		}
		if !bytes.Equal(out, in) {
			t.Fatalf("Encode(Decode(b)) != b\n got %x\nwant %x", out, in)
		}
		m2, err := Decode(out)
		if err != nil {
			t.Fatalf("Decode(Encode(m)): %v", err)
		}
		out2, err := Encode(m2)
		if err != nil || !bytes.Equal(out2, out) {
			t.Fatalf("second round trip differs: %v", err)
		}
		rendered, err := Render(m)
		if err != nil {
			t.Fatalf("Render of a decoded message: %v", err)
		}
		if !json.Valid(rendered) {
			t.Fatalf("Render produced invalid JSON: %s", rendered)
		}
		if m.Kind == KindRequest {
			if _, err := m.Request(); err != nil {
				t.Fatalf("Request view of a decoded request: %v", err)
			}
		}
	})
}

// FuzzDecodeRequest: DecodeRequest is Decode followed by Message.Request,
// error for error (the same message) and view for view; a response is
// ErrNotRequest exactly when Decode accepts it.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, gerr := DecodeRequest(in)
		m, err := Decode(in)
		var want *Request
		if err == nil {
			if m.Kind != KindRequest {
				if !errors.Is(gerr, ErrNotRequest) {
					t.Fatalf("a valid response: DecodeRequest error %v, want ErrNotRequest", gerr)
				}
				return
			}
			want, err = m.Request()
		}
		if err != nil {
			if gerr == nil || gerr.Error() != err.Error() {
				t.Fatalf("DecodeRequest error %v, want %v", gerr, err)
			}
			if syncerr.As(gerr) == nil || syncerr.As(gerr).Code != syncerr.As(err).Code {
				t.Fatalf("DecodeRequest error code differs: %v vs %v", gerr, err)
			}
			return
		}
		if gerr != nil {
			t.Fatalf("DecodeRequest rejects what Decode accepts: %v", gerr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeRequest view differs\n got %+v\nwant %+v", got, want)
		}
	})
}
