package enginetest

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// RunReferencesStayInScope runs the cross-scope attacks on declared
// references (§6.11 with §3.4): mallory may write only project pA, the
// victim only project pV, in one partition. A reference binds a child to
// a parent with the same scope values, so each attack is refused where
// it is set up; rows an older server stored across scopes (seeded
// straight into the store) are neither counted, nor deleted, nor nulled,
// and never block the owner's delete.
func RunReferencesStayInScope(t *testing.T, newStore func(t *testing.T) store.Store, newSegs func() store.SegmentStore) {
	setup := func(t *testing.T, version uint16) (*Harness, *Client, *Client) {
		h := New(t, newStore(t), newSegs(), Options{Schema: ReferenceSchema})
		h.Grants.Set("mallory", engine.ScopeMap{"project_id": {"pA"}})
		h.Grants.Set("victim", engine.ScopeMap{"project_id": {"pV"}})
		part := fmt.Sprintf("refscope-%s-%d", t.Name(), h.Clock.Now())
		m, v := h.ClientV(version, part, "mallory", "m"), h.ClientV(version, part, "victim", "v")
		for _, c := range []*Client{m, v} {
			project := map[string]string{"mallory": "pA", "victim": "pV"}[c.Actor]
			if r := c.Push("own", c.ProjectOp(project)); r.Status != wire.PushApplied {
				t.Fatalf("%s creates %s: %+v", c.Actor, project, r.Results)
			}
		}
		return h, m, v
	}
	applied := func(t *testing.T, r *wire.PushResult) {
		t.Helper()
		if r.Status != wire.PushApplied {
			t.Fatalf("commit %s: status %d %+v, want applied", r.ClientCommitID, r.Status, r.Results)
		}
	}
	// missingParent asserts the §6.11 missing_parent rejection of op 0
	// naming parent through column.
	missingParent := func(t *testing.T, c *Client, r *wire.PushResult, det *wire.PushResultDetails, column, parent string) {
		t.Helper()
		want := violationCode(c.Version)
		if r.Status != wire.PushRejected || len(r.Results) != 1 || r.Results[0].Code != string(want) || r.Results[0].OpIndex != 0 {
			t.Fatalf("commit %s: status %d %+v, want %s at op 0", r.ClientCommitID, r.Status, r.Results[:min(1, len(r.Results))], want)
		}
		wantJSON := fmt.Sprintf(`{"fieldPaths":[%q],"reason":"missing_parent","references":{"parent":"projects","row":%q}}`, column, parent)
		if det == nil || len(det.Entries) != 1 || det.Entries[0].DetailsJSON != wantJSON {
			t.Fatalf("commit %s: details %+v, want %s", r.ClientCommitID, det, wantJSON)
		}
	}
	// untouched asserts that the stored row is still rs.
	untouched := func(t *testing.T, h *Harness, c *Client, before map[string]RowState) {
		t.Helper()
		after := h.ServerRows(c.Partition, "items")
		for id, r := range before {
			if got, ok := after[id]; !ok || got.Version != r.Version || !bytes.Equal(got.Payload, r.Payload) {
				t.Fatalf("row %s in another scope was changed: before version %d, after %+v (present %v)", id, r.Version, got.Version, ok)
			}
		}
	}
	// changesIn asserts that every change of the commit res names scope
	// project_id=project.
	changesIn := func(t *testing.T, h *Harness, c *Client, res *wire.PushResult, project string) {
		t.Helper()
		var commit *store.Commit
		err := h.Store.ReadLog(context.Background(), c.Partition, res.CommitSeq.Value-1, res.CommitSeq.Value, func(cm *store.Commit) bool { commit = cm; return false })
		if err != nil || commit == nil {
			t.Fatalf("read log: %v", err)
		}
		for _, ch := range commit.Changes {
			if len(ch.Scopes) != 1 || ch.Scopes[0].Value != project {
				t.Errorf("the delete wrote %s/%s in scopes %v, outside project %s", ch.Table, ch.RowID, ch.Scopes, project)
			}
		}
	}
	// victimSees bootstraps a fresh victim replica of pV items.
	victimSees := func(t *testing.T, v *Client) map[string]RowState {
		t.Helper()
		r := v.NewReplica("items", "items", Scopes("project_id", "pV"))
		if err := r.Sync(wire.PullHeader{Accept: wire.AcceptInlineRows}, 10); err != nil {
			t.Fatal(err)
		}
		return r.Rows
	}

	// (1) Whether a row exists in a scope the actor cannot read must not
	// show in the answer: a parent in another scope is reported exactly
	// like an absent one.
	t.Run("existence-probe", func(t *testing.T) {
		for _, version := range []uint16{wire.Version2, wire.Version3} {
			t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
				h, m, _ := setup(t, version)
				foreign, fdet, _ := m.PushDetailed("probe-1", m.ItemIn("pA", "m1", Parents{Restrict: "pV"}))
				absent, adet, _ := m.PushDetailed("probe-2", m.ItemIn("pA", "m2", Parents{Restrict: "ghost"}))
				missingParent(t, m, foreign, fdet, "restrict_parent", "pV")
				missingParent(t, m, absent, adet, "restrict_parent", "ghost")
				if foreign.Results[0].Message != absent.Results[0].Message || foreign.Results[0].Retryable != absent.Results[0].Retryable {
					t.Errorf("answers differ: %+v vs %+v", foreign.Results[0], absent.Results[0])
				}
				if n := len(h.ServerRows(m.Partition, "items")); n != 0 {
					t.Errorf("%d items stored", n)
				}
			})
		}
	})

	// linkAcross has from push an item of its project fromProject
	// naming parent, the project of to, through column: refused as a
	// missing parent. The same item stored by an older server (seeded)
	// does not stop to's delete of its project, which applies, leaves the
	// item as it was and writes nothing outside to's project.
	linkAcross := func(t *testing.T, h *Harness, from, to *Client, fromProject, column string, p Parents) {
		t.Helper()
		parent := p.Project()
		r, det, _ := from.PushDetailed("link", from.ItemIn(fromProject, "x1", p))
		missingParent(t, from, r, det, column, parent)
		SeedItems(t, h, from.Partition, 1, SeededItem{fromProject, "x2", p})
		before := h.ServerRows(from.Partition, "items")
		res := to.Push("del", Delete("projects", parent))
		applied(t, res)
		untouched(t, h, from, before)
		changesIn(t, h, to, res, parent)
	}

	// (2) A RESTRICT child in the attacker's scope would block the
	// owner's delete forever.
	t.Run("restrict-child-blocks-owner-delete", func(t *testing.T) {
		h, m, v := setup(t, wire.Version3)
		linkAcross(t, h, m, v, "pA", "restrict_parent", Parents{Restrict: "pV"})
	})

	// (3) 1,002 CASCADE children in the attacker's scope would push the
	// owner's delete past the cascade cap (1,000) for good.
	t.Run("cascade-children-exhaust-owner-cap", func(t *testing.T) {
		h, m, v := setup(t, wire.Version3)
		const n = 1002
		var ops []wire.Operation
		for i := range n {
			ops = append(ops, m.ItemIn("pA", fmt.Sprintf("m%04d", i), Parents{Cascade: "pV"}))
		}
		for start := 0; start < n; start += engine.DefaultMaxOperations {
			end := min(start+engine.DefaultMaxOperations, n)
			r, det, _ := m.PushDetailed(fmt.Sprintf("flood-%d", start), ops[start:end]...)
			missingParent(t, m, r, det, "cascade_parent", "pV")
		}
		// Stored by an older server, they fill the whole first window of
		// the reference index ahead of the owner's own children (ids
		// sorting after them): the owner's cascade still finds and
		// deletes exactly its own.
		seeded := make([]SeededItem, n)
		for i := range seeded {
			seeded[i] = SeededItem{"pA", fmt.Sprintf("m%04d", i), Parents{Cascade: "pV"}}
		}
		SeedItems(t, h, m.Partition, 1, seeded...)
		before := h.ServerRows(m.Partition, "items")
		applied(t, v.Push("own-children", v.ItemIn("pV", "z1", Parents{Cascade: "pV"}), v.ItemIn("pV", "z2", Parents{Cascade: "pV"})))
		res := v.Push("del", Delete("projects", "pV"))
		applied(t, res)
		untouched(t, h, m, before)
		if rows := h.ServerRows(m.Partition, "items"); len(rows) != n {
			t.Errorf("%d items after the owner's cascade, want the %d in pA (z1, z2 deleted)", len(rows), n)
		}
		changesIn(t, h, v, res, "pV")
	})

	// (4) The victim's row referencing the attacker's parent would be
	// deleted by the attacker's cascade, in a scope the attacker cannot
	// write; (5) SET NULL would write it.
	for _, c := range []struct {
		name, column string
		p            Parents
	}{
		{"attacker-cascade-deletes-victim-row", "cascade_parent", Parents{Cascade: "pA"}},
		{"attacker-set-null-writes-victim-row", "nullify_parent", Parents{Nullify: "pA"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, m, v := setup(t, wire.Version3)
			linkAcross(t, h, v, m, "pV", c.column, c.p)
			if rows := victimSees(t, v); len(rows) != 1 || rows["x2"].Version != 1 {
				t.Errorf("victim bootstrap after the attacker's delete: %+v, want its row x2 unchanged", rows)
			}
		})
	}
}
