package syncular_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/skyfold/syncular-lambda/syncular"
)

// An app adds a business rule and a durable reaction, and each of its
// function mains calls LambdaMain with the function it is.
func ExampleApp() {
	app := &syncular.App{
		Validators: map[string]syncular.RowValidator{
			"tasks": func(_ context.Context, _ syncular.Caller, op *syncular.Operation) error {
				if !op.Delete && op.Row["title"] == "" {
					return syncular.Reject("task.title_blank", "a task needs a title", nil)
				}
				return nil
			},
		},
		PlanReactions: func(_ context.Context, c *syncular.Commit) ([]syncular.Reaction, error) {
			var out []syncular.Reaction
			for _, ch := range c.Changes {
				if ch.Table == "tasks" && !ch.Deleted {
					out = append(out, syncular.Reaction{Key: ch.RowID, Type: "task.written", Version: 1, Payload: ch.Row})
				}
			}
			return out, nil
		},
		ReactionHandlers: map[string]syncular.ReactionHandler{
			"task.written": func(_ context.Context, d *syncular.Delivery) error {
				var row map[string]any
				if err := json.Unmarshal(d.Payload, &row); err != nil {
					return syncular.Permanent("task.bad_payload", err)
				}
				fmt.Println("task written:", row["title"], "key", d.IdempotencyKey)
				return nil
			},
		},
	}
	_ = app // in functions/push/main.go: app.LambdaMain(syncular.Push)
}

// A scope resolver of the app's own: here every actor may read and write
// the project named after it.
func ExampleScopeResolverFunc() {
	resolver := syncular.ScopeResolverFunc(func(_ context.Context, who syncular.Actor) (syncular.Scopes, error) {
		return syncular.Scopes{"project_id": {"home-" + who.ID}}, nil
	})
	s, _ := resolver.ResolveScopes(context.Background(), syncular.Actor{ID: "alice"})
	fmt.Println(s["project_id"])
	// Output: [home-alice]
}
