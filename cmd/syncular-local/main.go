// Command syncular-local runs the sync functions on one local HTTP server
// (default 127.0.0.1:8787) over an in-memory store, so an app can sync a
// stock Syncular client against this backend with no AWS account
// (internal/localrun has the runner; -h lists the flags).
package main

import "github.com/skyfold/syncular-lambda/internal/localrun"

func main() { localrun.Main(localrun.Extensions{}) }
