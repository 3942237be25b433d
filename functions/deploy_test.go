package functions

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/codedeploy"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/app/apptest"
	"github.com/skyfold/syncular-lambda/internal/auth"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/migrate"
	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/lambdahttp"
	"github.com/skyfold/syncular-lambda/internal/memstore"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// TestDeployKeepsServing (issue 20, item 1) runs deploys the way the
// template runs them, against one DynamoDB Local table: the old and the
// new build (the push and pull functions of each, with their own store
// instances, as separate Lambda versions) serve clients that push and
// pull continuously on many partitions, half of them on wire version 3
// (refusals are HTTP 503) and half on version 2. Every sync function's
// deployment group shifts its alias with the DeploymentPreference type
// the template declares (each AllowedValues type, the percentages
// compressed to short steps) and invokes the hooks the template gives it
// (PreTraffic before, PostTraffic after the shift; the hook function's
// reserved concurrency of 1 runs one invocation at a time; a group goes
// on once the hook reported its status to CodeDeploy).
//
// It asserts: no non-retryable answer; retryable refusals per client
// (the Retry-After seconds a client would wait) 0 for a code-only deploy
// and at most 5 s for a schema bump; nothing on serverErrors, the metric
// the groups' rollback alarms read; after a rollback mid-shift the old
// build serves every client without a refusal; no pushed row is lost;
// and a completed schema deploy leaves its checkpoint activated on every
// partition.
//
// A release that changes an existing table's layout (NewColumn) fences
// each partition from the old build with the new build's first write
// there. Each function version forwards what its serve gate refuses to
// the newest registered version past the fence (app.Forwarder, here
// invoking the other build's handler in process), so such a release too
// stays within the budget on the longest shift, and after a rollback
// (NewColumnRolledBack, once the new build fenced half the partitions)
// the old build serves the fenced partitions through the new version.
// Without forwarding (SSP2_DEPLOY_NOFORWARD=1, the wiring before it)
// NewColumnRolledBack fails: every client of a fenced partition is
// refused until it gives up (804–806 s of Retry-After for one client,
// 1,400 to 9,200 refusals after the rollback in four runs).
//
// On the wiring before issue 20 (a PreTraffic hook on all four groups
// that bumped the marker and fenced every partition before any shift) it
// fails: the code-only deploy got refusals (the fence walk moved every
// gate token: 6 requests on serverErrors, 2 s for one client), a
// Linear10PercentEvery1Minute schema bump 172 serverErrors and 45 s of
// Retry-After for one client, and after a rollback the old build refused
// every request (10,269 refusals after the rollback, 5,632 serverErrors).
func TestDeployKeepsServing(t *testing.T) {
	ddb := testenv.DynamoDB(t)
	plan := readDeployPlan(t)
	t.Logf("template: deployment types %v (default %s); hooks %v", plan.types, plan.defaultType, plan.hooks)
	v1 := todo(t)
	v2 := todoV2(t, v1)
	run := func(name string, sc deployScenario) {
		t.Run(name, func(t *testing.T) {
			sc.plan = plan
			sc.noForward = os.Getenv("SSP2_DEPLOY_NOFORWARD") == "1"
			res := runDeploy(t, ddb, sc)
			res.check(t, sc)
		})
	}
	run("CodeOnly/"+plan.defaultType, deployScenario{typ: plan.defaultType, oldSchema: v1, newSchema: v1})
	for _, typ := range plan.types {
		run("SchemaBump/"+typ, deployScenario{typ: typ, oldSchema: v1, newSchema: v2, checkpoints: "notes-projection=tasks"})
	}
	// A changed layout of an existing table, measured on the longest
	// shift the template allows.
	longest := plan.defaultType
	for _, typ := range plan.types {
		if len(shiftSchedule(t, typ)) > len(shiftSchedule(t, longest)) {
			longest = typ
		}
	}
	v2col := todoV2Column(t, v1)
	run("NewColumn/"+longest, deployScenario{typ: longest, oldSchema: v1, newSchema: v2col, fences: true})
	// Rolled back halfway, after the new build fenced partitions: the old build
	// serves them again by forwarding to the new version.
	run("NewColumnRolledBack/"+longest, deployScenario{typ: longest, oldSchema: v1, newSchema: v2col, fences: true, rollbackAfter: 5})
	for _, typ := range plan.types {
		if len(shiftSchedule(t, typ)) > 1 {
			run("SchemaBumpRolledBack/"+typ, deployScenario{typ: typ, oldSchema: v1, newSchema: v2, checkpoints: "notes-projection=tasks", rollbackAfter: 1})
			break
		}
	}
}

// deployPlan is what the template says about deploys.
type deployPlan struct {
	types       []string            // DeploymentType's AllowedValues
	defaultType string              // its Default
	hooks       map[string][]string // function name → lifecycle hooks (PreTraffic, PostTraffic)
}

func readDeployPlan(t *testing.T) deployPlan {
	t.Helper()
	root := loadYAML(t)
	p := deployPlan{hooks: map[string][]string{}}
	for _, f := range app.Functions {
		dp := get(root, "Resources", f.LogicalID, "Properties", "DeploymentPreference")
		typ := get(dp, "Type")
		if typ == nil || typ.Tag != "!Ref" {
			t.Fatalf("%s: DeploymentPreference.Type must be !Ref a parameter", f.LogicalID)
		}
		param := get(root, "Parameters", typ.Value)
		p.defaultType = scalar(get(param, "Default"))
		p.types = nil
		for _, v := range get(param, "AllowedValues").Content {
			p.types = append(p.types, v.Value)
		}
		for _, k := range keys(get(dp, "Hooks")) {
			if !refTo(get(dp, "Hooks", k), app.MigrateHookJob.LogicalID) {
				t.Fatalf("%s: hook %s is not the migrate hook", f.LogicalID, k)
			}
			p.hooks[f.Name] = append(p.hooks[f.Name], k)
		}
	}
	return p
}

var (
	canaryType = regexp.MustCompile(`^Canary(\d+)Percent\d+Minutes?$`)
	linearType = regexp.MustCompile(`^Linear(\d+)PercentEvery\d+Minutes?$`)
)

// shiftSchedule is the new version's traffic share (percent) after each
// step of a CodeDeploy Lambda deployment configuration.
func shiftSchedule(t *testing.T, typ string) []int {
	t.Helper()
	if typ == "AllAtOnce" {
		return []int{100}
	}
	if m := canaryType.FindStringSubmatch(typ); m != nil {
		p, _ := strconv.Atoi(m[1])
		return []int{p, 100}
	}
	if m := linearType.FindStringSubmatch(typ); m != nil {
		p, _ := strconv.Atoi(m[1])
		var out []int
		for s := p; s < 100; s += p {
			out = append(out, s)
		}
		return append(out, 100)
	}
	t.Fatalf("unknown deployment type %q", typ)
	return nil
}

// todoV2Column is the todo schema's next version with a nullable column
// added to tasks: a storage layout version 1 cannot read.
func todoV2Column(t *testing.T, v1 *schema.Schema) *schema.Schema {
	return nextTodo(t, v1, func(doc map[string]any) {
		for _, tb := range doc["tables"].([]any) {
			if m := tb.(map[string]any); m["name"] == "tasks" {
				m["columns"] = append(m["columns"].([]any), map[string]any{"name": "estimate", "type": "integer", "nullable": true})
			}
		}
	})
}

// todoV2 is the todo schema's next version: projects and tasks as they
// are, plus a notes table; served beside version 1.
func todoV2(t *testing.T, v1 *schema.Schema) *schema.Schema {
	return nextTodo(t, v1, func(doc map[string]any) {
		doc["tables"] = append(doc["tables"].([]any), map[string]any{
			"name": "notes", "primaryKey": "id", "scopes": []any{"project:{project_id}"},
			"columns": []any{
				map[string]any{"name": "id", "type": "string", "nullable": false},
				map[string]any{"name": "project_id", "type": "string", "nullable": false},
				map[string]any{"name": "body", "type": "string", "nullable": false},
			},
		})
	})
}

// nextTodo is version 2 of the todo schema document as edit changes it,
// merged with v1 (a build that serves both).
func nextTodo(t *testing.T, v1 *schema.Schema, edit func(doc map[string]any)) *schema.Schema {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(mustRead(t, schemaPath), &doc); err != nil {
		t.Fatal(err)
	}
	doc["version"] = 2
	edit(doc)
	b, _ := json.Marshal(doc)
	s2, err := schema.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	m, err := schema.Merge(s2, v1)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

type deployScenario struct {
	plan                 deployPlan
	typ                  string
	oldSchema, newSchema *schema.Schema
	checkpoints          string // the new build's SYNC_CHECKPOINTS
	// rollbackAfter, when positive, rolls the deployment back after that
	// many shift steps (a rollback alarm), as CloudFormation then rolls
	// every alias back.
	rollbackAfter int
	// fences: the release changes an existing table's layout, so the new
	// build's first write in a partition fences the old one out of it.
	// Without forwarding a request the old build then refuses is retried
	// until the traffic weight sends it to the new one (about (1-w)/w
	// retries at weight w); with it, the old build answers through the
	// new one. The run must fence partitions and, rolled back, serve them
	// by forwarding after the rollback.
	fences bool
	// noForward builds the functions without a Forwarder (SYNC_FORWARD=off,
	// the behaviour before forwarding), for measuring the difference
	// (SSP2_DEPLOY_NOFORWARD=1).
	noForward bool
}

const (
	deployPartitions = 8
	deployClients    = 16
	deployStep       = 150 * time.Millisecond // one shift step (minutes in AWS)
	retryScale       = 25 * time.Millisecond  // one second of Retry-After
	deployTenantKey  = "tenant"
)

// build is one version of the push and pull functions.
type build struct {
	name     string
	version  string // the Lambda function version
	handlers map[string]*lambdahttp.Handler
}

// inProcessInvoker is app.Invoker over the builds of this test: the Lambda
// Invoke of function fn's version v runs that build's handler with the
// payload, as the Lambda runtime would.
type inProcessInvoker struct {
	mu     sync.Mutex
	builds map[string]*build // by version
	calls  atomic.Int64
}

func (p *inProcessInvoker) Invoke(ctx context.Context, fn, version string, payload []byte) ([]byte, string, error) {
	p.mu.Lock()
	b := p.builds[version]
	p.mu.Unlock()
	if b == nil || b.handlers[fn] == nil {
		return nil, "", fmt.Errorf("no function %s:%s", fn, version)
	}
	p.calls.Add(1)
	out, err := b.handlers[fn].Invoke(ctx, payload)
	if err != nil {
		doc, _ := json.Marshal(map[string]string{"errorMessage": err.Error()})
		return doc, "Unhandled", nil
	}
	return out, "", nil
}

// deployRun is what one scenario observed.
type deployRun struct {
	clients    []*deployClient
	logs       *lineBuffer
	hookErrs   []string
	rolledBack bool
	store      *dynamostore.Store
	afterLogs  int // logs' length when the deploy (or rollback) was over
	forwards   int64
}

func runDeploy(t *testing.T, ddb *testenv.DynamoLocal, sc deployScenario) *deployRun {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := ddb.Client(t)
	table := testenv.UniqueName(t, "deploy")
	if err := dynamostore.CreateTable(ctx, c, table); err != nil {
		t.Fatal(err)
	}
	env := envLocal(t)
	secret := []byte(env["SYNC_HS256_SECRET"])
	logs := &lineBuffer{}
	segs := memstore.NewSegments()
	invoker := &inProcessInvoker{builds: map[string]*build{}}
	newBuild := func(name, version string, sch *schema.Schema, checkpoints string) *build {
		cfg := localEnvConfig(t, env, map[string]string{
			"SYNC_TABLE_NAME": table, "SYNC_PARTITION_CLAIM": deployTenantKey, "SYNC_CHECKPOINTS": checkpoints, "SYNC_LOG_LEVEL": "info",
		})
		b := &build{name: name, version: version, handlers: map[string]*lambdahttp.Handler{}}
		for _, fn := range []app.Function{app.Push, app.Pull} {
			// Each function version is its own Lambda instance: its own
			// SDK client and store (and so its own marker cache).
			st := dynamostore.New(ddb.Client(t), table, dynamostore.Options{})
			logger := app.NewLogger(logs, slog.LevelInfo, fn)
			deps := app.Deps{Schema: sch, Store: st, Segments: segs, Logger: logger}
			if !sc.noForward {
				// The cold start registers the version (app.FromEnv does
				// it from AWS_LAMBDA_FUNCTION_NAME and _VERSION).
				fwd := &app.Forwarder{Function: fn.Name, Version: version, SchemaVersion: int64(sch.Latest), Builds: st, Invoker: invoker, Logger: logger}
				if err := fwd.Register(ctx); err != nil {
					t.Fatal(err)
				}
				deps.Forward = fwd
			}
			h, err := app.Build(cfg, fn, deps)
			if err != nil {
				t.Fatal(err)
			}
			b.handlers[fn.Name] = h
		}
		invoker.mu.Lock()
		invoker.builds[version] = b
		invoker.mu.Unlock()
		return b
	}
	oldB := newBuild("old", "1", sc.oldSchema, "")
	newB := newBuild("new", "2", sc.newSchema, sc.checkpoints)
	decls, err := migrate.ParseDeclarations(sc.checkpoints)
	if err != nil {
		t.Fatal(err)
	}

	f := &fleet{old: oldB, new: newB, weights: map[string]*atomic.Int64{}}
	for _, fn := range app.Functions {
		f.weights[fn.Name] = &atomic.Int64{}
	}
	run := &deployRun{logs: logs, store: dynamostore.New(c, table, dynamostore.Options{})}
	for i := range deployClients {
		v := wire.Version3
		if i%2 == 1 {
			v = wire.Version2
		}
		part := fmt.Sprintf("tenant-%02d", i%deployPartitions)
		tok, err := auth.MintHS256(secret, auth.Claims{"sub": fmt.Sprintf("actor-%02d", i), deployTenantKey: part,
			"syncular_scopes": map[string][]string{"project_id": {"p1"}}}, time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		run.clients = append(run.clients, &deployClient{id: fmt.Sprintf("client-%02d", i), partition: part, version: uint16(v),
			token: tok, tasks: tableOf(t, sc.oldSchema, "tasks"), fleet: f, rng: rand.New(rand.NewPCG(uint64(i), 7))})
	}
	// Before the deploy: everything on the old build.
	for _, cl := range run.clients {
		for range 2 {
			cl.round(ctx)
		}
	}

	// The clients sync continuously while the deployment runs.
	stop := make(chan struct{})
	var clientsWG sync.WaitGroup
	for _, cl := range run.clients {
		clientsWG.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				cl.round(ctx)
				time.Sleep(15 * time.Millisecond)
			}
		})
	}

	// CodeDeploy: one deployment group per function, shifting together.
	var (
		hookMu     sync.Mutex // the hook's reserved concurrency of 1
		hooksWG    sync.WaitGroup
		errMu      sync.Mutex
		rolledBack atomic.Bool
	)
	invokeHook := func(fn, kind string) bool {
		rep := &hookReporter{status: make(chan string, 1)}
		hooksWG.Go(func() {
			hookMu.Lock()
			defer hookMu.Unlock()
			h := &app.MigrateHook{Store: dynamostore.New(ddb.Client(t), table, dynamostore.Options{}), Reporter: rep,
				Version: int64(sc.newSchema.Latest), Checkpoints: decls, Logger: slog.New(slog.DiscardHandler)}
			hctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			res, err := h.Run(hctx, app.HookEvent{DeploymentID: "d-" + fn, LifecycleEventHookExecutionID: kind + "-" + fn})
			if err != nil || res.Error != "" || res.Incomplete > 0 || res.TimedOut {
				errMu.Lock()
				run.hookErrs = append(run.hookErrs, fmt.Sprintf("%s %s: %+v %v", fn, kind, res, err))
				errMu.Unlock()
			}
			if !res.Reported {
				rep.status <- "Failed" // no report: CodeDeploy times the hook out
			}
		})
		return <-rep.status == "Succeeded"
	}
	schedule := shiftSchedule(t, sc.typ)
	var groups sync.WaitGroup
	for _, fn := range app.Functions {
		groups.Go(func() {
			hooks := sc.plan.hooks[fn.Name]
			w := f.weights[fn.Name]
			has := func(k string) bool {
				for _, h := range hooks {
					if h == k {
						return true
					}
				}
				return false
			}
			if has("PreTraffic") && !invokeHook(fn.Name, "PreTraffic") {
				rolledBack.Store(true)
				return
			}
			for i, pct := range schedule {
				if rolledBack.Load() {
					return
				}
				w.Store(int64(pct))
				time.Sleep(deployStep)
				if sc.rollbackAfter == i+1 {
					if sc.fences {
						// The alarm fires once the new build has fenced
						// partitions (on the compressed steps its share of
						// the traffic varies with the machine's load).
						waitFenced(ctx, t, run.store, int64(sc.oldSchema.Latest), deployPartitions/2)
					}
					rolledBack.Store(true) // the rollback alarm fired
				}
			}
			if !rolledBack.Load() && has("PostTraffic") && !invokeHook(fn.Name, "PostTraffic") {
				rolledBack.Store(true)
			}
		})
	}
	groups.Wait()
	if rolledBack.Load() {
		for _, w := range f.weights {
			w.Store(0)
		}
	}
	run.rolledBack = rolledBack.Load()
	time.Sleep(2 * deployStep)
	// After the deploy (or its rollback): every client must be served.
	run.afterLogs = logs.len()
	for _, cl := range run.clients {
		cl.after.Store(true)
	}
	time.Sleep(4 * deployStep)
	close(stop)
	clientsWG.Wait()
	hooksWG.Wait()
	// One more round each, then the data check reads through the serving build.
	for _, cl := range run.clients {
		cl.round(ctx)
		cl.verify(ctx)
	}
	run.forwards = invoker.calls.Load()
	return run
}

// fencedPartitions counts the partitions whose writer fence is above
// version.
func fencedPartitions(ctx context.Context, t *testing.T, st *dynamostore.Store, version int64) int {
	n := 0
	for i := range deployPartitions {
		g, err := st.ReadGate(ctx, fmt.Sprintf("tenant-%02d", i))
		if err != nil {
			t.Error(err)
			return 0
		}
		if g.WriterFence > version {
			n++
		}
	}
	return n
}

// waitFenced waits (bounded) until at least n partitions are fenced above
// version.
func waitFenced(ctx context.Context, t *testing.T, st *dynamostore.Store, version int64, n int) {
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; {
		if fencedPartitions(ctx, t, st, version) >= n {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("the new build fenced fewer than %d partitions", n)
}

// fleet routes a request to a build by its function's traffic weight.
type fleet struct {
	old, new *build
	weights  map[string]*atomic.Int64 // percent on the new build
}

func (f *fleet) pick(fn string, rng *rand.Rand, mu *sync.Mutex) *build {
	mu.Lock()
	n := rng.IntN(100)
	mu.Unlock()
	if int64(n) < f.weights[fn].Load() {
		return f.new
	}
	return f.old
}

// deployClient is one device: it pushes a task per round and pulls.
type deployClient struct {
	id, partition, token string
	version              uint16
	tasks                *schema.Table
	fleet                *fleet
	rng                  *rand.Rand
	rngMu                sync.Mutex

	epoch  string
	cursor int64
	n      int
	after  atomic.Bool

	mu          sync.Mutex
	requests    int
	refusals    int // retryable refusals answered
	refusedSecs int // Retry-After seconds a client waits on them
	afterRefuse int // refusals of requests sent once the deploy or rollback was over
	maxEpisode  int // most refusals in a row of one request
	failures    []string
	pushed      []string
}

func (c *deployClient) fail(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.failures) < 5 {
		c.failures = append(c.failures, fmt.Sprintf(format, args...))
	}
}

// round is one sync round: a push with a pull on /sync (push function),
// then a pull on /pull (pull function); each retried unchanged on a
// retryable refusal, as stock clients do (SPEC §2.4).
func (c *deployClient) round(ctx context.Context) {
	if c.epoch == "" {
		c.send(ctx, "pull", "/pull", nil) // epoch acquisition carries no push (§2.1)
	}
	c.n++
	id := fmt.Sprintf("%s-%04d", c.id, c.n)
	vals := []rowcodec.Value{{Str: id}, {Str: "p1"}, {Str: "task " + id}, {Bool: false}, {Null: true}, {Null: true}, {Null: true}, {Int: int64(c.n)}}
	var payload []byte
	var err error
	if c.version >= wire.Version3 {
		present := make([]bool, len(vals))
		for i := range present {
			present[i] = true
		}
		payload, err = c.tasks.Codec.AppendSparse(nil, vals, present)
	} else {
		payload, err = c.tasks.Codec.Append(nil, vals)
	}
	if err != nil {
		c.fail("encode: %v", err)
		return
	}
	commit := &wire.PushCommit{ClientCommitID: id, Operations: []wire.Operation{apptest.Upsert("tasks", id, 0, payload)}}
	if c.send(ctx, "push", "/sync", commit) {
		c.mu.Lock()
		c.pushed = append(c.pushed, id)
		c.mu.Unlock()
	}
	c.send(ctx, "pull", "/pull", nil)
}

func (c *deployClient) request(commit *wire.PushCommit, cursor int64) []byte {
	hdr := &wire.ReqHeader{ClientID: c.id, SchemaVersion: 1}
	if c.epoch != "" {
		hdr.LogEpoch = wire.Some(c.epoch)
	}
	frames := []wire.Frame{hdr}
	if commit != nil {
		frames = append(frames, commit)
	}
	frames = append(frames, &wire.PullHeader{Accept: wire.AcceptInlineRows},
		&wire.Subscription{ID: "tasks", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: cursor})
	b, _ := wire.Encode(&wire.Message{WireVersion: c.version, Kind: wire.KindRequest, Frames: frames})
	return b
}

// send delivers one request until it is answered for good; true when a
// push in it was applied (or replayed as applied).
func (c *deployClient) send(ctx context.Context, fn, route string, commit *wire.PushCommit) bool {
	for attempt := 0; ; attempt++ {
		if attempt > 200 || ctx.Err() != nil {
			c.fail("%s %s: still refused after %d attempts", fn, route, attempt)
			return false
		}
		// A request sent once the deploy or rollback was over (one sent
		// before may still be answered after it).
		after := c.after.Load()
		b := c.fleet.pick(fn, c.rng, &c.rngMu)
		resp, err := invokeHandler(ctx, b.handlers[fn], fn, route, c.token, c.request(commit, c.cursor))
		c.mu.Lock()
		c.requests++
		c.mu.Unlock()
		if err != nil {
			c.fail("%s via %s: %v", fn, b.name, err)
			return false
		}
		retryAfter, refused, msg := c.answer(commit, resp)
		if msg != "" {
			c.fail("%s via %s: %s", fn, b.name, msg)
			return false
		}
		if !refused {
			return commit != nil
		}
		c.mu.Lock()
		c.maxEpisode = max(c.maxEpisode, attempt+1)
		c.refusals++
		c.refusedSecs += retryAfter
		if after {
			c.afterRefuse++
		}
		c.mu.Unlock()
		time.Sleep(time.Duration(retryAfter) * retryScale)
	}
}

// answer classifies a response: a retryable refusal (with the seconds
// its Retry-After asks for, 1 when absent), a failure message, or
// success (which advances the client's epoch and cursor).
func (c *deployClient) answer(commit *wire.PushCommit, resp events.APIGatewayV2HTTPResponse) (retryAfter int, refused bool, failure string) {
	body := []byte(resp.Body)
	if resp.IsBase64Encoded {
		body, _ = base64.StdEncoding.DecodeString(resp.Body)
	}
	retryAfter = 1
	if v, err := strconv.Atoi(resp.Headers["Retry-After"]); err == nil && v > 0 {
		retryAfter = v
	}
	if resp.StatusCode != 200 {
		// §10.1: the JSON error says whether a retry can succeed.
		var e struct {
			Code      string `json:"code"`
			Retryable bool   `json:"retryable"`
		}
		if json.Unmarshal(body, &e) == nil && e.Retryable {
			return retryAfter, true, ""
		}
		return 0, false, fmt.Sprintf("HTTP %d %s", resp.StatusCode, body)
	}
	m, err := wire.Decode(body)
	if err != nil {
		return 0, false, fmt.Sprintf("response does not decode: %v", err)
	}
	for _, fr := range m.Frames {
		switch x := fr.(type) {
		case *wire.ErrorFrame:
			if x.Retryable {
				return retryAfter, true, ""
			}
			return 0, false, "in-band ERROR " + x.Code
		case *wire.RespHeader:
			if x.ResetRequired && c.epoch != "" {
				return 0, false, "reset required mid-run"
			}
			c.epoch = x.LogEpoch
		case *wire.PushResult:
			if commit == nil || x.ClientCommitID != commit.ClientCommitID || (x.Status != wire.PushApplied && x.Status != wire.PushCached) {
				return 0, false, fmt.Sprintf("push result %+v", x)
			}
		}
	}
	secs, err := enginetest.ParseSections(m)
	if err != nil {
		return 0, false, err.Error()
	}
	for _, s := range secs {
		if s.End != nil && s.End.NextCursor > c.cursor {
			c.cursor = s.End.NextCursor
		}
	}
	return 0, false, ""
}

// verify pulls the partition's log from the start through the build now
// serving and checks every row this client pushed is there.
func (c *deployClient) verify(ctx context.Context) {
	seen := map[string]bool{}
	cursor := int64(0)
	for range 100 {
		b := c.fleet.pick("pull", c.rng, &c.rngMu)
		resp, err := invokeHandler(ctx, b.handlers["pull"], "pull", "/pull", c.token, c.request(nil, cursor))
		if err != nil || resp.StatusCode != 200 {
			c.fail("verify pull via %s: %v %d %s", b.name, err, resp.StatusCode, resp.Body)
			return
		}
		body, _ := base64.StdEncoding.DecodeString(resp.Body)
		m, err := wire.Decode(body)
		if err != nil {
			c.fail("verify: %v", err)
			return
		}
		secs, err := enginetest.ParseSections(m)
		if err != nil || len(secs) != 1 {
			c.fail("verify sections: %v", err)
			return
		}
		for _, cm := range secs[0].Commits {
			for _, ch := range cm.Changes {
				seen[ch.RowID] = true
			}
		}
		if secs[0].End == nil || secs[0].End.NextCursor <= cursor {
			break
		}
		cursor = secs[0].End.NextCursor
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range c.pushed {
		if !seen[id] {
			c.failures = append(c.failures, "pushed row "+id+" is missing from the log")
			return
		}
	}
}

func invokeHandler(ctx context.Context, h *lambdahttp.Handler, fn, route, token string, body []byte) (events.APIGatewayV2HTTPResponse, error) {
	var resp events.APIGatewayV2HTTPResponse
	ev := apptest.Event("POST", route, map[string]string{"Content-Type": apptest.ContentType, "Authorization": "Bearer " + token}, body)
	in, err := json.Marshal(ev)
	if err != nil {
		return resp, err
	}
	out, err := h.Invoke(ctx, in)
	if err != nil {
		return resp, fmt.Errorf("invoke %s: %w", fn, err)
	}
	if err := json.Unmarshal(out, &resp); err != nil {
		return resp, err
	}
	return resp, nil
}

func (r *deployRun) check(t *testing.T, sc deployScenario) {
	t.Helper()
	var requests, refusals, maxSecs, afterRefusals, maxEpisode int
	for _, c := range r.clients {
		c.mu.Lock()
		requests += c.requests
		refusals += c.refusals
		maxSecs = max(maxSecs, c.refusedSecs)
		afterRefusals += c.afterRefuse
		maxEpisode = max(maxEpisode, c.maxEpisode)
		for _, f := range c.failures {
			t.Errorf("%s (wire %d, %s): %s", c.id, c.version, c.partition, f)
		}
		c.mu.Unlock()
	}
	serverErrors, notReady := r.logs.sum("serverErrors", 0), r.logs.sum("schemaNotReady", 0)
	forwarded, forwardedAfter := r.logs.sum("forwarded", 0), r.logs.sum("forwarded", r.afterLogs)
	t.Logf("%s: %d requests from %d clients on %d partitions; %d retryable refusals, at most %d s of Retry-After for one client, at most %d refusals in a row for one request; serverErrors %d, schemaNotReady %d; forwarded %d (%d after the deploy or rollback); rolled back %t",
		sc.typ, requests, len(r.clients), deployPartitions, refusals, maxSecs, maxEpisode, serverErrors, notReady, forwarded, forwardedAfter, r.rolledBack)
	if int64(forwarded) != r.forwards {
		t.Errorf("%d request lines counted forwarded, but %d forwarding invocations answered", forwarded, r.forwards)
	}
	if sc.fences && !sc.noForward {
		fenced := fencedPartitions(context.Background(), t, r.store, int64(sc.oldSchema.Latest))
		t.Logf("%d of %d partitions fenced from the old build", fenced, deployPartitions)
		if fenced == 0 {
			// (How many requests the old build forwards during the shift
			// depends on the machine's pace; after a rollback it must.)
			t.Errorf("the layout change fenced no partition: the scenario did not exercise the fence")
		}
		if r.rolledBack && forwardedAfter == 0 {
			t.Errorf("after the rollback no request was forwarded: the old build did not serve the fenced partitions through the new one")
		}
	}
	for _, e := range r.hookErrs {
		t.Errorf("hook: %s", e)
	}
	budget := 5
	if sc.newSchema == sc.oldSchema {
		budget = 0
	}
	if maxSecs > budget {
		t.Errorf("a client was refused for %d s of Retry-After, want at most %d s", maxSecs, budget)
	}
	if serverErrors != 0 {
		t.Errorf("%d requests counted on serverErrors (the deployment's rollback alarm metric)", serverErrors)
	}
	if r.rolledBack && afterRefusals != 0 {
		t.Errorf("%d refusals after the rollback: the old build must serve everything again", afterRefusals)
	}
	if sc.rollbackAfter > 0 != r.rolledBack {
		t.Errorf("rolled back %t, want %t", r.rolledBack, sc.rollbackAfter > 0)
	}
	decls, _ := migrate.ParseDeclarations(sc.checkpoints)
	if r.rolledBack || len(decls) == 0 {
		return
	}
	for i := range deployPartitions {
		p := fmt.Sprintf("tenant-%02d", i)
		for _, d := range decls {
			ck, err := r.store.GetCheckpoint(context.Background(), p, d.Name)
			if err != nil || ck == nil || ck.State != store.CheckpointActivated {
				t.Errorf("%s: checkpoint %s after the deploy: %+v %v, want activated", p, d.Name, ck, err)
			}
		}
	}
}

// hookReporter stands in for CodeDeploy's PutLifecycleEventHookExecutionStatus.
type hookReporter struct{ status chan string }

func (h *hookReporter) PutLifecycleEventHookExecutionStatus(_ context.Context, in *codedeploy.PutLifecycleEventHookExecutionStatusInput, _ ...func(*codedeploy.Options)) (*codedeploy.PutLifecycleEventHookExecutionStatusOutput, error) {
	h.status <- string(in.Status)
	return &codedeploy.PutLifecycleEventHookExecutionStatusOutput{LifecycleEventHookExecutionId: aws.String(aws.ToString(in.LifecycleEventHookExecutionId))}, nil
}

// lineBuffer collects the functions' JSON log lines.
type lineBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lineBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lineBuffer) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Len()
}

// sum adds a numeric field over every request line from byte offset from
// on (an EMF counter's Sum).
func (l *lineBuffer) sum(field string, from int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(l.buf.Bytes()[from:]))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		if v, ok := line[field].(float64); ok {
			n += int(v)
		}
	}
	return n
}

func tableOf(t *testing.T, s *schema.Schema, name string) *schema.Table {
	t.Helper()
	tb, ok := s.Versions[1].Table(name)
	if !ok {
		t.Fatalf("no table %s", name)
	}
	return tb
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
