package wiring

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/core/reactions"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// SYNC_REACTIONS_ENABLED=false (a stack deployed with ReactionsEnabled=false)
// tells prune there are no §6.9 reactions to enqueue, so an app that
// registers a planner is refused at start instead of having its planned
// reactions pruned unenqueued; with true (the default) it starts.
func TestNewEngineReactionsOff(t *testing.T) {
	doc, err := os.ReadFile("../../examples/todo/schema.json")
	if err != nil {
		t.Fatal(err)
	}
	sc, err := schema.Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	load := func(v string) *config.Config {
		env := map[string]string{"SYNC_TABLE_NAME": "t", "SYNC_BUCKET": "b", "SYNC_SIGNED_URLS": "off", "SYNC_REACTIONS_ENABLED": v}
		cfg, err := config.Load(func(k string) string { return env[k] })
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	planner := reactions.PlannerFunc(func(context.Context, *reactions.Input) ([]reactions.Planned, error) { return nil, nil })
	for _, v := range []string{"true", ""} {
		if _, err := NewEngine(load(v), Deps{Schema: sc, Store: memstore.New(), Segments: memstore.NewSegments(), Hooks: Hooks{Reactions: planner}}); err != nil {
			t.Fatalf("SYNC_REACTIONS_ENABLED=%q with a planner: %v", v, err)
		}
	}
	if _, err := NewEngine(load("false"), Deps{Schema: sc, Store: memstore.New(), Segments: memstore.NewSegments()}); err != nil {
		t.Fatalf("SYNC_REACTIONS_ENABLED=false without a planner: %v", err)
	}
	_, err = NewEngine(load("false"), Deps{Schema: sc, Store: memstore.New(), Segments: memstore.NewSegments(), Hooks: Hooks{Reactions: planner}})
	if err == nil || !strings.Contains(err.Error(), "SYNC_REACTIONS_ENABLED=false") {
		t.Fatalf("SYNC_REACTIONS_ENABLED=false with a planner: %v", err)
	}
}
