// Command migratehook is the CodeDeploy post-traffic hook of the sync
// functions (app.MigrateHook): it runs the rolling-upgrade migration step
// and reports the lifecycle status. Build with -tags lambda.norpc for the
// provided.al2023 runtime.
package main

import "github.com/skyfold/syncular-lambda/internal/app"

func main() { app.MigrateHookMain() }
