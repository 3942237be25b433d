package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// §6.3: a clientCommitId repeated within one request is processed once;
// later occurrences replay the persisted result (cached / rejected).
func TestPushDuplicateCommitIDInRequest(t *testing.T) {
	h := newHarness(t, enginetest.Options{})
	grantAll(h, projects("p1"), "alice")
	a := h.Client("tenant", "alice", "a")
	ok := cmt("dup", up("tasks", "t1", a.Task("t1", "p1", "first", false), 0))
	other := cmt("dup", up("tasks", "t2", a.Task("t2", "p1", "different body, same key", false), 0))
	res := mustPushAll(t, a, ok, cmt("mid", up("tasks", "t3", a.Task("t3", "p1", "x", false), 0)), other, ok)
	seq := wantApplied(t, res[0])
	wantApplied(t, res[1])
	for _, r := range res[2:] {
		if r.Status != wire.PushCached || r.CommitSeq.Value != seq || len(r.Results) != 1 || !sameOpResult(r.Results[0], res[0].Results[0]) {
			t.Fatalf("duplicate: %+v, want cached replay of %+v", r, res[0])
		}
	}
	if _, ok := h.ServerRows("tenant", "tasks")["t2"]; ok {
		t.Fatal("a duplicate key applied a second body")
	}
	if got := logSeqs(t, h, "tenant"); len(got) != 2 {
		t.Fatalf("log %v, want 2 commits", got)
	}
	// A rejected first occurrence replays as rejected, identical.
	bad := cmt("rej", up("tasks", "t1", a.Task("t1", "p1", "stale", false), 7))
	res = mustPushAll(t, a, bad, cmt("rej", up("tasks", "t9", a.Task("t9", "p1", "would apply", false), 0)))
	first := wantRejected(t, res[0], 0, wire.OpConflict, syncerr.VersionConflict)
	second := wantRejected(t, res[1], 0, wire.OpConflict, syncerr.VersionConflict)
	if !sameOpResult(first, second) {
		t.Fatalf("rejected replay differs: %+v vs %+v", first, second)
	}
	if _, ok := h.ServerRows("tenant", "tasks")["t9"]; ok {
		t.Fatal("duplicate of a rejected commit applied")
	}
}

// §6.2 baseVersion = 0 insert race: the loser gets a conflict carrying the
// winner's row when it may see it, sync.forbidden when it may not.
func TestPushInsertRace(t *testing.T) {
	h := newHarness(t, enginetest.Options{})
	h.Grants.Set("alice", projects("p1", "p2"))
	h.Grants.Set("bob", projects("p1"))
	a := h.Client("tenant", "alice", "a")
	b := h.Client("tenant", "bob", "b")
	wantApplied(t, a.Push("a1", up("tasks", "x", a.Task("x", "p1", "alice first", false), 0)))
	conf := wantRejected(t, b.Push("b1", up("tasks", "x", b.Task("x", "p1", "bob second", false), 0)), 0, wire.OpConflict, syncerr.VersionConflict)
	stored := h.ServerRows("tenant", "tasks")["x"]
	if conf.ServerVersion != 1 || !sameBytes(conf.ServerRow, stored.Payload) {
		t.Fatalf("conflict %+v does not carry the winner's row", conf)
	}
	// The winner's row lives in p2, which bob does not hold: no leak.
	wantApplied(t, a.Push("a2", up("tasks", "y", a.Task("y", "p2", "secret", false), 0)))
	for i, op := range []wire.Operation{
		up("tasks", "y", b.Task("y", "p1", "bob claims p1", false), 0),
		up("tasks", "y", b.Task("y", "p1", "bob claims p1", false), 1),
		up("tasks", "y", b.Task("y", "p1", "bob lww", false), -1),
		del("tasks", "y"),
	} {
		rec := wantRejected(t, b.Push(fmt.Sprintf("b-y%d", i), op), 0, wire.OpError, syncerr.Forbidden)
		if rec.ServerVersion != 0 || len(rec.ServerRow) != 0 || strings.Contains(rec.Message, "secret") {
			t.Fatalf("forbidden record leaks the row: %+v", rec)
		}
	}
}

// §6.2: baseVersion ≠ 0 on an absent row is sync.row_missing — after the
// payload passes authorization (§3.4: the payload is the authorization
// row of an absent-row upsert).
func TestPushRowMissing(t *testing.T) {
	h := newHarness(t, enginetest.Options{})
	h.Grants.Set("alice", projects("p1"))
	a := h.Client("tenant", "alice", "a")
	rec := wantRejected(t, a.Push("c1", up("tasks", "nope", a.Task("nope", "p1", "x", false), 3)), 0, wire.OpError, syncerr.RowMissing)
	if rec.Retryable {
		t.Fatal("row_missing must not be retryable")
	}
	wantRejected(t, a.Push("c2", up("tasks", "nope", a.Task("nope", "p2", "x", false), 3)), 0, wire.OpError, syncerr.Forbidden)
}

// §6.2: LWW (no baseVersion) increments from the current version.
func TestPushLastWriteWins(t *testing.T) {
	h := newHarness(t, enginetest.Options{})
	h.Grants.Set("alice", projects("p1"))
	a := h.Client("tenant", "alice", "a")
	for i := 1; i <= 4; i++ {
		wantApplied(t, a.Push(fmt.Sprint(i), up("tasks", "t", a.Task("t", "p1", fmt.Sprint(i), false), -1)))
		if v := h.ServerRows("tenant", "tasks")["t"].Version; v != int64(i) {
			t.Fatalf("after %d LWW writes version %d", i, v)
		}
	}
	// Two upserts of one row in one commit: each increments.
	wantApplied(t, a.Push("two", up("tasks", "t", a.Task("t", "p1", "a", false), 4), up("tasks", "t", a.Task("t", "p1", "b", false), 5)))
	if v := h.ServerRows("tenant", "tasks")["t"].Version; v != 6 {
		t.Fatalf("version %d after two in-commit upserts", v)
	}
}

// §6.2/§3.4: deleting an absent row is applied with no authorization
// check and no emitted change. The engine still appends the commit (it
// carries zero changes): the commitSeq is real and pulls advance over it
// without a COMMIT frame. A commit mixing it with real work emits only
// the real changes.
func TestPushAbsentRowDelete(t *testing.T) {
	h := newHarness(t, enginetest.Options{})
	h.Grants.Set("alice", projects("p1"))
	h.Grants.Set("bob", projects("p1"))
	a := h.Client("tenant", "alice", "a")
	obs := h.Client("tenant", "bob", "b").NewReplica("s", "tasks", p1Scopes("p1"))
	hdr := pullHdr(acceptRows)
	if err := obs.Sync(hdr, 3); err != nil {
		t.Fatal(err)
	}
	seq := wantApplied(t, a.Push("d1", del("tasks", "ghost")))
	var commit *store.Commit
	_ = h.Store.ReadLog(context.Background(), "tenant", seq-1, seq, func(c *store.Commit) bool { commit = c; return false })
	if commit == nil || len(commit.Changes) != 0 {
		t.Fatalf("absent-row delete commit %+v: want a commit with no changes", commit)
	}
	sec, err := obs.Pull(hdr)
	if err != nil {
		t.Fatal(err)
	}
	if len(sec.Commits) != 0 || sec.End.NextCursor != seq {
		t.Fatalf("observer: %d commits, nextCursor %d; want none and %d", len(sec.Commits), sec.End.NextCursor, seq)
	}
	// No authorization check: even an actor without any grant applies it.
	h.Grants.FailWith(engine.ErrNoGrant)
	wantApplied(t, a.Push("d2", del("tasks", "ghost2")))
	h.Grants.FailWith(nil)
	// Mixed with a real change: one COMMIT carrying only the upsert.
	seq = wantApplied(t, a.Push("d3", del("tasks", "ghost"), up("tasks", "t1", a.Task("t1", "p1", "x", false), 0), del("tasks", "ghost3")))
	sec, err = obs.Pull(hdr)
	if err != nil {
		t.Fatal(err)
	}
	if len(sec.Commits) != 1 || sec.Commits[0].CommitSeq != seq || len(sec.Commits[0].Changes) != 1 || sec.Commits[0].Changes[0].RowID != "t1" {
		t.Fatalf("mixed commit delivered as %+v", sec.Commits)
	}
	// Deleting the same row twice in one commit: one change.
	seq = wantApplied(t, a.Push("d4", del("tasks", "t1"), del("tasks", "t1")))
	sec, _ = obs.Pull(hdr)
	if len(sec.Commits) != 1 || sec.Commits[0].CommitSeq != seq || len(sec.Commits[0].Changes) != 1 || sec.Commits[0].Changes[0].Op != wire.OpDelete {
		t.Fatalf("double delete delivered as %+v", sec.Commits)
	}
}

// §3.4 step 2: an update authorizes the STORED row, never the payload;
// step 5: scope columns keep their stored values (no re-homing by push).
func TestPushAuthorizesStoredRowAndStripsScopes(t *testing.T) {
	h := newHarness(t, enginetest.Options{})
	h.Grants.Set("admin", projects("*"))
	h.Grants.Set("alice", projects("p1"))
	h.Grants.Set("both", projects("p1", "p2"))
	admin := h.Client("tenant", "admin", "admin")
	wantApplied(t, admin.Push("seed", up("tasks", "in-p2", admin.Task("in-p2", "p2", "x", false), 0), up("tasks", "in-p1", admin.Task("in-p1", "p1", "y", false), 0)))
	a := h.Client("tenant", "alice", "a")
	// Payload claims p1 (allowed) but the stored row is in p2.
	wantRejected(t, a.Push("c1", up("tasks", "in-p2", a.Task("in-p2", "p1", "hijack", false), 1)), 0, wire.OpError, syncerr.Forbidden)
	wantRejected(t, a.Push("c2", up("tasks", "in-p2", a.Task("in-p2", "p1", "hijack", false), -1)), 0, wire.OpError, syncerr.Forbidden)
	wantRejected(t, a.Push("c3", del("tasks", "in-p2")), 0, wire.OpError, syncerr.Forbidden)
	// Insert into an unheld scope, and with an empty scope value.
	wantRejected(t, a.Push("c4", up("tasks", "new", a.Task("new", "p2", "x", false), 0)), 0, wire.OpError, syncerr.Forbidden)
	wantRejected(t, a.Push("c5", up("tasks", "new", a.Task("new", "", "x", false), -1)), 0, wire.OpError, syncerr.Forbidden)
	if v := h.ServerRows("tenant", "tasks")["in-p2"]; v.Version != 1 {
		t.Fatalf("forbidden writes changed the row: v%d", v.Version)
	}
	// Re-homing: "both" holds p1 and p2 and moves in-p1 to p2 by payload.
	bc := h.Client("tenant", "both", "both")
	sub2 := bc.NewReplica("s2", "tasks", p1Scopes("p2"))
	sub1 := bc.NewReplica("s1", "tasks", p1Scopes("p1"))
	hdr := pullHdr(acceptRows)
	if _, err := enginetest.Exchange(bc, hdr, nil, sub1, sub2); err != nil {
		t.Fatal(err)
	}
	for _, base := range []int64{1, -1} {
		wantApplied(t, bc.Push(fmt.Sprint("move", base), up("tasks", "in-p1", bc.Task("in-p1", "p2", "moved?", true), base)))
	}
	stored := h.ServerRows("tenant", "tasks")["in-p1"]
	vals := decodeTask(t, bc, stored.Payload)
	if vals[1].Str != "p1" || vals[2].Str != "moved?" || stored.Version != 3 {
		t.Fatalf("stored row %v v%d: scope column must keep p1, other columns update", vals, stored.Version)
	}
	if _, err := enginetest.Exchange(bc, hdr, nil, sub1, sub2); err != nil {
		t.Fatal(err)
	}
	if len(sub2.LastSection.Commits) != 0 || len(sub1.LastSection.Commits) != 2 {
		t.Fatalf("the p2 subscription saw %d commits, p1 %d: scope migration by push", len(sub2.LastSection.Commits), len(sub1.LastSection.Commits))
	}
	for _, c := range sub1.LastSection.Commits {
		ch := c.Changes[0]
		if len(ch.Scopes) != 1 || ch.Scopes[0].Value != "p1" || decodeTask(t, bc, ch.Row.Value)[1].Str != "p1" {
			t.Fatalf("emitted change %+v not tagged with the stored scope", ch)
		}
	}
	// The projects table maps its scope to the primary key column: a
	// wildcard grant inserts any project.
	wantApplied(t, admin.Push("proj", up("projects", "p7", projectRow(t, admin, "p7", "Seven"), 0)))
	wantRejected(t, a.Push("proj-a", up("projects", "p8", projectRow(t, a, "p8", "Eight"), 0)), 0, wire.OpError, syncerr.Forbidden)
}

// §1.7 commit-level surface: unknown table and undecodable payloads reject
// only their commit; the batch continues.
func TestPushCommitLevelValidation(t *testing.T) {
	h := newHarness(t, enginetest.Options{})
	h.Grants.Set("alice", projects("p1"))
	a := h.Client("tenant", "alice", "a")
	good := a.Task("t1", "p1", "ok", false)
	res := mustPushAll(t, a,
		cmt("c1", up("tasks", "t0", a.Task("t0", "p1", "rolled back", false), 0), up("nope", "x", good, 0)),
		cmt("c2", up("tasks", "t1", good, 0)),
		cmt("c3", up("tasks", "t2", []byte{0xff, 0x00, 0x01}, 0)),
		cmt("c4", up("tasks", "t3", good, 0)), // payload key t1 ≠ rowId t3
		cmt("c5", up("tasks", "t4", a.Task("t4", "p1", "ok", false), 0), del("nope", "x")))
	wantRejected(t, res[0], 1, wire.OpError, syncerr.UnknownTable)
	wantApplied(t, res[1])
	wantRejected(t, res[2], 0, wire.OpError, syncerr.InvalidRequest)
	wantRejected(t, res[3], 0, wire.OpError, syncerr.InvalidRequest)
	wantRejected(t, res[4], 1, wire.OpError, syncerr.UnknownTable)
	rows := h.ServerRows("tenant", "tasks")
	if len(rows) != 1 || rows["t1"].Version != 1 {
		t.Fatalf("rows after the batch: %v", rows)
	}
}

// §6.1: the operation cap counts operations across all commits of the
// request; exceeding it is request-level and applies nothing.
func TestPushOperationCap(t *testing.T) {
	for _, tc := range []struct {
		limit, want int
	}{{0, engine.DefaultMaxOperations}, {3, 3}} {
		h := newHarness(t, enginetest.Options{Limits: engine.Limits{MaxOperations: tc.limit}})
		h.Grants.Set("alice", projects("p1"))
		a := h.Client("tenant", "alice", "a")
		build := func(total int, prefix string) []wire.PushCommit {
			var commits []wire.PushCommit
			for i := 0; i < total; {
				var ops []wire.Operation
				for j := 0; j < 2 && i < total; j, i = j+1, i+1 {
					id := fmt.Sprintf("%s%d", prefix, i)
					ops = append(ops, up("tasks", id, a.Task(id, "p1", "x", false), -1))
				}
				commits = append(commits, cmt(fmt.Sprintf("%s-c%d", prefix, len(commits)), ops...))
			}
			return commits
		}
		_, err := a.PushCommits(build(tc.want+1, "over")...)
		wantCode(t, err, syncerr.TooManyOperations)
		if n := len(h.ServerRows("tenant", "tasks")); n != 0 || head(t, h, "tenant").MaxCommitSeq != 0 {
			t.Fatalf("limit %d: %d rows applied by a capped request", tc.want, n)
		}
		res := mustPushAll(t, a, build(tc.want, "at")...)
		for _, r := range res {
			wantApplied(t, r)
		}
		if n := len(h.ServerRows("tenant", "tasks")); n != tc.want {
			t.Fatalf("at the cap: %d rows", n)
		}
	}
}

// §1.5: clientId actor binding and the reserved server-command prefix.
func TestPushClientIDRules(t *testing.T) {
	h := newHarness(t, enginetest.Options{})
	grantAll(h, projects("p1"), "alice", "mallory")
	a := h.Client("tenant", "alice", "shared")
	wantApplied(t, a.Push("c1", up("tasks", "t1", a.Task("t1", "p1", "x", false), 0)))
	m := h.Client("tenant", "mallory", "shared")
	_, err := m.PushCommits(cmt("c1", up("tasks", "t1", m.Task("t1", "p1", "steal", false), -1)))
	wantCode(t, err, syncerr.InvalidClientID)
	_, err = m.Pull(pullHdr(acceptRows), sub("s", "tasks", "p1", -1))
	wantCode(t, err, syncerr.InvalidClientID)
	// The same clientId in another partition is a different client.
	other := h.Client("tenant-2", "mallory", "shared")
	h.Grants.Set("mallory", projects("p1"))
	wantApplied(t, other.Push("c1", up("tasks", "t1", other.Task("t1", "p1", "mine", false), 0)))

	r := h.Client("tenant", "alice", `["remote-command","x"]`)
	_, err = r.PushCommits(cmt("c1", up("tasks", "t9", r.Task("t9", "p1", "x", false), 0)))
	wantCode(t, err, syncerr.InvalidClientID)
	_, err = r.Pull(pullHdr(acceptRows), sub("s", "tasks", "p1", -1))
	wantCode(t, err, syncerr.InvalidClientID)
	if _, ok := h.ServerRows("tenant", "tasks")["t9"]; ok {
		t.Fatal("reserved clientId applied a commit")
	}
}

// §1.6 schema floor: an unserved schemaVersion gets RESP_HEADER with both
// version fields and END, nothing processed.
func TestSchemaFloor(t *testing.T) {
	h := newHarness(t, enginetest.Options{})
	h.Grants.Set("alice", projects("p1"))
	for _, version := range []uint16{wire.Version1, wire.Version2} {
		for _, sv := range []int32{2, 99} {
			c := h.Client("tenant", "alice", fmt.Sprintf("a%d-%d", version, sv))
			c.Version = version
			task := c.Task("t1", "p1", "x", false)
			c.Schema = sv
			m := c.Request([]wire.PushCommit{cmt("c1", up("tasks", "t1", task, 0))}, &wire.PullHeader{Accept: acceptRows}, []wire.Subscription{sub("s", "tasks", "p1", -1)})
			resp, err := c.Send(m)
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Frames) != 1 {
				t.Fatalf("v%d schema %d: %d frames, want RESP_HEADER only", version, sv, len(resp.Frames))
			}
			hdr := resp.Frames[0].(*wire.RespHeader)
			if !hdr.RequiredSchemaVersion.Present || !hdr.LatestSchemaVersion.Present || hdr.LatestSchemaVersion.Value != 1 || hdr.RequiredSchemaVersion.Value != 1 {
				t.Fatalf("schema floor header %+v", hdr)
			}
			if version == wire.Version2 && (hdr.LogEpoch == "" || hdr.ResetRequired) {
				t.Fatalf("v2 schema floor header %+v: want epoch, no reset", hdr)
			}
		}
	}
	if n := head(t, h, "tenant").MaxCommitSeq; n != 0 {
		t.Fatalf("schema floor applied %d commits", n)
	}
	// A served version is answered without requiredSchemaVersion.
	c := h.Client("tenant", "alice", "ok")
	resp, err := c.Send(c.Request(nil, &wire.PullHeader{Accept: acceptRows}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if hdr := resp.Frames[0].(*wire.RespHeader); hdr.RequiredSchemaVersion.Present || !hdr.LatestSchemaVersion.Present {
		t.Fatalf("served version header %+v", hdr)
	}
}

// §2.1 / §1.5 epochs: acquisition, mismatch, acquisition with commits,
// rotation.
func TestEpochRules(t *testing.T) {
	h := newHarness(t, enginetest.Options{})
	h.Grants.Set("alice", projects("p1"))
	a := h.Client("tenant", "alice", "a")
	epoch := a.Epoch
	// Re-acquisition returns the same epoch, header only.
	acq := *a
	acq.Epoch = ""
	resp, err := acq.Send(acq.Request(nil, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	if hdr := resp.Frames[0].(*wire.RespHeader); len(resp.Frames) != 1 || !hdr.ResetRequired || hdr.LogEpoch != epoch {
		t.Fatalf("acquisition: %d frames %+v", len(resp.Frames), hdr)
	}
	// Acquisition carrying PUSH_COMMIT is an error.
	_, err = acq.Send(acq.Request([]wire.PushCommit{cmt("c1", up("tasks", "t1", a.Task("t1", "p1", "x", false), 0))}, nil, nil))
	wantCode(t, err, syncerr.InvalidRequest)
	// Wrong epoch: reset response, nothing processed.
	wrong := *a
	wrong.Epoch = "not-the-epoch"
	resp, err = wrong.Send(wrong.Request([]wire.PushCommit{cmt("c1", up("tasks", "t1", a.Task("t1", "p1", "x", false), 0))}, &wire.PullHeader{Accept: acceptRows}, []wire.Subscription{sub("s", "tasks", "p1", -1)}))
	if err != nil {
		t.Fatal(err)
	}
	if hdr := resp.Frames[0].(*wire.RespHeader); len(resp.Frames) != 1 || !hdr.ResetRequired || hdr.LogEpoch != epoch {
		t.Fatalf("wrong epoch: %d frames %+v", len(resp.Frames), hdr)
	}
	if head(t, h, "tenant").MaxCommitSeq != 0 {
		t.Fatal("a reset response applied a push")
	}
	// A v1 client works before rotation.
	v1 := &enginetest.Client{H: h, Partition: "tenant", Actor: "alice", ID: "old", Version: wire.Version1, Schema: 1, Accept: acceptRows}
	wantApplied(t, v1.Push("v1c", up("tasks", "t1", v1.Task("t1", "p1", "x", false), 0)))
	wantApplied(t, a.Push("c2", up("tasks", "t2", a.Task("t2", "p1", "x", false), 0)))
	if err := h.Store.RotateEpoch(context.Background(), "tenant", "epoch-2", h.Clock.Now()); err != nil {
		t.Fatal(err)
	}
	_, err = v1.Send(v1.Request([]wire.PushCommit{cmt("v1d", up("tasks", "t3", v1.Task("t3", "p1", "x", false), 0))}, nil, nil))
	wantCode(t, err, syncerr.ClientWireUnsupported)
	_, err = v1.Pull(pullHdr(acceptRows), sub("s", "tasks", "p1", -1))
	wantCode(t, err, syncerr.ClientWireUnsupported)
	resp, err = a.Send(a.Request([]wire.PushCommit{cmt("c3", up("tasks", "t3", a.Task("t3", "p1", "x", false), 0))}, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	if hdr := resp.Frames[0].(*wire.RespHeader); len(resp.Frames) != 1 || !hdr.ResetRequired || hdr.LogEpoch != "epoch-2" {
		t.Fatalf("old epoch after rotation: %d frames %+v", len(resp.Frames), hdr)
	}
	if _, ok := h.ServerRows("tenant", "tasks")["t3"]; ok {
		t.Fatal("push under the old epoch applied")
	}
	// After the reset the client replays its outbox under the new epoch:
	// the idempotency record of c2 survived, so it is cached.
	a.Epoch = "epoch-2"
	if r := a.Push("c2", up("tasks", "t2", a.Task("t2", "p1", "x", false), 0)); r.Status != wire.PushCached {
		t.Fatalf("replay after rotation: %+v", r)
	}
	// The rotation dropped client records: the actor binding starts over.
	// v1 is still refused (epoch validation stays required).
	_, err = v1.PushCommits(cmt("v1e", del("tasks", "t1")))
	wantCode(t, err, syncerr.ClientWireUnsupported)
}

// §1.1 routes: /pull refuses PUSH_COMMIT, /push refuses PULL_HEADER.
func TestRouteModes(t *testing.T) {
	h := newHarness(t, enginetest.Options{})
	h.Grants.Set("alice", projects("p1"))
	a := h.Client("tenant", "alice", "a")
	push := []wire.PushCommit{cmt("c1", up("tasks", "t1", a.Task("t1", "p1", "x", false), 0))}
	_, err := a.SendMode(a.Request(push, nil, nil), engine.ModePull)
	wantCode(t, err, syncerr.InvalidRequest)
	_, err = a.SendMode(a.Request(push, &wire.PullHeader{Accept: acceptRows}, []wire.Subscription{sub("s", "tasks", "p1", -1)}), engine.ModePull)
	wantCode(t, err, syncerr.InvalidRequest)
	_, err = a.SendMode(a.Request(nil, &wire.PullHeader{Accept: acceptRows}, []wire.Subscription{sub("s", "tasks", "p1", -1)}), engine.ModePush)
	wantCode(t, err, syncerr.InvalidRequest)
	_, err = a.SendMode(a.Request(push, &wire.PullHeader{Accept: acceptRows}, nil), engine.ModePush)
	wantCode(t, err, syncerr.InvalidRequest)
	if head(t, h, "tenant").MaxCommitSeq != 0 {
		t.Fatal("a refused route applied a push")
	}
	resp, err := a.SendMode(a.Request(push, nil, nil), engine.ModePush)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := resp.Frames[1].(*wire.PushResult); !ok || r.Status != wire.PushApplied {
		t.Fatalf("push route: %+v", resp.Frames)
	}
	resp, err = a.SendMode(a.Request(nil, &wire.PullHeader{Accept: acceptRows}, []wire.Subscription{sub("s", "tasks", "p1", -1)}), engine.ModePull)
	if err != nil {
		t.Fatal(err)
	}
	if secs := enginetest.Sections(t, resp); len(secs) != 1 || secs[0].Start.Status != wire.SubActive {
		t.Fatalf("pull route: %+v", secs)
	}
}

// §6.3: an unreadable stored outcome answers sync.idempotency_cache_miss
// (retryable, rejected, not persisted) instead of re-applying.
func TestPushIdempotencyCacheMiss(t *testing.T) {
	st := &unreadableOutcomes{Store: memstore.New()}
	h := enginetest.New(t, st, memstore.NewSegments(), enginetest.Options{})
	h.Grants.Set("alice", projects("p1"))
	a := h.Client("tenant", "alice", "a")
	commit := cmt("c1", up("tasks", "t1", a.Task("t1", "p1", "x", false), 0))
	wantApplied(t, mustPushAll(t, a, commit)[0])
	st.broken = true
	res := mustPushAll(t, a, commit, commit)
	for _, r := range res {
		rec := wantRejected(t, r, 0, wire.OpError, syncerr.IdempotencyCacheMiss)
		if !rec.Retryable {
			t.Fatal("cache miss must be retryable")
		}
	}
	if head(t, h, "tenant").MaxCommitSeq != 1 {
		t.Fatal("cache miss re-applied the commit")
	}
	st.broken = false
	if r := mustPushAll(t, a, commit)[0]; r.Status != wire.PushCached || r.CommitSeq.Value != 1 {
		t.Fatalf("after recovery: %+v (the miss must not have been persisted)", r)
	}
}

type unreadableOutcomes struct {
	*memstore.Store
	broken bool
}

func (u *unreadableOutcomes) GetOutcome(ctx context.Context, p, c, id string, nowMs int64) (*store.Outcome, error) {
	if u.broken {
		return nil, store.ErrOutcomeUnreadable
	}
	return u.Store.GetOutcome(ctx, p, c, id, nowMs)
}

// §6.3: when a commit storage cannot hold is rejected and the rejection's
// idempotency key then cannot be checked, the answer is the same
// sync.idempotency_cache_miss as on the other rejection path, not a
// request-level storage error, and nothing is applied or recorded.
func TestPushTooLargeRejectionUnreadableKey(t *testing.T) {
	st := &tooLargeUnreadable{Store: memstore.New()}
	h := enginetest.New(t, st, memstore.NewSegments(), enginetest.Options{})
	h.Grants.Set("alice", projects("p1"))
	a := h.Client("tenant", "alice", "a")
	commit := cmt("c1", up("tasks", "t1", a.Task("t1", "p1", "x", false), 0))
	rec := wantRejected(t, mustPushAll(t, a, commit)[0], 0, wire.OpError, syncerr.IdempotencyCacheMiss)
	if !rec.Retryable {
		t.Fatal("cache miss must be retryable")
	}
	if head(t, h, "tenant").MaxCommitSeq != 0 {
		t.Fatal("the commit storage refused was applied")
	}
}

type tooLargeUnreadable struct{ *memstore.Store }

func (*tooLargeUnreadable) Commit(context.Context, string, *store.CommitRequest) error {
	return store.ErrTooLarge
}

func (*tooLargeUnreadable) PutRejection(context.Context, string, string, string, store.Outcome, store.WriterCheck) error {
	return store.ErrOutcomeUnreadable
}

// §1.5/§2.3: a commit refused for its identifiers records its outcome
// under the actor, like every other rejection, so replay's actor fence
// holds for it too.
func TestIdentifierRejectionRecordsActor(t *testing.T) {
	st := memstore.New()
	h := enginetest.New(t, st, memstore.NewSegments(), enginetest.Options{})
	h.Grants.Set("alice", projects("p1"))
	a := h.Client("tenant", "alice", "a")
	wantRejected(t, mustPushAll(t, a, cmt("c1", up("tasks", "", nil, 0)))[0], 0, wire.OpError, syncerr.InvalidRequest)
	o, err := st.GetOutcome(context.Background(), "tenant", "a", "c1", h.Clock.Now())
	if err != nil || o == nil {
		t.Fatalf("outcome: %v %v", o, err)
	}
	if o.Applied || o.ActorID != "alice" {
		t.Fatalf("recorded outcome: applied %v, actor %q; want a rejection recorded by alice", o.Applied, o.ActorID)
	}
}
