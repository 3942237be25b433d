package wire

import (
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

func detailsMsg(pr pb, d pb) []byte {
	return resp(fr(FrameRespHeader, pRespHeader), fr(FramePushResult, pr), fr(FramePushResultDetails, d))
}

func TestPushResultDetailsGrammar(t *testing.T) {
	ok := DetailEntry{OpIndex: 2, DetailsJSON: `{"reason":"outside_schedule"}`}
	mustDecode(t, detailsMsg(pushResult("c1", PushRejected, 2), detailsFrame("c1", ok)))
	// Details may be followed by more results and subscriptions, and
	// unknown frames are transparent to the pairing.
	mustDecode(t, resp(fr(FrameRespHeader, pRespHeader), fr(FramePushResult, pushResult("c1", PushRejected, 2)), fr(0x17, nil),
		fr(FramePushResultDetails, detailsFrame("c1", ok)), fr(FramePushResult, pushResult("c2", PushApplied, 0)),
		fr(FrameSubStart, pSubStart), fr(FrameSubEnd, pSubEnd)))

	bad := []struct {
		name string
		in   []byte
	}{
		{"without PUSH_RESULT", resp(fr(FrameRespHeader, pRespHeader), fr(FramePushResultDetails, detailsFrame("c1", ok)))},
		{"after LEASE only", resp(fr(FrameRespHeader, pRespHeader), fr(FrameLease, pLease), fr(FramePushResultDetails, detailsFrame("c1", ok)))},
		{"after applied result", detailsMsg(pushResult("c1", PushApplied, 0), detailsFrame("c1", DetailEntry{0, `{"reason":"x"}`}))},
		{"clientCommitId mismatch", detailsMsg(pushResult("c1", PushRejected, 2), detailsFrame("c2", ok))},
		{"opIndex not an error record", detailsMsg(pushResult("c1", PushRejected, 1), detailsFrame("c1", ok))},
		{"twice", resp(fr(FrameRespHeader, pRespHeader), fr(FramePushResult, pushResult("c1", PushRejected, 2)),
			fr(FramePushResultDetails, detailsFrame("c1", ok)), fr(FramePushResultDetails, detailsFrame("c1", ok)))},
		{"not immediately after its result", resp(fr(FrameRespHeader, pRespHeader), fr(FramePushResult, pushResult("c1", PushRejected, 2)),
			fr(FramePushResult, pushResult("c2", PushRejected, 2)), fr(FramePushResultDetails, detailsFrame("c1", ok)))},
		{"inside a subscription", resp(fr(FrameRespHeader, pRespHeader), fr(FramePushResult, pushResult("c1", PushRejected, 2)),
			fr(FrameSubStart, pSubStart), fr(FramePushResultDetails, detailsFrame("c1", ok)), fr(FrameSubEnd, pSubEnd))},
		{"no entries", detailsMsg(pushResult("c1", PushRejected, 2), detailsFrame("c1"))},
		{"negative opIndex", detailsMsg(pushResult("c1", PushRejected, -1), detailsFrame("c1", DetailEntry{-1, `{"reason":"x"}`}))},
		{"duplicate opIndex", detailsMsg(pb{}.str("c1").u8(3).u8(0).u32(2).i32(2).u8(3).str("a").str("b").u8(0).i32(3).u8(3).str("a").str("b").u8(0),
			detailsFrame("c1", ok, ok))},
		{"trailing byte", detailsMsg(pushResult("c1", PushRejected, 2), detailsFrame("c1", ok).u8(0))},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) { rejects(t, tc.in, syncerr.InvalidRequest) })
	}
}

func TestDetailsJSONShape(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	paths := func(n int) string {
		var b strings.Builder
		b.WriteString(`{"fieldPaths":[`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`"f` + strings.Repeat("x", i) + `"`)
		}
		b.WriteString(`]}`)
		return b.String()
	}
	refs := func(n int) string {
		var b strings.Builder
		b.WriteString(`{"references":{`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`"k` + strings.Repeat("x", i) + `":"v"`)
		}
		b.WriteString(`}}`)
		return b.String()
	}
	valid := []string{
		`{"reason":"outside_schedule_day"}`,
		`{"requiredAction":"edit_fields"}`,
		` { "fieldPaths" : [ "start" , "schedule.day_of_week", "_x.Y9" ] } `,
		`{"references":{"ticket-id":"T-1 9","b.c":"é \u00e9 \"q\""}}`,
		`{"references":{"k":"\ud83d\ude00"}}`,
		`{"reason":"a.b-c_d","requiredAction":"x1","fieldPaths":["a"],"references":{"z":"1","a":"2"}}`,
		`{"reason":"` + long(96) + `"}`,
		`{"fieldPaths":["` + long(160) + `"]}`,
		`{"references":{"` + long(64) + `":"` + long(256) + `"}}`,
		`{"references":{"k":"` + strings.Repeat("é", 128) + `"}}`,
		paths(32),
		refs(16),
		`{"reason":"\u0061"}`,
		// The limit applies to the normalized encoding, not the raw text.
		`{"reason":"x"` + strings.Repeat(" ", 5000) + `}`,
	}
	for _, s := range valid {
		if err := validateDetailsJSON(s); err != nil {
			t.Errorf("valid %s: %v", s, err)
			continue
		}
		mustDecode(t, detailsMsg(pushResult("c1", PushRejected, 0), detailsFrame("c1", DetailEntry{0, s})))
	}
	invalid := []struct{ name, s string }{
		{"not JSON", `{reason:"x"}`},
		{"array", `["reason"]`},
		{"scalar", `"x"`},
		{"empty object", `{}`},
		{"unknown member", `{"reason":"x","message":"hi"}`},
		{"duplicate member", `{"reason":"x","reason":"y"}`},
		{"trailing data", `{"reason":"x"} {}`},
		{"trailing comma", `{"reason":"x",}`},
		{"null member", `{"reason":null}`},
		{"number member", `{"reason":5}`},
		{"empty reason", `{"reason":""}`},
		{"uppercase token", `{"reason":"Outside"}`},
		{"token starting with digit", `{"reason":"1x"}`},
		{"token double separator", `{"requiredAction":"a__b"}`},
		{"token trailing separator", `{"requiredAction":"a-"}`},
		{"token too long", `{"reason":"` + long(97) + `"}`},
		{"empty fieldPaths", `{"fieldPaths":[]}`},
		{"too many fieldPaths", paths(33)},
		{"duplicate fieldPath", `{"fieldPaths":["a","a"]}`},
		{"path with empty segment", `{"fieldPaths":["a..b"]}`},
		{"path leading dot", `{"fieldPaths":[".a"]}`},
		{"path trailing dot", `{"fieldPaths":["a."]}`},
		{"path segment starts with digit", `{"fieldPaths":["a.1b"]}`},
		{"path with dash", `{"fieldPaths":["a-b"]}`},
		{"empty path", `{"fieldPaths":[""]}`},
		{"path too long", `{"fieldPaths":["` + long(161) + `"]}`},
		{"non-string path", `{"fieldPaths":[1]}`},
		{"empty references", `{"references":{}}`},
		{"too many references", refs(17)},
		{"duplicate reference key", `{"references":{"a":"1","a":"2"}}`},
		{"bad reference key", `{"references":{"A":"1"}}`},
		{"reference key too long", `{"references":{"` + long(65) + `":"1"}}`},
		{"empty reference value", `{"references":{"a":""}}`},
		{"reference value too long", `{"references":{"a":"` + long(257) + `"}}`},
		{"reference value bytes over 256", `{"references":{"k":"` + strings.Repeat("é", 129) + `"}}`},
		{"untrimmed reference value", `{"references":{"a":" x"}}`},
		{"untrimmed reference value (NBSP)", `{"references":{"a":"x\u00a0"}}`},
		{"untrimmed reference value (BOM)", "{\"references\":{\"a\":\"\uFEFFx\"}}"},
		{"control character", `{"references":{"a":"x\ny"}}`},
		{"C1 control character", `{"references":{"a":"x\u0085y"}}`},
		{"DEL", `{"references":{"a":"x\u007fy"}}`},
		{"non-string reference value", `{"references":{"a":1}}`},
		{"over 4096 bytes normalized", `{"references":{"a":"` + strings.Repeat(`\\`, 128) + `"` + refsTail(15) + `}}`},
	}
	for _, tc := range invalid {
		t.Run(tc.name, func(t *testing.T) {
			if err := validateDetailsJSON(tc.s); err == nil {
				t.Fatalf("accepted %s", tc.s)
			}
			rejects(t, detailsMsg(pushResult("c1", PushRejected, 0), detailsFrame("c1", DetailEntry{0, tc.s})), syncerr.InvalidRequest)
		})
	}
}

// refsTail adds n more references with 256-byte values that need escaping
// (so the normalized text, not the raw text, decides the size limit).
func refsTail(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(`,"r` + strings.Repeat("x", i) + `":"` + strings.Repeat(`\"`, 128) + `"`)
	}
	return b.String()
}

func TestNormalizeDetailsJSON(t *testing.T) {
	got, err := NormalizeDetailsJSON(` {"references":{"z":"1","a":"q\"\u00e9"}, "requiredAction":"fix","fieldPaths":["b","a"],"reason":"r"} `)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"fieldPaths":["b","a"],"reason":"r","requiredAction":"fix","references":{"a":"q\"é","z":"1"}}`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	// A lone surrogate escape is legal JSON; JSON.stringify writes it back
	// as an escape, and so does the normalizer.
	got, err = NormalizeDetailsJSON(`{"references":{"a":"x\uD800y"}}`)
	if err != nil || got != `{"references":{"a":"x\ud800y"}}` {
		t.Fatalf("lone surrogate: %s %v", got, err)
	}
	// Render shows the normalized object under "details".
	m := mustDecode(t, detailsMsg(pushResult("c1", PushRejected, 0), detailsFrame("c1", DetailEntry{0, `{ "reason" : "r" }`})))
	r, err := Render(m)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(r), `{"type":"PUSH_RESULT_DETAILS","clientCommitId":"c1","entries":[{"opIndex":0,"details":{"reason":"r"}}]}`) {
		t.Fatalf("rendering %s", r)
	}
}
