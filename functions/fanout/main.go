// Command fanout reads the table's DynamoDB stream and posts realtime
// hellos, deltas and wake-ups to WebSocket connections (app.FanoutJob).
// Build with -tags lambda.norpc.
package main

import "github.com/skyfold/syncular-lambda/internal/app"

func main() { app.FanoutMain() }
