package memstore

import (
	"bytes"
	"slices"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// cloneRow decouples a row's memory from the caller's (commits and
// outcomes are decoupled by their encoding, logcodec.go). StoredScope
// holds only strings, so cloning the slice copies the scopes fully.
// bytes.Clone and slices.Clone keep nil distinct from empty.
func cloneRow(r *store.Row) store.Row {
	c := *r
	c.Scopes = slices.Clone(r.Scopes)
	c.Payload = bytes.Clone(r.Payload)
	c.ColumnVersions = slices.Clone(r.ColumnVersions)
	return c
}
