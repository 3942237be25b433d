package engine_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

const floatScopeSchema = `{
  "version": 1,
  "tables": [
    {"name": "readings", "primaryKey": "id",
     "columns": [
       {"name": "id", "type": "string", "nullable": false},
       {"name": "level", "type": "float", "nullable": false}
     ],
     "scopes": ["level:{level}"]}
  ]
}`

// Issue 9 item 5: a float scope value is stored and authorized in the
// text ECMAScript's Number.prototype.toString gives (String(x) in JS),
// since grants and clients are written in that form. Expected strings
// are JavaScript's own outputs (node -e 'console.log(String(x))').
func TestFloatScopeValuesRenderLikeJavaScript(t *testing.T) {
	cases := []struct {
		v    float64
		want string
	}{
		{1000000, "1000000"},
		{123456789, "123456789"},
		{1e-7, "1e-7"},
		{-1e-7, "-1e-7"},
		{1.5e-7, "1.5e-7"},
		{123e-20, "1.23e-18"},
		{0.000001, "0.000001"},
		{0.00000125, "0.00000125"},
		{1e20, "100000000000000000000"},
		{1e21, "1e+21"},
		{123456789012345680000, "123456789012345680000"},
		{9007199254740992, "9007199254740992"},
		{0.30000000000000004, "0.30000000000000004"}, // 0.1 + 0.2 at run time
		{4.35, "4.35"},
		{-1.5, "-1.5"},
		{100, "100"},
		{5e-324, "5e-324"},
		{math.MaxFloat64, "1.7976931348623157e+308"},
		{math.Copysign(0, -1), "0"},
	}
	h := newHarness(t, enginetest.Options{Schema: floatScopeSchema})
	a := h.Client("tenant", "alice", "a")
	for i, tc := range cases {
		id := fmt.Sprintf("r%d", i)
		// The grant holds only the JavaScript text: the insert is
		// authorized exactly when the server renders the same text.
		h.Grants.Set("alice", engine.ScopeMap{"level": {tc.want}})
		row, err := a.Codec("readings").Codec.Append(nil, []rowcodec.Value{{Str: id}, {Float: tc.v}})
		if err != nil {
			t.Fatal(err)
		}
		if r := a.Push("c"+id, up("readings", id, row, 0)); r.Status != wire.PushApplied {
			t.Errorf("%v: insert under grant %q: %+v", tc.v, tc.want, r.Results)
			continue
		}
		rows, err := h.Store.GetRows(context.Background(), "tenant", "readings", []string{id})
		if err != nil || rows[id] == nil || len(rows[id].Scopes) != 1 {
			t.Fatalf("%v: stored row %+v %v", tc.v, rows[id], err)
		}
		if got := rows[id].Scopes[0].Value; got != tc.want {
			t.Errorf("%v: stored scope %q, JavaScript renders %q", tc.v, got, tc.want)
		}
	}
}
