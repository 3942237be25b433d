package rowcodec_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/vectors"
)

// pushCodec builds the codec of the push/ manifest's table and returns
// the primary-key column index.
func pushCodec(t testing.TB, m vectors.Manifest) (*rowcodec.Codec, int) {
	t.Helper()
	cols := make([]rowcodec.Column, len(m.Columns))
	pk := -1
	for i, c := range m.Columns {
		typ, ok := rowcodec.ParseType(c.Type)
		if !ok {
			t.Fatalf("push manifest column %q: unknown type %q", c.Name, c.Type)
		}
		cols[i] = rowcodec.Column{Name: c.Name, Type: typ, Nullable: c.Nullable}
		if c.Name == m.PrimaryKey {
			pk = i
		}
	}
	if pk < 0 {
		t.Fatalf("push manifest primary key %q is not a column", m.PrimaryKey)
	}
	codec, err := rowcodec.New(cols)
	if err != nil {
		t.Fatal(err)
	}
	return codec, pk
}

func jsonValue(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("bad JSON %s: %v", b, err)
	}
	return v
}

// TestSparseVectors: every valid push/ vector of the v3 set decodes,
// renders deep-equal to its JSON and re-encodes byte for byte; every
// invalid one fails with its catalog code (Appendix A #26).
func TestSparseVectors(t *testing.T) {
	dir := vectors.DirV3(t)
	m := vectors.Load(t, dir, "push")
	if len(m.Invalid) != 4 {
		t.Fatalf("push manifest lists %d invalid cases, want 4", len(m.Invalid))
	}
	codec, pk := pushCodec(t, m)
	for _, c := range m.Cases {
		t.Run(c.Name, func(t *testing.T) {
			bin, err := os.ReadFile(filepath.Join(dir, "push", c.Bin))
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join(dir, "push", c.JSON))
			if err != nil {
				t.Fatal(err)
			}
			row, present, err := codec.DecodeSparse(bin, pk, nil, nil)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			got, err := codec.RenderSparseDocument(nil, row, present)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			if g, w := jsonValue(t, got), jsonValue(t, want); !reflect.DeepEqual(g, w) {
				t.Fatalf("render differs:\n got %s\nwant %s", got, want)
			}
			enc, err := codec.AppendSparse(nil, row, present)
			if err != nil {
				t.Fatalf("re-encode: %v", err)
			}
			if !bytes.Equal(enc, bin) {
				t.Fatalf("re-encode differs:\n got % x\nwant % x", enc, bin)
			}
		})
	}
	for _, c := range m.Invalid {
		t.Run("invalid/"+c.Name, func(t *testing.T) {
			bin, err := os.ReadFile(filepath.Join(dir, "push", c.Bin))
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = codec.DecodeSparse(bin, pk, nil, nil)
			if !syncerr.HasCode(err, syncerr.Code(c.Error)) {
				t.Fatalf("decode error %v, want %s", err, c.Error)
			}
		})
	}
}

// tiny: id string (PK, non-nullable), a integer nullable, b boolean
// non-nullable.
var tiny = []rowcodec.Column{
	{Name: "id", Type: rowcodec.TypeString},
	{Name: "a", Type: rowcodec.TypeInteger, Nullable: true},
	{Name: "b", Type: rowcodec.TypeBoolean},
}

func TestSparseLayout(t *testing.T) {
	codec, err := rowcodec.New(tiny)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		row     []rowcodec.Value
		present []bool
		bytes   []byte // written by hand from §2.4
	}{
		{"id+b", []rowcodec.Value{{Str: "x"}, {}, {Bool: true}}, []bool{true, false, true},
			[]byte{0x05, 0x00, 1, 0, 0, 0, 'x', 0x01}},
		{"id+null a", []rowcodec.Value{{Str: "x"}, {Null: true}, {}}, []bool{true, true, false},
			[]byte{0x03, 0x02, 1, 0, 0, 0, 'x'}},
		{"pk only", []rowcodec.Value{{Str: ""}, {}, {}}, []bool{true, false, false},
			[]byte{0x01, 0x00, 0, 0, 0, 0}},
		{"full", []rowcodec.Value{{Str: "y"}, {Int: 2}, {Bool: false}}, []bool{true, true, true},
			[]byte{0x07, 0x00, 1, 0, 0, 0, 'y', 2, 0, 0, 0, 0, 0, 0, 0, 0x00}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			enc, err := codec.AppendSparse(nil, c.row, c.present)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(enc, c.bytes) {
				t.Fatalf("encode:\n got % x\nwant % x", enc, c.bytes)
			}
			row, present, err := codec.DecodeSparse(c.bytes, 0, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(present, c.present) {
				t.Fatalf("present %v, want %v", present, c.present)
			}
			for i := range row {
				want := c.row[i]
				if !c.present[i] {
					want = rowcodec.Value{}
				}
				if !reflect.DeepEqual(row[i], want) {
					t.Fatalf("column %d: %+v, want %+v", i, row[i], want)
				}
			}
		})
	}
}

// TestSparseDecodeErrors pins the §2.4 decode-error order: each input
// carries the named violation plus every later one, so only the order
// decides which is reported.
func TestSparseDecodeErrors(t *testing.T) {
	nine := make([]rowcodec.Column, 9) // 2-byte presence bitmap, 7 padding bits
	for i := range nine {
		nine[i] = rowcodec.Column{Name: string(rune('a' + i)), Type: rowcodec.TypeBoolean, Nullable: i != 0 && i != 2}
	}
	codec, err := rowcodec.New(nine)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, want string
		b          []byte
	}{
		// padding bit 9 set, PK (a) absent, null padding set, c null.
		{"presence padding first", "padding bit", []byte{0x04, 0x02, 0xff}},
		// PK absent, null padding set (1 present column, bit 1 set), c null.
		{"missing pk second", "primary-key", []byte{0x04, 0x00, 0x03}},
		// PK + c present (2 columns), null bit 2 (padding) and bit 1 (c) set.
		{"null padding third", "beyond the 2 present", []byte{0x05, 0x00, 0x06}},
		// PK + c present, c NULL; the value of a is then missing too.
		{"non-nullable null fourth", "non-nullable column \"c\"", []byte{0x05, 0x00, 0x02}},
		{"truncated presence", "truncated in presence", []byte{0x01}},
		{"truncated nulls", "truncated in null", []byte{0x01, 0x00}},
		{"truncated value", "truncated in column", []byte{0x01, 0x00, 0x00}},
		{"bad boolean", "neither 0 nor 1", []byte{0x01, 0x00, 0x00, 0x02}},
		{"trailing", "trailing", []byte{0x01, 0x00, 0x00, 0x01, 0x00}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := codec.DecodeSparse(c.b, 0, nil, nil)
			if !syncerr.HasCode(err, syncerr.InvalidRequest) {
				t.Fatalf("error %v is not sync.invalid_request", err)
			}
			// Every violation has the same code; the message tells which
			// rule fired, which is what the order test needs.
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not report %q", err, c.want)
			}
		})
	}
	if _, _, err := codec.DecodeSparse([]byte{0x01, 0x00, 0x00, 0x01}, 0, nil, nil); err != nil {
		t.Fatalf("valid pk-only row: %v", err)
	}
	if _, _, err := codec.DecodeSparse([]byte{0x01, 0x00, 0x01}, 9, nil, nil); !syncerr.HasCode(err, syncerr.InvalidRequest) {
		t.Fatalf("pk index out of range: %v", err)
	}
}

func TestSparseEncodeRefuses(t *testing.T) {
	codec, err := rowcodec.New(tiny)
	if err != nil {
		t.Fatal(err)
	}
	prefix := []byte("keep")
	for name, c := range map[string]struct {
		row     []rowcodec.Value
		present []bool
	}{
		"null non-nullable": {[]rowcodec.Value{{Str: "x"}, {}, {Null: true}}, []bool{true, false, true}},
		"unsafe integer":    {[]rowcodec.Value{{Str: "x"}, {Int: 1 << 53}, {}}, []bool{true, true, false}},
		"bad utf8":          {[]rowcodec.Value{{Str: "\xff"}, {}, {}}, []bool{true, false, false}},
		"flag count":        {[]rowcodec.Value{{Str: "x"}, {}, {}}, []bool{true}},
	} {
		out, err := codec.AppendSparse(prefix, c.row, c.present)
		if !syncerr.HasCode(err, syncerr.InvalidRequest) {
			t.Fatalf("%s: error %v", name, err)
		}
		if string(out) != "keep" {
			t.Fatalf("%s: dst changed to %q", name, out)
		}
	}
	// An absent column's value is ignored, even an invalid one.
	if _, err := codec.AppendSparse(nil, []rowcodec.Value{{Str: "x"}, {Int: 1 << 60}, {Null: true}}, []bool{true, false, false}); err != nil {
		t.Fatalf("absent invalid values: %v", err)
	}
}

func TestPresenceBitmap(t *testing.T) {
	nine := make([]rowcodec.Column, 9)
	for i := range nine {
		nine[i] = rowcodec.Column{Name: string(rune('a' + i)), Type: rowcodec.TypeString}
	}
	codec, err := rowcodec.New(nine)
	if err != nil {
		t.Fatal(err)
	}
	present := []bool{false, true, false, false, false, false, false, false, true}
	bm := rowcodec.PresenceBitmap(9, present)
	if !bytes.Equal(bm, []byte{0x02, 0x01}) {
		t.Fatalf("bitmap % x", bm)
	}
	got, err := codec.DecodePresence(bm)
	if err != nil || !reflect.DeepEqual(got, present) {
		t.Fatalf("decode %v %v", got, err)
	}
	if b := rowcodec.PresenceBitmap(0, nil); len(b) != 0 {
		t.Fatalf("0 columns: % x", b)
	}
	for name, b := range map[string][]byte{
		"padding bit": {0x00, 0x02},
		"short":       {0x01},
		"long":        {0x01, 0x00, 0x00},
	} {
		if _, err := codec.DecodePresence(b); !syncerr.HasCode(err, syncerr.InvalidRequest) {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// TestSparseBoundedMemory: a length prefix claiming 4 GiB allocates
// nothing proportional to the claim, and a valid decode into reused
// buffers allocates at most the one text copy.
func TestSparseBoundedMemory(t *testing.T) {
	codec, err := rowcodec.New(tiny)
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]rowcodec.Value, 3)
	present := make([]bool, 3)
	huge := []byte{0x01, 0x00, 0xff, 0xff, 0xff, 0xff, 'x'}
	allocs := testing.AllocsPerRun(100, func() {
		if _, _, err := codec.DecodeSparse(huge, 0, dst, present); err == nil {
			t.Fatal("accepted a truncated value")
		}
	})
	if allocs > 4 {
		t.Fatalf("error path allocates %.0f times", allocs)
	}
	valid := []byte{0x05, 0x00, 1, 0, 0, 0, 'x', 0x01}
	allocs = testing.AllocsPerRun(100, func() {
		var err error
		if dst, present, err = codec.DecodeSparse(valid, 0, dst, present); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 {
		t.Fatalf("valid decode allocates %.0f times, want ≤ 1", allocs)
	}
}

func TestRenderSparse(t *testing.T) {
	codec, err := rowcodec.New(tiny)
	if err != nil {
		t.Fatal(err)
	}
	got, err := codec.RenderSparse(nil, []rowcodec.Value{{Str: "x"}, {Null: true}, {}}, []bool{true, true, false})
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != `{"id":"x","a":null}` {
		t.Fatalf("render %s", got)
	}
}
