package engine

import (
	"context"
	"fmt"
	"slices"

	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/validate"
)

// candidateReader is the §6.8 candidate-state reader of one commit: the
// partition's rows with the commit's staged writes (its own operations
// and what declared references appended) over them. Rows it reads from
// the store reflect at least the head the commit is conditioned on, and
// the commit lands only if that head has not moved, so what the
// validator saw is what the commit applies to.
type candidateReader struct {
	run *pushRun
	sv  *schema.Version
	// staged is every row the commit writes (nil: deleted by it).
	staged map[rowKey]*store.Row
	// failed is a storage failure under a read: the commit then fails
	// request-level whatever the validator made of it.
	failed error
}

func newCandidateReader(run *pushRun, ev *evaluation) *candidateReader {
	c := &candidateReader{run: run, sv: run.e.schema.Versions[run.e.schema.Latest], staged: make(map[rowKey]*store.Row, len(ev.rows))}
	for i := range ev.rows {
		w := &ev.rows[i]
		if w.Delete {
			c.staged[rowKey{w.Table, w.Row.RowID}] = nil
		} else {
			c.staged[rowKey{w.Table, w.Row.RowID}] = &w.Row
		}
	}
	return c
}

func (c *candidateReader) table(name string) (*schema.Table, error) {
	t, ok := c.sv.Table(name)
	if !ok {
		return nil, fmt.Errorf("%w: unknown table %q", validate.ErrBadScan, name)
	}
	return t, nil
}

// GetRow implements validate.Reader.
func (c *candidateReader) GetRow(ctx context.Context, table, rowID string) (validate.Row, int64, bool, error) {
	t, err := c.table(table)
	if err != nil {
		return nil, 0, false, err
	}
	r, staged := c.staged[rowKey{table, rowID}]
	if !staged {
		rows, err := c.run.e.store.GetRows(ctx, c.run.rs.auth.Partition, table, []string{rowID})
		if err != nil {
			c.failed = storeErr(err, "read candidate row")
			return nil, 0, false, c.failed
		}
		r = rows[rowID]
	}
	if !live(r) {
		return nil, 0, false, nil
	}
	row, err := decodeRow(t, r.Payload)
	if err != nil {
		return nil, 0, false, err
	}
	return row, r.Version, true, nil
}

// ScanRows implements validate.Reader: the candidate rows of q.Table
// whose scopes match q.Scopes, ascending by rowId. Each value of the
// first filter variable is read through the store's scope index, as far
// as Limit matching rows plus the rows the commit stages in the table
// (each of which can drop one), so the page is exact.
func (c *candidateReader) ScanRows(ctx context.Context, q validate.Scan) ([]validate.ScannedRow, error) {
	t, err := c.table(q.Table)
	if err != nil {
		return nil, err
	}
	limit := q.Limit
	if limit == 0 {
		limit = validate.DefaultScanLimit
	}
	if limit < 1 || limit > validate.MaxScanLimit {
		return nil, fmt.Errorf("%w: limit %d is outside 1..%d", validate.ErrBadScan, q.Limit, validate.MaxScanLimit)
	}
	if len(q.Scopes) == 0 {
		return nil, validate.ErrScanRequiresScope
	}
	eff := make(ScopeMap, len(q.Scopes))
	for k, vals := range q.Scopes {
		if !t.HasVariable(k) {
			return nil, fmt.Errorf("%w: table %q has no scope variable %q", validate.ErrBadScan, q.Table, k)
		}
		if len(vals) == 0 {
			return nil, validate.ErrScanRequiresScope
		}
		eff[k] = dedupSorted(vals)
	}
	after := func(id string) bool { return !q.HasAfter || id > q.AfterRowID }
	stagedHere := 0
	for k := range c.staged {
		if k.table == q.Table {
			stagedHere++
		}
	}
	want := limit + stagedHere
	drive := slices.Sorted(func(yield func(string) bool) {
		for k := range eff {
			if !yield(k) {
				return
			}
		}
	})[0]
	found := map[string]*store.Row{}
	for _, v := range eff[drive] {
		var cur *store.ScopeCursor
		if q.HasAfter {
			cur = &store.ScopeCursor{Value: v, RowID: q.AfterRowID}
		}
		n := 0
		err := c.run.e.store.ScanScopedRows(ctx, c.run.rs.auth.Partition, q.Table, drive, []string{v}, cur, want, func(_ string, r *store.Row) bool {
			if matchesScopes(r.Scopes, eff) {
				found[r.RowID] = r
				n++
			}
			return n < want
		})
		if err != nil {
			c.failed = storeErr(err, "scan candidate rows")
			return nil, c.failed
		}
	}
	for k, r := range c.staged {
		if k.table != q.Table || !after(k.rowID) {
			continue
		}
		if r != nil && matchesScopes(r.Scopes, eff) {
			found[k.rowID] = r
		} else {
			delete(found, k.rowID)
		}
	}
	ids := make([]string, 0, len(found))
	for id := range found {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	ids = ids[:min(len(ids), limit)]
	out := make([]validate.ScannedRow, len(ids))
	for i, id := range ids {
		r := found[id]
		row, err := decodeRow(t, r.Payload)
		if err != nil {
			return nil, err
		}
		out[i] = validate.ScannedRow{RowID: id, Version: r.Version, Row: row}
	}
	return out, nil
}
