package schema

import (
	"fmt"
	"slices"

	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
)

// DecodeStored decodes a stored row payload of latest-version table st
// into st's columns. Rows are stored in the layout of the storage
// version that wrote them, so a row written before a schema bump that
// changed st's columns is still in an older layout until a backfill
// rewrites it: the payload is decoded with st's codec, else with each
// older served version's codec of the table, newest first, and its
// values moved over by column name (a column the old layout lacks, or
// holds with another type, is NULL). Stored column versions (§2.2 of
// the wire-3 spec) have one entry per column of the writer's layout,
// which picks the layout when the row has them. layout is the table the
// payload decoded with (st when current). An older layout decodes only
// when the document keeps that version's tables (schemaVersions[].tables
// or a merged document).
func (s *Schema) DecodeStored(st *Table, payload []byte, columnVersions []int64) (vals []rowcodec.Value, layout *Table, err error) {
	cands := []*Table{st}
	served := s.Served()
	slices.Reverse(served)
	for _, n := range served {
		if t, ok := s.Versions[n].Table(st.Name); ok && t != st && !slices.Equal(t.Columns, st.Columns) {
			cands = append(cands, t)
		}
	}
	var firstErr error
	for _, t := range cands {
		if columnVersions != nil && len(columnVersions) != len(t.Columns) {
			continue
		}
		got, err := t.Codec.Decode(payload, nil)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if t == st {
			return got, st, nil
		}
		out := make([]rowcodec.Value, len(st.Columns))
		for i, c := range st.Columns {
			out[i] = rowcodec.Value{Null: true}
			if j := t.ColumnIndex(c.Name); j >= 0 && t.Columns[j].Type == c.Type {
				out[i] = got[j]
			}
		}
		return out, t, nil
	}
	if firstErr == nil {
		firstErr = fmt.Errorf("no served layout has %d columns", len(columnVersions))
	}
	return nil, nil, fmt.Errorf("stored row of %s decodes in no served layout (keep the previous version's tables in the schema document): %w", st.Name, firstErr)
}
