// Command pull is the example app's pull function (template logical id
// PullFunction; build with FUNCTIONS_DIR=examples/customapp/functions).
package main

import (
	"github.com/skyfold/syncular-lambda/examples/customapp"
	"github.com/skyfold/syncular-lambda/syncular"
)

func main() { customapp.App().LambdaMain(syncular.Pull) }
