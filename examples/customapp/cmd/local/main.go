// Command local runs the example app's functions on one local HTTP
// server with its hooks, as `make run` runs the stock ones:
//
//	go run ./examples/customapp/cmd/local -schema examples/todo/schema.json
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/skyfold/syncular-lambda/examples/customapp"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := customapp.App().RunLocal(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "local:", err)
		os.Exit(1)
	}
}
