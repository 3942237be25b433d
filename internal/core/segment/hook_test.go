package segment

import (
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

func TestWireHookRegistered(t *testing.T) {
	h := wire.ValidateRowsSegment
	if h == nil {
		t.Fatal("wire.ValidateRowsSegment is not set")
	}
	_, good, _ := encodeTasks(t, 3, EncoderOptions{})
	if err := h(good); err != nil {
		t.Fatal(err)
	}
	if err := h(good[:len(good)-4]); !syncerr.HasCode(err, syncerr.InvalidRequest) {
		t.Fatalf("truncated segment: %v", err)
	}
}
