package engine

import (
	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// Rows are stored encoded for the latest schema version (the storage
// version). A client on an older served version gets rows transcoded by
// column name: columns it lacks are dropped. Its writes keep the stored
// values of the columns it does not know (NULL on insert), so an older
// client never erases data a newer one wrote. Same-version requests are
// byte copies.

// transcode re-encodes storage-version bytes for the request version t.
func (e *Engine) transcode(st, t *schema.Table, payload []byte) ([]byte, error) {
	if st == t {
		return payload, nil
	}
	vals, err := st.Codec.Decode(payload, nil)
	if err != nil {
		return nil, syncerr.Wrap(err, syncerr.OperationExecutionFailed, "stored row of %s does not decode", st.Name)
	}
	out := make([]rowcodec.Value, len(t.Columns))
	for i, c := range t.Columns {
		if j := st.ColumnIndex(c.Name); j >= 0 {
			out[i] = vals[j]
		} else {
			out[i] = rowcodec.Value{Null: true}
		}
	}
	b, err := t.Codec.Append(nil, out)
	if err != nil {
		return nil, syncerr.Wrap(err, syncerr.SchemaMismatch, "row of %s cannot be served to schema version", t.Name)
	}
	return b, nil
}
