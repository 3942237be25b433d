// Command conformance-host serves this module's SSP2 engine to the public
// Syncular conformance catalog over HTTP (see package conformancehost for
// the protocol). It is a test tool: it binds to loopback only.
//
// -store memory (the default) keeps every instance in memory. -store
// dynamodb runs every instance on the production stores: dynamostore on a
// table of its own in DynamoDB Local (started here, installed with
// scripts/testenv-dynamodb.sh, unless -dynamodb-endpoint names a running
// one), s3segments and s3blobs on an in-process S3 API server, realtime
// fed from the table's stream. Tables are deleted with their instances.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/skyfold/syncular-lambda/internal/conformancehost"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8790", "loopback address to listen on (host:port; port 0 picks one)")
	verbose := flag.Bool("v", false, "log one line per sync/segment request to stderr")
	storeKind := flag.String("store", "memory", "instance stores: memory, or dynamodb (DynamoDB Local + an S3 API server)")
	endpoint := flag.String("dynamodb-endpoint", "", "with -store dynamodb: a running DynamoDB Local (default: start one)")
	repo := flag.String("repo", "", "with -store dynamodb: the repository (for scripts/testenv-dynamodb.sh; default: found above the working directory)")
	flag.Parse()
	if err := run(*addr, *verbose, *storeKind, *endpoint, *repo); err != nil {
		fmt.Fprintln(os.Stderr, "conformance-host:", err)
		os.Exit(1)
	}
}

func run(addr string, verbose bool, storeKind, endpoint, repo string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("bad -addr %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("-addr %q: this test host only listens on loopback", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	var log *slog.Logger
	if verbose {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := conformancehost.Options{Logger: log}
	switch storeKind {
	case "memory":
	case "dynamodb":
		if endpoint == "" {
			if repo == "" {
				wd, err := os.Getwd()
				if err != nil {
					return err
				}
				if repo, err = findRepo(wd); err != nil {
					return err
				}
			}
			d, err := startDynamoLocal(ctx, repo)
			if err != nil {
				return err
			}
			defer d.stop()
			endpoint = d.endpoint
		}
		opts.Prod = &conformancehost.Prod{Endpoint: endpoint}
	default:
		return fmt.Errorf("-store %q: want memory or dynamodb", storeKind)
	}
	ch := conformancehost.New(opts)
	defer ch.Close()
	srv := &http.Server{Handler: ch, ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("http://%s\n", ln.Addr())

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
