package conformancehost

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
)

// TestReferenceOptions: the newer driver's table references (§6.11) and
// limits.maxCascadeOperationsPerCommit are accepted and validated; the
// engine enforces them (engine TestB19References).
func TestReferenceOptions(t *testing.T) {
	now := int64(1750000000000)
	mk := func(schemaJSON, limits string) *controlError {
		o := &createOptions{Schema: json.RawMessage(schemaJSON), Partition: "part-1", NowMs: &now}
		if limits != "" {
			if err := json.Unmarshal([]byte(limits), &o.Limits); err != nil {
				t.Fatal(err)
			}
		}
		_, cerr := newInstance(t.Context(), "x", o, slog.New(slog.DiscardHandler), nil)
		return cerr
	}
	if cerr := mk(enginetest.ReferenceSchema, `{"maxCascadeOperationsPerCommit": 3}`); cerr != nil {
		t.Fatalf("reference schema with a cascade cap: %+v", cerr)
	}
	if cerr := mk(enginetest.ReferenceSchema, `{"maxCascadeOperationsPerCommit": 0}`); cerr == nil {
		t.Errorf("a zero cascade cap was accepted")
	}
	bad := strings.Replace(enginetest.ReferenceSchema, `"onDelete": "SET NULL"`, `"onDelete": "SET DEFAULT"`, 1)
	if cerr := mk(bad, ""); cerr == nil {
		t.Errorf("ON DELETE SET DEFAULT was accepted")
	}
}
