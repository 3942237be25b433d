package crdt

import (
	"bytes"
	"errors"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/crdt/yjs"
)

func TestDefaultRegistry(t *testing.T) {
	var none Registry
	if none.Has(YjsDoc) {
		t.Fatal("a nil registry has a merger")
	}
	r := Default()
	if !r.Has(YjsDoc) || r.Has("rga-log") {
		t.Fatalf("Default() = %v, want exactly yjs-doc", r)
	}
	m, _ := r.Lookup(YjsDoc)
	// Client 1 inserts "hi" into the root text "t" (update format v1).
	hi := []byte{1, 1, 1, 0, 4, 1, 1, 't', 2, 'h', 'i', 0}
	// §5.10.2: NULL stored state is the empty document; a first value is
	// stored as merged with nothing, and merging it again changes nothing.
	first, err := m.Merge(nil, hi)
	if err != nil || !bytes.Equal(first, hi) {
		t.Fatalf("Merge(nil, hi) = %x, %v; want %x", first, err, hi)
	}
	again, err := m.Merge(first, hi)
	if err != nil || !bytes.Equal(again, hi) {
		t.Fatalf("Merge(hi, hi) = %x, %v; want %x", again, err, hi)
	}
	if _, err := m.Merge(first, []byte{1, 2, 3}); !errors.Is(err, yjs.ErrMalformed) {
		t.Fatalf("Merge of malformed bytes: %v, want ErrMalformed", err)
	}
}
