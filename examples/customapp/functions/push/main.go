// Command push is the example app's push function (template logical id
// PushFunction; build with FUNCTIONS_DIR=examples/customapp/functions).
package main

import (
	"github.com/skyfold/syncular-lambda/examples/customapp"
	"github.com/skyfold/syncular-lambda/syncular"
)

func main() { customapp.App().LambdaMain(syncular.Push) }
