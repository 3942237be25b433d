// Command syncular-realtime is the stock realtime tier (internal/rttier,
// docs/REALTIME.md). It never links the Lambda runtime.
package main

import (
	"github.com/skyfold/syncular-lambda/internal/rttier"
	"github.com/skyfold/syncular-lambda/internal/wiring"
)

func main() { rttier.Main(wiring.Hooks{}) }
