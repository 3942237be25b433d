package wiring

import (
	"errors"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/crdt"
)

// An app adds mergers; it cannot replace the built-in yjs-doc.
func TestMergersKeepTheBuiltIn(t *testing.T) {
	bad := crdt.MergeFunc(func([]byte, []byte) ([]byte, error) { return nil, errors.New("replaced") })
	r := mergers(crdt.Registry{crdt.YjsDoc: bad, "other": bad})
	if !r.Has("other") || len(r) != 2 {
		t.Fatalf("registry %v", r)
	}
	m, _ := r.Lookup(crdt.YjsDoc)
	if _, err := m.Merge(nil, []byte{0, 0}); err != nil && err.Error() == "replaced" {
		t.Fatal("the app replaced the built-in yjs-doc merger")
	}
}
