package engine_test

import (
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

func newHarness(t *testing.T, o enginetest.Options) *enginetest.Harness {
	return enginetest.New(t, memstore.New(), memstore.NewSegments(), o)
}

func sub(id, table, project string, cursor int64) wire.Subscription {
	return wire.Subscription{ID: id, Table: table, Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{project}}}, Cursor: cursor}
}

func TestPushThenBootstrapThenIncremental(t *testing.T) {
	h := newHarness(t, enginetest.Options{})
	h.Grants.Set("alice", engine.ScopeMap{"project_id": {"p1"}})
	h.Grants.Set("bob", engine.ScopeMap{"project_id": {"p1"}})
	a := h.Client("tenant", "alice", "a")
	b := h.Client("tenant", "bob", "b")

	res := a.Push("c1", enginetest.Upsert("tasks", "t1", a.Task("t1", "p1", "write spec", false), 0))
	if res.Status != wire.PushApplied || !res.CommitSeq.Present || res.CommitSeq.Value != 1 {
		t.Fatalf("push: %+v", res)
	}
	resp, err := b.Send(b.Request(nil, &wire.PullHeader{Accept: b.Accept}, []wire.Subscription{sub("s", "tasks", "p1", -1)}))
	if err != nil {
		t.Fatal(err)
	}
	secs := enginetest.Sections(t, resp)
	if len(secs) != 1 || !secs[0].Start.Bootstrap || len(secs[0].Segments) != 1 {
		t.Fatalf("bootstrap sections: %+v", secs)
	}
	if got := secs[0].End.NextCursor; got != 1 || secs[0].End.BootstrapState.Present {
		t.Fatalf("bootstrap end: %+v", secs[0].End)
	}
	a.Push("c2", enginetest.Upsert("tasks", "t1", a.Task("t1", "p1", "write spec v2", true), 1))
	resp, err = b.Send(b.Request(nil, &wire.PullHeader{Accept: b.Accept}, []wire.Subscription{sub("s", "tasks", "p1", 1)}))
	if err != nil {
		t.Fatal(err)
	}
	secs = enginetest.Sections(t, resp)
	if len(secs[0].Commits) != 1 || secs[0].Commits[0].Changes[0].RowVersion.Value != 2 || secs[0].End.NextCursor != 2 {
		t.Fatalf("incremental: %+v %+v", secs[0].Commits, secs[0].End)
	}
	// Replay is cached with the original commitSeq.
	res = a.Push("c2", enginetest.Upsert("tasks", "t1", a.Task("t1", "p1", "write spec v2", true), 1))
	if res.Status != wire.PushCached || res.CommitSeq.Value != 2 {
		t.Fatalf("replay: %+v", res)
	}
}
