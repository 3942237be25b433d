package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// failingLog fails ReadLog once armed: a storage failure after the first
// response byte.
type failingLog struct {
	*memstore.Store
	armed       bool
	wholeWindow bool
}

func (f *failingLog) ReadLog(ctx context.Context, p string, after, through int64, fn func(*store.Commit) bool) error {
	if f.armed {
		return errors.New("disk on fire")
	}
	return f.Store.ReadLog(ctx, p, after, through, fn)
}

func (f *failingLog) ReadLogScoped(ctx context.Context, p, table, variable string, values []string, after, through int64, fn func(*store.Commit) bool) (int64, error) {
	if f.armed {
		return 0, errors.New("disk on fire")
	}
	return f.Store.ReadLogScoped(ctx, p, table, variable, values, after, through, fn)
}

// CheapScopedLog: with wholeWindow the engine reads short windows whole
// (ReadLog), as over DynamoDB, not through memstore's scope index.
func (f *failingLog) CheapScopedLog() bool { return !f.wholeWindow }

// §1.1 / §1.6: failures after the first byte go in-band as ERROR then
// END; completed parts of the response stand; failures before it are
// request errors with nothing written.
func TestInBandError(t *testing.T) {
	for _, whole := range []bool{true, false} {
		t.Run(fmt.Sprintf("whole=%v", whole), func(t *testing.T) { testInBandError(t, whole) })
	}
}

func testInBandError(t *testing.T, whole bool) {
	st := &failingLog{Store: memstore.New(), wholeWindow: whole}
	h := enginetest.New(t, st, memstore.NewSegments(), enginetest.Options{})
	grantAll(h, projects("p1"), "alice", "bob")
	a := h.Client("tenant", "alice", "a")
	wantApplied(t, a.Push("c1", up("tasks", "t1", a.Task("t1", "p1", "x", false), 0)))
	b := h.Client("tenant", "bob", "b")
	st.armed = true
	body, err := wire.Encode(b.Request([]wire.PushCommit{cmt("b1", up("tasks", "t2", b.Task("t2", "p1", "y", false), 0))},
		&wire.PullHeader{Accept: acceptRows}, []wire.Subscription{sub("boot", "tasks", "p1", -1), sub("inc", "tasks", "p1", 0)}))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rep, err := h.Engine.HandleSync(context.Background(), engine.Auth{Partition: "tenant", ActorID: "bob"}, body, engine.SyncOptions{}, &out)
	if err != nil {
		t.Fatalf("mid-stream failure returned as a request error: %v", err)
	}
	resp, err := wire.Decode(out.Bytes()) // the decoder enforces "ERROR then END"
	if err != nil {
		t.Fatal(err)
	}
	var kinds []wire.FrameType
	for _, f := range resp.Frames {
		kinds = append(kinds, f.Type())
	}
	last, ok := resp.Frames[len(resp.Frames)-1].(*wire.ErrorFrame)
	// An unexpected storage fault is sync.internal_error; this v2 client
	// gets it as its catalog's nearest code (syncerr.ForWire).
	if !ok || last.Code != string(syncerr.ForWire(syncerr.InternalError, wire.Version2)) || !last.Retryable || rep.ErrorCode != last.Code || last.Category == "" || last.Message != syncerr.InternalMessage {
		t.Fatalf("frames %v: want a trailing ERROR, report %+v", kinds, rep)
	}
	if r, ok := resp.Frames[1].(*wire.PushResult); !ok || r.Status != wire.PushApplied {
		t.Fatalf("the push before the failure must stand: %v", kinds)
	}
	if _, err := enginetest.ParseSections(resp); err == nil {
		t.Fatal("ParseSections must surface the in-band error")
	}
	// The bootstrap section before the failure completed.
	if st := resp.Frames[2].(*wire.SubStart); st.ID != "boot" || !st.Bootstrap {
		t.Fatalf("frames %v", kinds)
	}
	st.armed = false
	if got := head(t, h, "tenant").MaxCommitSeq; got != 2 {
		t.Fatalf("maxCommitSeq %d", got)
	}
}

// Request-level failures write nothing.
func TestRequestErrorsWriteNothing(t *testing.T) {
	h := newHarness(t, enginetest.Options{})
	h.Grants.Set("alice", projects("p1"))
	a := h.Client("tenant", "alice", "a")
	body, _ := wire.Encode(a.Request(nil, &wire.PullHeader{Accept: acceptRows}, []wire.Subscription{sub("s", "tasks", "p1", -1)}))
	for name, tc := range map[string]struct {
		auth engine.Auth
		body []byte
		code syncerr.Code
	}{
		"no partition":     {engine.Auth{ActorID: "alice"}, body, syncerr.AuthRequired},
		"no actor":         {engine.Auth{Partition: "tenant"}, body, syncerr.AuthRequired},
		"not SSP2":         {engine.Auth{Partition: "tenant", ActorID: "alice"}, []byte("hello"), syncerr.InvalidRequest},
		"truncated":        {engine.Auth{Partition: "tenant", ActorID: "alice"}, body[:len(body)-1], syncerr.InvalidRequest},
		"response message": {engine.Auth{Partition: "tenant", ActorID: "alice"}, responseBytes(t), syncerr.InvalidRequest},
	} {
		var out bytes.Buffer
		_, err := h.Engine.HandleSync(context.Background(), tc.auth, tc.body, engine.SyncOptions{}, &out)
		if enginetest.ErrCode(err) != tc.code || out.Len() != 0 {
			t.Fatalf("%s: %v with %d bytes written, want %s and nothing", name, err, out.Len(), tc.code)
		}
	}
}

func responseBytes(t *testing.T) []byte {
	b, err := wire.Encode(&wire.Message{WireVersion: wire.Version2, Kind: wire.KindResponse, Frames: []wire.Frame{&wire.RespHeader{LogEpoch: "e"}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// §2.3: the idempotency key is (partition, clientId, clientCommitId): the
// same clientCommitId from another client, or in another partition, is
// another commit.
func TestIdempotencyKeyScope(t *testing.T) {
	h := newHarness(t, enginetest.Options{})
	grantAll(h, projects("p1"), "alice")
	a := h.Client("tenant", "alice", "a")
	a2 := h.Client("tenant", "alice", "a2")
	other := h.Client("tenant-2", "alice", "a")
	s1 := wantApplied(t, a.Push("same", up("tasks", "t1", a.Task("t1", "p1", "x", false), 0)))
	s2 := wantApplied(t, a2.Push("same", up("tasks", "t2", a2.Task("t2", "p1", "x", false), 0)))
	s3 := wantApplied(t, other.Push("same", up("tasks", "t1", other.Task("t1", "p1", "x", false), 0)))
	if s1 != 1 || s2 != 2 || s3 != 1 {
		t.Fatalf("commitSeqs %d %d %d: want per-partition sequences 1, 2 and 1", s1, s2, s3)
	}
}

// faultyRows fails GetRows with a plain (uncoded) storage error, the
// way a backend reports a timeout or a 5xx it could not classify.
type faultyRows struct {
	*memstore.Store
	armed bool
}

func (f *faultyRows) GetRows(ctx context.Context, p, table string, ids []string) (map[string]*store.Row, error) {
	if f.armed {
		return nil, errors.New("connection reset by peer")
	}
	return f.Store.GetRows(ctx, p, table, ids)
}

// Issue 9 item 11: a transient storage fault reaches the client as
// sync.internal_error, which is retryable, and nothing is recorded for
// the commit: the same push applies once storage recovers.
func TestStorageFaultIsRetryable(t *testing.T) {
	st := &faultyRows{Store: memstore.New()}
	h := enginetest.New(t, st, memstore.NewSegments(), enginetest.Options{})
	grantAll(h, projects("p1"), "alice")
	a := h.Client("tenant", "alice", "a")
	wantApplied(t, a.Push("c0", up("tasks", "t0", a.Task("t0", "p1", "x", false), 0)))
	st.armed = true
	resp, err := a.Send(a.Request([]wire.PushCommit{cmt("c1", up("tasks", "t1", a.Task("t1", "p1", "y", false), 0))}, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	// The push runs after the response header (§1.6), so the fault is
	// the in-band ERROR frame.
	last, ok := resp.Frames[len(resp.Frames)-1].(*wire.ErrorFrame)
	// A version-2 client receives sync.internal_error as its catalog's
	// retryable stand-in (syncerr.ForWire).
	if !ok || last.Code != string(syncerr.ForWire(syncerr.InternalError, wire.Version2)) || !last.Retryable {
		t.Fatalf("storage fault answered %+v; want a retryable sync.internal_error (v2 form)", resp.Frames[len(resp.Frames)-1])
	}
	st.armed = false
	wantApplied(t, a.Push("c1", up("tasks", "t1", a.Task("t1", "p1", "y", false), 0)))
}
