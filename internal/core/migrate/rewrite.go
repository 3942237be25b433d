package migrate

import (
	"context"
	"fmt"

	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// Values is one decoded row by column name, in the latest schema
// version's columns (a column the row's stored layout lacks is NULL).
type Values map[string]rowcodec.Value

// RowHook is a host's Go backfill of one row of table: given its current
// values it returns the columns to change and their new values, or nil
// (or an empty map) when the row is unchanged. It must be idempotent:
// given a row it already rewrote it returns nil. It may not change the
// primary key, scope, reference, encrypted, bytes, blob_ref or crdt
// columns (schema.Table.BackfillProtected). An error stops the backfill
// before its batch writes anything; the next run retries the batch.
type RowHook func(ctx context.Context, table string, row Values) (Values, error)

// Hooks are the RowHooks a host registers, by backfill (checkpoint)
// name.
type Hooks map[string]RowHook

// Declarations is every backfill checkpoint a build declares, with its
// transform:
//   - each backfill of the schema document (schema.Backfill), on its
//     table, rewriting rows by its rules, then by the host's hook of the
//     same name when there is one;
//   - each SYNC_CHECKPOINTS entry (checkpoints, ParseDeclarations): with
//     a hook of the same name the hook rewrites its source tables' rows;
//     without one the checkpoint only verifies.
//
// A hook naming no declared backfill, or a name declared twice, is an
// error: a host's transform must never be silently skipped.
func Declarations(sch *schema.Schema, checkpoints string, hooks Hooks) ([]Declaration, error) {
	env, err := ParseDeclarations(checkpoints)
	if err != nil {
		return nil, fmt.Errorf("SYNC_CHECKPOINTS: %w", err)
	}
	var out []Declaration
	used := map[string]bool{}
	for _, bf := range sch.Backfills {
		used[bf.Name] = true
		w := &rewriter{sch: sch, name: bf.Name, rules: bf, hook: hooks[bf.Name]}
		out = append(out, Declaration{Name: bf.Name, Sources: []string{bf.Table}, Transform: w.transform})
	}
	for _, d := range env {
		if used[d.Name] {
			return nil, fmt.Errorf("checkpoint %q is declared by both the schema's backfills and SYNC_CHECKPOINTS", d.Name)
		}
		used[d.Name] = true
		if h := hooks[d.Name]; h != nil {
			latest := sch.Versions[sch.Latest]
			for _, t := range d.Sources {
				if _, ok := latest.Table(t); !ok {
					return nil, fmt.Errorf("checkpoint %q: hook backfill of table %q, which the latest schema version %d lacks", d.Name, t, sch.Latest)
				}
			}
			w := &rewriter{sch: sch, name: d.Name, hook: h}
			d.Transform = w.transform
		}
		out = append(out, d)
	}
	for name := range hooks {
		if !used[name] {
			return nil, fmt.Errorf("a backfill hook is registered for %q, which neither the schema's backfills nor SYNC_CHECKPOINTS declare", name)
		}
	}
	return out, nil
}

// rewriter rewrites rows in place: the stored row decoded (from the
// layout it was written in), rules then hook applied, re-encoded in the
// latest version's layout as the row's next server_version (§2.2).
type rewriter struct {
	sch   *schema.Schema
	name  string
	rules *schema.Backfill // nil: hook only
	hook  RowHook          // nil: rules only
}

func (w *rewriter) transform(ctx context.Context, table string, row *store.Row) ([]store.RowWrite, error) {
	st, ok := w.sch.Versions[w.sch.Latest].Table(table)
	if !ok {
		return nil, fmt.Errorf("table %q is not in the latest schema version %d", table, w.sch.Latest)
	}
	vals, layout, err := w.sch.DecodeStored(st, row.Payload, row.ColumnVersions)
	if err != nil {
		return nil, err
	}
	changed := make([]bool, len(st.Columns))
	write := layout != st // a row of an older layout is rewritten anyway
	if w.rules != nil && w.rules.Table == table {
		for _, i := range w.rules.Apply(st, vals) {
			changed[i], write = true, true
		}
	}
	if w.hook != nil {
		in := make(Values, len(st.Columns))
		for i, c := range st.Columns {
			in[c.Name] = vals[i]
		}
		out, err := w.hook(ctx, table, in)
		if err != nil {
			return nil, fmt.Errorf("backfill hook %s: %w", w.name, err)
		}
		for name, v := range out {
			i := st.ColumnIndex(name)
			if i < 0 {
				return nil, fmt.Errorf("backfill hook %s set column %q, which table %s lacks", w.name, name, table)
			}
			if why := st.BackfillProtected(i); why != "" {
				return nil, fmt.Errorf("backfill hook %s may not set column %q: %s", w.name, name, why)
			}
			if !schema.SameValue(st.Columns[i].Type, vals[i], v) {
				vals[i] = v
				changed[i], write = true, true
			}
		}
	}
	if !write {
		return nil, nil
	}
	payload, err := st.Codec.Append(nil, vals)
	if err != nil {
		return nil, fmt.Errorf("backfilled row does not encode: %w", err)
	}
	// §2.2: the rewrite is the row's next version; the columns it wrote,
	// and those its stored layout lacked, take that version.
	next := row.Version + 1
	cv := make([]int64, len(st.Columns))
	for i, c := range st.Columns {
		j := layout.ColumnIndex(c.Name)
		switch {
		case changed[i] || j < 0:
			cv[i] = next
		case j < len(row.ColumnVersions):
			cv[i] = row.ColumnVersions[j]
		default:
			cv[i] = row.Version
		}
	}
	return []store.RowWrite{{Table: table, Row: store.Row{RowID: row.RowID, Version: next, ColumnVersions: cv, Scopes: row.Scopes, Payload: payload}}}, nil
}
