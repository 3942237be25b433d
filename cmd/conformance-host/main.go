// Command conformance-host serves this module's SSP2 engine to the public
// Syncular conformance catalog over HTTP (see package conformancehost for
// the protocol). It is a test tool: it binds to loopback only and keeps
// everything in memory.
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
	flag.Parse()
	if err := run(*addr, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "conformance-host:", err)
		os.Exit(1)
	}
}

func run(addr string, verbose bool) error {
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
	var log *slog.Logger
	if verbose {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	srv := &http.Server{
		Handler:           conformancehost.New(conformancehost.Options{Logger: log}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	fmt.Printf("http://%s\n", ln.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
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
