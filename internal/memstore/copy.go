package memstore

import (
	"bytes"
	"slices"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
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

// copyCommit deep-copies a commit in four allocations whatever its size:
// the commit, its changes, and one arena each for the row bytes and the
// scopes, which every change slices with a capped capacity (an append by
// the caller reallocates instead of writing into a neighbour). Pulls copy
// every commit they read, so this is on the hot path of every pull.
func copyCommit(in *store.Commit) *store.Commit {
	c := *in
	if in.Changes == nil {
		return &c
	}
	rowBytes, scopes := 0, 0
	for i := range in.Changes {
		rowBytes += len(in.Changes[i].Row)
		scopes += len(in.Changes[i].Scopes)
	}
	rowArena := make([]byte, 0, rowBytes)
	scopeArena := make(wire.StoredScopes, 0, scopes)
	c.Changes = make([]store.Change, len(in.Changes))
	for i := range in.Changes {
		ch := in.Changes[i]
		if ch.Row != nil {
			off := len(rowArena)
			rowArena = append(rowArena, ch.Row...)
			ch.Row = rowArena[off:len(rowArena):len(rowArena)]
		}
		if ch.Scopes != nil {
			off := len(scopeArena)
			scopeArena = append(scopeArena, ch.Scopes...)
			ch.Scopes = scopeArena[off:len(scopeArena):len(scopeArena)]
		}
		c.Changes[i] = ch
	}
	return &c
}
