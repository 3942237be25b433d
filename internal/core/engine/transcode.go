package engine

import (
	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// Rows are stored encoded for the storage version of the build that
// wrote them: the latest version, except rows written before a schema
// bump that a backfill has not rewritten yet (schema.DecodeStored). A
// client on an older served version gets rows transcoded by column
// name: columns it lacks are dropped. Its writes keep the stored values
// of the columns it does not know (NULL on insert), so an older client
// never erases data a newer one wrote. Same-version requests are byte
// copies of rows in the current layout.

// transcode re-encodes stored bytes for the request version t.
func (e *Engine) transcode(st, t *schema.Table, payload []byte) ([]byte, error) {
	if st == t && st.Codec.ValidateRow(payload) == nil {
		return payload, nil
	}
	// An older layout is decoded by the version that wrote it, so a
	// build serving while its backfill runs never sends a row in a
	// layout its client does not read.
	vals, _, err := e.schema.DecodeStored(st, payload, nil)
	if err != nil {
		return nil, syncerr.Wrap(err, syncerr.OperationExecutionFailed, "stored row of %s does not decode", st.Name)
	}
	out := vals
	if st != t {
		out = make([]rowcodec.Value, len(t.Columns))
		for i, c := range t.Columns {
			if j := st.ColumnIndex(c.Name); j >= 0 {
				out[i] = vals[j]
			} else {
				out[i] = rowcodec.Value{Null: true}
			}
		}
	}
	b, err := t.Codec.Append(nil, out)
	if err != nil {
		return nil, syncerr.Wrap(err, syncerr.SchemaMismatch, "row of %s cannot be served to schema version", t.Name)
	}
	return b, nil
}

// storedRow decodes stored row r of latest table st (into dst when its
// capacity allows). A row still in an older layout is read in that
// layout (schema.DecodeStored) and returned as a copy whose column
// versions follow st's columns (a column the old layout lacks is at the
// row's version), so an update writes it in the current layout.
func (e *Engine) storedRow(st *schema.Table, r *store.Row, dst []rowcodec.Value) ([]rowcodec.Value, *store.Row, error) {
	vals, err := st.Codec.Decode(r.Payload, dst)
	if err == nil {
		return vals, r, nil
	}
	vals, layout, lerr := e.schema.DecodeStored(st, r.Payload, r.ColumnVersions)
	if lerr != nil || layout == st {
		return nil, r, err
	}
	m := *r
	m.ColumnVersions = make([]int64, len(st.Columns))
	for i, c := range st.Columns {
		m.ColumnVersions[i] = r.Version
		if j := layout.ColumnIndex(c.Name); j >= 0 && j < len(r.ColumnVersions) {
			m.ColumnVersions[i] = r.ColumnVersions[j]
		}
	}
	return vals, &m, nil
}
