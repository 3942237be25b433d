package enginetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/validate"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// RunValidatorsRollBack checks §6.7 row validators and the §6.8
// whole-commit validator on an engine over the store newStore returns,
// once per wire version 2 and 3: a rejection anywhere in a commit leaves
// no row, no log entry and a recorded rejected outcome with the host's
// code, message and details; the whole-commit validator sees every
// staged operation and the candidate state; unexpected validator errors
// and host bugs answer sync.constraint_violation with a fixed message.
func RunValidatorsRollBack(t *testing.T, newStore func(*testing.T) store.Store, newSegs func() store.SegmentStore) {
	for _, v := range []uint16{wire.Version2, wire.Version3} {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			for _, sc := range validatorScenarios {
				t.Run(sc.name, func(t *testing.T) {
					h := New(t, newStore(t), newSegs(), Options{Schema: sc.schema})
					h.Grants.Set("alice", p1)
					a := h.ClientV(v, fmt.Sprintf("val-v%d-%s", v, sc.name), "alice", "a")
					sc.run(t, h, a)
				})
			}
		})
	}
}

// titleRule rejects a task titled "bad" with a host code and details.
var titleRule = validate.RowValidatorFunc(func(_ context.Context, _ validate.Caller, op *validate.Operation) error {
	if op.Row != nil && op.Row["title"] == "bad" {
		return validate.Reject("app.bad_title", "title may not be bad", &validate.Details{FieldPaths: []string{"title"}, Reason: "bad_title", RequiredAction: "edit_fields"})
	}
	return nil
})

// wantNothingWritten checks the partition holds exactly the task rows
// named and its log ends at seq.
func wantNothingWritten(t *testing.T, h *Harness, a *Client, seq int64, rows ...string) {
	t.Helper()
	got := h.ServerRows(a.Partition, "tasks")
	if len(got) != len(rows) {
		t.Fatalf("stored tasks %v, want exactly %v", keys(got), rows)
	}
	for _, id := range rows {
		if _, ok := got[id]; !ok {
			t.Fatalf("stored tasks %v, want exactly %v", keys(got), rows)
		}
	}
	hd, _, err := h.Store.Head(context.Background(), a.Partition)
	if err != nil {
		t.Fatal(err)
	}
	if hd.MaxCommitSeq != seq {
		t.Fatalf("log head %d, want %d: a rejected commit reached the log", hd.MaxCommitSeq, seq)
	}
	n := 0
	if err := h.Store.ReadLog(context.Background(), a.Partition, seq, 1<<52, func(*store.Commit) bool { n++; return true }); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d log entries after seq %d", n, seq)
	}
}

func keys(m map[string]RowState) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// wantRejection checks a rejected result with one error record.
func wantRejection(t *testing.T, r *wire.PushResult, opIndex int32, code, message string) {
	t.Helper()
	if r.Status != wire.PushRejected || r.CommitSeq.Present || len(r.Results) != 1 {
		t.Fatalf("want rejected with one record, got status %d seq %+v results %+v", r.Status, r.CommitSeq, r.Results)
	}
	got := r.Results[0]
	if got.OpIndex != opIndex || got.Status != wire.OpError || got.Code != code || got.Message != message || got.Retryable {
		t.Fatalf("rejection record %+v, want op %d %s %q not retryable", got, opIndex, code, message)
	}
}

var validatorScenarios = []struct {
	name   string
	schema string // "" for TodoSchema
	run    func(t *testing.T, h *Harness, a *Client)
}{
	{"third-op-rejected-rolls-back", "", func(t *testing.T, h *Harness, a *Client) {
		var calls atomic.Int32
		counted := validate.RowValidatorFunc(func(ctx context.Context, who validate.Caller, op *validate.Operation) error {
			calls.Add(1)
			if who.ActorID != "alice" || who.Partition != a.Partition || !strings.HasPrefix(who.ClientCommitID, "c") {
				t.Errorf("validator sees caller %+v", who)
			}
			return titleRule(ctx, who, op)
		})
		if err := h.Engine.SetValidators(&validate.Hooks{Rows: map[string]validate.RowValidator{"tasks": counted}}); err != nil {
			t.Fatal(err)
		}
		ops := []wire.Operation{
			Upsert("tasks", "t1", a.Task("t1", "p1", "one", false), -1),
			Upsert("tasks", "t2", a.Task("t2", "p1", "two", false), -1),
			Upsert("tasks", "t3", a.Task("t3", "p1", "bad", false), -1),
		}
		r, det, _ := a.PushDetailed("c1", ops...)
		wantRejection(t, r, 2, "app.bad_title", "title may not be bad")
		const wantDetails = `{"fieldPaths":["title"],"reason":"bad_title","requiredAction":"edit_fields"}`
		if det == nil || len(det.Entries) != 1 || det.Entries[0].OpIndex != 2 || det.Entries[0].DetailsJSON != wantDetails {
			t.Fatalf("details %+v, want one entry for op 2 with %s", det, wantDetails)
		}
		wantNothingWritten(t, h, a, 0)
		if n := calls.Load(); n != 3 {
			t.Fatalf("validator ran %d times, want once per operation (3)", n)
		}
		// §2.3/§6.8: the replay answers the recorded outcome, details
		// included, without running the validator again.
		r2, det2, _ := a.PushDetailed("c1", ops...)
		wantRejection(t, r2, 2, "app.bad_title", "title may not be bad")
		if det2 == nil || det2.Entries[0].DetailsJSON != wantDetails {
			t.Fatalf("replayed details %+v", det2)
		}
		if n := calls.Load(); n != 3 {
			t.Fatalf("the replay ran the validator (%d calls)", n)
		}
		// A corrected commit applies.
		ops[2] = Upsert("tasks", "t3", a.Task("t3", "p1", "good", false), -1)
		if r := a.Push("c2", ops...); r.Status != wire.PushApplied {
			t.Fatalf("corrected commit: %+v", r.Results)
		}
		wantNothingWritten(t, h, a, 1, "t1", "t2", "t3")
	}},
	{"delete-sees-stored-row", "", func(t *testing.T, h *Harness, a *Client) {
		if r := a.Push("c0", Upsert("tasks", "t1", a.Task("t1", "p1", "keep", true), -1)); r.Status != wire.PushApplied {
			t.Fatalf("%+v", r.Results)
		}
		frozen := validate.RowValidatorFunc(func(_ context.Context, _ validate.Caller, op *validate.Operation) error {
			if op.Op == validate.Delete && op.Row == nil && op.Stored["done"] == true && op.StoredVersion == 1 {
				return validate.Reject("app.done_is_final", "a done task stays", nil)
			}
			return nil
		})
		if err := h.Engine.SetValidators(&validate.Hooks{Rows: map[string]validate.RowValidator{"tasks": frozen}}); err != nil {
			t.Fatal(err)
		}
		// The absent-row delete runs no validator; the existing one does.
		r, det, _ := a.PushDetailed("c1", Delete("tasks", "ghost"), Delete("tasks", "t1"))
		wantRejection(t, r, 1, "app.done_is_final", "a done task stays")
		if det != nil {
			t.Fatalf("details %+v for a rejection without details", det)
		}
		wantNothingWritten(t, h, a, 1, "t1")
	}},
	{"commit-validator-sees-candidate-state", "", func(t *testing.T, h *Harness, a *Client) {
		for i, id := range []string{"t0", "t5"} {
			if r := a.Push(fmt.Sprintf("seed%d", i), Upsert("tasks", id, a.Task(id, "p1", "seed", false), -1)); r.Status != wire.PushApplied {
				t.Fatalf("%+v", r.Results)
			}
		}
		var seen atomic.Int32
		accept := false
		cv := validate.CommitValidatorFunc(func(ctx context.Context, c *validate.Commit, rd validate.Reader) error {
			seen.Add(1)
			type ev struct {
				i        int
				op       validate.OpKind
				id       string
				title    any
				stored   any
				from, to int64
			}
			var got []ev
			for _, op := range c.Operations {
				e := ev{i: op.OpIndex, op: op.Op, id: op.RowID, from: op.StoredVersion, to: op.NextVersion}
				if op.Row != nil {
					e.title = op.Row["title"]
				}
				if op.Stored != nil {
					e.stored = op.Stored["title"]
				}
				got = append(got, e)
			}
			want := []ev{
				{0, validate.Upsert, "t4", "first", nil, 0, 1},
				{1, validate.Delete, "t0", nil, "seed", 1, 0},
				{2, validate.Upsert, "t4", "second", "first", 1, 2},
				{3, validate.Delete, "ghost", nil, nil, 0, 0},
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("operation evidence\n got %+v\nwant %+v", got, want)
			}
			if !strings.HasPrefix(c.ClientCommitID, "c") || c.ActorID != "alice" || c.ClientID != "a" {
				t.Errorf("caller %+v", c.Caller)
			}
			// getRow: the final candidate, sibling writes included.
			if row, ver, ok, err := rd.GetRow(ctx, "tasks", "t4"); err != nil || !ok || row["title"] != "second" || ver != 2 {
				t.Errorf("GetRow(t4) = %v %d %v %v, want the second title at version 2", row, ver, ok, err)
			}
			if _, _, ok, err := rd.GetRow(ctx, "tasks", "t0"); err != nil || ok {
				t.Errorf("GetRow(t0) = %v %v, want absent (deleted by the commit)", ok, err)
			}
			if row, _, ok, err := rd.GetRow(ctx, "tasks", "t5"); err != nil || !ok || row["title"] != "seed" {
				t.Errorf("GetRow(t5) = %v %v %v, want the stored row", row, ok, err)
			}
			rows, err := rd.ScanRows(ctx, validate.Scan{Table: "tasks", Scopes: map[string][]string{"project_id": {"p1"}}})
			var ids []string
			for _, r := range rows {
				ids = append(ids, r.RowID)
			}
			if err != nil || strings.Join(ids, ",") != "t4,t5" {
				t.Errorf("ScanRows = %v %v, want t4,t5", ids, err)
			}
			if rows, err := rd.ScanRows(ctx, validate.Scan{Table: "tasks", Scopes: map[string][]string{"project_id": {"p1"}}, AfterRowID: "t4", HasAfter: true, Limit: 1}); err != nil || len(rows) != 1 || rows[0].RowID != "t5" {
				t.Errorf("ScanRows after t4 = %+v %v, want t5", rows, err)
			}
			if _, err := rd.ScanRows(ctx, validate.Scan{Table: "tasks"}); !errors.Is(err, validate.ErrScanRequiresScope) {
				t.Errorf("a scan without scopes: %v, want ErrScanRequiresScope", err)
			}
			if accept {
				return nil
			}
			return validate.RejectOp(1, "app.needs_archive", "archive t0 first", &validate.Details{Reason: "archive_first"})
		})
		if err := h.Engine.SetValidators(&validate.Hooks{Rows: map[string]validate.RowValidator{"tasks": titleRule}, Commit: cv}); err != nil {
			t.Fatal(err)
		}
		ops := []wire.Operation{
			Upsert("tasks", "t4", a.Task("t4", "p1", "first", false), -1),
			Delete("tasks", "t0"),
			Upsert("tasks", "t4", a.Task("t4", "p1", "second", false), -1),
			Delete("tasks", "ghost"),
		}
		r, det, _ := a.PushDetailed("c1", ops...)
		wantRejection(t, r, 1, "app.needs_archive", "archive t0 first")
		if det == nil || len(det.Entries) != 1 || det.Entries[0].OpIndex != 1 || det.Entries[0].DetailsJSON != `{"reason":"archive_first"}` {
			t.Fatalf("details %+v", det)
		}
		wantNothingWritten(t, h, a, 2, "t0", "t5")
		if seen.Load() != 1 {
			t.Fatalf("commit validator ran %d times, want 1", seen.Load())
		}
		// A row validator's rejection ends the commit before the
		// whole-commit validator runs.
		r = a.Push("c2", Upsert("tasks", "t6", a.Task("t6", "p1", "bad", false), -1))
		wantRejection(t, r, 0, "app.bad_title", "title may not be bad")
		if seen.Load() != 1 {
			t.Fatalf("commit validator ran after a row rejection")
		}
		accept = true
		if r := a.Push("c3", ops...); r.Status != wire.PushApplied {
			t.Fatalf("accepted commit: %+v", r.Results)
		}
		wantNothingWritten(t, h, a, 3, "t4", "t5")
	}},
	{"unexpected-errors-and-host-bugs", "", func(t *testing.T, h *Harness, a *Client) {
		cases := []struct {
			name string
			row  error
			cmt  error
			op   int32
			msg  string
		}{
			{"row-error", errors.New("secret row detail"), nil, 1, "write validator failed"},
			{"row-reserved-code", validate.Reject("sync.mine", "x", nil), nil, 1, "write validator failed"},
			{"row-bad-details", validate.Reject("app.x", "x", &validate.Details{FieldPaths: []string{"not a path"}}), nil, 1, "write validator failed"},
			{"row-hand-built-reserved", &validate.Rejection{Code: "blob.mine", Message: "x"}, nil, 1, "write validator failed"},
			{"commit-error", nil, errors.New("secret commit detail"), 0, "whole-commit validator failed"},
			{"commit-bad-index", nil, validate.RejectOp(7, "app.x", "x", nil), 0, "whole-commit validator failed"},
		}
		for i, c := range cases {
			row := validate.RowValidatorFunc(func(_ context.Context, _ validate.Caller, op *validate.Operation) error {
				if op.OpIndex == 1 {
					return c.row
				}
				return nil
			})
			cmt := validate.CommitValidatorFunc(func(context.Context, *validate.Commit, validate.Reader) error { return c.cmt })
			if err := h.Engine.SetValidators(&validate.Hooks{Rows: map[string]validate.RowValidator{"tasks": row}, Commit: cmt}); err != nil {
				t.Fatal(err)
			}
			r, det, raw := a.PushDetailed(fmt.Sprintf("c%d", i),
				Upsert("tasks", "t1", a.Task("t1", "p1", "one", false), -1),
				Upsert("tasks", "t2", a.Task("t2", "p1", "two", false), -1))
			wantRejection(t, r, c.op, string(syncerr.ConstraintViolation), c.msg)
			if det != nil || strings.Contains(string(raw), "secret") {
				t.Fatalf("%s: the error's text or details leaked: %+v", c.name, det)
			}
			wantNothingWritten(t, h, a, 0)
		}
		if err := h.Engine.SetValidators(&validate.Hooks{Rows: map[string]validate.RowValidator{"nope": titleRule}}); err == nil {
			t.Fatal("a validator for an unserved table was installed")
		}
		// Removing the hooks turns validation off.
		if err := h.Engine.SetValidators(nil); err != nil {
			t.Fatal(err)
		}
		if r := a.Push("off", Upsert("tasks", "t1", a.Task("t1", "p1", "bad", false), -1)); r.Status != wire.PushApplied {
			t.Fatalf("with no validators: %+v", r.Results)
		}
	}},
	{"appended-operations-are-validated", ReferenceSchema, func(t *testing.T, h *Harness, a *Client) {
		h.Grants.Set("alice", engine.ScopeMap{"project_id": {"*"}})
		if r := a.Push("seed", a.ProjectOp("p1"), a.ItemOp("i1", Parents{Cascade: "p1"}), a.ItemOp("i2", Parents{Nullify: "p1"}), a.NoteOp("n1", "i1")); r.Status != wire.PushApplied {
			t.Fatalf("seed: %+v", r.Results)
		}
		type seen struct {
			op       validate.OpKind
			index    int
			appended bool
			table    string
			id       string
			nullify  any
		}
		var rows []seen
		keepLink := true
		rv := validate.RowValidatorFunc(func(_ context.Context, _ validate.Caller, op *validate.Operation) error {
			s := seen{op.Op, op.OpIndex, op.Appended, op.Table, op.RowID, nil}
			if op.Table == "items" && op.Row != nil {
				s.nullify = op.Row["nullify_parent"]
			}
			rows = append(rows, s)
			if keepLink && op.Appended && op.Op == validate.Upsert && op.Stored["nullify_parent"] == "p1" {
				return validate.Reject("app.keep_link", "the link stays", nil)
			}
			return nil
		})
		var evidence []seen
		cv := validate.CommitValidatorFunc(func(_ context.Context, c *validate.Commit, _ validate.Reader) error {
			for _, op := range c.Operations {
				evidence = append(evidence, seen{op.Op, op.OpIndex, op.Appended, op.Table, op.RowID, nil})
			}
			return nil
		})
		if err := h.Engine.SetValidators(&validate.Hooks{Rows: map[string]validate.RowValidator{"items": rv, "notes": rv, "projects": rv}, Commit: cv}); err != nil {
			t.Fatal(err)
		}
		// §6.11: the delete of p1 (op 1) appends the CASCADE delete of i1
		// and, through it, of n1, and the SET NULL upsert of i2; each runs
		// its table's validator, attributed to op 1.
		r := a.Push("del", a.ProjectOp("p2"), Delete("projects", "p1"))
		wantRejection(t, r, 1, "app.keep_link", "the link stays")
		if len(evidence) != 0 {
			t.Fatalf("the commit validator ran after a row rejection: %+v", evidence)
		}
		if got := len(h.ServerRows(a.Partition, "items")) + len(h.ServerRows(a.Partition, "notes")) + len(h.ServerRows(a.Partition, "projects")); got != 4 {
			t.Fatalf("%d rows after the rejected cascade, want the 4 seeded", got)
		}
		keepLink = false
		rows = nil
		if r := a.Push("del2", a.ProjectOp("p2"), Delete("projects", "p1")); r.Status != wire.PushApplied {
			t.Fatalf("accepted cascade: %+v", r.Results)
		}
		want := []seen{
			{validate.Upsert, 0, false, "projects", "p2", nil},
			{validate.Delete, 1, false, "projects", "p1", nil},
		}
		if !reflect.DeepEqual(rows[:2], want) || !reflect.DeepEqual(evidence[:2], want) {
			t.Fatalf("client operations: validators saw %+v, commit validator %+v", rows, evidence)
		}
		appended := map[string]seen{}
		for _, s := range rows[2:] {
			appended[s.table+"/"+s.id] = s
		}
		wantApp := map[string]seen{
			"items/i1": {validate.Delete, 1, true, "items", "i1", nil},
			"items/i2": {validate.Upsert, 1, true, "items", "i2", nil},
			"notes/n1": {validate.Delete, 1, true, "notes", "n1", nil},
		}
		if !reflect.DeepEqual(appended, wantApp) || len(rows) != 5 || len(evidence) != 5 {
			t.Fatalf("appended operations: validators saw %+v, commit validator %d operations", rows, len(evidence))
		}
	}},
}
