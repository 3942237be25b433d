// Command syncular-stack runs the deployed shape on one machine (`make
// stack`): DynamoDB Local with its stream, an S3 API, every HTTP function
// under the Lambda Runtime Interface Emulator behind a local API Gateway,
// the stream consumer feeding the fanout function, and two realtime tier
// instances behind one /realtime address — all on 127.0.0.1. It prints the
// base URL, the realtime URL and a 24 h dev token, and stops everything on
// Ctrl-C (internal/stack).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/skyfold/syncular-lambda/internal/stack"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "syncular-stack:", err)
		os.Exit(1)
	}
}

// run starts the stack, prints the banner and serves until ctx ends.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("syncular-stack", flag.ContinueOnError)
	fs.SetOutput(stderr)
	port := fs.Int("port", 3000, "gateway port on 127.0.0.1 (0: any free port)")
	schemaPath := fs.String("schema", "", "schema file (default examples/todo/schema.json)")
	instances := fs.Int("instances", 2, "realtime tier instances")
	actor := fs.String("actor", "dev-user", "dev token subject (actorId)")
	quiet := fs.Bool("quiet", false, "do not print the children's logs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg := stack.Config{Port: *port, Schema: *schemaPath, Instances: *instances,
		Logger: slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	if !*quiet {
		cfg.Logs = stderr
	}
	fmt.Fprintln(stdout, "syncular-stack: installing, building and starting (DynamoDB Local, S3, functions under aws-lambda-rie, realtime tier)…")
	s, err := stack.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	tok, err := s.DevToken(*actor)
	if err != nil {
		return err
	}
	rt := s.RealtimeURL
	if !s.HasTier {
		rt = "(none: cmd/syncular-realtime is not in this tree)"
	}
	fmt.Fprintf(stdout, `syncular-stack: the deployed shape on 127.0.0.1
  base URL      %s   (POST /sync, /push, /pull; GET /segments/{id}; blobs) via the local API Gateway
  realtime URL  %s   (%d tier instances)
  dev token %s
                (sub %q, every scope "*", valid 24h)
  DynamoDB Local %s (table %s), S3 %s (bucket %s)
  invocation counts: GET %s/_stack/invocations
Ctrl-C stops everything.
`, s.BaseURL, rt, len(s.Instances()), tok, *actor, s.DynamoEndpoint, s.Table, s.S3Endpoint, s.Bucket, s.BaseURL)
	<-ctx.Done()
	fmt.Fprintln(stdout, "syncular-stack: stopping")
	return nil
}
