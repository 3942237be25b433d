// Package syncular builds this sync backend's functions with an app's own
// code: write validators (§6.7) and whole-commit validators (§6.8),
// durable reactions (§6.9), CRDT mergers (§5.10) and a scope resolver
// (§3.2). An app writes one small main package per function that calls
// the same App:
//
//	// functions/push/main.go of the app
//	func main() { myapp.App().LambdaMain(syncular.Push) }
//
// and deploys with the project's template (docs/APPS.md), or runs every
// function at once locally with App.RunLocal. Everything here is plain
// values and small interfaces; nothing of the internal packages leaks
// into the API, so the internals can change without breaking an app.
package syncular
