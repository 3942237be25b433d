package wiring

import (
	"context"
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/core/reactions"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// SYNC_REACTIONS_ENABLED=false (a stack deployed with ReactionsEnabled=false)
// tells prune there are no §6.9 reactions to enqueue, so an app that
// registers a planner is refused at start instead of having its planned
// reactions pruned unenqueued; with true (the default) it starts.
func TestNewEngineReactionsOff(t *testing.T) {
	sc := todoSchema(t)
	load := func(v string) *config.Config { return configWith(t, "SYNC_REACTIONS_ENABLED", v) }
	planner := reactions.PlannerFunc(func(context.Context, *reactions.Input) ([]reactions.Planned, error) { return nil, nil })
	for _, v := range []string{"true", ""} {
		if _, err := NewEngine(load(v), Deps{Schema: sc, Store: memstore.New(), Segments: memstore.NewSegments(), Hooks: Hooks{Reactions: planner}}); err != nil {
			t.Fatalf("SYNC_REACTIONS_ENABLED=%q with a planner: %v", v, err)
		}
	}
	if _, err := NewEngine(load("false"), Deps{Schema: sc, Store: memstore.New(), Segments: memstore.NewSegments()}); err != nil {
		t.Fatalf("SYNC_REACTIONS_ENABLED=false without a planner: %v", err)
	}
	_, err := NewEngine(load("false"), Deps{Schema: sc, Store: memstore.New(), Segments: memstore.NewSegments(), Hooks: Hooks{Reactions: planner}})
	if err == nil || !strings.Contains(err.Error(), "SYNC_REACTIONS_ENABLED=false") {
		t.Fatalf("SYNC_REACTIONS_ENABLED=false with a planner: %v", err)
	}
}
