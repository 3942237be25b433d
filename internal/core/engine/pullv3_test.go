package engine_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// racyStore injects the storage races of the 0.21+ pull rules: pruning
// during the next commit-log read, and partition heads that lag behind
// what was committed (a store without read-after-write).
type racyStore struct {
	*memstore.Store
	pruneOnRead int64 // > 0: the next ReadLog first prunes through it
	touchLag    bool  // TouchPartition reports maxCommitSeq 0
	headLag     bool  // Head reports maxCommitSeq 0
	// wholeWindow: the engine reads short windows whole (ReadLog), as
	// over DynamoDB, instead of through memstore's scope index.
	wholeWindow bool
}

func (r *racyStore) CheapScopedLog() bool { return !r.wholeWindow }

func (r *racyStore) pruneFirst(ctx context.Context, p string) error {
	if h := r.pruneOnRead; h > 0 {
		r.pruneOnRead = 0
		if _, err := r.Store.Prune(ctx, p, h); err != nil {
			return err
		}
	}
	return nil
}

func (r *racyStore) ReadLog(ctx context.Context, p string, after, through int64, fn func(*store.Commit) bool) error {
	if err := r.pruneFirst(ctx, p); err != nil {
		return err
	}
	return r.Store.ReadLog(ctx, p, after, through, fn)
}

func (r *racyStore) ReadLogScoped(ctx context.Context, p, table, variable string, values []string, after, through int64, fn func(*store.Commit) bool) (int64, error) {
	if err := r.pruneFirst(ctx, p); err != nil {
		return 0, err
	}
	return r.Store.ReadLogScoped(ctx, p, table, variable, values, after, through, fn)
}

func (r *racyStore) TouchPartition(ctx context.Context, p string, now int64, epoch string) (store.Head, error) {
	h, err := r.Store.TouchPartition(ctx, p, now, epoch)
	if r.touchLag {
		h.MaxCommitSeq = 0
	}
	return h, err
}

func (r *racyStore) Head(ctx context.Context, p string) (store.Head, bool, error) {
	h, ok, err := r.Store.Head(ctx, p)
	if r.headLag {
		h.MaxCommitSeq = 0
	}
	return h, ok, err
}

func racyHarness(t *testing.T) (*enginetest.Harness, *racyStore) {
	st := &racyStore{Store: memstore.New()}
	h := enginetest.New(t, st, memstore.NewSegments(), enginetest.Options{})
	grantAll(h, projects("p1"), "alice")
	return h, st
}

// §4.6 (0.21+): when pruning crosses the cursor while the commit window is
// read, the subscription is answered reset — never an active section with
// the pruned commits silently missing, nor one followed by an error;
// whether the window is read whole or through the log's scope index.
func TestHorizonRecheckAfterWindowRead(t *testing.T) {
	for _, whole := range []bool{true, false} {
		for _, v := range []uint16{wire.Version2, wire.Version3} {
			t.Run(fmt.Sprintf("whole=%v/v%d", whole, v), func(t *testing.T) { testHorizonRecheck(t, v, whole) })
		}
	}
}

func testHorizonRecheck(t *testing.T, v uint16, whole bool) {
	h, st := racyHarness(t)
	st.wholeWindow = whole
	w := h.Client("tenant", "alice", "writer")
	for i, id := range []string{"t1", "t2", "t3", "t4", "t5"} {
		wantApplied(t, w.Push("c"+id, up("tasks", id, w.Task(id, "p1", "x", i%2 == 0), 0)))
	}
	c := h.ClientV(v, "tenant", "alice", "reader")
	st.pruneOnRead = 4 // the cursor is 2: commits 3 and 4 vanish mid-read
	resp, err := c.Send(c.Request(nil, &wire.PullHeader{Accept: acceptRows}, []wire.Subscription{sub("s", "tasks", "p1", 2)}))
	if err != nil {
		t.Fatalf("v%d: %v", v, err)
	}
	secs := enginetest.Sections(t, resp) // fails on an ERROR frame
	if len(secs) != 1 {
		t.Fatalf("v%d: %d sections", v, len(secs))
	}
	s := secs[0]
	if s.Start.Status != wire.SubReset || s.Start.ReasonCode != string(syncerr.CursorExpired) || len(s.Commits) != 0 || s.End.NextCursor != 2 {
		t.Fatalf("v%d: want reset/cursor_expired with no commits, got start %+v, %d commits, end %+v", v, s.Start, len(s.Commits), s.End)
	}
	if st.pruneOnRead != 0 {
		t.Fatalf("v%d: the log was never read", v)
	}

	// Without pruning, the same read serves the window whole.
	resp, err = c.Send(c.Request(nil, &wire.PullHeader{Accept: acceptRows}, []wire.Subscription{sub("s", "tasks", "p1", 4)}))
	if err != nil {
		t.Fatal(err)
	}
	secs = enginetest.Sections(t, resp)
	if s := secs[0]; s.Start.Status != wire.SubActive || len(s.Commits) != 1 || s.Commits[0].CommitSeq != 5 || s.End.NextCursor != 5 {
		t.Fatalf("v%d: plain incremental: %+v %d %+v", v, s.Start, len(s.Commits), s.End)
	}
}

// §7 preamble (0.21+): a pull in the same request as a push sees the
// commits that push was answered with, even when the head read at the
// start of the request lags (here: a replayed commit applied before);
// when storage still cannot show the commit, the request fails with
// sync.storage_stale_read instead of a pull that misses the client's own
// write.
func TestReadAfterWriteInCombinedRound(t *testing.T) {
	h, st := racyHarness(t)
	v2 := h.ClientV(wire.Version2, "tenant", "alice", "dev")
	seq := wantApplied(t, v2.Push("c1", up("tasks", "t1", v2.Task("t1", "p1", "x", false), 0)))
	v3 := h.ClientV(wire.Version3, "tenant", "alice", "dev") // same device, upgraded

	round := func(c *enginetest.Client) *wire.Message {
		t.Helper()
		resp, err := c.Send(c.Request([]wire.PushCommit{cmt("c1", del("tasks", "t1"))},
			&wire.PullHeader{Accept: acceptRows}, []wire.Subscription{sub("s", "tasks", "p1", 0)}))
		if err != nil {
			t.Fatalf("v%d round: %v", c.Version, err)
		}
		return resp
	}

	st.touchLag = true
	resp := round(v3)
	res := resp.Frames[1].(*wire.PushResult)
	if res.Status != wire.PushCached || res.CommitSeq.Value != seq {
		t.Fatalf("replay: %+v", res)
	}
	secs := enginetest.Sections(t, resp)
	if s := secs[0]; s.Start.Status != wire.SubActive || len(s.Commits) != 1 || s.Commits[0].CommitSeq != seq || s.End.NextCursor != seq {
		t.Fatalf("the pull does not see commit %d accepted in its own request: %+v, %d commits, %+v", seq, s.Start, len(s.Commits), s.End)
	}

	st.headLag = true
	for _, c := range []*enginetest.Client{v3, v2} {
		resp := round(c)
		ef, ok := resp.Frames[len(resp.Frames)-1].(*wire.ErrorFrame)
		want := syncerr.ForWire(syncerr.StorageStaleRead, c.Version)
		if !ok || ef.Code != string(want) {
			t.Fatalf("v%d: want an ERROR %s, frames %+v", c.Version, want, resp.Frames)
		}
		for _, f := range resp.Frames {
			if _, ok := f.(*wire.SubStart); ok {
				t.Fatalf("v%d: a section was served from a stale read", c.Version)
			}
		}
	}
}

// countingLog counts the commits the engine takes from the log.
type countingLog struct {
	*memstore.Store
	read int
}

func (c *countingLog) ReadLog(ctx context.Context, p string, after, through int64, fn func(*store.Commit) bool) error {
	return c.Store.ReadLog(ctx, p, after, through, func(cm *store.Commit) bool { c.read++; return fn(cm) })
}

func (c *countingLog) ReadLogScoped(ctx context.Context, p, table, variable string, values []string, after, through int64, fn func(*store.Commit) bool) (int64, error) {
	return c.Store.ReadLogScoped(ctx, p, table, variable, values, after, through, func(cm *store.Commit) bool { c.read++; return fn(cm) })
}

// Over a store whose scope index is cheap (memstore), an incremental pull
// of a short window takes from the log only the commits of its scope
// values (§3.1 inverted index), not every commit of the window: with all
// clients writing into one partition, a pull's cost follows what it
// delivers, not the partition's write rate.
func TestShortWindowReadsThroughScopeIndex(t *testing.T) {
	st := &countingLog{Store: memstore.New()}
	h := enginetest.New(t, st, memstore.NewSegments(), enginetest.Options{})
	grantAll(h, projects("p1", "p2", "p3", "p4"), "alice")
	w := h.Client("tenant", "alice", "writer")
	for i := range 20 {
		id := fmt.Sprintf("t%02d", i)
		wantApplied(t, w.Push("c"+id, up("tasks", id, w.Task(id, fmt.Sprintf("p%d", 1+i%4), "x", false), 0)))
	}
	c := h.Client("tenant", "alice", "reader")
	st.read = 0
	resp, err := c.Send(c.Request(nil, &wire.PullHeader{Accept: acceptRows}, []wire.Subscription{sub("s", "tasks", "p1", 0)}))
	if err != nil {
		t.Fatal(err)
	}
	s := enginetest.Sections(t, resp)[0]
	if s.Start.Status != wire.SubActive || len(s.Commits) != 5 || s.End.NextCursor != 20 {
		t.Fatalf("pull of p1: %+v, %d commits, %+v; want active, 5 commits, cursor 20", s.Start, len(s.Commits), s.End)
	}
	for i, cm := range s.Commits {
		if want := int64(1 + 4*i); cm.CommitSeq != want {
			t.Errorf("commit %d: seq %d, want %d", i, cm.CommitSeq, want)
		}
	}
	if st.read != 5 {
		t.Errorf("the pull took %d commits from the log for a window of 20 with 5 of its scope, want 5", st.read)
	}
}
