// Package localrun is the local runner (cmd/syncular-local, and an app's
// own runner through the public package syncular): it runs the sync
// functions on one local HTTP
// server (default 127.0.0.1:8787), so an app can sync a stock Syncular
// client against this backend with no AWS account: each request becomes
// the API Gateway v2 event the deployed API would send and goes through
// the same handlers the Lambda mains run, over an in-memory store (or
// DynamoDB/S3 endpoints given by flag). Auth is HS256; the start banner
// prints a 24-hour dev token and a curl that performs a pull.
package localrun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/core/reactions"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/wiring"
)

// Extensions are an app's own code for the runner: the engine hooks,
// and the handlers of §6.9 reactions, delivered in-process after each
// commit and by a one-second sweep.
type Extensions struct {
	Hooks            wiring.Hooks
	ReactionHandlers map[string]reactions.Handler
}

// Main is the whole main of a local runner with ext.
func Main(ext Extensions) {
	// Ctrl-C / SIGTERM cancel ctx: the server drains and exits cleanly.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, os.Args[1:], os.Stdout, os.Stderr, ext); err != nil {
		fmt.Fprintln(os.Stderr, "syncular-local:", err)
		os.Exit(1)
	}
}

// runCtx is Run without extensions.
func runCtx(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return Run(ctx, args, stdout, stderr, Extensions{})
}

// Run is the whole command; it returns when ctx is cancelled.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, ext Extensions) error {
	fs := flag.NewFlagSet("syncular-local", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var optsCORS []string
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8787", "listen address")
	fs.StringVar(&o.schemaPath, "schema", "examples/todo/schema.json", "schema file to serve")
	fs.StringVar(&o.secret, "secret", "", "HS256 secret for bearer tokens (≥32 bytes; random when empty, so tokens die with the process)")
	fs.StringVar(&o.scopes, "scopes", "", `dev token scopes claim as JSON, e.g. {"project_id":["p1"]} (default: every scope variable of the schema, "*")`)
	fs.StringVar(&o.actor, "actor", "dev-user", "dev token subject (actorId)")
	fs.StringVar(&o.partition, "partition", "default", "partition of every request")
	fs.StringVar(&o.mount, "mount", "", "route prefix, e.g. /api")
	fs.StringVar(&o.signedURLs, "signed-urls", config.SignedNative, "segment URLs: native, presign (needs -s3-endpoint) or off")
	fs.StringVar(&o.publicURL, "public-url", "", "scheme://host[/base] that native signed segment URLs point at (default: the listen address; never taken from a request's Host header)")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.dynamoEndpoint, "dynamodb-endpoint", "", "use this DynamoDB endpoint (e.g. DynamoDB Local http://127.0.0.1:8000) instead of memory")
	fs.StringVar(&o.s3Endpoint, "s3-endpoint", "", "use this S3 endpoint (path-style) for segments instead of memory")
	fs.StringVar(&o.table, "table", "syncular-local", "DynamoDB table with -dynamodb-endpoint")
	fs.StringVar(&o.bucket, "bucket", "syncular-local", "S3 bucket with -s3-endpoint")
	fs.BoolVar(&o.jsonEvents, "json-events", false, "pass each request to its function as the JSON event document the Lambda runtime delivers, and parse the JSON response document (slower; the default converts the request directly into what that event converts to)")
	fs.BoolVar(&o.create, "create", false, "create the table and bucket first")
	cors := fs.String("cors-origins", "*", "comma-separated browser origins allowed by CORS (\"*\" for any, empty for none)")
	pprofAddr := fs.String("pprof", "", "serve net/http/pprof (CPU, heap, allocs, mutex, block profiles) on this loopback address, e.g. 127.0.0.1:6060")
	gcFloor := fs.Int("gc-floor-mb", 64, "collector pacing: heap goal live + max(floor − live, floor/2, live/2) MiB (GOGC set from the live heap; 0 keeps the Go default; ignored when GOGC or GOMEMLIMIT is set)")
	printPull := fs.Bool("print-pull", false, "write a minimal SSP2 pull request body to stdout and exit")
	render := fs.Bool("render", false, "read an SSP2 message (or a JSON error) on stdin and print its debug rendering")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, o := range strings.Split(*cors, ",") {
		if o = strings.TrimSpace(o); o != "" {
			optsCORS = append(optsCORS, o)
		}
	}
	o.corsOrigins = optsCORS
	o.ext = ext
	if *render {
		return renderStdin(os.Stdin, stdout)
	}

	level := slog.LevelInfo
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	rn, err := newRunner(ctx, o, logger)
	if err != nil {
		return err
	}
	scopes, err := devScopes(rn.schema, o.scopes)
	if err != nil {
		return err
	}
	body, err := pullBody(rn.schema, scopes)
	if err != nil {
		return err
	}
	if *printPull {
		_, err := stdout.Write(body)
		return err
	}
	token, err := rn.devToken(o.actor, scopes)
	if err != nil {
		return err
	}
	// The demo pull body: a file of this run's own (a fixed path would be
	// overwritten by every other runner on the machine, possibly with
	// another schema), removed when the runner stops.
	pullFile, err := writeTempFile("syncular-local-pull-*.bin", body)
	if err != nil {
		return err
	}
	defer os.Remove(pullFile)

	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return err
	}
	if o.publicURL == "" {
		rn.setPublicURL("http://" + ln.Addr().String())
	}
	base := "http://" + ln.Addr().String() + rn.cfg.Mount
	scopesJSON, _ := json.Marshal(scopes)
	fmt.Fprintf(stdout, `syncular-local: serving %s over %s
  base URL   %s   (POST /sync, /push, /pull; GET /segments/{id})
  dev token  %s
             (sub %q, partition %q, scopes %s, valid 24h)
  try a pull:
    curl -sS %s/sync -H 'Authorization: Bearer %s' -H 'Content-Type: application/vnd.syncular.sync.v2' --data-binary @%s | go run ./cmd/syncular-local -render
Ctrl-C stops.
`, o.schemaPath, rn.backend, base, token, o.actor, o.partition, scopesJSON, base, token, shellQuote(pullFile))

	if *pprofAddr != "" {
		stopPprof, err := servePprof(*pprofAddr, stdout)
		if err != nil {
			return err
		}
		defer stopPprof()
	}

	if *gcFloor > 0 && !app.OperatorSetGC(os.Getenv) {
		go runGCTuner(ctx, uint64(*gcFloor)<<20, 250*time.Millisecond)
	}
	srv := &http.Server{Handler: rn, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	go rn.hub.Run(ctx) // hints, reconciliation, grant re-checks, §8.5 heartbeats
	go rn.runFanout(ctx)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	// Hijacked sockets outlive srv.Shutdown: close them going-away (1001)
	// so clients reconnect at once.
	rn.hub.Drain("server shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// renderStdin prints the §11.1 debug rendering of an SSP2 message, or a
// JSON error body as is.
func renderStdin(r io.Reader, w io.Writer) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '{' {
		_, err := w.Write(append(t, '\n'))
		return err
	}
	m, err := wire.Decode(b)
	if err != nil {
		return fmt.Errorf("not an SSP2 message: %w", err)
	}
	out, err := wire.Render(m)
	if err != nil {
		return err
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, out, "", "  ") != nil {
		pretty.Reset()
		pretty.Write(out)
	}
	pretty.WriteByte('\n')
	_, err = w.Write(pretty.Bytes())
	return err
}

// writeTempFile writes body to a new file in the temporary directory,
// named after pattern (os.CreateTemp), and returns its path.
func writeTempFile(pattern string, body []byte) (string, error) {
	f, err := os.CreateTemp("", pattern)
	if err != nil {
		return "", fmt.Errorf("demo pull body: %w", err)
	}
	if _, err := f.Write(body); err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", fmt.Errorf("demo pull body: %w", err)
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("demo pull body: %w", err)
	}
	return f.Name(), nil
}
