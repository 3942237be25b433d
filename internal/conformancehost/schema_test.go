package conformancehost_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// The catalog's errors/schema-not-ready-refusal (§2.4, §10.2 of the
// wire-3 spec), through real bytes: once the driver declared a backfill
// checkpoint this engine did not declare, a bare pull is refused at the
// request level with sync.schema_not_ready and its fixed metadata
// (internal, retryable, retryLater, HTTP 503). A wire-2 client gets the
// retryable code its own catalog knows.
func TestSchemaNotReadyRefusal(t *testing.T) {
	e := newEnv(t)
	id := e.create("")
	e.call(id, "setAllowedScopes", nil, "actor-1", map[string][]string{"project_id": {"p1"}})
	e.call(id, "declareBackfillCheckpoint", nil, "tasks-projection")
	c := &client{e: e, id: id, cid: "client-1", actor: "actor-1"}

	for _, tc := range []struct {
		version uint16
		code    syncerr.Code
	}{
		{wire.Version3, syncerr.SchemaNotReady},
		{wire.Version2, syncerr.ForWire(syncerr.SchemaNotReady, wire.Version2)},
	} {
		m := &wire.Message{WireVersion: tc.version, Kind: wire.KindRequest, Frames: []wire.Frame{
			&wire.ReqHeader{ClientID: c.cid, SchemaVersion: 1},
			&wire.PullHeader{Accept: wire.AcceptInlineRows},
		}}
		body, err := wire.Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		st, hdr, b := c.post(body)
		var got struct {
			Code              string `json:"code"`
			Message           string `json:"message"`
			Category          string `json:"category"`
			Retryable         bool   `json:"retryable"`
			RecommendedAction string `json:"recommendedAction"`
		}
		if hdr.Get("Content-Type") != "application/json" || json.Unmarshal(b, &got) != nil {
			t.Fatalf("wire %d: not a JSON error: %d %s", tc.version, st, b)
		}
		if got.Code != string(tc.code) || !got.Retryable {
			t.Fatalf("wire %d: %d %s", tc.version, st, b)
		}
		if tc.version == wire.Version3 {
			if st != http.StatusServiceUnavailable || got.Category != "internal" || got.RecommendedAction != "retryLater" {
				t.Fatalf("wire 3 metadata: %d %s", st, b)
			}
		}
	}
	if got := e.callInt(id, "getMaxCommitSeq"); got != 0 {
		t.Fatalf("a refused request wrote: maxCommitSeq %d", got)
	}
}
