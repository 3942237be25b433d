// Package syncular builds this sync backend's functions with an app's own
// code: a scope resolver, durable reactions and, as they are added, the
// other server hooks of the Syncular spec. An app writes one small main
// package per function that calls the same App:
//
//	// functions/push/main.go of the app
//	func main() { myapp.App().LambdaMain(syncular.Push) }
//
// and deploys with the project's template (docs/APPS.md), or runs every
// function at once locally with App.RunLocal. Everything here is plain
// values and small interfaces; nothing of the internal packages leaks
// into the API, so the internals can change without breaking an app.
package syncular
