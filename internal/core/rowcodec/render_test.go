package rowcodec

import (
	"encoding/json"
	"math"
	"strconv"
	"testing"
)

func TestAppendFloatMatchesJavaScript(t *testing.T) {
	// Expected strings are what JavaScript's String(x) yields.
	cases := map[float64]string{
		0.1:                     "0.1",
		1e21:                    "1e+21",
		1e20:                    "100000000000000000000",
		1.2345678901234568e20:   "123456789012345680000",
		1e-7:                    "1e-7",
		1e-6:                    "0.000001",
		1.5e-7:                  "1.5e-7",
		math.Copysign(0, -1):    "0",
		5e-324:                  "5e-324",
		math.MaxFloat64:         "1.7976931348623157e+308",
		0.000001234:             "0.000001234",
		123.456:                 "123.456",
		100:                     "100",
		9007199254740992:        "9007199254740992",
		1.0 / 3:                 "0.3333333333333333",
		-1.5:                    "-1.5",
		0.125:                   "0.125",
		3.5:                     "3.5",
		-2.5e-10:                "-2.5e-10",
		1.7976931348623157e300:  "1.7976931348623156e+300",
		123456789012345678:      "123456789012345680",
		math.Inf(1):             "Infinity",
		math.Inf(-1):            "-Infinity",
		4.35:                    "4.35",
		0.30000000000000004:     "0.30000000000000004",
		2e-7:                    "2e-7",
		1e100:                   "1e+100",
		12345678901234567890123: "1.2345678901234568e+22",
	}
	for f, want := range cases {
		if got := string(AppendFloat(nil, f)); got != want {
			t.Errorf("%v: got %q, want %q", f, got, want)
		}
	}
	if got := string(AppendFloat(nil, math.NaN())); got != "NaN" {
		t.Errorf("NaN: %q", got)
	}
	// Every rendering parses back to the same value.
	for i := 0; i < 2000; i++ {
		f := math.Float64frombits(uint64(i)*0x9E3779B97F4A7C15 + 12345)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		g, err := strconv.ParseFloat(string(AppendFloat(nil, f)), 64)
		if err != nil || (g != f && !(f == 0 && g == 0)) {
			t.Fatalf("%v: round trip gave %v %v", f, g, err)
		}
	}
}

func TestValueString(t *testing.T) {
	cases := []struct {
		t    Type
		v    Value
		want string
	}{
		{TypeString, Value{Str: "abc"}, "abc"},
		{TypeInteger, Value{Int: -9007199254740991}, "-9007199254740991"},
		{TypeFloat, Value{Float: 2.5}, "2.5"},
		{TypeFloat, Value{Float: 3}, "3"},
		{TypeBoolean, Value{Bool: true}, "true"},
		{TypeBoolean, Value{}, "false"},
		{TypeJSON, Value{Str: `{"a":1}`}, `{"a":1}`},
		{TypeBytes, Value{Bytes: []byte{0, 1, 2}}, "AAEC"},
		{TypeString, Value{Null: true, Str: "x"}, ""},
	}
	for _, c := range cases {
		if got := c.v.String(c.t); got != c.want {
			t.Errorf("%s %+v: got %q want %q", c.t, c.v, got, c.want)
		}
	}
}

func TestRenderValue(t *testing.T) {
	cases := []struct {
		t    Type
		v    Value
		want string
	}{
		{TypeString, Value{Null: true}, `null`},
		{TypeString, Value{Str: "a\"\\\n\x01\u2028é"}, "\"a\\\"\\\\\\n\\u0001\u2028é\""},
		{TypeInteger, Value{Int: 9007199254740991}, `9007199254740991`},
		{TypeFloat, Value{Float: 0.125}, `0.125`},
		{TypeFloat, Value{Float: math.NaN()}, `null`},
		{TypeFloat, Value{Float: math.Inf(-1)}, `null`},
		{TypeFloat, Value{Float: 1e21}, `1e+21`},
		{TypeBoolean, Value{Bool: false}, `false`},
		{TypeJSON, Value{Str: ` { "a" : [1, "x y"] } `}, `{"a":[1,"x y"]}`},
		{TypeJSON, Value{Str: `"q\" \\"`}, `"q\" \\"`},
		{TypeJSON, Value{Str: `7`}, `7`},
		{TypeBlobRef, Value{Str: `{"blobId":"` + blobID + `","byteLength":3}`}, `{"blobId":"` + blobID + `","byteLength":3}`},
		{TypeBytes, Value{Bytes: []byte{0, 1, 2, 0xfe, 0xff}}, `"AAEC/v8="`},
		{TypeCRDT, Value{Bytes: nil}, `""`},
	}
	for _, c := range cases {
		got, err := RenderValue(nil, c.t, c.v)
		if err != nil || string(got) != c.want {
			t.Errorf("%s %+v: got %s (%v) want %s", c.t, c.v, got, err, c.want)
		}
		if !json.Valid(got) {
			t.Errorf("%s: invalid JSON %s", c.t, got)
		}
	}
	if _, err := RenderValue(nil, TypeJSON, Value{Str: "{"}); err == nil {
		t.Error("RenderValue accepted invalid json")
	}
	c := mustCodec(t, allTypes)
	out, err := c.RenderRow(nil, sampleRow())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil || len(m) != len(allTypes) {
		t.Fatalf("RenderRow output %s: %v", out, err)
	}
}
