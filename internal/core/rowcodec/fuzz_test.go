package rowcodec_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/segment"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// fuzzCols: the notes table of the golden segment vectors (string ×3,
// integer, float, boolean, json, bytes) plus blob_ref and crdt, so all
// eight §2.4 types are exercised and the bitmap has padding bits.
var fuzzCols = []rowcodec.Column{
	{Name: "id", Type: rowcodec.TypeString},
	{Name: "title", Type: rowcodec.TypeString, Nullable: true},
	{Name: "body", Type: rowcodec.TypeString},
	{Name: "count", Type: rowcodec.TypeInteger, Nullable: true},
	{Name: "score", Type: rowcodec.TypeFloat},
	{Name: "done", Type: rowcodec.TypeBoolean},
	{Name: "meta", Type: rowcodec.TypeJSON, Nullable: true},
	{Name: "blob", Type: rowcodec.TypeBytes, Nullable: true},
	{Name: "ref", Type: rowcodec.TypeBlobRef, Nullable: true},
	{Name: "doc", Type: rowcodec.TypeCRDT, Nullable: true},
}

// vectorSeeds returns the .bin files (valid and invalid) of one vector
// kind that exist, for seeding: set is the variable naming the vector set
// and def its folder name beside the repository. Fuzzing still runs
// without them.
func vectorSeeds(set, def, kind string) [][]byte {
	dir := os.Getenv(set)
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "..", "shared", def)
	}
	files, _ := filepath.Glob(filepath.Join(dir, kind, "*.bin"))
	inv, _ := filepath.Glob(filepath.Join(dir, kind, "invalid", "*.bin"))
	var out [][]byte
	for _, f := range append(files, inv...) {
		if b, err := os.ReadFile(f); err == nil {
			out = append(out, b)
		}
	}
	return out
}

// vectorSegments returns the golden segment files of wire 1–2.
func vectorSegments() [][]byte { return vectorSeeds("SSP2_VECTORS", "ssp2-vectors", "segment") }

const seedBlobRef = `{"blobId":"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08","byteLength":4,"mediaType":"text/plain","name":"t.txt"}`

func FuzzRowDecode(f *testing.F) {
	codec, err := rowcodec.New(fuzzCols)
	if err != nil {
		f.Fatal(err)
	}
	// Seed with every vector row, widened to the fuzz columns.
	n := 0
	for _, bin := range vectorSegments() {
		seg, err := segment.Decode(bin)
		if err != nil || len(seg.Columns) != 8 {
			continue
		}
		for _, block := range seg.Blocks {
			for _, r := range block {
				f.Add(r.Raw) // valid for the notes codec, not for this one
				vals := append([]rowcodec.Value(nil), r.Values...)
				ref := rowcodec.Value{Null: true}
				if n%2 == 0 {
					ref = rowcodec.Value{Str: seedBlobRef}
				}
				vals = append(vals, ref, rowcodec.Value{Bytes: []byte{1, 2, byte(n)}})
				b, err := codec.Append(nil, vals)
				if err != nil {
					f.Fatal(err)
				}
				f.Add(b)
				n++
			}
		}
	}
	all := make([]rowcodec.Value, len(fuzzCols))
	for i := range all {
		all[i].Null = fuzzCols[i].Nullable
	}
	all[4].Float = 1.5
	if b, err := codec.Append(nil, all); err == nil {
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff})

	f.Fuzz(func(t *testing.T, b []byte) {
		vals, err := codec.Decode(b, nil)
		vn, verr := codec.Validate(b)
		if err != nil {
			if !syncerr.HasCode(err, syncerr.InvalidRequest) {
				t.Fatalf("error %v is not sync.invalid_request", err)
			}
			if verr == nil && vn == len(b) {
				t.Fatalf("Validate accepts what Decode rejects: %v", err)
			}
			return
		}
		if verr != nil || vn != len(b) {
			t.Fatalf("Validate disagrees with Decode: n=%d err=%v", vn, verr)
		}
		enc, err := codec.Append(nil, vals)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if !bytes.Equal(enc, b) {
			t.Fatalf("re-encode differs:\n in % x\nout % x", b, enc)
		}
		again, err := codec.Decode(enc, nil)
		if err != nil || len(again) != len(vals) {
			t.Fatalf("decode of re-encoded row: %v", err)
		}
		out, err := codec.RenderRow(nil, vals)
		if err != nil || !json.Valid(out) {
			t.Fatalf("render: %v %s", err, out)
		}
		for i, c := range fuzzCols {
			if !vals[i].Null {
				_ = vals[i].String(c.Type)
			}
			if c.Type == rowcodec.TypeJSON && !vals[i].Null && !json.Valid([]byte(vals[i].Str)) {
				t.Fatalf("accepted json %q that encoding/json rejects", vals[i].Str)
			}
		}
	})
}

// sparseCols is the table of the v3 push/ vectors (SPEC Appendix A #26),
// so the seeds decode; blob_ref is added to reach every §2.4 type.
var sparseCols = []rowcodec.Column{
	{Name: "id", Type: rowcodec.TypeString},
	{Name: "title", Type: rowcodec.TypeString, Nullable: true},
	{Name: "body", Type: rowcodec.TypeString},
	{Name: "count", Type: rowcodec.TypeInteger, Nullable: true},
	{Name: "score", Type: rowcodec.TypeFloat},
	{Name: "done", Type: rowcodec.TypeBoolean},
	{Name: "meta", Type: rowcodec.TypeJSON, Nullable: true},
	{Name: "blob", Type: rowcodec.TypeBytes, Nullable: true},
	{Name: "doc", Type: rowcodec.TypeCRDT, Nullable: true},
	{Name: "ref", Type: rowcodec.TypeBlobRef, Nullable: true},
}

// vectorPushRows returns the v3 push/ files.
func vectorPushRows() [][]byte { return vectorSeeds("SSP2_VECTORS_V3", "ssp2-vectors-v3", "push") }

// FuzzDecodeSparse: DecodeSparse never panics, fails only with
// sync.invalid_request, reports the primary key present, and whatever it
// accepts re-encodes to the same bytes and renders as valid JSON.
func FuzzDecodeSparse(f *testing.F) {
	// The vectors' 9-column table: its rows are valid seeds as they are.
	codec9, err := rowcodec.New(sparseCols[:9])
	if err != nil {
		f.Fatal(err)
	}
	codec10, err := rowcodec.New(sparseCols)
	if err != nil {
		f.Fatal(err)
	}
	for _, b := range vectorPushRows() {
		f.Add(b, false)
	}
	row := make([]rowcodec.Value, len(sparseCols))
	present := make([]bool, len(sparseCols))
	present[0], present[9] = true, true
	row[0].Str, row[9].Str = "k", seedBlobRef
	if b, err := codec10.AppendSparse(nil, row, present); err == nil {
		f.Add(b, true)
	}
	f.Add([]byte{0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, false)
	f.Add([]byte{}, true)

	f.Fuzz(func(t *testing.T, b []byte, wide bool) {
		codec := codec9
		if wide {
			codec = codec10
		}
		vals, pres, err := codec.DecodeSparse(b, 0, nil, nil)
		if err != nil {
			if !syncerr.HasCode(err, syncerr.InvalidRequest) {
				t.Fatalf("error %v is not sync.invalid_request", err)
			}
			return
		}
		if !pres[0] {
			t.Fatal("accepted a row without its primary key")
		}
		enc, err := codec.AppendSparse(nil, vals, pres)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if !bytes.Equal(enc, b) {
			t.Fatalf("re-encode differs:\n in % x\nout % x", b, enc)
		}
		out, err := codec.RenderSparseDocument(nil, vals, pres)
		if err != nil || !json.Valid(out) {
			t.Fatalf("render: %v %s", err, out)
		}
		// The same presence flags survive the conflictColumns layout.
		back, err := codec.DecodePresence(rowcodec.PresenceBitmap(len(pres), pres))
		if err != nil {
			t.Fatalf("presence round trip: %v", err)
		}
		for i := range pres {
			if back[i] != pres[i] {
				t.Fatalf("presence round trip differs at %d", i)
			}
		}
	})
}
