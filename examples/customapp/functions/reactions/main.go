// Command reactions is the example app's reactions function: it delivers
// the app's §6.9 reactions (template parameter ReactionsEnabled).
package main

import "github.com/skyfold/syncular-lambda/examples/customapp"

func main() { customapp.App().ReactionsMain() }
