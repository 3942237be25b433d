package costmodel_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/app/apptest"
	"github.com/skyfold/syncular-lambda/internal/auth"
	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/migrate"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/costmodel"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/s3segments"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var secret = []byte("cost-secret-cost-secret-cost-secret!")

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// countingLog is a function's stdout: bytes and lines (log events).
type countingLog struct {
	mu           sync.Mutex
	bytes, lines int
	last         []byte
}

func (c *countingLog) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bytes += len(p)
	c.lines += bytes.Count(p, []byte("\n"))
	if bytes.Contains(p, []byte(`"msg":"request"`)) {
		c.last = append(c.last[:0], p...)
	}
	return len(p), nil
}

// rig is the deployment under measurement: the functions built by
// app.Build as the Lambda runtime builds them (FromEnv), over DynamoDB
// Local and the S3 server, each invocation recorded.
type rig struct {
	d       *apptest.Deployment
	tok     string
	epoch   string
	logs    map[string]*countingLog
	memory  map[string]int
	usage   dynamostore.Usage
	current *costmodel.Operation
	meter   *costmodel.DynamoMeter
	// rows numbers the task rows pushed (ids), commits the commit ids.
	rows, commits int
	// The last invocation's DynamoDB usage and decoded response body.
	lastUsage dynamostore.Usage
	lastBody  []byte
}

// sent is the size of an HTTP body as it travels (before the event's
// base64).
func sent(t testing.TB, body string, b64 bool) int {
	if !b64 {
		return len(body)
	}
	b, err := base64.StdEncoding.DecodeString(body)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

func newRig(t *testing.T) *rig {
	ctx := context.Background()
	base := testenv.DynamoDB(t).Client(t)
	r := &rig{logs: map[string]*countingLog{}, memory: map[string]int{}}
	ddb := dynamodb.New(base.Options(), func(o *dynamodb.Options) {
		inner := o.HTTPClient
		if inner == nil {
			inner = &http.Client{}
		}
		r.meter = &costmodel.DynamoMeter{Inner: inner, Keys: []string{dynamostore.AttrPK, dynamostore.AttrSK}}
		o.HTTPClient = r.meter
	})
	table := testenv.UniqueName(t, "cost")
	if err := dynamostore.CreateTable(ctx, ddb, table); err != nil {
		t.Fatal(err)
	}
	s3srv := testenv.S3(t)
	bucket := strings.ToLower(testenv.UniqueName(t, "cost"))
	s3srv.CreateBucket(t, bucket)
	segs := s3segments.New(s3srv.Client(t), bucket, "segments/", ddb, table, s3segments.Options{})

	sch, err := schema.ReadFile(filepath.Join(repoRoot(), "examples", "todo", "schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	// A deployed stack after its deploy's post-traffic hook: the migration
	// step has raised the schema marker and the store-format level, so
	// large commits store compressed log bodies (dynamostore formats.go;
	// during a deploy's traffic shift they are stored plain).
	pr, err := migrate.Step(ctx, dynamostore.New(ddb, table, dynamostore.Options{}), migrate.Plan{Version: int64(sch.Latest)})
	if err != nil || pr.FormatLevel != dynamostore.FormatLevel {
		t.Fatalf("migration step: level %d, %v", pr.FormatLevel, err)
	}
	env := map[string]string{
		"SYNC_TABLE_NAME": table, "SYNC_BUCKET": bucket, "SYNC_AUTH_MODE": "hs256", "SYNC_HS256_SECRET": string(secret),
		"SYNC_SIGNED_URLS": "native", "SYNC_SIGNING_KEY": strings.Repeat("s", 32), "SYNC_PUBLIC_URL": "https://sync.example.test",
	}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	mem, err := costmodel.FunctionMemory(filepath.Join(repoRoot(), "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	platformLogged, err := costmodel.PlatformLogged(filepath.Join(repoRoot(), "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The meter the functions run with (app.DynamoMeter's log fields),
	// keeping the request's usage for the tables.
	meter := func(ctx context.Context) (context.Context, func() []slog.Attr) {
		ctx, attrs := app.DynamoMeter(ctx)
		c := dynamostore.CapacityFrom(ctx)
		return ctx, func() []slog.Attr {
			r.usage = c.Snapshot()
			return attrs()
		}
	}
	handlers := map[string]func(context.Context, []byte) ([]byte, error){}
	for _, fn := range app.Functions {
		r.logs[fn.Name] = &countingLog{}
		r.memory[fn.Name] = mem[fn.LogicalID]
		h, err := app.Build(cfg, fn, app.Deps{Schema: sch, Store: dynamostore.New(ddb, table, dynamostore.Options{}), Segments: segs,
			Logger: app.NewLogger(r.logs[fn.Name], slog.LevelInfo, fn), Meter: meter})
		if err != nil {
			t.Fatal(err)
		}
		handlers[fn.Name] = h.Invoke
	}
	r.d = &apptest.Deployment{Schema: sch, Invoke: func(t testing.TB, fn string, ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
		ev.RequestContext.RequestID = "KqW3hFp0oAMEb8g=" // an HTTP API request id's length
		payload := apptest.MustJSON(t, ev)
		lg := r.logs[fn]
		bytes0, lines0 := lg.bytes, lg.lines
		r.usage = dynamostore.Usage{}
		r.meter.Take()
		cpu0 := processCPU(t)
		start := time.Now()
		out, err := handlers[fn](context.Background(), payload)
		elapsed := time.Since(start)
		cpuMs := float64((processCPU(t) - cpu0).Microseconds()) / 1000
		du := r.meter.Take()
		if err != nil {
			t.Fatal(err)
		}
		var resp events.APIGatewayV2HTTPResponse
		if err := json.Unmarshal(out, &resp); err != nil {
			t.Fatal(err)
		}
		r.lastUsage, r.lastBody = r.usage, apptest.Body(t, &resp)
		if r.current != nil {
			reqBody, respBody := sent(t, ev.Body, ev.IsBase64Encoded), sent(t, resp.Body, resp.IsBase64Encoded)
			billed := costmodel.BilledMs(float64(elapsed.Microseconds())/1000, cpuMs, r.memory[fn])
			// Lambda's own START/END/REPORT lines: an assumed 40 MB used
			// (two digits, as a warm Go function reports) of version 12.
			// None when the template's SystemLogLevel filters them.
			sysBytes, sysEvents := costmodel.PlatformLog(float64(elapsed.Microseconds())/1000, billed, r.memory[fn], 40, "12")
			if !platformLogged {
				sysBytes, sysEvents = 0, 0
			}
			r.current.Invocations = append(r.current.Invocations, costmodel.Invocation{
				Function: fn, MemoryMB: r.memory[fn],
				BilledMs: billed, CPUMs: cpuMs,
				PlatformLogBytes: sysBytes, PlatformLogEvents: sysEvents,
				RequestBytes: reqBody, ResponseBytes: respBody,
				DynamoCalls: du.Calls, RRU: du.RRU, WRU: du.WRU,
				StoreRRU: r.usage.EstRCU, StoreWRU: r.usage.EstWCU,
				LogBytes: lg.bytes - bytes0, LogEvents: lg.lines - lines0,
			})
		}
		return resp
	}}
	r.tok, err = auth.MintHS256(secret, auth.Claims{"sub": "alice", "syncular_scopes": map[string][]string{"project_id": {"p1"}}}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	r.epoch = r.d.Epoch(t, "push", "/sync", r.tok, "seed")
	r.d.Push(t, r.tok, "seed", r.epoch, wire.PushCommit{ClientCommitID: "p", Operations: []wire.Operation{apptest.Upsert("projects", "p1", 0, r.d.Project(t, "p1"))}})
	return r
}

// measure records the invocations fn makes as the operation name.
func (r *rig) measure(name string, fn func()) costmodel.Operation {
	op := costmodel.Operation{Name: name}
	r.current = &op
	fn()
	r.current = nil
	return op
}

// median measures the operation once with the meter on, for its counts
// (calls, units, bytes: the same on every run), then n times with the
// meter passive, and gives the metered run the billed durations of the
// passive run of median duration: the meter's own reads (an item's size
// before each write, a round trip each) and parsing are not the
// function's work (costmodel.DynamoMeter.SetPassive).
func (r *rig) median(t testing.TB, n int, name string, fn func()) costmodel.Operation {
	t.Helper()
	op := r.measure(name, fn)
	r.meter.SetPassive(true)
	defer r.meter.SetPassive(false)
	runs := make([]costmodel.Operation, n)
	for i := range runs {
		runs[i] = r.measure(name, fn)
	}
	ms := func(op costmodel.Operation) int {
		total := 0
		for _, in := range op.Invocations {
			total += in.BilledMs
		}
		return total
	}
	slices.SortFunc(runs, func(a, b costmodel.Operation) int { return ms(a) - ms(b) })
	timed := runs[n/2]
	if len(timed.Invocations) != len(op.Invocations) {
		t.Fatalf("%s: %d invocations metered, %d timed", name, len(op.Invocations), len(timed.Invocations))
	}
	for i := range op.Invocations {
		in, tm := &op.Invocations[i], timed.Invocations[i]
		if tm.Function != in.Function || tm.DynamoCalls != in.DynamoCalls {
			t.Fatalf("%s: invocation %d metered as %s with %d calls, timed as %s with %d", name, i, in.Function, in.DynamoCalls, tm.Function, tm.DynamoCalls)
		}
		in.BilledMs, in.CPUMs = tm.BilledMs, tm.CPUMs
		in.PlatformLogBytes, in.PlatformLogEvents = tm.PlatformLogBytes, tm.PlatformLogEvents
	}
	return op
}

func (r *rig) tasks(t testing.TB, n int) []wire.Operation {
	ops := make([]wire.Operation, n)
	for i := range ops {
		r.rows++
		id := fmt.Sprintf("t%06d", r.rows)
		// A title of 32 characters that do not repeat across rows, so
		// compressed sizes are not flattered.
		sum := sha256.Sum256([]byte(id))
		ops[i] = apptest.Upsert("tasks", id, 0, r.d.Task(t, id, "p1", hex.EncodeToString(sum[:16])))
	}
	return ops
}

func sub(cursor int64) wire.Subscription {
	return wire.Subscription{ID: "s", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: cursor}
}

var accept = wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows}

// pullAll pulls sub from cursor until caught up (a bootstrap until its
// state ends), returning the final cursor.
func (r *rig) pullAll(t testing.TB, client string, cursor int64) int64 {
	s := sub(cursor)
	fetch := apptest.NativeFetcher(r.d)
	for range 10_000 {
		sec := r.d.Pull(t, r.tok, client, r.epoch, accept, s)
		for _, ref := range sec.Refs {
			// A stock client downloads each SEGMENT_REF: through its
			// URL (the segment function) or the segment route.
			if ref.URL.Present {
				fetch(t, ref.URL.Value)
			} else if resp := r.d.Direct(t, r.tok, ref.SegmentID, map[string][]string{"project_id": {"p1"}}); resp.StatusCode != 200 {
				t.Fatalf("segment %s: HTTP %d", ref.SegmentID, resp.StatusCode)
			}
		}
		s.Cursor = sec.End.NextCursor
		s.BootstrapState = sec.End.BootstrapState
		if !s.BootstrapState.Present && len(sec.Commits) == 0 {
			return s.Cursor
		}
	}
	t.Fatal("pull never caught up")
	return 0
}

// pushRound is a stock client's round: its commit and its pull in one
// request to /sync.
func (r *rig) pushRound(t testing.TB, client string, ops []wire.Operation, cursor int64) int64 {
	r.commits++
	s := sub(cursor)
	m := r.d.Sync(t, "push", "/sync", r.tok, apptest.Request(t, wire.Version2,
		wire.ReqHeader{ClientID: client, SchemaVersion: r.d.Schema.Latest, LogEpoch: wire.Some(r.epoch)},
		&wire.PushCommit{ClientCommitID: fmt.Sprintf("k%d", r.commits), Operations: ops}, &accept, &s))
	for _, res := range apptest.Find[*wire.PushResult](m) {
		if res.Status != wire.PushApplied {
			t.Fatalf("push round: %s %+v", res.Status, res.Results)
		}
	}
	secs, err := enginetest.ParseSections(m)
	if err != nil || len(secs) != 1 {
		t.Fatalf("push round pull: %v (%d sections)", err, len(secs))
	}
	return secs[0].End.NextCursor
}

// TestCost measures every operation of issue 23 through the functions'
// handlers on DynamoDB Local and prices it (SSP2_COST=1, `make cost`,
// prints the tables and the totals; without it, a smaller bootstrap
// and the shape checks only).
func TestCost(t *testing.T) {
	full := os.Getenv("SSP2_COST") != ""
	bootRows, reps := 100, 1
	if full {
		bootRows, reps = 5_000, 7
	}
	r := newRig(t)
	p := costmodel.USEast1
	var ops []costmodel.Operation

	cursor := r.pullAll(t, "dev-1", -1)
	cursor = r.pushRound(t, "dev-1", r.tasks(t, 1), cursor) // warm: binds the client
	ops = append(ops, r.median(t, reps, "push-round-1op", func() { cursor = r.pushRound(t, "dev-1", r.tasks(t, 1), cursor) }))
	// Unmeasured: every measured 50-op round then follows a 50-op
	// commit. The first one after a small commit (the 1-op rounds) also
	// settles that commit before its transaction (dynamostore fast.go: a
	// head read, a log read and the appliedSeq update, +2 RRU and +1 WRU),
	// which would make the row depend on which run is the median.
	cursor = r.pushRound(t, "dev-1", r.tasks(t, 50), cursor)
	ops = append(ops, r.median(t, reps, "push-round-50op", func() { cursor = r.pushRound(t, "dev-1", r.tasks(t, 50), cursor) }))
	cursor = r.pullAll(t, "dev-2", cursor)
	ops = append(ops, r.median(t, reps, "quiet-pull", func() { cursor = r.pullAll(t, "dev-2", cursor) }))
	from := cursor
	for range 100 {
		r.commits++
		r.d.Push(t, r.tok, "dev-3", r.epoch, wire.PushCommit{ClientCommitID: fmt.Sprintf("i%d", r.commits), Operations: r.tasks(t, 1)})
	}
	// Read-only: every run pulls the same 100 commits from the same cursor.
	ops = append(ops, r.median(t, reps, "incremental-pull-100", func() { r.pullAll(t, "dev-2", from) }))

	// The bootstrap: a partition of bootRows task rows (plus the ones
	// above), read by a fresh client; priced per 10,000 rows (1% of 1M)
	// by linear extrapolation from what it measures. Measured once, with
	// the meter on (a second bootstrap would find its segments published
	// and do less), so its duration includes the meter's work: an upper
	// bound.
	for have := 0; have < bootRows; have += 50 {
		r.commits++
		r.d.Push(t, r.tok, "seed", r.epoch, wire.PushCommit{ClientCommitID: fmt.Sprintf("b%d", r.commits), Operations: r.tasks(t, 50)})
	}
	rows := r.rows // task rows in the partition
	if os.Getenv("SSP2_COST_TRACE") != "" {
		r.meter.Trace = func(op string, rru, wru float64) { t.Logf("%s %.1f %.1f", op, rru, wru) }
	}
	boot := r.measure(fmt.Sprintf("bootstrap-%drows", rows), func() { r.pullAll(t, "fresh", -1) })
	r.meter.Trace = nil
	ops = append(ops, boot)

	for _, op := range ops {
		if len(op.Invocations) == 0 {
			t.Fatalf("%s: no invocation recorded", op.Name)
		}
		for _, in := range op.Invocations {
			if in.MemoryMB == 0 || in.DynamoCalls == 0 || in.LogBytes == 0 || in.LogEvents == 0 {
				t.Errorf("%s: incomplete counts %+v", op.Name, in)
			}
		}
		p.WriteTable(os.Stdout, op)
	}
	// The table against AppSync (docs/OPERATIONS.md holds the one
	// measured when it was written; checkComparison compares).
	fmt.Printf("\nAgainst AppSync (docs/OPERATIONS.md):\n\n%s\n", costmodel.ComparisonHeader)
	var compared []costmodel.ComparisonRow
	for _, op := range ops[:4] {
		compared = append(compared, p.Comparison(op))
		fmt.Println(compared[len(compared)-1].Markdown())
	}
	rt := realtimeRow(p)
	fmt.Println(rt)
	checkComparison(t, compared, rt)
	fmt.Println()
	for _, op := range ops[:4] {
		fmt.Printf("%s usd_per_million=%.2f\n", op.Name, p.PriceOp(op).Total()*1e6)
	}
	fmt.Printf("bootstrap-1pct-1M-rows usd_each=%.6f\n", p.PriceOp(boot).Total()*10_000/float64(rows))
	// The recommended wss:// shape (TLS in the tasks); the TLS listener's
	// month is in docs/OPERATIONS.md.
	fmt.Printf("realtime-idle-10k usd_per_month=%.2f\n", p.RealtimeIdle(10_000, false))
}

// realtimeRow is the comparison table's row for 10,000 idle realtime
// sockets a month (TLS in the tasks; AppSync: connection minutes).
func realtimeRow(p costmodel.Prices) string {
	return fmt.Sprintf("| `realtime-idle-10k`, a month (not per million) | | | | | **$%.2f** | $%.2f |", p.RealtimeIdle(10_000, false), p.AppSyncIdle(10_000))
}

// checkComparison compares the table against AppSync in
// docs/OPERATIONS.md (between its "make cost: comparison" markers) with
// the rows just measured: the same operations; API Gateway and AppSync
// to the cent, the logs to a cent either way and 16 bytes an invocation
// (the digits of a duration); DynamoDB and the total less Lambda to 2% (item
// sizes carry times whose digits vary, so a read may cross a 4 KB unit
// from one run to the next). Lambda's share is the billed duration this
// machine measured when the table was written, which varies run to run:
// it must only be at least the request price.
func checkComparison(t *testing.T, measured []costmodel.ComparisonRow, realtime string) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(repoRoot(), "docs", "OPERATIONS.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "<!-- make cost: comparison -->")
	block, _, ok2 := strings.Cut(block, "<!-- end make cost: comparison -->")
	if !ok || !ok2 {
		t.Fatal("docs/OPERATIONS.md has no <!-- make cost: comparison --> ... <!-- end make cost: comparison --> block")
	}
	if !strings.Contains(block, costmodel.ComparisonHeader) {
		t.Errorf("docs/OPERATIONS.md: the comparison table's header is not\n%s", costmodel.ComparisonHeader)
	}
	if !strings.Contains(block, realtime) {
		t.Errorf("docs/OPERATIONS.md: the comparison table lacks the row\n%s", realtime)
	}
	written := map[string]costmodel.ComparisonRow{}
	for line := range strings.Lines(block) {
		if !strings.HasPrefix(line, "| `") || strings.HasPrefix(line, "| `realtime") {
			continue
		}
		r, err := costmodel.ParseComparisonRow(strings.TrimSpace(line))
		if err != nil {
			t.Fatal(err)
		}
		written[r.Name] = r
	}
	if len(written) != len(measured) {
		t.Errorf("docs/OPERATIONS.md: %d operations in the comparison table, make cost measures %d", len(written), len(measured))
	}
	cent := func(a, b float64) bool { return math.Abs(a-b) < 0.0051 }
	near := func(a, b float64) bool { return math.Abs(a-b) <= 0.02*b+0.0151 }
	// A read that crosses a 4 KB boundary in one run and not the other
	// is one read unit apart, whatever the operation's size (a window of
	// 100 small commits read 8.5 units in one run and 9.5 in the next):
	// read units, and the dollars they make, may also differ by one unit.
	rru := costmodel.USEast1.DynamoRRU * 1e6
	nearReads := func(a, b, unit float64) bool { return near(a, b) || math.Abs(a-b) <= unit+0.0151 }
	for _, m := range measured {
		w, ok := written[m.Name]
		if !ok {
			t.Errorf("docs/OPERATIONS.md: no row for %s; make cost prints\n%s", m.Name, m.Markdown())
			continue
		}
		invocations := m.AppSync / (costmodel.USEast1.AppSyncQuery * 1e6)
		if !cent(w.API, m.API) || !nearReads(w.Dynamo, m.Dynamo, rru) || !nearReads(w.RRU, m.RRU, 1) || !near(w.WRU, m.WRU) ||
			!cent(w.AppSync, m.AppSync) || math.Abs(w.Logs-m.Logs) > 0.0151 || math.Abs(float64(w.LogBytes-m.LogBytes)) > 16*invocations ||
			!nearReads(w.Total-w.Lambda, m.Total-m.Lambda, rru) || w.Lambda < invocations*costmodel.USEast1.LambdaRequest*1e6-0.005 {
			t.Errorf("docs/OPERATIONS.md's row disagrees with the measurement:\n%s\nmake cost prints\n%s", strings.TrimSpace(w.Markdown()), m.Markdown())
		}
	}
}

// processCPU is the CPU time (user and system) this process has used: the
// handler's, and whatever else runs in the process meanwhile (the S3
// server, the meter's own size reads), so an invocation's share is an
// upper bound.
func processCPU(t testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
