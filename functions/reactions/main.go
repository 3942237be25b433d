// Command reactions is the stock reactions function: it has no handlers
// of its own, so it only enqueues and keeps records; an app builds its
// own with handlers (syncular.App.ReactionsMain, docs/APPS.md).
// Build with -tags lambda.norpc.
package main

import "github.com/skyfold/syncular-lambda/internal/app"

func main() { app.ReactionsMain(nil) }
