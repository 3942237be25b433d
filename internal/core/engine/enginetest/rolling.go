package enginetest

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/migrate"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// SchemaBackend is a store with the rolling-upgrade side.
type SchemaBackend interface {
	store.Store
	store.SchemaStore
}

// RollingUpgrade runs the serve-gate scenarios (gate.go of the engine)
// through real request bytes on a fresh backend per scenario (the schema
// marker is table-wide). TodoSchema is version 1: the running version.
func RollingUpgrade(t *testing.T, newStore func(t testing.TB) SchemaBackend, segs func() store.SegmentStore) {
	for _, sc := range []struct {
		name string
		run  func(t *testing.T, st SchemaBackend, segs store.SegmentStore)
	}{
		{"MarkerAloneServesFenceRefuses", rollingMarkerNewer},
		{"LazyFenceOnNewLayoutWrite", rollingLazyFence},
		{"OwnFenceRaiseServesItsResponse", rollingOwnFence},
		{"LazyFenceOnReferenceChange", rollingReferenceFence},
		{"UndeclaredCheckpointRefusesUntilActivated", rollingCheckpointGate},
		{"TableWideCheckpointGatedBeforeMaterialised", rollingTableWide},
		{"WriterRacingMigrationFenced", rollingRacingWriter},
		{"RejectionRacingMigrationFenced", rollingRacingRejection},
		{"RefusedAfterResponseBuilt", func(t *testing.T, st SchemaBackend, segs store.SegmentStore) {
			rollingAfterResponse(t, st, segs, false)
		}},
		{"RefusedAfterResponseBuiltStreamingHost", func(t *testing.T, st SchemaBackend, segs store.SegmentStore) { rollingAfterResponse(t, st, segs, true) }},
		{"GateReadsOnlyWhenDataServed", rollingGateReads},
		{"RefusedWhenEpochRotatesMidResponse", rollingEpochMidResponse},
		{"RoundPastOwnCommitRefusedAfterFence", rollingRoundPastOwn},
	} {
		t.Run(sc.name, func(t *testing.T) { sc.run(t, newStore(t), segs()) })
	}
}

var rollingScopes = engine.ScopeMap{"project_id": {"p1"}}

func rollingHarness(t *testing.T, st store.Store, segs store.SegmentStore, checkpoints ...string) *Harness {
	h := New(t, st, segs, Options{Checkpoints: checkpoints})
	h.Grants.Set("actor-a", rollingScopes)
	return h
}

func taskSub(cursor int64) []wire.Subscription {
	return []wire.Subscription{{ID: "s", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: cursor}}
}

func (c *Client) pull(cursor int64) (*wire.Message, error) {
	return c.Send(c.Request(nil, &wire.PullHeader{Accept: c.Accept}, taskSub(cursor)))
}

// wantNotReady checks a request-level sync.schema_not_ready (§10.2 of the
// wire-3 spec: internal, retryable, retryLater, HTTP 503).
func wantNotReady(t *testing.T, err error, what string) {
	t.Helper()
	se := syncerr.As(err)
	if se == nil || se.Code != syncerr.SchemaNotReady {
		t.Fatalf("%s: got %v, want sync.schema_not_ready", what, err)
	}
	en := se.Entry()
	if en.Category != "internal" || !en.Retryable || en.RecommendedAction != "retryLater" || se.HTTPStatus() != http.StatusServiceUnavailable {
		t.Fatalf("%s: metadata %+v status %d", what, en, se.HTTPStatus())
	}
}

func headSeq(t *testing.T, st store.Store, p string) int64 {
	t.Helper()
	h, _, err := st.Head(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return h.MaxCommitSeq
}

// rollingMarkerNewer: the table-wide marker alone refuses nothing (it
// moves after a deploy's traffic shift, and a rolled-back build must
// serve again); the partition's writer fence above the build refuses it.
func rollingMarkerNewer(t *testing.T, st SchemaBackend, segs store.SegmentStore) {
	h := rollingHarness(t, st, segs)
	c := h.ClientV3("tenant", "actor-a", "client-a")
	applied(t, c.Push("c1", Upsert("tasks", "t1", c.Task("t1", "p1", "one", false), -1)))
	v2 := h.Client("tenant", "actor-a", "client-v2")
	if _, err := st.BumpSchemaMarker(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	if _, err := c.pull(0); err != nil {
		t.Fatalf("pull with only the marker past the build: %v", err)
	}
	applied(t, c.Push("c2", Upsert("tasks", "t2", c.Task("t2", "p1", "two", false), -1)))
	if err := st.RaiseWriterFence(context.Background(), "tenant", 2); err != nil {
		t.Fatal(err)
	}
	_, err := c.pull(0)
	wantNotReady(t, err, "pull after the partition's fence moved past the build")
	_, err = c.Send(c.Request([]wire.PushCommit{{ClientCommitID: "c3", Operations: []wire.Operation{Upsert("tasks", "t3", c.Task("t3", "p1", "three", false), -1)}}}, nil, nil))
	wantNotReady(t, err, "push after the partition's fence moved past the build")
	if got := headSeq(t, st, "tenant"); got != 2 {
		t.Fatalf("a refused push moved the head to %d", got)
	}
	// A wire-2 client gets the retryable code its catalog knows.
	_, err = v2.pull(0)
	if ErrCode(err) != syncerr.ForWire(syncerr.SchemaNotReady, wire.Version2) {
		t.Fatalf("wire-2 refusal code %q", ErrCode(err))
	}
}

// TodoSchemaV2 is TodoSchema's next version: the same projects and tasks
// layouts and a new notes table.
var TodoSchemaV2 = strings.Replace(strings.Replace(TodoSchema, `"version": 1`, `"version": 2`, 1), "\n  ]\n}", `,
    {"name": "notes", "primaryKey": "id", "scopes": ["project:{project_id}"],
     "columns": [{"name": "id", "type": "string", "nullable": false},
                 {"name": "project_id", "type": "string", "nullable": false},
                 {"name": "body", "type": "string", "nullable": false}]}
  ]
}`, 1)

// rollingLazyFence: a version-2 build writing tables whose layout version
// 1 shares leaves the partition to both builds; its first write of a
// table new in version 2 fences version 1 out of that partition only, in
// the same commit.
func rollingLazyFence(t *testing.T, st SchemaBackend, segs store.SegmentStore) {
	ctx := context.Background()
	old := rollingHarness(t, st, segs)
	nw := New(t, st, segs, Options{Schema: TodoSchemaV2, OlderSchemas: []string{TodoSchema}})
	nw.Grants.Set("actor-a", rollingScopes)
	for _, p := range []string{"shared", "noted"} {
		c := nw.ClientV3(p, "actor-a", "client-new")
		c.Schema = 1 // an app release still on version 1
		applied(t, c.Push("c1", Upsert("tasks", "t1", c.Task("t1", "p1", "one", false), -1)))
		o := *c
		o.H, o.ID = old, "client-old"
		if _, err := o.pull(0); err != nil {
			t.Fatalf("%s: the old build refused a partition the new one wrote in a shared layout: %v", p, err)
		}
		applied(t, o.Push("c2", Upsert("tasks", "t2", o.Task("t2", "p1", "two", false), -1)))
	}
	o := old.ClientV3("noted", "actor-a", "client-old2")
	c := nw.ClientV3("noted", "actor-a", "client-new2")
	note := c.Row("notes", Cols{"id": S("n1"), "project_id": S("p1"), "body": S("hello")})
	applied(t, c.Push("n1", Upsert("notes", "n1", note, -1)))
	if g, err := st.ReadGate(ctx, "noted"); err != nil || g.WriterFence != 2 {
		t.Fatalf("gate after the first notes write: %+v, %v; want fence 2", g, err)
	}
	if g, err := st.ReadGate(ctx, "shared"); err != nil || g.WriterFence != 0 {
		t.Fatalf("the untouched partition was fenced: %+v, %v", g, err)
	}
	_, err := o.pull(0)
	wantNotReady(t, err, "old build on the partition holding a version-2 table")
	so := old.ClientV3("shared", "actor-a", "client-old3")
	if _, err := so.pull(0); err != nil {
		t.Fatalf("old build on the partition without version-2 data: %v", err)
	}
}

// rollingOwnFence: the request whose own commit raises the partition's
// fence (the newer build's first write of its layout there) is answered:
// that raise moved the gate token, but nothing else did, and the fence
// is the request's own build's. Before, the after-response check
// refused it and the client retried a commit already applied.
func rollingOwnFence(t *testing.T, st SchemaBackend, segs store.SegmentStore) {
	nw := New(t, st, segs, Options{Schema: TodoSchemaV2, OlderSchemas: []string{TodoSchema}})
	nw.Grants.Set("actor-a", rollingScopes)
	c := nw.ClientV3("own", "actor-a", "client-new")
	applied(t, c.Push("c1", Upsert("tasks", "t1", c.Task("t1", "p1", "one", false), -1)))
	note := c.Row("notes", Cols{"id": S("n1"), "project_id": S("p1"), "body": S("hello")})
	resp, err := c.Send(c.Request([]wire.PushCommit{{ClientCommitID: "n1", Operations: []wire.Operation{Upsert("notes", "n1", note, -1)}}},
		&wire.PullHeader{Accept: c.Accept}, taskSub(0)))
	if err != nil {
		t.Fatalf("the push+pull whose commit fenced the partition was refused: %v", err)
	}
	if g, err := st.ReadGate(context.Background(), "own"); err != nil || g.WriterFence != 2 {
		t.Fatalf("gate after the first notes write: %+v, %v; want fence 2", g, err)
	}
	var res *wire.PushResult
	sent := 0
	for _, f := range resp.Frames {
		switch x := f.(type) {
		case *wire.PushResult:
			res = x
		case *wire.Commit:
			sent++
		}
	}
	if res == nil {
		t.Fatal("no push result")
	}
	applied(t, res)
	if sent == 0 {
		t.Fatal("the response carries no commit: the after-response check was not exercised")
	}
}

// todoWithTaskRef is TodoSchema at version v, tasks declaring project_id
// a reference to projects (§6.11, RESTRICT) when ref is set: the same
// columns and scopes either way.
func todoWithTaskRef(v int, ref bool) string {
	doc := strings.Replace(TodoSchema, `"version": 1`, fmt.Sprintf(`"version": %d`, v), 1)
	if ref {
		doc = strings.Replace(doc, `"scopes": ["project:{project_id}"]}`, `"scopes": ["project:{project_id}"],
     "references": [{"column": "project_id", "parentTable": "projects"}]}`, 1)
	}
	return doc
}

// rollingReferenceFence: a release that changes only a table's declared
// references (§6.11) changes what its rows mean to the partition: a task
// written by the build declaring tasks.project_id → projects (RESTRICT)
// has a reference-index entry under its project, one written by a build
// without the reference has none. Left unfenced, an older build without
// the reference deletes a project a newer build's task still refers to
// (a dangling reference the newer build's RESTRICT forbids); an older
// build declaring a reference the newer one dropped finds no index entry
// for a task the newer build wrote and deletes its project as well,
// against its own RESTRICT. So the newer build's first write of the
// table fences the older one out of the partition, in either direction,
// as for a column change (LazyFenceOnNewLayoutWrite), and the older
// build's delete is refused.
func rollingReferenceFence(t *testing.T, st SchemaBackend, segs store.SegmentStore) {
	ctx := context.Background()
	for _, added := range []bool{true, false} {
		p := map[bool]string{true: "ref-added", false: "ref-dropped"}[added]
		old := New(t, st, segs, Options{Schema: todoWithTaskRef(1, !added)})
		nw := New(t, st, segs, Options{Schema: todoWithTaskRef(2, added), OlderSchemas: []string{todoWithTaskRef(1, !added)}})
		for _, h := range []*Harness{old, nw} {
			h.Grants.Set("actor-a", engine.ScopeMap{"project_id": {"p1", "p3"}})
		}
		o := old.ClientV3(p, "actor-a", "client-old")
		applied(t, o.Push("proj-p1", Upsert("projects", "p1", o.Row("projects", Cols{"id": S("p1"), "name": S("p1")}), -1)))
		c := nw.ClientV3(p, "actor-a", "client-new")
		c.Schema = 1 // an app release still on version 1
		applied(t, c.Push("proj-p3", Upsert("projects", "p3", c.Row("projects", Cols{"id": S("p3"), "name": S("p3")}), -1)))
		if g, err := st.ReadGate(ctx, p); err != nil || g.WriterFence != 0 {
			t.Fatalf("%s: a write of a table whose layout did not change fenced the partition: %+v, %v", p, g, err)
		}
		applied(t, c.Push("t1", Upsert("tasks", "t1", c.Task("t1", "p1", "one", false), -1)))
		if g, err := st.ReadGate(ctx, p); err != nil || g.WriterFence != 2 {
			t.Fatalf("%s: gate after the first tasks write under changed references: %+v, %v; want fence 2", p, g, err)
		}
		_, err := o.Send(o.Request([]wire.PushCommit{{ClientCommitID: "drop-p1", Operations: []wire.Operation{
			Delete("projects", "p1")}}}, nil, nil))
		wantNotReady(t, err, p+": the older build deleting the project of a task written under other references")
		if got := headSeq(t, st, p); got != 3 {
			t.Fatalf("%s: head at %d after the refused write, want 3", p, got)
		}
	}
}

func rollingCheckpointGate(t *testing.T, st SchemaBackend, segs store.SegmentStore) {
	ctx := context.Background()
	old := rollingHarness(t, st, segs)
	declaring := rollingHarness(t, st, segs, "tasks-projection")
	c := old.ClientV3("tenant", "actor-a", "client-a")
	applied(t, c.Push("c1", Upsert("tasks", "t1", c.Task("t1", "p1", "one", false), -1)))
	if _, err := st.DeclareCheckpoint(ctx, "tenant", "tasks-projection", 1, []string{"tasks"}, 0); err != nil {
		t.Fatal(err)
	}
	_, err := c.pull(0)
	wantNotReady(t, err, "undeclared pending checkpoint")
	d := *c
	d.H = declaring
	if _, err := d.pull(0); err != nil {
		t.Fatalf("the declaring build refused: %v", err)
	}
	applied(t, d.Push("c2", Upsert("tasks", "t2", d.Task("t2", "p1", "two", false), -1)))
	cp, err := st.ClaimCheckpoint(ctx, "tenant", "tasks-projection", 0)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := st.AdvanceCheckpoint(ctx, "tenant", store.CheckpointAdvance{Name: "tasks-projection", Epoch: cp.OwnerEpoch, Watermark: headSeq(t, st, "tenant")}, 0); !ok || err != nil {
		t.Fatalf("advance: %v %v", ok, err)
	}
	if o, err := st.ActivateCheckpoint(ctx, "tenant", "tasks-projection", cp.OwnerEpoch, 0); o != store.Activated || err != nil {
		t.Fatalf("activate = %s, %v", o, err)
	}
	resp, err := c.pull(0)
	if err != nil {
		t.Fatalf("pull after activation: %v", err)
	}
	if n := len(Sections(t, resp)[0].Commits); n != 2 {
		t.Fatalf("pull after activation sent %d commits, want 2", n)
	}
}

// fenceOnCommit raises the writer fence right before the first commit:
// a migration landing between the request's entry gate and its write.
type fenceOnCommit struct {
	SchemaBackend
	fired atomic.Bool
}

func (f *fenceOnCommit) Commit(ctx context.Context, p string, req *store.CommitRequest) error {
	if f.fired.CompareAndSwap(false, true) {
		if _, err := f.BumpSchemaMarker(ctx, 2); err != nil {
			return err
		}
		if err := f.RaiseWriterFence(ctx, p, 2); err != nil {
			return err
		}
	}
	return f.SchemaBackend.Commit(ctx, p, req)
}

// fenceOnReject is fenceOnCommit for a rejected outcome.
type fenceOnReject struct {
	SchemaBackend
	fired atomic.Bool
}

func (f *fenceOnReject) PutRejection(ctx context.Context, p, clientID, commitID string, o store.Outcome, w store.WriterCheck) error {
	if f.fired.CompareAndSwap(false, true) {
		if _, err := f.BumpSchemaMarker(ctx, 2); err != nil {
			return err
		}
		if err := f.RaiseWriterFence(ctx, p, 2); err != nil {
			return err
		}
	}
	return f.SchemaBackend.PutRejection(ctx, p, clientID, commitID, o, w)
}

// rollingRacingRejection: an old build whose entry gate passed just before
// a migration evaluates a commit to a rejection (a row outside its
// scopes); the fence raised meanwhile stops the rejected outcome too, so
// the old build's verdict is never recorded and the client retries
// against the new build.
func rollingRacingRejection(t *testing.T, st SchemaBackend, segs store.SegmentStore) {
	f := &fenceOnReject{SchemaBackend: st}
	h := rollingHarness(t, f, segs)
	c := h.ClientV3("tenant", "actor-a", "client-a")
	resp, err := c.Send(c.Request([]wire.PushCommit{{ClientCommitID: "c1", Operations: []wire.Operation{Upsert("tasks", "t1", c.Task("t1", "p2", "out of scope", false), -1)}}}, nil, nil))
	if !f.fired.Load() {
		t.Fatal("the push recorded no rejection: the scenario did not run")
	}
	if err == nil {
		var code string
		for _, fr := range resp.Frames {
			switch x := fr.(type) {
			case *wire.ErrorFrame:
				code = x.Code
			case *wire.PushResult:
				t.Fatalf("fenced rejection answered %+v", x)
			}
		}
		if code != string(syncerr.SchemaNotReady) {
			t.Fatalf("fenced rejection: ERROR frame code %q", code)
		}
	} else {
		wantNotReady(t, err, "fenced rejection")
	}
	if o, _ := st.GetOutcome(context.Background(), "tenant", "client-a", "c1", h.Clock.Now()); o != nil {
		t.Fatalf("the fenced writer recorded a rejected outcome: %+v", o)
	}
}

func rollingRacingWriter(t *testing.T, st SchemaBackend, segs store.SegmentStore) {
	f := &fenceOnCommit{SchemaBackend: st}
	f.fired.Store(true)
	h := rollingHarness(t, f, segs)
	c := h.ClientV3("tenant", "actor-a", "client-a")
	applied(t, c.Push("c1", Upsert("tasks", "t1", c.Task("t1", "p1", "one", false), -1)))
	f.fired.Store(false)
	resp, err := c.Send(c.Request([]wire.PushCommit{{ClientCommitID: "c2", Operations: []wire.Operation{Upsert("tasks", "t2", c.Task("t2", "p1", "two", false), -1)}}}, nil, nil))
	if err == nil {
		// Refused mid-stream: an in-band ERROR frame, no PUSH_RESULT.
		var code string
		for _, fr := range resp.Frames {
			switch x := fr.(type) {
			case *wire.ErrorFrame:
				code = x.Code
			case *wire.PushResult:
				t.Fatalf("fenced push answered %+v", x)
			}
		}
		if code != string(syncerr.SchemaNotReady) {
			t.Fatalf("fenced push: ERROR frame code %q", code)
		}
	} else {
		wantNotReady(t, err, "fenced push")
	}
	if got := headSeq(t, st, "tenant"); got != 1 {
		t.Fatalf("the fenced writer committed: head %d", got)
	}
	if o, _ := st.GetOutcome(context.Background(), "tenant", "client-a", "c2", h.Clock.Now()); o != nil {
		t.Fatal("the fenced writer recorded an outcome")
	}
}

// markerOnRead raises the partition's fence while the pull reads the
// log: the response is built from data a newer build may have moved.
type markerOnRead struct {
	SchemaBackend
	arm   atomic.Bool
	gates atomic.Int64
}

func (m *markerOnRead) ReadLog(ctx context.Context, p string, after, through int64, fn func(*store.Commit) bool) error {
	if m.arm.CompareAndSwap(true, false) {
		if err := m.RaiseWriterFence(ctx, p, 2); err != nil {
			return err
		}
	}
	return m.SchemaBackend.ReadLog(ctx, p, after, through, fn)
}

func (m *markerOnRead) ReadGate(ctx context.Context, p string) (store.Gate, error) {
	m.gates.Add(1)
	return m.SchemaBackend.ReadGate(ctx, p)
}

// rollingAfterResponse: stream is a host whose writer is not a
// *bytes.Buffer, which the engine buffers for instead of writing into.
func rollingAfterResponse(t *testing.T, st SchemaBackend, segs store.SegmentStore, stream bool) {
	m := &markerOnRead{SchemaBackend: st}
	h := rollingHarness(t, m, segs)
	c := h.ClientV3("tenant", "actor-a", "client-a")
	c.Stream = stream
	applied(t, c.Push("c1", Upsert("tasks", "t1", c.Task("t1", "p1", "one", false), -1)))
	m.arm.Store(true)
	_, err := c.pull(0) // Send fails the test if bytes came with the error
	wantNotReady(t, err, "pull whose data moved under it")
}

func rollingGateReads(t *testing.T, st SchemaBackend, segs store.SegmentStore) {
	m := &markerOnRead{SchemaBackend: st}
	h := rollingHarness(t, m, segs)
	c := h.ClientV3("tenant", "actor-a", "client-a")
	applied(t, c.Push("c1", Upsert("tasks", "t1", c.Task("t1", "p1", "one", false), -1)))
	if n := m.gates.Load(); n != 0 {
		t.Fatalf("a push read the gate %d extra times", n)
	}
	if _, err := c.pull(1); err != nil {
		t.Fatal(err)
	}
	if n := m.gates.Load(); n != 0 {
		t.Fatalf("a quiet pull read the gate %d extra times", n)
	}
	if _, err := c.pull(0); err != nil {
		t.Fatal(err)
	}
	if n := m.gates.Load(); n != 1 {
		t.Fatalf("a pull that served a commit read the gate %d times, want 1", n)
	}
}

// epochOnRead rotates the partition's log epoch while the pull reads the
// log (a restore's rotation landing mid-request).
type epochOnRead struct {
	SchemaBackend
	arm atomic.Bool
}

func (m *epochOnRead) ReadLog(ctx context.Context, p string, after, through int64, fn func(*store.Commit) bool) error {
	if m.arm.CompareAndSwap(true, false) {
		if err := m.RotateEpoch(ctx, p, "rotated-epoch", 1); err != nil {
			return err
		}
	}
	return m.SchemaBackend.ReadLog(ctx, p, after, through, fn)
}

// rollingEpochMidResponse (issue 20: the gate token is bound to the log
// epoch): a response built while the epoch rotated is replaced by a
// retryable refusal, never sent with data of the previous epoch; the
// retry meets the new epoch.
func rollingEpochMidResponse(t *testing.T, st SchemaBackend, segs store.SegmentStore) {
	m := &epochOnRead{SchemaBackend: st}
	h := rollingHarness(t, m, segs)
	c := h.ClientV3("tenant", "actor-a", "client-a")
	applied(t, c.Push("c1", Upsert("tasks", "t1", c.Task("t1", "p1", "one", false), -1)))
	m.arm.Store(true)
	_, err := c.pull(0)
	wantNotReady(t, err, "pull whose log epoch rotated under it")
}

// rollingTableWide: a release declares its checkpoint table-wide (the
// migration step, O(1) in partitions). Before any partition holds it,
// every partition gates it as declared: the old build and a build of the
// new version that did not declare it are refused, the declaring build
// serves. The declaring build's first write in a partition materialises
// it there (checkpoint declared, fence raised) in a write of its own
// before the commit; the backfill walk materialises and activates the
// rest, after which only the old build stays refused (by the fence).
func rollingTableWide(t *testing.T, st SchemaBackend, segs store.SegmentStore) {
	ctx := context.Background()
	old := rollingHarness(t, st, segs)
	declaring := New(t, st, segs, Options{Schema: TodoSchemaV2, OlderSchemas: []string{TodoSchema}, Checkpoints: []string{"proj"}})
	undeclared := New(t, st, segs, Options{Schema: TodoSchemaV2, OlderSchemas: []string{TodoSchema}})
	for _, h := range []*Harness{declaring, undeclared} {
		h.Grants.Set("actor-a", rollingScopes)
	}
	parts := []string{"read-only", "written"}
	olds, undecl := map[string]*Client{}, map[string]*Client{}
	for _, p := range parts {
		c := old.ClientV3(p, "actor-a", "client-old")
		applied(t, c.Push("c1", Upsert("tasks", "t1", c.Task("t1", "p1", "one", false), -1)))
		olds[p], undecl[p] = c, undeclared.ClientV3(p, "actor-a", "client-undeclared")
	}
	decl := migrate.Declaration{Name: "proj", Sources: []string{"tasks"}}
	plan := migrate.Plan{Version: 2, Checkpoints: []migrate.Declaration{decl}, Now: func() int64 { return 0 },
		Partitions: func(_ context.Context, fn func(string) bool) error {
			for _, p := range parts {
				if !fn(p) {
					break
				}
			}
			return nil
		}}
	if _, err := migrate.Step(ctx, st, plan); err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		o := olds[p]
		_, err := o.pull(0)
		wantNotReady(t, err, p+": old build, checkpoint declared table-wide")
		_, err = o.Send(o.Request([]wire.PushCommit{{ClientCommitID: "c2", Operations: []wire.Operation{Upsert("tasks", "t2", o.Task("t2", "p1", "two", false), -1)}}}, nil, nil))
		wantNotReady(t, err, p+": old build's push, checkpoint declared table-wide")
		_, err = undecl[p].pull(0)
		wantNotReady(t, err, p+": new version without the declaration")
		if got := headSeq(t, st, p); got != 1 {
			t.Fatalf("%s: a refused push moved the head to %d", p, got)
		}
	}
	d := declaring.ClientV3("read-only", "actor-a", "client-new")
	if _, err := d.pull(0); err != nil {
		t.Fatalf("the declaring build refused: %v", err)
	}
	if c, err := st.GetCheckpoint(ctx, "read-only", "proj"); err != nil || c != nil {
		t.Fatalf("a pull materialised the checkpoint: %+v %v", c, err)
	}
	// Its first write, with a pull in the same request: the request's
	// own materialisation does not make it refuse its response.
	w := declaring.ClientV3("written", "actor-a", "client-new")
	resp, err := w.Send(w.Request([]wire.PushCommit{{ClientCommitID: "c3", Operations: []wire.Operation{Upsert("tasks", "t3", w.Task("t3", "p1", "three", false), -1)}}},
		&wire.PullHeader{Accept: w.Accept}, taskSub(0)))
	if err != nil {
		t.Fatalf("the declaring build's first push and pull: %v", err)
	}
	if n := len(Sections(t, resp)[0].Commits); n != 2 {
		t.Fatalf("pull with the first push sent %d commits, want 2", n)
	}
	if c, err := st.GetCheckpoint(ctx, "written", "proj"); err != nil || c == nil || c.State != store.CheckpointDeclared || c.SchemaVersion != 2 {
		t.Fatalf("checkpoint after the declaring build's first write: %+v %v", c, err)
	}
	if g, err := st.ReadGate(ctx, "written"); err != nil || g.WriterFence != 2 || g.Unmaterialized != 0 || len(g.Pending) != 1 {
		t.Fatalf("gate after the declaring build's first write: %+v %v", g, err)
	}
	pr, err := migrate.Run(ctx, st, plan, migrate.RunOptions{Backfill: true}, nil)
	if err != nil || pr.Partitions != 2 || pr.Fenced != 2 || pr.Activated != 2 || pr.Incomplete != 0 {
		t.Fatalf("backfill walk: %+v %v", pr, err)
	}
	for _, p := range parts {
		if _, err := undecl[p].pull(0); err != nil {
			t.Fatalf("%s: new version without the declaration, after activation: %v", p, err)
		}
		_, err := olds[p].pull(0)
		wantNotReady(t, err, p+": old build after the walk (fenced)")
	}
}

// newerAfterCommit lets a newer build commit right after the request's
// own commit armed names landed: a fence raised between that commit
// point and the response.
type newerAfterCommit struct {
	SchemaBackend
	armed string
	after func()
}

func (n *newerAfterCommit) Commit(ctx context.Context, p string, req *store.CommitRequest) error {
	err := n.SchemaBackend.Commit(ctx, p, req)
	if err == nil && n.armed != "" && req.Commit.ClientCommitID == n.armed {
		n.armed = ""
		n.after()
	}
	return err
}

// rollingRoundPastOwn (issue 23): an old build's push round commits c1 at
// N on the entry gate token; right after that commit point a newer build
// lands the client's c2 at N+1 in its own layout (fencing the old build
// out). The round's c2 replays that outcome, so its pull reads to N+1,
// past its own commit: the after-response check still runs and refuses,
// where a window ending at N would have been served (gateNeedsRecheck).
func rollingRoundPastOwn(t *testing.T, st SchemaBackend, segs store.SegmentStore) {
	w := &newerAfterCommit{SchemaBackend: st}
	old := rollingHarness(t, w, segs)
	nw := New(t, st, segs, Options{Schema: TodoSchemaV2, OlderSchemas: []string{TodoSchema}})
	nw.Grants.Set("actor-a", rollingScopes)
	c := old.ClientV3("tenant", "actor-a", "client-a")
	applied(t, c.Push("c0", Upsert("tasks", "t0", c.Task("t0", "p1", "zero", false), -1)))
	e := headSeq(t, st, "tenant")
	n := *c
	n.H, n.Schema = nw, nw.Schema.Latest
	w.armed, w.after = "c1", func() {
		note := n.Row("notes", Cols{"id": S("n1"), "project_id": S("p1"), "body": S("from the newer build")})
		applied(t, n.Push("c2", Upsert("notes", "n1", note, -1)))
	}
	resp, err := c.Send(c.Request([]wire.PushCommit{
		{ClientCommitID: "c1", Operations: []wire.Operation{Upsert("tasks", "t1", c.Task("t1", "p1", "one", false), -1)}},
		{ClientCommitID: "c2", Operations: []wire.Operation{Upsert("tasks", "t2", c.Task("t2", "p1", "two", false), -1)}},
	}, &wire.PullHeader{Accept: c.Accept}, taskSub(e)))
	if w.armed != "" {
		t.Fatal("the round's own commit never landed: the scenario did not run")
	}
	if g, gerr := st.ReadGate(context.Background(), "tenant"); gerr != nil || g.WriterFence != 2 {
		t.Fatalf("the newer build did not fence the partition: %+v, %v", g, gerr)
	}
	if err != nil {
		wantNotReady(t, err, "round whose window passed its own commit after a fence")
		return
	}
	// A store that reports the moved head before c2's key answers the
	// round's c2 with the fence at its commit: in-band, never with data.
	for _, f := range resp.Frames {
		switch x := f.(type) {
		case *wire.Commit:
			t.Fatalf("round past its own commit served commit %d across a fence", x.CommitSeq)
		case *wire.ErrorFrame:
			if x.Code != string(syncerr.SchemaNotReady) {
				t.Fatalf("fenced round: ERROR frame code %q", x.Code)
			}
			return
		}
	}
	t.Fatal("round past its own commit was served across a newer build's fence")
}
