// Package crdt is the server's CRDT merger registry (SPEC §5.10.2): the
// merge function of each crdtType a schema's crdt columns may name. The
// engine merges every pushed crdt value into the stored one through it;
// hosts add their own mergers beside the built-in yjs-doc.
package crdt

import "github.com/skyfold/syncular-lambda/internal/core/crdt/yjs"

// YjsDoc is the crdtType of the built-in Yjs merger (§5.10.1).
const YjsDoc = "yjs-doc"

// Merger merges a pushed CRDT value into the stored one. stored is nil
// when the row is new or the column was NULL. The result is the column's
// new value. Merge must be commutative, associative and idempotent over
// the updates it consumes (§5.10.2); an error rejects the operation with
// sync.crdt_merge_failed and rolls the commit back.
type Merger interface {
	Merge(stored, incoming []byte) ([]byte, error)
}

// MergeFunc adapts a function to Merger.
type MergeFunc func(stored, incoming []byte) ([]byte, error)

// Merge calls f.
func (f MergeFunc) Merge(stored, incoming []byte) ([]byte, error) { return f(stored, incoming) }

// Registry maps a crdtType to its merger. A nil Registry has no mergers.
type Registry map[string]Merger

// Lookup returns the merger of crdtType, if one is registered.
func (r Registry) Lookup(crdtType string) (Merger, bool) {
	m, ok := r[crdtType]
	return m, ok && m != nil
}

// Has reports whether crdtType has a merger (schema.CheckCRDTTypes takes
// it to refuse a schema naming an unknown crdtType before serving).
func (r Registry) Has(crdtType string) bool {
	_, ok := r.Lookup(crdtType)
	return ok
}

// Default is a registry holding the built-in mergers: yjs-doc.
func Default() Registry {
	return Registry{YjsDoc: MergeFunc(mergeYjs)}
}

// mergeYjs merges Yjs version-1 updates in pure Go. A first value is
// merged alone, which validates it and stores it in canonical form.
func mergeYjs(stored, incoming []byte) ([]byte, error) {
	if stored == nil {
		return yjs.Merge(incoming)
	}
	return yjs.Merge(stored, incoming)
}
