package engine

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// §6.11 PUSH_RESULT_DETAILS reasons of sync.reference_violation.
const (
	reasonMissingParent    = "missing_parent"
	reasonRestrictedDelete = "restricted_delete"
	reasonCascadeLimit     = "cascade_limit"
)

// The messages stay static (§6.11); the details frame carries the case.
var referenceMessages = map[string]string{
	reasonMissingParent:    "a declared reference names a parent row that does not exist",
	reasonRestrictedDelete: "the deleted row is still referenced by child rows (ON DELETE RESTRICT)",
	reasonCascadeLimit:     "the delete cascades to more rows than one commit may change",
}

// referenceReject builds the terminating error record of a reference
// violation and its PUSH_RESULT_DETAILS companion (§6.3.1, §6.11).
func referenceReject(clientCommitID string, opIndex int32, reason string, fieldPaths []string, refs map[string]string) (*wire.OpResult, *wire.PushResultDetails) {
	res := &wire.OpResult{OpIndex: opIndex, Status: wire.OpError, Code: string(syncerr.ReferenceViolation), Message: referenceMessages[reason]}
	type detailsJSON struct {
		FieldPaths []string          `json:"fieldPaths,omitempty"`
		Reason     string            `json:"reason"`
		References map[string]string `json:"references,omitempty"`
	}
	// A column name outside the schema-path grammar or a row id the
	// bounded shape cannot carry (untrimmed, control characters, over 256
	// bytes) is left out rather than failing the whole companion.
	for _, d := range []detailsJSON{{fieldPaths, reason, refs}, {nil, reason, refs}, {nil, reason, nil}} {
		raw, err := json.Marshal(d)
		if err != nil {
			continue
		}
		norm, err := wire.NormalizeDetailsJSON(string(raw))
		if err != nil {
			continue
		}
		return res, &wire.PushResultDetails{ClientCommitID: clientCommitID, Entries: []wire.DetailEntry{{OpIndex: opIndex, DetailsJSON: norm}}}
	}
	return res, nil
}

// refPass is the §6.11 enforcement state of one commit: the candidate
// state (the commit's staged writes over the stored rows) and what the
// pass appends.
type refPass struct {
	e   *Engine
	ctx context.Context
	rs  *reqState
	pc  *wire.PushCommit
	ev  *evaluation
	sv  *schema.Version // storage version: staged payloads use its codecs
	cap int

	// final is the candidate state of every row the commit writes (nil:
	// deleted); committed caches stored rows read for the pass.
	final     map[rowKey]*store.Row
	committed map[rowKey]*store.Row
	appended  int
}

// live reports whether r is a present row (tombstones are absent).
func live(r *store.Row) bool { return r != nil && !r.Deleted }

// enforceReferences runs the §6.11 rules once over the commit's candidate
// state, after every client operation is staged (§6.8 order). On a
// violation it sets ev.reject and ev.details; otherwise it appends the
// CASCADE deletes and SET NULL upserts to ev.changes and ev.rows and puts
// the reference-index writes of the whole commit in ev.refs.
func (e *Engine) enforceReferences(ctx context.Context, rs *reqState, pc *wire.PushCommit, ev *evaluation) error {
	sv := e.schema.Versions[e.schema.Latest]
	if !sv.HasReferences() || len(ev.rows) == 0 {
		return nil
	}
	p := &refPass{
		e: e, ctx: ctx, rs: rs, pc: pc, ev: ev, sv: sv,
		cap:       e.limits.MaxCascadeOperationsPerCommit,
		final:     make(map[rowKey]*store.Row, len(ev.rows)),
		committed: make(map[rowKey]*store.Row, ev.stored.size()),
	}
	// evaluate read every row the operations name; one it did not find
	// is known to be absent.
	for i := range pc.Operations {
		p.committed[rowKey{pc.Operations[i].Table, pc.Operations[i].RowID}] = nil
	}
	ev.stored.each(func(k rowKey, r *store.Row) { p.committed[k] = r })
	for i := range ev.rows {
		w := &ev.rows[i]
		k := rowKey{w.Table, w.Row.RowID}
		if w.Delete {
			p.final[k] = nil
		} else {
			p.final[k] = &w.Row
		}
	}
	done, err := p.checkParents()
	if err != nil || done {
		return err
	}
	if done, err = p.deletes(); err != nil || done {
		return err
	}
	return p.indexWrites()
}

// reject records the terminating violation.
func (p *refPass) reject(opIndex int, reason string, fieldPaths []string, refs map[string]string) (bool, error) {
	p.ev.reject, p.ev.details = referenceReject(p.pc.ClientCommitID, int32(opIndex), reason, fieldPaths, refs)
	return true, nil
}

// candidate returns the candidate state of a row, reading stored rows
// the pass has not seen yet in one batch per table.
func (p *refPass) candidate(table string, ids []string) (map[string]*store.Row, error) {
	out := make(map[string]*store.Row, len(ids))
	var missing []string
	for _, id := range ids {
		k := rowKey{table, id}
		if r, ok := p.final[k]; ok {
			out[id] = r
		} else if r, ok := p.committed[k]; ok {
			out[id] = r
		} else {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		got, err := p.e.store.GetRows(p.ctx, p.rs.auth.Partition, table, missing)
		if err != nil {
			return nil, storeErr(err, "read referenced rows")
		}
		for _, id := range missing {
			r := got[id]
			p.committed[rowKey{table, id}] = r
			out[id] = r
		}
	}
	return out, nil
}

// refValue is the parent id a row's reference column holds.
func refValue(t *schema.Table, ref *schema.Reference, vals []rowcodec.Value) (string, bool) {
	v := vals[ref.ColumnIndex]
	if v.Null {
		return "", false
	}
	return valueText(t.Columns[ref.ColumnIndex].Type, v), true
}

func (p *refPass) decode(t *schema.Table, r *store.Row) ([]rowcodec.Value, error) {
	vals, _, err := p.e.storedRow(t, r, nil)
	if err != nil {
		return nil, syncerr.Wrap(err, syncerr.OperationExecutionFailed, "stored row %s/%s does not decode", t.Name, r.RowID)
	}
	return vals, nil
}

// checkParents is the first §6.11 rule: a reference column that an
// upsert of the commit presents and whose candidate value is non-null must
// name a parent present in the candidate state with the child's scope
// values (else missing_parent, see sameScope).
// The violation is attributed to the last upsert of the row that
// presented the column, whose value is the candidate one. A column no
// upsert presents keeps its committed value and is not re-checked (a
// sparse v3 patch of other columns, or a client schema version without
// the column).
func (p *refPass) checkParents() (bool, error) {
	ops := p.pc.Operations
	type refAt struct {
		k   rowKey
		ref int
	}
	last := map[refAt]int{}
	for i := range ops {
		op := &ops[i]
		t, ok := p.sv.Table(op.Table)
		if op.Op != wire.OpUpsert || !ok {
			continue
		}
		for j := range t.References {
			if p.referencePresent(op, &t.References[j]) {
				last[refAt{rowKey{op.Table, op.RowID}, j}] = i
			}
		}
	}
	if len(last) == 0 {
		return false, nil
	}
	type need struct {
		op     int
		child  *schema.Table
		scopes wire.StoredScopes // the child's candidate scopes
		ref    *schema.Reference
		parent string
	}
	var needs []need
	want := map[string][]string{}
	for i := range ops { // in operation order: the first violation terminates
		op := &ops[i]
		t, ok := p.sv.Table(op.Table)
		if op.Op != wire.OpUpsert || !ok {
			continue
		}
		k := rowKey{op.Table, op.RowID}
		var vals []rowcodec.Value
		for j := range t.References {
			if at, ok := last[refAt{k, j}]; !ok || at != i {
				continue
			}
			row := p.final[k]
			if !live(row) {
				break
			}
			if vals == nil {
				var err error
				if vals, err = p.decode(t, row); err != nil {
					return false, err
				}
			}
			ref := &t.References[j]
			if parent, ok := refValue(t, ref, vals); ok {
				needs = append(needs, need{i, t, row.Scopes, ref, parent})
				want[ref.ParentTable] = append(want[ref.ParentTable], parent)
			}
		}
	}
	found := map[rowKey]*store.Row{}
	for table, ids := range want {
		rows, err := p.candidate(table, ids)
		if err != nil {
			return false, err
		}
		for id, r := range rows {
			found[rowKey{table, id}] = r
		}
	}
	for _, n := range needs {
		// A parent in other scope values is reported exactly like an
		// absent one: same reason, message and details, so the answer
		// tells nothing about rows outside the child's scope.
		if parent := found[rowKey{n.ref.ParentTable, n.parent}]; !live(parent) || !sameScope(n.child, n.scopes, parent.Scopes) {
			return p.reject(n.op, reasonMissingParent, []string{n.ref.Column}, map[string]string{"parent": n.ref.ParentTable, "row": n.parent})
		}
	}
	return false, nil
}

// sameScope reports whether two rows of tables declaring t's scope
// patterns (§6.11: a parent and its child declare the same ones) hold the
// same value for every scope variable; a missing or empty value never
// matches (fail closed, as §3.4 step 2).
//
// This is the one rule that confines a declared reference: a child and
// its parent are in the same scopes. A child can only be written by an
// actor allowed its scopes (§3.4), so it can only name a parent that
// actor may see and write; and whoever may delete a parent may write all
// of its children, so RESTRICT, CASCADE and SET NULL never read or write
// across scopes, whatever the deleting actor's grant.
func sameScope(t *schema.Table, a, b wire.StoredScopes) bool {
	for _, sp := range t.Scopes {
		va, ok := storedValue(a, sp.Variable)
		if !ok || va == "" {
			return false
		}
		if vb, ok := storedValue(b, sp.Variable); !ok || vb != va {
			return false
		}
	}
	return true
}

// referencePresent reports whether an upsert presents the reference
// column: a column of the client's schema version that is in a full row
// (wire versions 1 and 2) or has its presence bit set in a sparse row
// (wire version 3, §2.4 "Sparse rows"). evaluate has already decoded the
// payload, so its presence bitmap is well formed.
func (p *refPass) referencePresent(op *wire.Operation, ref *schema.Reference) bool {
	t, ok := p.rs.schemaV.Table(op.Table)
	if !ok {
		return false
	}
	ci := t.ColumnIndex(ref.Column)
	if ci < 0 {
		return false
	}
	if !rulesFor(p.rs.version).sparse {
		return true
	}
	b := op.Payload.Value
	return ci>>3 < len(b) && b[ci>>3]&(1<<(ci&7)) != 0
}

// deleted is a parent row the commit deletes, with the client operation
// the deletion traces back to.
type deleted struct {
	table, id string
	scopes    wire.StoredScopes
	origin    int
}

// restrictCheck is a RESTRICT reference of a deleted parent, decided
// after every cascade ran (candidate state, §6.11).
type restrictCheck struct {
	parent   deleted
	child    *schema.Table
	ref      *schema.Reference
	children []string
}

// deletes applies the ON DELETE actions of every parent the commit
// deletes, recursively through CASCADE with the candidate state as the
// visited set, then decides RESTRICT.
func (p *refPass) deletes() (bool, error) {
	ops := p.pc.Operations
	var queue []deleted
	queued := map[rowKey]bool{}
	for i := range ops {
		op := &ops[i]
		k := rowKey{op.Table, op.RowID}
		if op.Op != wire.OpDelete || len(p.sv.ReferencedBy(op.Table)) == 0 || queued[k] {
			continue
		}
		// Only a row that existed before the commit can have children in
		// the index; children staged in this commit were checked above.
		stored := p.ev.stored.get(k)
		if r, ok := p.final[k]; !ok || r != nil || !live(stored) {
			continue
		}
		queued[k] = true
		queue = append(queue, deleted{op.Table, op.RowID, stored.Scopes, i})
	}
	var restricts []restrictCheck
	for len(queue) > 0 {
		// One cascade level at a time: the index is read for all its
		// parents in one store call (one head check), then processed in
		// queue order exactly as one parent at a time would be.
		level := queue
		queue = nil
		type ask struct {
			d deleted
			r schema.Referrer
		}
		var asks []ask
		var qs []store.ChildQuery
		for _, d := range level {
			for _, r := range p.sv.ReferencedBy(d.table) {
				asks = append(asks, ask{d, r})
				qs = append(qs, store.ChildQuery{ChildTable: r.Table.Name, Column: r.Ref().Column, ParentID: d.id})
			}
		}
		parents := make([]deleted, len(asks))
		for i := range asks {
			parents[i] = asks[i].d
		}
		listed, err := p.listChildren(qs, parents)
		if err != nil {
			return false, err
		}
		for i, a := range asks {
			d, child, ref := a.d, a.r.Table, a.r.Ref()
			ids, rows, err := p.children(child, ref, d, listed[i])
			if err != nil {
				return false, err
			}
			if ref.OnDelete == schema.Restrict {
				restricts = append(restricts, restrictCheck{d, child, ref, ids})
				continue
			}
			for _, id := range ids {
				k := rowKey{child.Name, id}
				row := rows[id]
				if !live(row) {
					continue
				}
				if p.appended == p.cap {
					p.ev.cascaded, p.ev.cascadeOrigin = p.appended+1, int32(d.origin)
					p.ev.rejectCascadeLimit(p.pc.ClientCommitID)
					return true, nil
				}
				p.appended++
				p.ev.cascaded, p.ev.cascadeOrigin = p.appended, int32(d.origin)
				if ref.OnDelete == schema.Cascade {
					p.appendDelete(child, row, d.origin)
					if len(p.sv.ReferencedBy(child.Name)) > 0 && !queued[k] {
						queued[k] = true
						queue = append(queue, deleted{child.Name, id, row.Scopes, d.origin})
					}
					continue
				}
				if err := p.appendSetNull(child, ref, row, d.origin); err != nil {
					return false, err
				}
			}
		}
	}
	var worst *restrictCheck
	for i := range restricts {
		c := &restricts[i]
		if worst != nil && worst.parent.origin <= c.parent.origin {
			continue
		}
		rows, err := p.candidate(c.child.Name, c.children)
		if err != nil {
			return false, err
		}
		for _, id := range c.children {
			if still, err := p.stillChild(c.child, c.ref, rows[id], c.parent); err != nil {
				return false, err
			} else if still {
				worst = c
				break
			}
		}
	}
	if worst != nil {
		p.ev.cascaded = 0 // the rejection is RESTRICT's, whatever cascaded
		return p.reject(worst.parent.origin, reasonRestrictedDelete, nil, map[string]string{"child": worst.child.Name})
	}
	return false, nil
}

// listChildren reads the committed reference index for qs (qs[i] asks for
// the children of parents[i]) in one store call and prefetches the
// candidate state of every listed child, one batched read per child
// table. The read is bounded by the cap plus the rows the commit writes,
// so an overflow is still detected; a query whose window is full and
// holds rows in other scopes than the parent's (which are no children,
// see sameScope) is read again with the window widened by them, so they
// can neither hide a real child nor count towards the cap.
func (p *refPass) listChildren(qs []store.ChildQuery, parents []deleted) ([][]string, error) {
	limit := p.cap - p.appended + 1 + len(p.final)
	listed, err := p.list(qs, limit)
	if err != nil {
		return nil, err
	}
	for i := range listed {
		child, ok := p.sv.Table(qs[i].ChildTable)
		if !ok {
			return nil, syncerr.New(syncerr.OperationExecutionFailed, "reference index names table %q outside the schema", qs[i].ChildTable)
		}
		for window := limit; len(listed[i]) >= window; {
			foreign, err := p.foreign(child, parents[i].scopes, listed[i])
			if err != nil {
				return nil, err
			}
			if window-foreign >= limit {
				break
			}
			window = limit + foreign
			more, err := p.list(qs[i:i+1], window)
			if err != nil {
				return nil, err
			}
			listed[i] = more[0]
		}
	}
	return listed, nil
}

// list is one ListChildren call and the prefetch of its answer.
func (p *refPass) list(qs []store.ChildQuery, limit int) ([][]string, error) {
	listed, err := p.e.store.ListChildren(p.ctx, p.rs.auth.Partition, qs, limit)
	if err != nil {
		return nil, storeErr(err, "list child rows")
	}
	if len(listed) != len(qs) {
		return nil, syncerr.New(syncerr.OperationExecutionFailed, "reference index answered %d of %d queries", len(listed), len(qs))
	}
	byTable := map[string][]string{}
	for i, ids := range listed {
		byTable[qs[i].ChildTable] = append(byTable[qs[i].ChildTable], ids...)
	}
	for table, ids := range byTable {
		if _, err := p.candidate(table, ids); err != nil {
			return nil, err
		}
	}
	return listed, nil
}

// foreign counts the listed rows that are live in the candidate state
// but not in the parent's scopes.
func (p *refPass) foreign(child *schema.Table, scopes wire.StoredScopes, ids []string) (int, error) {
	rows, err := p.candidate(child.Name, ids) // prefetched: no store call
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		if r := rows[id]; live(r) && !sameScope(child, scopes, r.Scopes) {
			n++
		}
	}
	return n, nil
}

// children narrows the committed children of parent (ids, from the
// index) to the rows that reference it in the candidate state now:
// without rows the commit deleted or pointed elsewhere, including by
// actions applied earlier in this pass, and without rows in other scopes
// than the parent's. Only data written before references were confined
// to one scope (sameScope) can hold such a row; it is left as it is:
// not counted, not deleted, not nulled, and it does not block the delete.
func (p *refPass) children(child *schema.Table, ref *schema.Reference, parent deleted, ids []string) ([]string, map[string]*store.Row, error) {
	rows, err := p.candidate(child.Name, ids) // prefetched: no store call
	if err != nil {
		return nil, nil, err
	}
	out := make([]string, 0, len(ids))
	skipped := 0
	for _, id := range ids {
		still, err := p.stillChild(child, ref, rows[id], parent)
		if err != nil {
			return nil, nil, err
		}
		if still {
			out = append(out, id)
		} else if live(rows[id]) && !sameScope(child, parent.scopes, rows[id].Scopes) {
			skipped++
		}
	}
	if skipped > 0 {
		p.e.log.WarnContext(p.ctx, "reference from another scope left untouched by a parent delete",
			"partition", p.rs.auth.Partition, "parentTable", parent.table, "childTable", child.Name, "column", ref.Column, "rows", skipped)
	}
	return out, rows, nil
}

// stillChild reports whether candidate row r references parent from the
// parent's scopes.
func (p *refPass) stillChild(child *schema.Table, ref *schema.Reference, r *store.Row, parent deleted) (bool, error) {
	if !live(r) || !sameScope(child, parent.scopes, r.Scopes) {
		return false, nil
	}
	vals, err := p.decode(child, r)
	if err != nil {
		return false, err
	}
	v, ok := refValue(child, ref, vals)
	return ok && v == parent.id, nil
}

// appendDelete stages a CASCADE delete: an ordinary delete change with
// the child's stored scopes (§6.11, §2.2).
func (p *refPass) appendDelete(child *schema.Table, row *store.Row, origin int) {
	p.ev.changes = append(p.ev.changes, store.Change{Table: child.Name, RowID: row.RowID, Op: wire.OpDelete, Scopes: row.Scopes})
	p.ev.rows = append(p.ev.rows, store.RowWrite{Table: child.Name, Delete: true, Row: store.Row{RowID: row.RowID, Scopes: row.Scopes}})
	p.ev.appended = append(p.ev.appended, appendedOp{row: len(p.ev.rows) - 1, origin: origin, stored: row})
	p.final[rowKey{child.Name, row.RowID}] = nil
}

// appendSetNull stages a SET NULL upsert that writes only the reference
// column: the row version moves and, with column versions, only that
// column's version (§6.11, §6.2).
func (p *refPass) appendSetNull(child *schema.Table, ref *schema.Reference, row *store.Row, origin int) error {
	vals, err := p.decode(child, row)
	if err != nil {
		return err
	}
	vals[ref.ColumnIndex] = rowcodec.Value{Null: true}
	payload, err := child.Codec.Append(nil, vals)
	if err != nil {
		return syncerr.Wrap(err, syncerr.OperationExecutionFailed, "row %s/%s does not re-encode", child.Name, row.RowID)
	}
	// §2.2: the write restamps the reference column only; the others
	// keep their column versions (a row stored without them had every
	// column at its row version).
	nr := store.Row{RowID: row.RowID, Version: row.Version + 1, Scopes: row.Scopes, Payload: payload}
	nr.ColumnVersions = make([]int64, len(child.Columns))
	for j := range nr.ColumnVersions {
		nr.ColumnVersions[j] = columnVersion(row, j)
	}
	nr.ColumnVersions[ref.ColumnIndex] = nr.Version
	p.ev.changes = append(p.ev.changes, store.Change{Table: child.Name, RowID: row.RowID, Op: wire.OpUpsert, RowVersion: nr.Version, Scopes: nr.Scopes, Row: payload})
	p.ev.rows = append(p.ev.rows, store.RowWrite{Table: child.Name, Row: nr})
	p.ev.appended = append(p.ev.appended, appendedOp{row: len(p.ev.rows) - 1, origin: origin, stored: row})
	p.final[rowKey{child.Name, row.RowID}] = &p.ev.rows[len(p.ev.rows)-1].Row
	return nil
}

// indexWrites derives the commit's net reference-index changes from the
// committed and the candidate state of every row it writes.
func (p *refPass) indexWrites() error {
	var out []store.RefWrite
	keys := make([]rowKey, 0, len(p.final))
	for k := range p.final {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b rowKey) int {
		if a.table != b.table {
			return compareStrings(a.table, b.table)
		}
		return compareStrings(a.rowID, b.rowID)
	})
	for _, k := range keys {
		t, ok := p.sv.Table(k.table)
		if !ok || len(t.References) == 0 {
			continue
		}
		if _, ok := p.committed[k]; !ok {
			if _, err := p.candidateCommitted(k); err != nil {
				return err
			}
		}
		before, after := p.committed[k], p.final[k]
		var bv, av []rowcodec.Value
		var err error
		if live(before) {
			if bv, err = p.decode(t, before); err != nil {
				return err
			}
		}
		if live(after) {
			if av, err = p.decode(t, after); err != nil {
				return err
			}
		}
		for j := range t.References {
			ref := &t.References[j]
			var old, cur string
			var hadOld, hasCur bool
			if bv != nil {
				old, hadOld = refValue(t, ref, bv)
			}
			if av != nil {
				cur, hasCur = refValue(t, ref, av)
			}
			if hadOld == hasCur && old == cur {
				continue
			}
			if hadOld {
				out = append(out, store.RefWrite{RefEntry: store.RefEntry{ChildTable: t.Name, Column: ref.Column, ParentID: old, ChildID: k.rowID}, Remove: true})
			}
			if hasCur {
				out = append(out, store.RefWrite{RefEntry: store.RefEntry{ChildTable: t.Name, Column: ref.Column, ParentID: cur, ChildID: k.rowID}})
			}
		}
	}
	p.ev.refs = out
	return nil
}

// candidateCommitted reads the committed state of k into the cache.
func (p *refPass) candidateCommitted(k rowKey) (*store.Row, error) {
	got, err := p.e.store.GetRows(p.ctx, p.rs.auth.Partition, k.table, []string{k.rowID})
	if err != nil {
		return nil, storeErr(err, "read referencing rows")
	}
	p.committed[k] = got[k.rowID]
	return got[k.rowID], nil
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
