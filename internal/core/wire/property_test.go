package wire

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// utf16Oracle compares by UTF-16 code units the slow, obvious way
// (canonjson tests CompareUTF16 itself against the same reference).
func utf16Oracle(a, b string) int {
	return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
}

// randKey draws short strings over the alphabet where UTF-16 and UTF-8
// byte order disagree: ASCII, U+E000–U+FFFF and supplementary planes.
func randKey(r *rand.Rand) string {
	alphabet := []rune{'a', 'b', 'z', 0x7F, 0xE9, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xE001, 0xFFFD, 0xFFFF, 0x10000, 0x10001, 0x1F600, 0x10FFFF}
	n := r.IntN(4)
	rs := make([]rune, n)
	for i := range rs {
		rs[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(rs)
}

// Encode sorts map keys in UTF-16 order; the decoder accepts that order
// and rejects the UTF-8 byte order wherever the two differ.
func TestMapOrderingProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	diverged := 0
	for range 3000 {
		seen := map[string]bool{}
		var keys []string
		for range 1 + r.IntN(6) {
			k := randKey(r)
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
		r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })

		var sm ScopeMap
		var st StoredScopes
		for _, k := range keys {
			sm = append(sm, ScopeEntry{Key: k, Values: []string{k}})
			st = append(st, StoredScope{Key: k, Value: k})
		}
		b, err := Encode(respMsg(rhdr(), &SubStart{ID: "s", Status: SubActive, EffectiveScopes: sm},
			&Commit{Tables: []string{"t"}, Changes: []Change{{Op: OpDelete, Scopes: st}}}, &SubEnd{}))
		if err != nil {
			t.Fatal(err)
		}
		m, err := Decode(b)
		if err != nil {
			t.Fatalf("decode of encoder output: %v", err)
		}
		want := slices.Clone(keys)
		slices.SortFunc(want, utf16Oracle)
		for i, e := range m.Frames[1].(*SubStart).EffectiveScopes {
			if e.Key != want[i] || e.Values[0] != want[i] {
				t.Fatalf("scope map order %d: %+q, want %+q", i, e.Key, want[i])
			}
		}
		for i, e := range m.Frames[2].(*Commit).Changes[0].Scopes {
			if e.Key != want[i] || e.Value != want[i] {
				t.Fatalf("stored scopes order %d: %+q, want %+q", i, e.Key, want[i])
			}
		}

		// Hand-encode the keys in UTF-8 byte order.
		byteOrder := slices.Clone(keys)
		sort.Strings(byteOrder)
		p := pb{}.str("s").u8(1).str("").u32(uint32(len(byteOrder)))
		for _, k := range byteOrder {
			p = p.str(k).u32(0)
		}
		in := resp(fr(FrameRespHeader, pRespHeader), fr(FrameSubStart, p.u8(0)), fr(FrameSubEnd, pSubEnd))
		if slices.Equal(byteOrder, want) {
			if _, err := Decode(in); err != nil {
				t.Fatalf("canonical order rejected: %v", err)
			}
		} else {
			diverged++
			_, err := Decode(in)
			if !syncerr.HasCode(err, syncerr.InvalidRequest) || !strings.Contains(err.Error(), "out of order") {
				t.Fatalf("byte-ordered keys %+q accepted or wrong error: %v", byteOrder, err)
			}
		}
	}
	if diverged == 0 {
		t.Fatal("no case where UTF-16 and byte order differ")
	}
	t.Logf("%d of 3000 maps had UTF-8 byte order ≠ UTF-16 order", diverged)
}

func TestI64Bounds(t *testing.T) {
	lease := func(v int64) []byte {
		return resp(fr(FrameRespHeader, pRespHeader), fr(FrameLease, pb{}.str("l").i64(v)))
	}
	for _, v := range []int64{0, 1, -1, MaxSafeInt, -MaxSafeInt, MaxSafeInt - 1} {
		m := mustDecode(t, lease(v))
		if got := m.Frames[1].(*Lease).ExpiresAtMs; got != v {
			t.Fatalf("decoded %d, want %d", got, v)
		}
	}
	for _, v := range []int64{MaxSafeInt + 1, -MaxSafeInt - 1, 1 << 62, -1 << 63, 1<<63 - 1} {
		rejects(t, lease(v), syncerr.InvalidRequest)
		if _, err := Encode(respMsg(rhdr(), &Lease{ExpiresAtMs: v})); err == nil {
			t.Fatalf("encoder accepted %d", v)
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	for range 10000 {
		v := int64(r.Uint64())
		inRange := v >= -MaxSafeInt && v <= MaxSafeInt
		_, err := Decode(lease(v))
		if inRange != (err == nil) {
			t.Fatalf("i64 %d: in range %t, decode error %v", v, inRange, err)
		}
	}
}

// json fields survive decode → encode byte for byte; any RFC 8259 value
// is accepted, anything else rejected.
func TestJSONVerbatim(t *testing.T) {
	docs := []string{
		`{"b":1,"a":2}`,
		" {\n\t\"a\" : [ 1 , 2.50 , -0 , 1e3 , 1E-2 ] ,\r\n \"b\" : { } } ",
		`{"a":"\u00e9\n\"\\\/","a":1}`,
		`"x"`, `7`, `-0.0`, `true`, `false`, `null`, `""`, `[]`, `{}`, ` 1 `,
		`"\ud800"`,
		`123456789012345678901234567890`,
		`{"emoji":"😀","bmp":"\uffff"}`,
		strings.Repeat("[", 20000) + strings.Repeat("]", 20000),
	}
	for _, d := range docs {
		for _, make := range []func(JSON) *Message{
			func(j JSON) *Message {
				return reqMsg(hdr(), pull(), &Subscription{ID: "s", Params: Some(j), BootstrapState: Some(j)})
			},
			func(j JSON) *Message {
				return respMsg(rhdr(), sub(), &SubEnd{BootstrapState: Some(j)}, &ErrorFrame{Details: Some(j)})
			},
		} {
			b, err := Encode(make(JSON(d)))
			if err != nil {
				t.Fatalf("%.40q: %v", d, err)
			}
			m := mustDecode(t, b)
			b2, _ := Encode(m)
			if !bytes.Equal(b, b2) || !bytes.Contains(b, []byte(d)) {
				t.Fatalf("%.40q not preserved", d)
			}
		}
	}
	bad := []string{``, ` `, `{`, `}`, `[1,]`, `{"a":1,}`, `{"a"}`, `{a:1}`, `'x'`, `01`, `1.`, `.5`, `+1`, `1e`, `--1`,
		`NaN`, `Infinity`, `tru`, `nulll`, `"\x"`, "\"a\x01\"", `"\u12"`, `1 2`, `{} {}`, `[1 2]`, "\uFEFF1", `"unterminated`,
		strings.Repeat("[", 100) + strings.Repeat("]", 99)}
	for _, d := range bad {
		in := req(fr(FrameReqHeader, pReqHeader), fr(FramePullHeader, pPull),
			fr(FrameSubscription, pb{}.str("s").str("t").u32(0).u8(1).str(d).i64(-1).u8(0)))
		rejects(t, in, syncerr.InvalidRequest)
	}
}
