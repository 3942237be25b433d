// Command realtime is the example app's realtime tier: socket pushes run
// the app's rule and reaction planning too
// (make realtime-image REALTIME_MAIN=./examples/customapp/cmd/realtime).
package main

import "github.com/skyfold/syncular-lambda/examples/customapp"

func main() { customapp.App().RealtimeMain() }
