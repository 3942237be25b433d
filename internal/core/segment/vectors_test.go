package segment

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/vectors"
)

type manifest = vectors.Manifest

func loadManifestIn(t testing.TB, dir string) (string, manifest) {
	t.Helper()
	m := vectors.Load(t, dir, "segment")
	if len(m.Invalid) == 0 {
		t.Fatal("segment manifest lists no invalid cases")
	}
	return filepath.Join(dir, "segment"), m
}

func parseJSON(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("bad JSON %s: %v", b, err)
	}
	return v
}

// streamRoundTrip decodes b with the streaming Decoder (tiny reads) and
// re-encodes row by row with the block structure it saw.
func streamRoundTrip(b []byte) ([]byte, error) {
	d := NewDecoder(io.LimitReader(bytes.NewReader(b), int64(len(b))), DecoderOptions{})
	h, err := d.Header()
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	e, err := NewEncoder(&out, h.Table, h.SchemaVersion, h.Columns, EncoderOptions{BlockRows: 1 << 30, BlockBytes: 1 << 30})
	if err != nil {
		return nil, err
	}
	for {
		if _, err := d.NextBlock(); err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
		for d.NextInBlock() {
			if _, err := d.Values(nil); err != nil {
				return nil, err
			}
			if err := e.AppendRow(d.ServerVersion(), d.Row()); err != nil {
				return nil, err
			}
		}
		if err := e.EndBlock(); err != nil {
			return nil, err
		}
	}
	st, err := e.Close()
	if err != nil {
		return nil, err
	}
	if st.SegmentID != SegmentID(out.Bytes()) || st.Bytes != int64(out.Len()) {
		return nil, io.ErrShortWrite
	}
	return out.Bytes(), nil
}

func TestVectors(t *testing.T) { runVectors(t, vectors.Dir(t)) }

// TestVectorsV3: the segment cases of the wire-version 3 set (the rows
// segment format is unchanged by version 3, §9).
func TestVectorsV3(t *testing.T) { runVectors(t, vectors.DirV3(t)) }

func runVectors(t *testing.T, root string) {
	dir, m := loadManifestIn(t, root)
	passed := 0
	for _, c := range m.Cases {
		t.Run(c.Name, func(t *testing.T) {
			bin, err := os.ReadFile(filepath.Join(dir, c.Bin))
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join(dir, c.JSON))
			if err != nil {
				t.Fatal(err)
			}
			seg, err := Decode(bin)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			got, err := Render(seg)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			if g, w := parseJSON(t, got), parseJSON(t, want); !reflect.DeepEqual(g, w) {
				t.Fatalf("rendering differs\n got: %s\nwant: %s", got, want)
			}
			re, err := Encode(seg)
			if err != nil || !bytes.Equal(re, bin) {
				t.Fatalf("re-encode from raw rows differs (err %v)", err)
			}
			for _, block := range seg.Blocks {
				for i := range block {
					block[i].Raw = nil
				}
			}
			re, err = Encode(seg)
			if err != nil || !bytes.Equal(re, bin) {
				t.Fatalf("re-encode from values differs (err %v)", err)
			}
			if err := ValidateStructure(bin); err != nil {
				t.Fatalf("ValidateStructure: %v", err)
			}
			re, err = streamRoundTrip(bin)
			if err != nil || !bytes.Equal(re, bin) {
				t.Fatalf("streaming round trip differs (err %v)", err)
			}
			passed++
		})
	}
	rejected := 0
	for _, c := range m.Invalid {
		t.Run("invalid/"+c.Name, func(t *testing.T) {
			bin, err := os.ReadFile(filepath.Join(dir, c.Bin))
			if err != nil {
				t.Fatal(err)
			}
			code := syncerr.Code(c.Error)
			_, err = Decode(bin)
			if !syncerr.HasCode(err, code) {
				t.Fatalf("Decode: got %v, want %s", err, code)
			}
			t.Logf("Decode: %v", err)
			if err := ValidateStructure(bin); !syncerr.HasCode(err, code) {
				t.Fatalf("ValidateStructure: got %v, want %s", err, code)
			}
			if _, err := streamRoundTrip(bin); !syncerr.HasCode(err, code) {
				t.Fatalf("Decoder: got %v, want %s", err, code)
			}
			rejected++
		})
	}
	t.Logf("segment vectors: %d/%d cases pass, %d/%d invalid cases rejected with their code",
		passed, len(m.Cases), rejected, len(m.Invalid))
	if passed != len(m.Cases) || rejected != len(m.Invalid) {
		t.Fail()
	}
}

// TestInlineSegmentVector decodes the SEGMENT_INLINE payload of the
// bootstrap-segments response vector and checks that its content address
// is the segmentId of the rows SEGMENT_REF in the same message.
func TestInlineSegmentVector(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(vectors.Dir(t), "response", "bootstrap-segments.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Frames []struct {
			Type      string `json:"type"`
			Payload   string `json:"payload"`
			SegmentID string `json:"segmentId"`
			MediaType string `json:"mediaType"`
			ByteLen   int    `json:"byteLength"`
			RowCount  int    `json:"rowCount"`
		} `json:"frames"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var payload []byte
	var refID string
	var refLen, refRows int
	for _, f := range doc.Frames {
		switch {
		case f.Type == "SEGMENT_INLINE":
			if payload, err = base64.StdEncoding.DecodeString(f.Payload); err != nil {
				t.Fatal(err)
			}
		case f.Type == "SEGMENT_REF" && f.MediaType == "rows":
			refID, refLen, refRows = f.SegmentID, f.ByteLen, f.RowCount
		}
	}
	if payload == nil || refID == "" {
		t.Fatal("vector lacks SEGMENT_INLINE or rows SEGMENT_REF")
	}
	if err := ValidateStructure(payload); err != nil {
		t.Fatal(err)
	}
	seg, err := Decode(payload)
	if err != nil {
		t.Fatal(err)
	}
	if got := SegmentID(payload); got != refID || len(payload) != refLen || seg.Rows() != refRows {
		t.Fatalf("inline segment id %s len %d rows %d; ref says %s %d %d", got, len(payload), seg.Rows(), refID, refLen, refRows)
	}
	re, err := Encode(seg)
	if err != nil || !bytes.Equal(re, payload) {
		t.Fatalf("re-encode differs: %v", err)
	}
}
