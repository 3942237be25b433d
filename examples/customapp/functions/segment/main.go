// Command segment is the example app's segment function (template logical id
// SegmentFunction; build with FUNCTIONS_DIR=examples/customapp/functions).
package main

import (
	"github.com/skyfold/syncular-lambda/examples/customapp"
	"github.com/skyfold/syncular-lambda/syncular"
)

func main() { customapp.App().LambdaMain(syncular.Segment) }
