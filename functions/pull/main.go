// Command pull is the pull Lambda function (see app.Pull for its routes). Build
// with -tags lambda.norpc for the provided.al2023 runtime.
package main

import "github.com/skyfold/syncular-lambda/internal/app"

func main() { app.Main(app.Pull) }
