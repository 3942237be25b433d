package yjs

import (
	"bytes"
	"errors"
	"testing"
)

// enc builds update bytes by hand from the format's pieces: a byte is
// itself, a string is a length-prefixed UTF-8 string, an int a varuint.
func enc(parts ...any) []byte {
	w := &writer{}
	for _, p := range parts {
		switch v := p.(type) {
		case byte:
			w.byte(v)
		case int:
			w.varUint(uint64(v))
		case string:
			w.str(v)
		case []byte:
			w.raw(v)
		default:
			panic("enc: unsupported part")
		}
	}
	return w.buf
}

// jsonRoot is an update of client 5: one ContentJSON item holding 1 and
// "x" (clocks 0 and 1) in the root type "a", and no deletions.
var jsonRoot = enc(
	1,       // one client
	1, 5, 0, // one struct, client 5, first clock 0
	byte(refJSON), 1, "a", // no origins: parent is the root "a"
	2, "1", `"x"`, // two JSON elements
	0, // empty delete set
)

func TestMergeJoinsSplitJSONContent(t *testing.T) {
	// The same two clocks as two items: the second names the first as its
	// origin, as Yjs encodes the right half of a split item.
	split := enc(
		1,
		2, 5, 0,
		byte(refJSON), 1, "a", 1, "1",
		byte(refJSON|flagOrigin), 5, 0, 1, `"x"`,
		0,
	)
	for _, in := range [][][]byte{{split}, {split, jsonRoot}, {jsonRoot, split}, {jsonRoot}} {
		got, err := Merge(in...)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, jsonRoot) {
			t.Errorf("Merge(%x) = %x, want the joined item %x", in, got, jsonRoot)
		}
	}
}

func TestMergeFillsHolesAndUnionsDeletes(t *testing.T) {
	// Client 7 has clocks 0 and 3 in different updates; the merge keeps
	// both with a Skip of 2 between, and unions the overlapping deletes.
	a := enc(1, 1, 7, 0, byte(refAny), 1, "t", 1, byte(anyNull), 1, 7, 1, 10, 1)
	b := enc(1, 1, 7, 3, byte(refAny), 1, "t", 1, byte(anyTrue), 1, 7, 1, 11, 2)
	want := enc(
		1,
		3, 7, 0,
		byte(refAny), 1, "t", 1, byte(anyNull),
		byte(infoSkip), 2,
		byte(refAny), 1, "t", 1, byte(anyTrue),
		1, 7, 1, 10, 3, // deletes [10,11) and [11,13) join into [10,13)
	)
	for _, in := range [][][]byte{{a, b}, {b, a}} {
		got, err := Merge(in...)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("Merge = %x, want %x", got, want)
		}
	}
}

func TestMergeDropsDeletedContent(t *testing.T) {
	// Client 7 inserted "abc" into the root text "t" and deleted the "b":
	// the merge keeps "a" and "c" and holds the deleted clock as deleted
	// content, the right parts naming their left neighbours as origins.
	in := enc(1, 1, 7, 0, byte(refString), 1, "t", "abc", 1, 7, 1, 1, 1)
	want := enc(
		1,
		3, 7, 0,
		byte(refString), 1, "t", "a",
		byte(refDeleted|flagOrigin), 7, 0, 1,
		byte(refString|flagOrigin), 7, 1, "c",
		1, 7, 1, 1, 1,
	)
	got, err := Merge(in)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("Merge = %x, want %x", got, want)
	}
}

func TestMergeRejectsMalformed(t *testing.T) {
	cases := map[string][]byte{
		"empty":                   {},
		"truncated":               jsonRoot[:len(jsonRoot)-3],
		"struct count over input": enc(1, 200, 5, 0),
		"client count over input": enc(100),
		"zero-length GC":          enc(1, 1, 5, 0, byte(refGC), 0, 0),
		"unknown content":         enc(1, 1, 5, 0, byte(11), 1, "a", 0),
		"content ref 10 item":     enc(1, 1, 5, 0, byte(10|flagOrigin), 5, 0, 0),
		"unknown type ref":        enc(1, 1, 5, 0, byte(refType), 1, "a", 7, 0),
		"invalid UTF-8 key":       enc(1, 1, 5, 0, byte(refString), 1, []byte{1, 0xff}, "x", 0),
		"invalid JSON":            enc(1, 1, 5, 0, byte(refJSON), 1, "a", 1, "{", 0),
		"unknown any tag":         enc(1, 1, 5, 0, byte(refAny), 1, "a", 1, byte(50), 0),
		"clock past 2^53":         enc(1, 1, 5, maxSafeInteger, byte(refGC), 2, 0),
		"varuint past 2^53":       enc(1, 1, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}),
		"deep any":                append(enc(1, 1, 5, 0, byte(refAny), 1, "a", 1), bytes.Repeat([]byte{anyArray, 1}, maxAnyDepth+2)...),
		"delete range past 2^53":  enc(0, 1, 5, 1, maxSafeInteger, 2),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Merge(jsonRoot, data)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("Merge = %v, want an error wrapping ErrMalformed", err)
			}
		})
	}
}

// FuzzYjsMerge: Merge never panics; what it accepts it merges the same
// way in either order, and its output merges to itself (§5.10.2).
func FuzzYjsMerge(f *testing.F) {
	f.Add(jsonRoot, enc(1, 2, 5, 0, byte(refJSON), 1, "a", 1, "1", byte(refJSON|flagOrigin), 5, 0, 1, `"x"`, 0))
	f.Add(enc(1, 1, 7, 0, byte(refString), 1, "t", "h\U0001F600i", 1, 7, 1, 1, 1),
		enc(1, 1, 7, 2, byte(refString|flagOrigin|flagRightOrigin), 7, 1, 7, 3, "\uFFFDi", 0))
	f.Add(enc(1, 3, 9, 0, byte(refGC), 2, byte(infoSkip), 3, byte(refType|flagParentSub), 0, 9, 0, "k", 1, 0),
		enc(2, 1, 9, 1, byte(refDeleted|flagOrigin), 9, 0, 4, 1, 3, 0, byte(refFormat), 1, "t", "b", "true", 0))
	f.Add(enc(1, 1, 4, 0, byte(refDoc), 0, 4, 9, "guid", byte(anyObject), 1, "k", byte(anyInteger), 0), []byte{0, 0})
	f.Fuzz(func(t *testing.T, a, b []byte) {
		ab, err := Merge(a, b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		ba, err := Merge(b, a)
		if err != nil {
			t.Fatalf("Merge(a, b) succeeded but Merge(b, a): %v", err)
		}
		if !bytes.Equal(ab, ba) {
			t.Fatalf("not commutative:\n ab %x\n ba %x", ab, ba)
		}
		again, err := Merge(ab)
		if err != nil {
			t.Fatalf("Merge of its own output: %v", err)
		}
		if !bytes.Equal(again, ab) {
			t.Fatalf("not idempotent:\n once  %x\n twice %x", ab, again)
		}
	})
}

// BenchmarkMergeManyStructs merges the densest input a row can hold: an
// update of about 392 KB (the engine's row limit) made of two-byte
// structs, with itself. B/op is the merger's worst-case memory per push.
func BenchmarkMergeManyStructs(b *testing.B) {
	const structs = 392 << 10 / 2
	w := &writer{}
	w.varUint(1)
	w.varUint(structs)
	w.varUint(3)
	w.varUint(0)
	for i := range structs {
		if i%2 == 0 {
			w.raw([]byte{refGC, 1})
		} else {
			w.raw([]byte{infoSkip, 1})
		}
	}
	w.varUint(0)
	update := w.buf
	b.SetBytes(int64(2 * len(update)))
	b.ReportAllocs()
	for range b.N {
		if _, err := Merge(update, update); err != nil {
			b.Fatal(err)
		}
	}
}
