// Package customapp is an example app that builds its own function set
// with hooks of its own, through the public package syncular: a rule on
// task titles and a durable reaction that tells a webhook about every
// task written. Its functions
// deploy with the project's template (FUNCTIONS_DIR, docs/APPS.md) and
// run locally with `go run ./examples/customapp/cmd/local`.
package customapp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/skyfold/syncular-lambda/syncular"
)

// App is the example's server: every function's main calls it.
func App() *syncular.App {
	return &syncular.App{
		Validators:    map[string]syncular.RowValidator{"tasks": checkTitle},
		PlanReactions: planTaskCreated,
		ReactionHandlers: map[string]syncular.ReactionHandler{
			"task.created": notifyWebhook(os.Getenv("NOTIFY_WEBHOOK_URL")),
		},
	}
}

// checkTitle refuses a task whose title is blank or longer than 200
// characters, with a code of the app's own the client can show.
func checkTitle(_ context.Context, _ syncular.Caller, op *syncular.Operation) error {
	if op.Delete {
		return nil
	}
	title, _ := op.Row["title"].(string)
	if strings.TrimSpace(title) == "" || utf8.RuneCountInString(title) > 200 {
		return syncular.Reject("task.title_invalid", "a task needs a title of 1 to 200 characters",
			&syncular.RejectDetails{FieldPaths: []string{"title"}, Reason: "title_invalid", RequiredAction: "edit_fields"})
	}
	return nil
}

// planTaskCreated asks for one "task.created" reaction per task a commit
// inserts or updates (the handler decides what is new to it).
func planTaskCreated(_ context.Context, c *syncular.Commit) ([]syncular.Reaction, error) {
	var out []syncular.Reaction
	for _, ch := range c.Changes {
		if ch.Table != "tasks" || ch.Deleted {
			continue
		}
		var row struct {
			ProjectID string `json:"project_id"`
			Title     string `json:"title"`
		}
		if err := json.Unmarshal(ch.Row, &row); err != nil {
			return nil, err
		}
		payload, err := json.Marshal(map[string]string{"task": ch.RowID, "project": row.ProjectID, "title": row.Title, "by": c.ActorID})
		if err != nil {
			return nil, err
		}
		out = append(out, syncular.Reaction{Key: "task:" + ch.RowID, Type: "task.created", Version: 1, Payload: payload})
	}
	return out, nil
}

// notifyWebhook POSTs each reaction's payload to url with its
// idempotency key, so a redelivery collapses to one effect there.
func notifyWebhook(url string) syncular.ReactionHandler {
	client := &http.Client{Timeout: 10 * time.Second}
	return func(ctx context.Context, d *syncular.Delivery) error {
		if d.Version != 1 {
			return syncular.Permanent("task.unknown_version", nil)
		}
		if url == "" {
			return syncular.Permanent("task.no_webhook", errors.New("NOTIFY_WEBHOOK_URL is not set"))
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(d.Payload))
		if err != nil {
			return syncular.Permanent("task.bad_webhook", err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", d.IdempotencyKey)
		resp, err := client.Do(req)
		if err != nil {
			return syncular.Retryable("task.webhook_unreachable", err)
		}
		defer resp.Body.Close()
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
			return syncular.Retryable("task.webhook_busy", fmt.Errorf("HTTP %d", resp.StatusCode))
		}
		if resp.StatusCode >= 300 {
			return syncular.Permanent("task.webhook_refused", fmt.Errorf("HTTP %d", resp.StatusCode))
		}
		return nil
	}
}
