package syncular

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/reactions"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// An App's hooks reach the engine as the app wrote them: a rule refuses
// with the app's code and writes nothing, a reaction is planned from the
// accepted row and reaches the app's handler with plain values.
func TestAppHooksThroughTheEngine(t *testing.T) {
	var delivered []Delivery
	a := &App{
		Validators: map[string]RowValidator{"tasks": func(_ context.Context, who Caller, op *Operation) error {
			if who.ActorID != "alice" || op.Table != "tasks" || op.Delete {
				return errors.New("unexpected evidence")
			}
			if op.Row["title"] == "" {
				return Reject("app.title_blank", "title is blank", &RejectDetails{FieldPaths: []string{"title"}})
			}
			return nil
		}},
		PlanReactions: func(_ context.Context, c *Commit) ([]Reaction, error) {
			var row struct {
				Title string `json:"title"`
			}
			if err := json.Unmarshal(c.Changes[0].Row, &row); err != nil {
				return nil, err
			}
			return []Reaction{{Key: "k", Type: "greet", Version: 1, Payload: json.RawMessage(`{"title":"` + row.Title + `"}`)}}, nil
		},
		ReactionHandlers: map[string]ReactionHandler{"greet": func(_ context.Context, d *Delivery) error {
			delivered = append(delivered, *d)
			return nil
		}},
	}
	hooks := a.hooks()
	st := memstore.New()
	h := enginetest.New(t, st, memstore.NewSegments(), enginetest.Options{Reactions: hooks.Reactions})
	if err := h.Engine.SetValidators(hooks.Validators); err != nil {
		t.Fatal(err)
	}
	h.Grants.Set("alice", engine.ScopeMap{"project_id": {"p1"}})
	c := h.ClientV3("part", "alice", "phone")

	r := c.Push("c1", enginetest.Upsert("tasks", "t1", c.Task("t1", "p1", "", false), 0))
	if r.Status != wire.PushRejected || len(r.Results) == 0 || r.Results[0].Code != "app.title_blank" {
		t.Fatalf("blank title: %+v", r)
	}
	if head, _, _ := st.Head(context.Background(), "part"); head.MaxCommitSeq != 0 {
		t.Fatalf("a refused commit was written: head %d", head.MaxCommitSeq)
	}
	if r := c.Push("c2", enginetest.Upsert("tasks", "t1", c.Task("t1", "p1", "hello", false), 0)); r.Status != wire.PushApplied {
		t.Fatalf("valid title: %+v", r)
	}
	run := &reactions.Runner{Log: st, Store: st, Handlers: a.handlers(), Now: func() time.Time { return time.UnixMilli(h.Clock.Now()) }}
	if _, err := run.RunPartition(context.Background(), "part"); err != nil {
		t.Fatal(err)
	}
	if len(delivered) != 1 || string(delivered[0].Payload) != `{"title":"hello"}` || delivered[0].ClientCommitID != "c2" || delivered[0].IdempotencyKey != `["part","phone","c2","k"]` {
		t.Fatalf("delivered %+v", delivered)
	}
	var _ store.ReactionStore = st
}

// The scope resolver gets who the request is for.
func TestAppScopeResolver(t *testing.T) {
	var got Actor
	a := &App{Scopes: ScopeResolverFunc(func(_ context.Context, who Actor) (Scopes, error) {
		got = who
		return Scopes{"project_id": {"p1"}}, nil
	})}
	m, err := a.hooks().Resolver.ResolveScopes(context.Background(), "part", "alice", "phone")
	if err != nil || len(m["project_id"]) != 1 || got != (Actor{Partition: "part", ID: "alice", ClientID: "phone"}) {
		t.Fatalf("%v %v %+v", m, err, got)
	}
}

// An app's merger joins the built-in one; yjs-doc stays the built-in.
func TestAppMergers(t *testing.T) {
	a := &App{Mergers: map[string]Merger{
		"max-bytes": func(stored, incoming []byte) ([]byte, error) {
			if len(stored) > len(incoming) {
				return stored, nil
			}
			return incoming, nil
		},
		"yjs-doc": func([]byte, []byte) ([]byte, error) { return nil, errors.New("replaced") },
	}}
	h := a.hooks()
	m, ok := h.Mergers.Lookup("max-bytes")
	if !ok {
		t.Fatal("app merger missing")
	}
	if out, err := m.Merge([]byte("ab"), []byte("c")); err != nil || string(out) != "ab" {
		t.Fatalf("merge %q %v", out, err)
	}
	if len(h.Mergers) != 2 {
		t.Fatalf("registry %v", h.Mergers)
	}
}
