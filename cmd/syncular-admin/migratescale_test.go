package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/core/migrate"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// opCounter is a loopback proxy in front of DynamoDB Local that counts
// the requests the SDK sends by operation (X-Amz-Target).
type opCounter struct {
	srv *httptest.Server
	mu  sync.Mutex
	ops map[string]int
}

func newOpCounter(t *testing.T, endpoint string) *opCounter {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	c := &opCounter{ops: map[string]int{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{Proxy: nil, MaxIdleConns: 128, MaxIdleConnsPerHost: 128}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		target := r.Header.Get("X-Amz-Target")
		op := target[strings.LastIndexByte(target, '.')+1:]
		c.mu.Lock()
		c.ops[op]++
		c.mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// take returns the counts since the last take and resets them.
func (c *opCounter) take() (map[string]int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out, total := c.ops, 0
	for _, n := range out {
		total += n
	}
	c.ops = map[string]int{}
	return out, total
}

// TestMigrateWalksTheRegistry: syncular-admin migrate declares the
// release's checkpoint table-wide without listing a partition; migrate
// -backfill walks exactly the registered partitions (the set the
// post-traffic hook walks), with no Scan of the table and several
// partitions in flight, materialising and activating the checkpoint in
// each.
func TestMigrateWalksTheRegistry(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	var registered []string
	for i := range 40 {
		p := fmt.Sprintf("reg-%02d", i)
		f.touch(p)
		registered = append(registered, p)
	}
	// A head without a registry item (a table older than the registry
	// that register-partitions has not backfilled yet): not migrated.
	legacy := dynamostore.Key(dynamostore.PartitionPK("legacy"), "HEAD")
	for k, v := range map[string]int64{"mx": 0, "ap": 0, "hz": 0, "ls": 1} {
		legacy[k] = dynamostore.N(v)
	}
	legacy["ep"], legacy["er"] = dynamostore.S("e-legacy"), dynamostore.BOOL(false)
	d := testenv.DynamoDB(t)
	if _, err := d.Client(t).PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: legacy}); err != nil {
		t.Fatal(err)
	}
	counter := newOpCounter(t, d.Endpoint)
	f.env["SYNC_DYNAMODB_ENDPOINT"] = counter.srv.URL
	f.env["SYNC_CHECKPOINTS"] = "tasks-projection=tasks"
	r := f.run("migrate", "-parallel", "8")
	ops, total := counter.take()
	// The one Query is the realtime tier's registry (the store-format
	// level raise), not a partition listing.
	if r.code != exitOK || !strings.Contains(r.stderr, "1 checkpoint(s) declared table-wide") || total > 4 || ops["Query"] > 1 {
		t.Fatalf("migrate: exit %d, %q, operations %v", r.code, r.stderr, ops)
	}
	// The test's Store reads the marker again (its copy may be up to
	// MarkerTTL old, as another instance's would be).
	if m, err := f.store.SchemaMarker(ctx); err != nil || m != 1 {
		t.Fatalf("marker after migrate: %d, %v", m, err)
	}
	for _, p := range append(registered, "legacy") {
		g, err := f.store.ReadGate(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		// Gated as declared everywhere, before any partition holds it.
		if g.WriterFence != 0 || len(g.Pending) != 1 || g.Unmaterialized == 0 {
			t.Fatalf("gate of %s after migrate: %+v", p, g)
		}
	}
	// -backfill with parallel partitions materialises and activates
	// every registered partition's checkpoint once.
	r = f.run("migrate", "-backfill", "-parallel", "8")
	ops, _ = counter.take()
	if r.code != exitOK || !strings.Contains(r.stderr, "fenced 40 of 40 partition(s)") || !strings.Contains(r.stderr, "40 checkpoint(s) activated, 0 incomplete") {
		t.Fatalf("migrate -backfill: exit %d, %q", r.code, r.stderr)
	}
	if ops["Scan"] != 0 {
		t.Fatalf("migrate -backfill sent %d Scan(s); operations: %v", ops["Scan"], ops)
	}
	for _, p := range registered {
		if g, err := f.store.ReadGate(ctx, p); err != nil || g.WriterFence != 1 || len(g.Pending) != 0 || g.Unmaterialized != 0 {
			t.Fatalf("gate of %s after migrate -backfill: %+v, %v", p, g, err)
		}
	}
	// Not walked (not registered): still gated as declared, nothing
	// materialised.
	if c, err := f.store.GetCheckpoint(ctx, "legacy", "tasks-projection"); err != nil || c != nil {
		t.Fatalf("unregistered partition migrated: %+v, %v", c, err)
	}
	if rows := f.rows(r, "partition\tcheckpoint\tstate\twatermark\tobservedRows"); len(rows) != 40 {
		t.Fatalf("%d progress lines, want 40", len(rows))
	}
	if r := f.run("migrate", "-parallel", "0"); r.code != exitUsage {
		t.Fatalf("-parallel 0: exit %d", r.code)
	}
}

// TestMigrateScale measures the migration over many registered partitions
// (MIGRATE_SCALE_PARTITIONS, e.g. 10000; skipped when unset): wall time
// and DynamoDB round trips per partition of the post-traffic hook and of
// syncular-admin migrate, for a code-only deploy and a checkpoint release,
// sequentially (parallel 1, the walk before) and at MIGRATE_SCALE_PARALLEL
// (default 32). It asserts what the runs did, never how fast.
func TestMigrateScale(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("MIGRATE_SCALE_PARTITIONS"))
	if n <= 0 {
		t.Skip("set MIGRATE_SCALE_PARTITIONS to measure")
	}
	par := migrate.DefaultParallel
	if v, err := strconv.Atoi(os.Getenv("MIGRATE_SCALE_PARALLEL")); err == nil && v > 0 {
		par = v
	}
	ctx := context.Background()
	d := testenv.DynamoDB(t)
	base := d.Client(t)
	counter := newOpCounter(t, d.Endpoint)
	counted := dynamodb.New(base.Options(), func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(counter.srv.URL) })
	for _, parallel := range []int{1, par} {
		table := testenv.UniqueName(t, fmt.Sprintf("mig%d", parallel))
		if err := dynamostore.CreateTable(ctx, base, table); err != nil {
			t.Fatal(err)
		}
		seed := dynamostore.New(base, table, dynamostore.Options{})
		start := time.Now()
		testenv.SeedPartitions(t, n, func(ctx context.Context, p string) error {
			_, err := seed.TouchPartition(ctx, p, 1, "e")
			return err
		})
		t.Logf("seeded %d partitions in %v", n, time.Since(start).Round(time.Millisecond))
		st := dynamostore.New(counted, table, dynamostore.Options{})
		hook := func(version int64, decls []migrate.Declaration) app.HookResult {
			h := &app.MigrateHook{Store: st, Version: version, Checkpoints: decls, Parallel: parallel,
				Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))}
			res, err := h.Run(ctx, app.HookEvent{})
			if err != nil || res.Status != "Succeeded" || len(decls) > 0 && res.Fenced != n {
				t.Fatalf("hook: %+v, %v", res, err)
			}
			return res
		}
		measure := func(name string, fn func()) {
			counter.take()
			start := time.Now()
			fn()
			el := time.Since(start)
			ops, total := counter.take()
			t.Logf("parallel %d, %s: %v for %d partitions, %.2f round trips/partition, %.0f partitions/s (%v)",
				parallel, name, el.Round(time.Millisecond), n, float64(total)/float64(n), float64(n)/el.Seconds(), ops)
		}
		decls := []migrate.Declaration{{Name: "tasks-projection", Sources: []string{"tasks"}}}
		measure("hook, checkpoint release", func() { hook(1, decls) })
		measure("hook, rerun", func() { hook(1, decls) })
		measure("hook, code-only deploy", func() { hook(1, nil) })
		env := map[string]string{
			"SYNC_TABLE_NAME": table, "SYNC_BUCKET": "admin-unused-bucket",
			"SYNC_SCHEMA_PATH": "../../examples/todo/schema.json", "SYNC_DYNAMODB_ENDPOINT": counter.srv.URL,
			"AWS_REGION": testenv.Region, "AWS_ACCESS_KEY_ID": "testenv", "AWS_SECRET_ACCESS_KEY": "testenv",
		}
		measure("migrate, code-only", func() {
			var out, errb strings.Builder
			if code := run(ctx, []string{"migrate", "-parallel", strconv.Itoa(parallel)}, func(k string) string { return env[k] }, &out, &errb); code != exitOK {
				t.Fatalf("migrate: exit %d %s", code, errb.String())
			}
		})
	}
}
