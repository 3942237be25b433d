package rowcodec

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// allTypes covers every §2.4 tag, each nullable, plus two non-nullable
// columns so the bitmap spans two bytes with padding.
var allTypes = []Column{
	{"s", TypeString, true},
	{"i", TypeInteger, true},
	{"f", TypeFloat, true},
	{"b", TypeBoolean, true},
	{"j", TypeJSON, true},
	{"by", TypeBytes, true},
	{"br", TypeBlobRef, true},
	{"c", TypeCRDT, true},
	{"id", TypeString, false},
	{"n", TypeInteger, false},
}

const blobID = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func mustCodec(t testing.TB, cols []Column) *Codec {
	t.Helper()
	c, err := New(cols)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func wantInvalid(t *testing.T, err error, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: expected an error", what)
	}
	if !syncerr.HasCode(err, syncerr.InvalidRequest) {
		t.Fatalf("%s: error %v is not sync.invalid_request", what, err)
	}
}

func sampleRow() []Value {
	return []Value{
		{Str: "héllo 𝄞 📝"},
		{Int: -42},
		{Float: 0.1},
		{Bool: true},
		{Str: ` {"a": [1, 2.5e3, "x\u00e9"], "b": null} `},
		{Bytes: []byte{0, 1, 2, 0xff}},
		{Str: `{"blobId":"` + blobID + `","byteLength":12,"mediaType":"image/png","name":"a \"b\".png"}`},
		{Bytes: []byte{9, 8, 7}},
		{Str: "row-1"},
		{Int: MaxSafeInt},
	}
}

func equalValues(t *testing.T, c *Codec, got, want []Value) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d values, want %d", len(got), len(want))
	}
	for i, col := range c.Columns() {
		g, w := got[i], want[i]
		if g.Null != w.Null {
			t.Fatalf("column %s: null %v, want %v", col.Name, g.Null, w.Null)
		}
		if g.Null {
			continue
		}
		ok := true
		switch col.Type {
		case TypeInteger:
			ok = g.Int == w.Int
		case TypeFloat:
			ok = math.Float64bits(g.Float) == math.Float64bits(w.Float)
		case TypeBoolean:
			ok = g.Bool == w.Bool
		case TypeBytes, TypeCRDT:
			ok = bytes.Equal(g.Bytes, w.Bytes)
		default:
			ok = g.Str == w.Str
		}
		if !ok {
			t.Fatalf("column %s: got %+v, want %+v", col.Name, g, w)
		}
	}
}

func TestRoundTripAllTypes(t *testing.T) {
	c := mustCodec(t, allTypes)
	row := sampleRow()
	b, err := c.Append(nil, row)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Decode(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	equalValues(t, c, got, row)
	again, err := c.Append(nil, got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, b) {
		t.Fatal("re-encoding changed the bytes")
	}
	n, err := c.Validate(append(b, 0xAA, 0xBB))
	if err != nil || n != len(b) {
		t.Fatalf("Validate prefix: n=%d err=%v, want %d", n, err, len(b))
	}
	if err := c.ValidateRow(append(b, 0)); err == nil {
		t.Fatal("ValidateRow accepted a trailing byte")
	}
	if _, err := c.Decode(append(b, 0), nil); err == nil {
		t.Fatal("Decode accepted a trailing byte")
	}

	// All nullable columns NULL.
	nulls := make([]Value, len(allTypes))
	for i := range nulls[:8] {
		nulls[i].Null = true
	}
	nulls[8] = Value{Str: ""}
	nulls[9] = Value{Int: -MaxSafeInt}
	b, err = c.Append(nil, nulls)
	if err != nil {
		t.Fatal(err)
	}
	if b[0] != 0xFF || b[1] != 0 {
		t.Fatalf("bitmap = % x, want ff 00", b[:2])
	}
	got, err = c.Decode(b, got)
	if err != nil {
		t.Fatal(err)
	}
	equalValues(t, c, got, nulls)
}

func TestDecodeIsIndependentOfDst(t *testing.T) {
	c := mustCodec(t, allTypes)
	b, _ := c.Append(nil, sampleRow())
	dst := make([]Value, 3, 20)
	for i := range dst {
		dst[i] = Value{Str: "stale", Int: 99, Bytes: []byte{1}}
	}
	got, err := c.Decode(b, dst)
	if err != nil {
		t.Fatal(err)
	}
	equalValues(t, c, got, sampleRow())
}

func TestBitmapRules(t *testing.T) {
	// 3 columns: bits 3..7 of the single bitmap byte are padding.
	cols := []Column{{"a", TypeBoolean, true}, {"b", TypeBoolean, false}, {"c", TypeBoolean, true}}
	c := mustCodec(t, cols)
	if _, err := c.Decode([]byte{0b101, 1}, nil); err != nil {
		t.Fatalf("valid row rejected: %v", err)
	}
	for bit := 3; bit < 8; bit++ {
		_, err := c.Decode([]byte{byte(1) << bit, 1, 1, 1}, nil)
		wantInvalid(t, err, "padding bit")
		if !strings.Contains(err.Error(), "padding") {
			t.Fatalf("message %q does not mention padding", err)
		}
	}
	_, err := c.Decode([]byte{0b010, 1, 1}, nil)
	wantInvalid(t, err, "null on non-nullable")
	if !strings.Contains(err.Error(), `"b"`) {
		t.Fatalf("message %q does not name the column", err)
	}
	_, err = c.Decode(nil, nil)
	wantInvalid(t, err, "empty row")

	// Exactly 8 columns: one byte, no padding; 9: two bytes, 7 padding bits.
	eight := make([]Column, 8)
	for i := range eight {
		eight[i] = Column{Name: string(rune('a' + i)), Type: TypeBoolean, Nullable: true}
	}
	c8 := mustCodec(t, eight)
	if _, err := c8.Decode([]byte{0xFF}, nil); err != nil {
		t.Fatal(err)
	}
	c9 := mustCodec(t, append(eight, Column{"z", TypeBoolean, true}))
	if _, err := c9.Decode([]byte{0xFF, 0x01}, nil); err != nil {
		t.Fatal(err)
	}
	_, err = c9.Decode([]byte{0xFF, 0x03}, nil)
	wantInvalid(t, err, "second-byte padding")
	_, err = c9.Decode([]byte{0xFF}, nil)
	wantInvalid(t, err, "short bitmap")

	// Zero columns: an empty row.
	c0 := mustCodec(t, nil)
	if n, err := c0.Validate([]byte{1, 2}); err != nil || n != 0 {
		t.Fatalf("zero columns: n=%d err=%v", n, err)
	}
}

func rowOf(t *testing.T, cols []Column, v Value) []byte {
	t.Helper()
	b, err := mustCodec(t, cols).Append(nil, []Value{v})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestIntegerBounds(t *testing.T) {
	cols := []Column{{"n", TypeInteger, false}}
	c := mustCodec(t, cols)
	for _, v := range []int64{0, 1, -1, MaxSafeInt, -MaxSafeInt} {
		b := rowOf(t, cols, Value{Int: v})
		got, err := c.Decode(b, nil)
		if err != nil || got[0].Int != v {
			t.Fatalf("%d: got %v err %v", v, got, err)
		}
	}
	for _, v := range []int64{MaxSafeInt + 1, -MaxSafeInt - 1, math.MaxInt64, math.MinInt64} {
		if _, err := c.Append(nil, []Value{{Int: v}}); err == nil {
			t.Fatalf("Append accepted %d", v)
		}
		raw := binary.LittleEndian.AppendUint64([]byte{0}, uint64(v))
		_, err := c.Decode(raw, nil)
		wantInvalid(t, err, "out-of-range integer")
	}
}

func TestBoolByte(t *testing.T) {
	c := mustCodec(t, []Column{{"b", TypeBoolean, false}})
	for x := 2; x < 256; x++ {
		_, err := c.Decode([]byte{0, byte(x)}, nil)
		wantInvalid(t, err, "bool byte")
	}
}

func TestFloatBitsPreserved(t *testing.T) {
	cols := []Column{{"f", TypeFloat, false}}
	c := mustCodec(t, cols)
	for _, bits := range []uint64{0, 1 << 63, 0x7FF8000000000001, 0xFFF0000000000000, 0x7FF0000000000000, 1} {
		b := rowOf(t, cols, Value{Float: math.Float64frombits(bits)})
		got, err := c.Decode(b, nil)
		if err != nil || math.Float64bits(got[0].Float) != bits {
			t.Fatalf("bits %x: got %x err %v", bits, math.Float64bits(got[0].Float), err)
		}
	}
}

func TestStrings(t *testing.T) {
	cols := []Column{{"s", TypeString, false}}
	c := mustCodec(t, cols)
	for _, s := range []string{"", "a", "𝄞𝔘📝", "\u2028\u2029", "\x00", strings.Repeat("ü", 1000), "\uFEFFbom"} {
		got, err := c.Decode(rowOf(t, cols, Value{Str: s}), nil)
		if err != nil || got[0].Str != s {
			t.Fatalf("%q: got %q err %v", s, got[0].Str, err)
		}
	}
	for _, bad := range [][]byte{{0xff}, {0xc0, 0x80}, {0xed, 0xa0, 0x80}, {0xf4, 0x90, 0x80, 0x80}, {'a', 0xe2, 0x82}} {
		raw := binary.LittleEndian.AppendUint32([]byte{0}, uint32(len(bad)))
		raw = append(raw, bad...)
		_, err := c.Decode(raw, nil)
		wantInvalid(t, err, "invalid UTF-8")
		if _, err := c.Append(nil, []Value{{Str: string(bad)}}); err == nil {
			t.Fatalf("Append accepted invalid UTF-8 % x", bad)
		}
	}
	// Length prefix beyond the buffer.
	_, err := c.Decode([]byte{0, 5, 0, 0, 0, 'a'}, nil)
	wantInvalid(t, err, "truncated string")
	_, err = c.Decode([]byte{0, 0xff, 0xff, 0xff, 0xff}, nil)
	wantInvalid(t, err, "huge length")
}

func TestJSONVerbatim(t *testing.T) {
	cols := []Column{{"j", TypeJSON, false}}
	c := mustCodec(t, cols)
	docs := []string{
		`true`, `false`, `null`, `7`, `-0`, `1.5e-300`, `1E+400`, `"x"`, `""`,
		` { "a" : [ 1 , 2 ] } `, "\t[\n]\r\n", `{}`, `[]`, `[[[[]]]]`,
		`{"k":"\u00e9\ud83d\ude00\n\"\\\/"}`, `{"a":1,"a":2}`, `"\ud800"`,
		`{"tags": ["a", "b"],  "unicode": "𝔘"}`,
		strings.Repeat("[", 100) + strings.Repeat("]", 100),
	}
	for _, d := range docs {
		got, err := c.Decode(rowOf(t, cols, Value{Str: d}), nil)
		if err != nil {
			t.Fatalf("%q rejected: %v", d, err)
		}
		if got[0].Str != d {
			t.Fatalf("%q not preserved: %q", d, got[0].Str)
		}
	}
	bad := []string{
		``, ` `, `{`, `}`, `[1,]`, `{"a":1,}`, `{"a"}`, `{a:1}`, `'x'`, `01`, `1.`, `.5`, `1e`, `+1`,
		`- 1`, `tru`, `nul`, `True`, `NaN`, `Infinity`, `"\x"`, `"\u12"`, "\"a\tb\"", `1 2`, `[1] x`,
		`{"a":1}}`, `[`, `"abc`, "\"\x01\"", "\uFEFF1", `[1 2]`, `{"a" 1}`, `{,}`, `[,]`,
	}
	for _, d := range bad {
		if json.Valid([]byte(d)) {
			t.Fatalf("test bug: %q is valid per encoding/json", d)
		}
		raw := binary.LittleEndian.AppendUint32([]byte{0}, uint32(len(d)))
		raw = append(raw, d...)
		_, err := c.Decode(raw, nil)
		wantInvalid(t, err, "bad json "+d)
		if _, err := c.Append(nil, []Value{{Str: d}}); err == nil {
			t.Fatalf("Append accepted %q", d)
		}
	}
}

func TestBlobRef(t *testing.T) {
	cols := []Column{{"r", TypeBlobRef, true}}
	c := mustCodec(t, cols)
	pre := `{"blobId":"` + blobID + `"`
	good := []string{
		pre + `,"byteLength":0}`,
		pre + `,"byteLength":9007199254740991}`,
		pre + `,"byteLength":5,"mediaType":"text/plain"}`,
		pre + `,"byteLength":5,"name":"a.txt"}`,
		pre + `,"byteLength":5,"mediaType":"","name":"\u00e9 \"q\" 📝"}`,
	}
	for _, s := range good {
		got, err := c.Decode(rowOf(t, cols, Value{Str: s}), nil)
		if err != nil || got[0].Str != s {
			t.Fatalf("%s rejected: %v", s, err)
		}
		if !ValidBlobRef(s) {
			t.Fatalf("ValidBlobRef(%s) = false", s)
		}
	}
	bad := map[string]string{
		"not json":             `{"blobId":`,
		"not an object":        `"` + blobID + `"`,
		"array":                `[1]`,
		"missing blobId":       `{"byteLength":1}`,
		"missing byteLength":   pre + `}`,
		"uppercase hex":        `{"blobId":"sha256:` + strings.ToUpper(blobID[7:]) + `","byteLength":1}`,
		"short hex":            `{"blobId":"sha256:` + blobID[8:] + `","byteLength":1}`,
		"long hex":             `{"blobId":"` + blobID + `0","byteLength":1}`,
		"wrong prefix":         `{"blobId":"sha512:` + blobID[7:] + `","byteLength":1}`,
		"blobId not string":    `{"blobId":1,"byteLength":1}`,
		"negative length":      pre + `,"byteLength":-1}`,
		"fractional length":    pre + `,"byteLength":1.5}`,
		"float-form length":    pre + `,"byteLength":1.0}`,
		"exponent length":      pre + `,"byteLength":1e3}`,
		"leading zero":         pre + `,"byteLength":01}`,
		"unsafe length":        pre + `,"byteLength":9007199254740992}`,
		"huge length":          pre + `,"byteLength":123456789012345678901234}`,
		"string length":        pre + `,"byteLength":"1"}`,
		"null length":          pre + `,"byteLength":null}`,
		"mediaType number":     pre + `,"byteLength":1,"mediaType":5}`,
		"mediaType null":       pre + `,"byteLength":1,"mediaType":null}`,
		"name bool":            pre + `,"byteLength":1,"name":true}`,
		"unknown key":          pre + `,"byteLength":1,"extra":1}`,
		"unknown key between":  pre + `,"byteLength":1,"x":"y","name":"n"}`,
		"order name,mediaType": pre + `,"byteLength":1,"name":"n","mediaType":"m"}`,
		"order length first":   `{"byteLength":1,"blobId":"` + blobID + `"}`,
		"duplicate key":        pre + `,"byteLength":1,"name":"a","name":"b"}`,
		"whitespace":           `{"blobId": "` + blobID + `","byteLength":1}`,
		"trailing whitespace":  pre + `,"byteLength":1} `,
		"leading whitespace":   ` ` + pre + `,"byteLength":1}`,
		"escaped key":          `{"blob\u0049d":"` + blobID + `","byteLength":1}`,
		"trailing data":        pre + `,"byteLength":1}{}`,
		"empty":                ``,
	}
	for name, s := range bad {
		raw := binary.LittleEndian.AppendUint32([]byte{0}, uint32(len(s)))
		raw = append(raw, s...)
		_, err := c.Decode(raw, nil)
		wantInvalid(t, err, name)
		if _, err := c.Append(nil, []Value{{Str: s}}); err == nil {
			t.Fatalf("%s: Append accepted %s", name, s)
		}
		if ValidBlobRef(s) {
			t.Fatalf("%s: ValidBlobRef accepted %s", name, s)
		}
	}
	// NULL is "no attachment".
	if _, err := c.Decode([]byte{1}, nil); err != nil {
		t.Fatal(err)
	}
}

func TestAppendRejects(t *testing.T) {
	c := mustCodec(t, []Column{{"a", TypeString, false}, {"b", TypeInteger, true}})
	dst := []byte("prefix")
	out, err := c.Append(dst, []Value{{Null: true}, {Int: 1}})
	wantInvalid(t, err, "NULL in non-nullable")
	if string(out) != "prefix" {
		t.Fatalf("dst changed on error: %q", out)
	}
	_, err = c.Append(nil, []Value{{Str: "x"}})
	wantInvalid(t, err, "short row")
	if _, err := New([]Column{{"x", Type(9), false}}); err == nil {
		t.Fatal("New accepted tag 9")
	}
	if _, err := New([]Column{{"x", Type(0), false}}); err == nil {
		t.Fatal("New accepted tag 0")
	}
}

func TestTruncationEverywhere(t *testing.T) {
	c := mustCodec(t, allTypes)
	b, _ := c.Append(nil, sampleRow())
	for n := 0; n < len(b); n++ {
		if _, err := c.Validate(b[:n]); err == nil {
			t.Fatalf("prefix of %d/%d bytes accepted", n, len(b))
		}
	}
}

func TestTypeNames(t *testing.T) {
	names := []string{"string", "integer", "float", "boolean", "json", "bytes", "blob_ref", "crdt"}
	for i, n := range names {
		tt, ok := ParseType(n)
		if !ok || tt != Type(i+1) || tt.String() != n {
			t.Fatalf("%s: got %v %v", n, tt, ok)
		}
	}
	if _, ok := ParseType("text"); ok {
		t.Fatal("ParseType accepted text")
	}
	if Type(0).String() != "type(0)" || Type(9).Valid() {
		t.Fatal("unknown tags")
	}
}
