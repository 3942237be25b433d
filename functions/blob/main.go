// Command blob is the blob Lambda function (see app.Blob for its routes):
// §5.9 uploads, upload grants and downloads. Build with -tags lambda.norpc
// for the provided.al2023 runtime.
package main

import "github.com/skyfold/syncular-lambda/internal/app"

func main() { app.Main(app.Blob) }
