package enginetest

import (
	"context"

	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// ClientV3 returns a wire-version-3 client (every stock client since
// 0.21) that has acquired the epoch. Its upsert payloads are sparse rows
// (§2.4); Task and Row encode every column as present.
func (h *Harness) ClientV3(partition, actor, clientID string) *Client {
	h.T.Helper()
	c := &Client{H: h, Partition: partition, Actor: actor, ID: clientID, Version: wire.Version3, Schema: h.Schema.Latest, Accept: wire.AcceptInlineRows | wire.AcceptExternalRows}
	resp, err := c.Send(c.Request(nil, nil, nil))
	if err != nil {
		h.T.Fatalf("epoch acquisition: %v", err)
	}
	if resp.WireVersion != wire.Version3 {
		h.T.Fatalf("a version-3 request was answered in wire version %d", resp.WireVersion)
	}
	hdr := resp.Frames[0].(*wire.RespHeader)
	if !hdr.ResetRequired || hdr.LogEpoch == "" {
		h.T.Fatalf("epoch acquisition: want resetRequired and an epoch, got %+v", hdr)
	}
	c.Epoch = hdr.LogEpoch
	return c
}

// Cols names column values for Row and Patch.
type Cols map[string]rowcodec.Value

// S, I, B and Null build values.
func S(s string) rowcodec.Value { return rowcodec.Value{Str: s} }

// I is an integer value.
func I(i int64) rowcodec.Value { return rowcodec.Value{Int: i} }

// B is a boolean value.
func B(b bool) rowcodec.Value { return rowcodec.Value{Bool: b} }

// Null is the NULL value.
func Null() rowcodec.Value { return rowcodec.Value{Null: true} }

// Row encodes a payload presenting every column of the client's version
// of table; columns missing from cols are NULL. A version-3 client sends a
// sparse row with every presence bit set, older clients a full row.
func (c *Client) Row(table string, cols Cols) []byte {
	c.H.T.Helper()
	t := c.Codec(table)
	vals := make([]rowcodec.Value, len(t.Columns))
	present := make([]bool, len(t.Columns))
	for i, col := range t.Columns {
		v, ok := cols[col.Name]
		if !ok {
			v = rowcodec.Value{Null: true}
		}
		vals[i], present[i] = v, true
	}
	return c.encode(table, vals, present)
}

// Patch encodes a sparse payload presenting exactly the named columns
// (the primary key must be among them). Version 3 only.
func (c *Client) Patch(table string, cols Cols) []byte {
	c.H.T.Helper()
	if c.Version < wire.Version3 {
		c.H.T.Fatalf("client %s speaks wire version %d, which has no sparse rows", c.ID, c.Version)
	}
	t := c.Codec(table)
	vals := make([]rowcodec.Value, len(t.Columns))
	present := make([]bool, len(t.Columns))
	for i, col := range t.Columns {
		vals[i], present[i] = cols[col.Name]
	}
	for name := range cols {
		if t.ColumnIndex(name) < 0 {
			c.H.T.Fatalf("table %s has no column %q", table, name)
		}
	}
	return c.encode(table, vals, present)
}

func (c *Client) encode(table string, vals []rowcodec.Value, present []bool) []byte {
	c.H.T.Helper()
	t := c.Codec(table)
	var b []byte
	var err error
	if c.Version >= wire.Version3 {
		b, err = t.Codec.AppendSparse(nil, vals, present)
	} else {
		b, err = t.Codec.Append(nil, vals)
	}
	if err != nil {
		c.H.T.Fatalf("encode %s row: %v", table, err)
	}
	return b
}

// Stored is a row as the server stores it, decoded with the storage
// (latest) schema version's codec.
type Stored struct {
	*store.Row
	Values Cols
}

// StoredRow reads one row straight from the store (GetRows, so a
// tombstone comes back with Deleted set); nil when the store has neither
// a row nor a tombstone.
func (h *Harness) StoredRow(partition, table, rowID string) *Stored {
	h.T.Helper()
	rows, err := h.Store.GetRows(context.Background(), partition, table, []string{rowID})
	if err != nil {
		h.T.Fatalf("get rows: %v", err)
	}
	r := rows[rowID]
	if r == nil {
		return nil
	}
	out := &Stored{Row: r}
	if r.Deleted {
		return out
	}
	st, _ := h.Schema.Versions[h.Schema.Latest].Table(table)
	vals, err := st.Codec.Decode(r.Payload, nil)
	if err != nil {
		h.T.Fatalf("stored %s/%s does not decode: %v", table, rowID, err)
	}
	out.Values = Cols{}
	for i, col := range st.Columns {
		out.Values[col.Name] = vals[i]
	}
	return out
}

// Bytes is a bytes (or crdt) value.
func Bytes(b []byte) rowcodec.Value { return rowcodec.Value{Bytes: b} }
