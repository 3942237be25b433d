// Command prune is the scheduled prune function (app.PruneJob): it prunes
// every partition of the registry with the §4.6 floors. Build with -tags
// lambda.norpc for the provided.al2023 runtime.
package main

import "github.com/skyfold/syncular-lambda/internal/app"

func main() { app.PruneMain() }
