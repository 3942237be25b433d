package segment

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

func FuzzSegmentDecode(f *testing.F) {
	dir := os.Getenv("SSP2_VECTORS")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "..", "shared", "ssp2-vectors")
	}
	files, _ := filepath.Glob(filepath.Join(dir, "segment", "*.bin"))
	inv, _ := filepath.Glob(filepath.Join(dir, "segment", "invalid", "*.bin"))
	for _, name := range append(files, inv...) {
		if b, err := os.ReadFile(name); err == nil {
			f.Add(b)
		}
	}
	_, b, _ := encodeTasks(f, 5, EncoderOptions{BlockRows: 2})
	f.Add(b)
	f.Add([]byte("SSG2"))

	f.Fuzz(func(t *testing.T, b []byte) {
		seg, err := Decode(b)
		verr := ValidateStructure(b)
		d := NewDecoder(bytes.NewReader(b), DecoderOptions{MaxBlockBytes: 1 << 20})
		rows := 0
		for d.Next() {
			if _, err := d.Values(nil); err != nil {
				t.Fatalf("Values after validation: %v", err)
			}
			rows++
		}
		serr := d.Err()
		if (err == nil) != (verr == nil) || (err == nil) != (serr == nil) {
			t.Fatalf("disagreement: Decode %v, ValidateStructure %v, Decoder %v", err, verr, serr)
		}
		if err != nil {
			for _, e := range []error{err, verr, serr} {
				if !syncerr.HasCode(e, syncerr.InvalidRequest) {
					t.Fatalf("error %v is not sync.invalid_request", e)
				}
			}
			return
		}
		if rows != seg.Rows() {
			t.Fatalf("Decoder saw %d rows, Decode %d", rows, seg.Rows())
		}
		if n, err := d.NextBlock(); n != 0 || err != io.EOF {
			t.Fatalf("after end: %d %v", n, err)
		}
		enc, err := Encode(seg)
		if err != nil || !bytes.Equal(enc, b) {
			t.Fatalf("re-encode differs: %v", err)
		}
		for _, block := range seg.Blocks {
			for i := range block {
				block[i].Raw = nil
			}
		}
		enc, err = Encode(seg)
		if err != nil || !bytes.Equal(enc, b) {
			t.Fatalf("re-encode from values differs: %v", err)
		}
		seg2, err := Decode(enc)
		if err != nil || seg2.Rows() != seg.Rows() {
			t.Fatalf("decode of re-encoded: %v", err)
		}
		out, err := Render(seg)
		if err != nil || !json.Valid(out) {
			t.Fatalf("render: %v %s", err, out)
		}
	})
}
