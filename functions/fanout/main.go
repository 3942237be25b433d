// Command fanout reads the table's DynamoDB stream and posts realtime
// hellos, deltas and wake-ups to WebSocket connections, and on a schedule
// §8.5 heartbeats (app.FanoutJob, app.HandleFanout).
// Build with -tags lambda.norpc.
package main

import "github.com/skyfold/syncular-lambda/internal/app"

func main() { app.FanoutMain() }
