// Command blob is the example app's blob function (template logical id
// BlobFunction; build with FUNCTIONS_DIR=examples/customapp/functions).
package main

import (
	"github.com/skyfold/syncular-lambda/examples/customapp"
	"github.com/skyfold/syncular-lambda/syncular"
)

func main() { customapp.App().LambdaMain(syncular.Blob) }
