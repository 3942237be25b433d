// Command fanout reads the table's DynamoDB stream and hints every live
// realtime tier instance of new commits and epoch rotations
// (app.FanoutJob, internal/rtfanout).
// Build with -tags lambda.norpc.
package main

import "github.com/skyfold/syncular-lambda/internal/app"

func main() { app.FanoutMain() }
