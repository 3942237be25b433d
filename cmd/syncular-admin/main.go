// Command syncular-admin runs operator tasks against a deployment's
// DynamoDB table: rotating log epochs after a point-in-time restore (SPEC
// §2.1) and enabling a restored table's stream, pruning the commit log (§4.6) and listing partitions.
//
// It reads the same environment variables as the Lambda functions
// (internal/config) and the usual AWS credential chain. It prints partition
// names, epochs and counters only, never tokens or payloads.
//
// Exit status: 0 ok, 1 failure or dry run, 2 usage or configuration error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"syscall"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/core/migrate"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // a failed partition, or a dry run
	exitUsage   = 2 // bad flags or configuration
)

const usage = `usage: syncular-admin <command> [flags]

Operator commands for a syncular-lambda deployment, configured by the same
environment variables as the functions (SYNC_TABLE_NAME, SYNC_BUCKET,
SYNC_SCHEMA_PATH, SYNC_DYNAMODB_ENDPOINT, ...) and the usual AWS credentials.

commands:
  partitions
        List every partition with its head: epoch, epochRequired,
        maxCommitSeq, horizonSeq, lastSeen (from the partition registry).
  rotate-epoch (-partition P | -all) [-yes]
        Install a new random log epoch, require epoch validation and delete
        the client records (SPEC §2.1 restore rule). Every client of the
        partition resets and re-bootstraps. Without -yes: dry run, exit 1.
  restore-prepare [-table T] [-timeout D]
        Ready a restored table (default SYNC_TABLE_NAME) for the stack:
        enable the table stream the template declares (KEYS_ONLY) unless
        one is enabled, wait until the table is active, print the stream
        ARN and the sam deploy line with ExistingTableName and
        ExistingTableStreamArn. Changes no item; idempotent.
  prune (-partition P | -all)
        Advance the pruning horizon as far as the SPEC §4.6 floors allow
        (newest 1000 commits, clients active in 14 days, 30-day age force)
        and delete the commits below it. Needs SYNC_SCHEMA_PATH.
  backfill-scopes (-partition P | -all)
        Move a partition created before scope-keyed reads to that layout,
        online: write every live row's scope copies, then mark the
        partition so bootstraps read only the requested scopes' rows.
        Idempotent and resumable (run it again after an interruption).
        Run it once every function writes copies. Needs SYNC_SCHEMA_PATH.

  register-partitions
        Add every partition that has a head to the partition registry
        (once, for tables written before the registry existed). The only
        command that Scans the whole table.

  migrate [-backfill] [-batch N] [-timeout D] [-parallel N]
        Rolling schema upgrade to the schema's latest version
        (SYNC_SCHEMA_PATH): raise the stored schema marker and declare
        the schema's backfills and the checkpoints of SYNC_CHECKPOINTS
        (name=table+table,...) table-wide in the same write (one item,
        whatever the number of partitions; every partition gates them
        from then on). With -backfill it then walks the registered
        partitions (the set the post-traffic hook walks; -parallel
        partitions at once, default 32): each materialises the
        declaration (its checkpoints declared there, its writer fence
        raised with them) and its backfills run or resume and activate.
        Idempotent: re-run to resume; a partition done costs one read. Prints per
        partition and checkpoint: state, watermark, observed rows. Roll
        forward only: builds older than a partition's fence answer
        sync.schema_not_ready there (docs/OPERATIONS.md).

  revoke-lease -partition P -lease ID
        Revoke an auth lease (SPEC §7.3.4, SYNC_AUTH_LEASES=on): rounds the
        lease would authorize during a scope resolver outage fail with
        sync.auth_lease_revoked; the client's next authorized round gets
        a fresh lease. Exit 1 when the partition holds no lease ID.

  sweep-blobs
        Delete orphaned blobs (SPEC §5.9.2): verified blobs under the
        bucket's blobs/ prefix that no row of their partition references
        and that nothing uploaded or referenced for 24 h, and presigned
        uploads older than that which never verified. Needs
        SYNC_SCHEMA_PATH. Run it on a schedule (e.g. daily).

Partition names are printed Go-quoted; pass them to -partition unquoted.
-all and partitions read the partition registry (Queries, no Scan).

exit status: 0 ok, 1 failure or dry run, 2 usage or configuration error
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole command: args without the program name, env in place
// of os.Getenv. It returns the exit status.
func run(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case "partitions", "rotate-epoch", "prune", "register-partitions", "migrate", "sweep-blobs", "backfill-scopes", "restore-prepare", "revoke-lease":
	default:
		fmt.Fprintf(stderr, "syncular-admin: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}

	fs := flag.NewFlagSet("syncular-admin "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var sel selection
	var yes bool
	var mig migrateFlags
	if cmd == "migrate" {
		fs.BoolVar(&mig.backfill, "backfill", false, "run or resume the declared checkpoints' backfills and activate them")
		fs.IntVar(&mig.batch, "batch", 100, "rows per backfill batch (one commit each)")
		fs.DurationVar(&mig.timeout, "timeout", 0, "stop the backfill between batches after this long (0: no limit); re-run to resume")
		fs.IntVar(&mig.parallel, "parallel", migrate.DefaultParallel, "partitions migrated at once")
	}
	var restoreTable string
	var restoreTimeout time.Duration
	if cmd == "restore-prepare" {
		fs.StringVar(&restoreTable, "table", "", "the restored `table` (default: SYNC_TABLE_NAME)")
		fs.DurationVar(&restoreTimeout, "timeout", 10*time.Minute, "give up waiting for the table after this long; run again to resume")
	}
	var leaseID string
	if cmd == "revoke-lease" {
		fs.Func("partition", "the `name` of the lease's partition", func(s string) error {
			sel.name, sel.one = s, true
			return nil
		})
		fs.StringVar(&leaseID, "lease", "", "the lease `id` (the LEASE frame's leaseId)")
	}
	takesSelection := cmd != "partitions" && cmd != "register-partitions" && cmd != "migrate" && cmd != "sweep-blobs" && cmd != "restore-prepare" && cmd != "revoke-lease"
	if takesSelection {
		fs.Func("partition", "the `name` of one partition", func(s string) error {
			sel.name, sel.one = s, true
			return nil
		})
		fs.BoolVar(&sel.all, "all", false, "every partition in the table")
	}
	if cmd == "rotate-epoch" {
		fs.BoolVar(&yes, "yes", false, "rotate for real (without it: dry run, exit 1)")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "syncular-admin %s: unexpected argument %q\n", cmd, fs.Arg(0))
		return exitUsage
	}
	if cmd == "migrate" && mig.parallel < 1 {
		fmt.Fprintf(stderr, "syncular-admin migrate: -parallel must be at least 1, got %d\n", mig.parallel)
		return exitUsage
	}
	if cmd == "revoke-lease" && (!sel.one || leaseID == "") {
		fmt.Fprintf(stderr, "syncular-admin revoke-lease: give -partition NAME and -lease ID\n")
		return exitUsage
	}
	if takesSelection && sel.one == sel.all {
		fmt.Fprintf(stderr, "syncular-admin %s: give exactly one of -partition NAME or -all\n", cmd)
		return exitUsage
	}

	cfg, err := config.Load(env)
	if err != nil {
		fmt.Fprintf(stderr, "syncular-admin: %v\n", err)
		return exitUsage
	}
	clients, err := app.NewAWSClients(ctx, cfg, awsOptions(cfg, env)...)
	if err != nil {
		fmt.Fprintf(stderr, "syncular-admin: %v\n", err)
		return exitFailure
	}
	a := &admin{
		cfg:     cfg,
		clients: clients,
		store:   dynamostore.New(clients.DynamoDB, cfg.TableName, dynamostore.Options{OutcomeTTL: cfg.OutcomeTTL, TransactionalCommits: !cfg.SmallCommits}),
		out:     stdout,
		errw:    stderr,
	}
	switch cmd {
	case "partitions":
		return a.partitions(ctx)
	case "rotate-epoch":
		return a.rotateEpoch(ctx, sel, yes)
	case "backfill-scopes":
		return a.backfillScopes(ctx, sel)
	case "register-partitions":
		return a.registerPartitions(ctx)
	case "migrate":
		return a.migrate(ctx, mig, env("SYNC_CHECKPOINTS"))
	case "sweep-blobs":
		return a.sweepBlobs(ctx)
	case "revoke-lease":
		return a.revokeLease(ctx, sel.name, leaseID)
	case "restore-prepare":
		if restoreTable == "" {
			restoreTable = cfg.TableName
		}
		return a.restorePrepare(ctx, restoreTable, restoreTimeout)
	default:
		return a.prune(ctx, sel)
	}
}

// selection is -partition or -all.
type selection struct {
	name string
	one  bool // -partition given (the name may be empty)
	all  bool
}

// awsOptions takes region and static credentials from env (so run does
// not depend on the process environment) and lets the SDK's default chain
// find anything else. A loopback endpoint override (DynamoDB Local) gets
// placeholder credentials and region when none are set.
func awsOptions(cfg *config.Config, env func(string) string) []func(*awsconfig.LoadOptions) error {
	var opts []func(*awsconfig.LoadOptions) error
	local := isLoopback(cfg.DynamoDBEndpoint)
	if r := firstSet(env("AWS_REGION"), env("AWS_DEFAULT_REGION")); r != "" {
		opts = append(opts, awsconfig.WithRegion(r))
	} else if local {
		opts = append(opts, awsconfig.WithRegion("us-east-1"))
	}
	id, secret := env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")
	switch {
	case id != "" && secret != "":
		opts = append(opts, awsconfig.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(id, secret, env("AWS_SESSION_TOKEN"))))
	case local && env("AWS_PROFILE") == "":
		opts = append(opts, awsconfig.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider("local", "local", "")))
	}
	return opts
}

func firstSet(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// isLoopback reports whether endpoint is an http(s) URL on this machine.
func isLoopback(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil || endpoint == "" {
		return false
	}
	h := u.Hostname()
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// quote renders a partition name for output: Go-quoted, so names with
// spaces, tabs or control characters stay one unambiguous field.
func quote(p string) string { return strconv.Quote(p) }

// targets returns the partitions sel names: the one given, or every
// partition of the registry, sorted.
func (a *admin) targets(ctx context.Context, sel selection) ([]string, error) {
	if !sel.all {
		return []string{sel.name}, nil
	}
	return a.allPartitions(ctx)
}

func (a *admin) allPartitions(ctx context.Context) ([]string, error) {
	var ps []string
	err := a.store.ListRegisteredPartitions(ctx, "", func(p, _ string) bool {
		ps = append(ps, p)
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	slices.Sort(ps)
	return ps, nil
}
