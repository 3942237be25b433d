package engine_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// Every response is encoded in its request's wire version (§1.2, §9 of
// both specs): version 3 like version 2 for epochs and RESP_HEADER, version
// 1 without them. (The harness also checks the version of every response.)
func TestResponseInRequestVersion(t *testing.T) {
	h := newHarness(t, enginetest.Options{})
	grantAll(h, projects("p1"), "alice")
	for _, v := range []uint16{wire.Version1, wire.Version2, wire.Version3} {
		c := h.ClientV(v, "tenant", "alice", "dev-"+string(rune('0'+v)))
		if v >= wire.Version2 && c.Epoch == "" {
			t.Fatalf("v%d: no epoch acquired", v)
		}
		m := c.Request(nil, &wire.PullHeader{Accept: acceptRows}, []wire.Subscription{sub("s", "tasks", "p1", -1)})
		body, err := wire.Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if _, err := h.Engine.HandleSync(context.Background(), engine.Auth{Partition: "tenant", ActorID: "alice"}, body, engine.SyncOptions{}, &out); err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		raw := out.Bytes()
		if got := binary.LittleEndian.Uint16(raw[4:6]); got != v {
			t.Fatalf("v%d request answered with wire version %d", v, got)
		}
		resp, err := wire.Decode(raw)
		if err != nil {
			t.Fatalf("v%d response: %v", v, err)
		}
		hdr := resp.Frames[0].(*wire.RespHeader)
		if (hdr.LogEpoch != "") != (v >= wire.Version2) || hdr.ResetRequired {
			t.Fatalf("v%d RESP_HEADER %+v", v, hdr)
		}
		if secs := enginetest.Sections(t, resp); len(secs) != 1 || secs[0].End == nil {
			t.Fatalf("v%d: sections %+v", v, secs)
		}
	}
	// A v3 epoch acquisition (no logEpoch) is answered like v2: resetRequired.
	c := h.ClientV(wire.Version3, "tenant-new", "alice", "fresh")
	if c.Epoch == "" {
		t.Fatal("v3 epoch acquisition failed")
	}
}

// storeOutcome records a rejected outcome the way the engine stores it
// (a PUSH_RESULT wrapped in a response of the given wire version).
func storeOutcome(t *testing.T, h *enginetest.Harness, clientID, commitID string, version uint16, res wire.PushResult) {
	t.Helper()
	res.ClientCommitID = commitID
	res.Status = wire.PushRejected
	b, err := wire.Encode(&wire.Message{WireVersion: version, Kind: wire.KindResponse, Frames: []wire.Frame{&wire.RespHeader{}, &res}})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Store.PutRejection(context.Background(), "tenant", clientID, commitID, store.Outcome{Result: b, RecordedAtMs: 1}, store.WriterCheck{}); err != nil {
		t.Fatal(err)
	}
}

// A stored outcome is replayed in the requesting client's version: a
// version-2 client gets codes its catalog knows and no conflictColumns; a
// version-3 client gets the outcome as stored. Outcomes stored at version
// 1 (before version 3 was served) still replay; new ones are stored at
// version 3 so conflictColumns survive.
func TestOutcomeReplayPerVersion(t *testing.T) {
	h := newHarness(t, enginetest.Options{})
	grantAll(h, projects("p1"), "alice")
	v2 := h.ClientV(wire.Version2, "tenant", "alice", "dev")
	v3 := h.ClientV(wire.Version3, "tenant", "alice", "dev") // the same app, upgraded
	wantApplied(t, v2.Push("seed", up("tasks", "t1", v2.Task("t1", "p1", "x", false), 0)))

	storeOutcome(t, h, "dev", "gone", wire.Version3, wire.PushResult{Results: []wire.OpResult{
		{OpIndex: 0, Status: wire.OpError, Code: string(syncerr.RowDeleted), Message: "deleted"}}})
	storeOutcome(t, h, "dev", "conflict", wire.Version3, wire.PushResult{Results: []wire.OpResult{
		{OpIndex: 0, Status: wire.OpConflict, Code: string(syncerr.VersionConflict), Message: "moved", ServerVersion: 1,
			ServerRow: v2.Task("t1", "p1", "x", false), ConflictColumns: []byte{0x04}}}})
	storeOutcome(t, h, "dev", "old", wire.Version1, wire.PushResult{Results: []wire.OpResult{
		{OpIndex: 0, Status: wire.OpError, Code: string(syncerr.UnknownTable), Message: "no table"}}})

	// Any operation: the key is taken, so the stored outcome answers.
	op := del("tasks", "t1")
	for _, tc := range []struct {
		c        *enginetest.Client
		id, code string
		cols     []byte
	}{
		{v2, "gone", string(syncerr.RowMissing), nil},
		{v3, "gone", string(syncerr.RowDeleted), nil},
		{v2, "conflict", string(syncerr.VersionConflict), nil},
		{v3, "conflict", string(syncerr.VersionConflict), []byte{0x04}},
		{v2, "old", string(syncerr.UnknownTable), nil},
		{v3, "old", string(syncerr.UnknownTable), nil},
	} {
		r := tc.c.Push(tc.id, op)
		if r.Status != wire.PushRejected || len(r.Results) != 1 {
			t.Fatalf("v%d %s: %+v", tc.c.Version, tc.id, r)
		}
		if got := r.Results[0]; got.Code != tc.code || !bytes.Equal(got.ConflictColumns, tc.cols) {
			t.Fatalf("v%d %s: code %s conflictColumns % x, want %s % x", tc.c.Version, tc.id, got.Code, got.ConflictColumns, tc.code, tc.cols)
		}
	}
	if got := head(t, h, "tenant").MaxCommitSeq; got != 1 {
		t.Fatalf("a replay applied something: maxCommitSeq %d", got)
	}

	// New outcomes are stored at wire version 3, whoever pushed them.
	wantApplied(t, v2.Push("fresh", up("tasks", "t2", v2.Task("t2", "p1", "y", false), 0)))
	o, err := h.Store.GetOutcome(context.Background(), "tenant", "dev", "fresh", h.Clock.Now())
	if err != nil || o == nil {
		t.Fatalf("outcome: %v", err)
	}
	if got := binary.LittleEndian.Uint16(o.Result[4:6]); got != wire.Version3 {
		t.Fatalf("outcome stored at wire version %d, want 3", got)
	}
	r := v3.Push("fresh", op)
	if r.Status != wire.PushCached || !r.CommitSeq.Present || r.CommitSeq.Value != 2 {
		t.Fatalf("v3 replay of a v2 push: %+v", r)
	}
}

// Request-level errors (§10.1 JSON, returned before the first byte) and
// in-band ERROR frames carry only codes of the client's catalog.
func TestErrorCodesForVersion2Clients(t *testing.T) {
	for _, v := range []uint16{wire.Version1, wire.Version2, wire.Version3} {
		st := &failingStore{failingLog: failingLog{Store: memstore.New()}}
		h := enginetest.New(t, st, memstore.NewSegments(), enginetest.Options{})
		grantAll(h, projects("p1"), "alice")
		seed := h.Client("tenant", "alice", "seed")
		wantApplied(t, seed.Push("seed", up("tasks", "t1", seed.Task("t1", "p1", "x", false), 0)))
		c := h.ClientV(v, "tenant", "alice", "dev")
		st.armed = true
		resp, err := c.Send(c.Request(nil, &wire.PullHeader{Accept: acceptRows}, []wire.Subscription{sub("s", "tasks", "p1", 0)}))
		if err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		ef, ok := resp.Frames[len(resp.Frames)-1].(*wire.ErrorFrame)
		if !ok {
			t.Fatalf("v%d: no ERROR frame", v)
		}
		want := syncerr.ForWire(syncerr.InternalError, v)
		if ef.Code != string(want) {
			t.Fatalf("v%d: ERROR code %s, want %s", v, ef.Code, want)
		}
		en := syncerr.New(want, "x").Entry()
		if ef.Category != en.Category || ef.Retryable != en.Retryable || ef.RecommendedAction != en.RecommendedAction {
			t.Fatalf("v%d: ERROR metadata %+v is not that of %s", v, ef, want)
		}
		if ef.Message != syncerr.InternalMessage {
			t.Fatalf("v%d: ERROR message %q leaks the fault", v, ef.Message)
		}

		// Before the first byte: a returned (HTTP JSON) error, same mapping.
		st.armed = false
		st.touchFails = true
		_, err = c.Send(c.Request(nil, &wire.PullHeader{Accept: acceptRows}, []wire.Subscription{sub("s", "tasks", "p1", 0)}))
		se := syncerr.As(err)
		if se == nil || se.Code != want || se.Message != syncerr.InternalMessage {
			t.Fatalf("v%d: request error %v, want %s", v, err, want)
		}
	}
}

// failingStore also fails TouchPartition (before any byte is written).
type failingStore struct {
	failingLog
	touchFails bool
}

func (f *failingStore) TouchPartition(ctx context.Context, p string, now int64, epoch string) (store.Head, error) {
	if f.touchFails {
		return store.Head{}, errors.New("connection reset")
	}
	return f.Store.TouchPartition(ctx, p, now, epoch)
}
