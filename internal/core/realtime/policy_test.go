package realtime_test

import (
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/realtime"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// The delivery decision of §8.2/§8.3/§8.7, case by case.
func TestDecide(t *testing.T) {
	ok := realtime.SessionFacts{Registered: true}
	touched := func(n int) realtime.CommitFacts {
		return realtime.CommitFacts{Touched: true, DeltaBytes: n, MaxMessageBytes: 100}
	}
	for _, tc := range []struct {
		name string
		s    realtime.SessionFacts
		c    realtime.CommitFacts
		want realtime.Decision
	}{
		{"delta", ok, touched(50), realtime.Decision{Action: realtime.SendDelta}},
		{"not touched", ok, realtime.CommitFacts{DeltaBytes: 50, MaxMessageBytes: 100}, realtime.Decision{}},
		{"no registration matches", ok, touched(0), realtime.Decision{}},
		{"encoding failed", ok, touched(-1), realtime.Decision{Action: realtime.WakeUp, Reason: realtime.ReasonCatchupRequired}},
		{"suppressed", realtime.SessionFacts{Registered: true, Suppressed: true}, touched(50), realtime.Decision{Action: realtime.WakeUp, Reason: realtime.ReasonCatchupRequired}},
		{"mid-round", realtime.SessionFacts{Registered: true, InRound: true}, touched(50), realtime.Decision{Action: realtime.WakeUp, Reason: realtime.ReasonCatchupRequired}},
		{"too large", ok, touched(101), realtime.Decision{Action: realtime.WakeUp, Reason: realtime.ReasonDeltaTooLarge}},
		{"gap", ok, realtime.CommitFacts{Gap: true}, realtime.Decision{Action: realtime.WakeUp, Reason: realtime.ReasonCatchupRequired}},
		{"gap, unregistered", realtime.SessionFacts{}, realtime.CommitFacts{Gap: true}, realtime.Decision{}},
	} {
		if got := realtime.Decide(tc.s, tc.c); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	if d := realtime.AfterRefusedSend(); d.Action != realtime.WakeUp || d.Reason != realtime.ReasonCatchupRequired {
		t.Errorf("refused send: %+v", d)
	}
}

// Everything a delta depends on is in its cache key (item 8): the log
// epoch, the wire version, the schema version and the registrations.
func TestDeltaKey(t *testing.T) {
	regs := []engine.Registration{{ID: "s", Table: "tasks", Effective: engine.ScopeMap{"project_id": {"p1"}}}}
	other := []engine.Registration{{ID: "s", Table: "tasks", Effective: engine.ScopeMap{"project_id": {"p2"}}}}
	base := realtime.DeltaKey("e1", wire.Version3, 1, regs)
	if base != realtime.DeltaKey("e1", wire.Version3, 1, regs) {
		t.Fatal("the key is not deterministic")
	}
	for name, k := range map[string]string{
		"epoch":         realtime.DeltaKey("e2", wire.Version3, 1, regs),
		"wire version":  realtime.DeltaKey("e1", wire.Version2, 1, regs),
		"schema":        realtime.DeltaKey("e1", wire.Version3, 2, regs),
		"registrations": realtime.DeltaKey("e1", wire.Version3, 1, other),
	} {
		if k == base {
			t.Errorf("keys equal across a different %s", name)
		}
	}
}

// §8.1's input rule in one function for every transport.
func TestClassifyText(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want realtime.Verdict
	}{
		{`{"type":"ack","cursor":5}`, realtime.Handle},
		{`{"event":"presence","data":{"scopeKey":"project:p1","doc":{"a":1}}}`, realtime.Handle},
		{`{"event":"presence","data":{"scopeKey":"project:p1","doc":null}}`, realtime.Handle},
		{`{"event":"future-thing","data":1}`, realtime.Ignore},
		{`{"type":"future-thing"}`, realtime.Ignore},
		{`{"event":"heartbeat","data":{"timestamp":1}}`, realtime.Ignore},
		{`not json`, realtime.Ignore},
		{`[1,2]`, realtime.Ignore},
		{`{"type":"ack","cursor":1.5}`, realtime.Reject},
		{`{"type":"ack"}`, realtime.Reject},
		{`{"event":"presence","data":{"scopeKey":"project:p1","doc":"x"}}`, realtime.Reject},
		{`{"event":"presence","data":{"scopeKey":"project:p1"}}`, realtime.Reject},
		{`{"event":"presence","data":{"scopeKey":"project:p1","kind":"join","actorId":"a","clientId":"c","doc":{},"timestamp":1}}`, realtime.Reject},
	} {
		if _, v, err := realtime.ClassifyText([]byte(tc.in)); v != tc.want || (v == realtime.Reject) != (err != nil) {
			t.Errorf("%s: verdict %d err %v, want %d", tc.in, v, err, tc.want)
		}
	}
}
