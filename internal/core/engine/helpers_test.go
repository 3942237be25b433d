package engine_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/segment"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// Accept masks used across the suite.
const (
	acceptRows     = wire.AcceptInlineRows | wire.AcceptExternalRows
	acceptInline   = wire.AcceptInlineRows
	acceptExternal = wire.AcceptExternalRows
)

var (
	up  = enginetest.Upsert
	del = enginetest.Delete
	cmt = enginetest.Commit
)

func pullHdr(accept uint8) wire.PullHeader { return wire.PullHeader{Accept: accept} }

func p1Scopes(projects ...string) wire.ScopeMap {
	return enginetest.Scopes("project_id", projects...)
}

// grantAll gives every named actor the same allowed scopes.
func grantAll(h *enginetest.Harness, m engine.ScopeMap, actors ...string) {
	for _, a := range actors {
		h.Grants.Set(a, m)
	}
}

func projects(ids ...string) engine.ScopeMap { return engine.ScopeMap{"project_id": ids} }

// taskWith encodes a tasks row with a priority.
func taskWith(t testing.TB, c *enginetest.Client, id, project, title string, done bool, prio int64) []byte {
	t.Helper()
	b, err := c.Codec("tasks").Codec.Append(nil, []rowcodec.Value{{Str: id}, {Str: project}, {Str: title}, {Bool: done}, {Int: prio}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decodeTask decodes a tasks row payload.
func decodeTask(t testing.TB, c *enginetest.Client, b []byte) []rowcodec.Value {
	t.Helper()
	v, err := c.Codec("tasks").Codec.Decode(b, nil)
	if err != nil {
		t.Fatalf("decode task: %v", err)
	}
	return v
}

// mustPushAll sends commits in one request and fails on a request error.
func mustPushAll(t testing.TB, c *enginetest.Client, commits ...wire.PushCommit) []*wire.PushResult {
	t.Helper()
	res, err := c.PushCommits(commits...)
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	return res
}

func mustPull(t testing.TB, c *enginetest.Client, hdr wire.PullHeader, subs ...wire.Subscription) []*enginetest.Section {
	t.Helper()
	secs, err := c.Pull(hdr, subs...)
	if err != nil {
		t.Fatalf("pull: %v", err)
	}
	if len(secs) != len(subs) {
		t.Fatalf("%d sections for %d subscriptions", len(secs), len(subs))
	}
	return secs
}

func wantApplied(t testing.TB, r *wire.PushResult) int64 {
	t.Helper()
	if r.Status != wire.PushApplied || !r.CommitSeq.Present {
		t.Fatalf("commit %s: want applied, got status %d results %+v", r.ClientCommitID, r.Status, r.Results)
	}
	for i, op := range r.Results {
		if op.OpIndex != int32(i) || op.Status != wire.OpApplied {
			t.Fatalf("commit %s: result %d = %+v", r.ClientCommitID, i, op)
		}
	}
	return r.CommitSeq.Value
}

// wantRejected asserts a rejected result with exactly one record at opIndex
// with the given status and code, and returns it.
func wantRejected(t testing.TB, r *wire.PushResult, opIndex int32, st wire.OpResultStatus, code syncerr.Code) wire.OpResult {
	t.Helper()
	if r.Status != wire.PushRejected || r.CommitSeq.Present || len(r.Results) != 1 {
		t.Fatalf("commit %s: want rejected with one record, got status %d seq %+v results %+v", r.ClientCommitID, r.Status, r.CommitSeq, r.Results)
	}
	got := r.Results[0]
	if got.OpIndex != opIndex || got.Status != st || got.Code != string(code) {
		t.Fatalf("commit %s: want op %d status %d %s, got %+v", r.ClientCommitID, opIndex, st, code, got)
	}
	return got
}

func wantCode(t testing.TB, err error, code syncerr.Code) {
	t.Helper()
	if got := enginetest.ErrCode(err); got != code {
		t.Fatalf("want request error %s, got %v", code, err)
	}
}

func head(t testing.TB, h *enginetest.Harness, partition string) store.Head {
	t.Helper()
	hd, ok, err := h.Store.Head(context.Background(), partition)
	if err != nil || !ok {
		t.Fatalf("head: %v %v", ok, err)
	}
	return hd
}

// logSeqs lists the commitSeqs stored in the log.
func logSeqs(t testing.TB, h *enginetest.Harness, partition string) []int64 {
	t.Helper()
	var out []int64
	err := h.Store.ReadLog(context.Background(), partition, -1, 1<<62, func(c *store.Commit) bool {
		out = append(out, c.Seq)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func wantRows(t testing.TB, want map[string]enginetest.RowState, got map[string]enginetest.RowState, what string) {
	t.Helper()
	if d := enginetest.DiffRows(want, got); d != "" {
		t.Fatalf("%s differs from server rows:\n%s", what, d)
	}
}

func sameBytes(a, b []byte) bool { return bytes.Equal(a, b) }

// projectRow encodes a projects row.
func projectRow(t testing.TB, c *enginetest.Client, id, name string) []byte {
	t.Helper()
	b, err := c.Codec("projects").Codec.Append(nil, []rowcodec.Value{{Str: id}, {Str: name}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decodeSegment(b []byte) (*segment.Segment, error) { return segment.Decode(b) }

// sameOpResult compares two result records field by field.
func sameOpResult(a, b wire.OpResult) bool {
	return a.OpIndex == b.OpIndex && a.Status == b.Status && a.Code == b.Code && a.Message == b.Message &&
		a.ServerVersion == b.ServerVersion && bytes.Equal(a.ServerRow, b.ServerRow) && a.Retryable == b.Retryable
}
