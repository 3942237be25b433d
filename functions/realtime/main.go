// Command realtime serves the WebSocket API's $connect, $disconnect and
// $default routes (app.RealtimeJob). Build with -tags lambda.norpc.
package main

import "github.com/skyfold/syncular-lambda/internal/app"

func main() { app.RealtimeMain() }
