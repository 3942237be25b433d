package memstore

import (
	"bytes"
	"slices"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// The clone helpers are the single place where the store decouples its
// memory from callers'. StoredScope holds only strings, so cloning the
// slice copies the scopes fully. bytes.Clone and slices.Clone keep nil
// distinct from empty.

func cloneRow(r *store.Row) store.Row {
	c := *r
	c.Scopes = slices.Clone(r.Scopes)
	c.Payload = bytes.Clone(r.Payload)
	c.ColumnVersions = slices.Clone(r.ColumnVersions)
	return c
}

func copyOutcome(o *store.Outcome) *store.Outcome {
	c := *o
	c.Result = bytes.Clone(o.Result)
	return &c
}

func copyCommit(in *store.Commit) *store.Commit {
	c := *in
	if in.Changes != nil {
		c.Changes = make([]store.Change, len(in.Changes))
		for i := range in.Changes {
			ch := in.Changes[i]
			ch.Scopes = slices.Clone(ch.Scopes)
			ch.Row = bytes.Clone(ch.Row)
			c.Changes[i] = ch
		}
	}
	return &c
}
