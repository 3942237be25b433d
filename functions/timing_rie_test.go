package functions

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/skyfold/syncular-lambda/internal/app/apptest"
	"github.com/skyfold/syncular-lambda/internal/core/blobs"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// Issue 15's Lambda view: cold init and warm handler time of every
// function binary under aws-lambda-rie, against DynamoDB Local and the
// local S3 server (loopback only, bounded). Gated because it is a
// measurement, not a check:
//
//	SSP2_LAMBDA_TIMING=1 go test -count=1 -v -run '^TestLambdaTiming$' -timeout 60m ./functions/
//
// (make lambda-timing). Knobs, all optional:
//
//	SSP2_LAMBDA_TIMING_SRC       module root whose functions/<name> are built
//	                             (default this checkout; point it at a
//	                             `git worktree` of an older commit to measure it)
//	SSP2_LAMBDA_TIMING_COLD      cold starts per function (default 5)
//	SSP2_LAMBDA_TIMING_WARM      warm invokes per function (default 200)
//	SSP2_LAMBDA_TIMING_ONLY      comma list of entries to run (e.g. push,pull-quiet)
//	SSP2_LAMBDA_TIMING_INITTRACE =1: run the functions with GODEBUG=inittrace=1
//	                             and report their package init time
//	SSP2_LAMBDA_TIMING_OUT       write the results as JSON to this file
//	SSP2_LAMBDA_TIMING_BASELINE  a previous run's JSON: also print before/after
//
// Each cold start is a fresh emulator (a fresh bootstrap process). The
// binaries are built as the Makefile builds them (-tags lambda.norpc
// -trimpath -ldflags "-s -w", static, Linux) but for the host's
// architecture so the emulator can run them. The data every entry reads
// is seeded through the measured tree's own push function, so an older
// tree never reads items a newer one wrote.

// timingResult is one entry's numbers (milliseconds, bytes), one value
// per cold start unless said otherwise.
type timingResult struct {
	Name string `json:"name"`
	// ColdMs: emulator start to the first invoke's response.
	ColdMs []float64 `json:"coldMs"`
	// UpMs: emulator start to its invoke port accepting connections (the
	// emulator starts the bootstrap only at the first invoke).
	UpMs []float64 `json:"upMs"`
	// FirstMs: the first invoke's round trip: bootstrap exec, Go runtime
	// and package init, app init, the handler's first run.
	FirstMs []float64 `json:"firstMs"`
	// InitDoneMs: first invoke sent to the "init done" line's timestamp
	// (HTTP functions only, which log it at debug level).
	InitDoneMs []float64 `json:"initDoneMs,omitempty"`
	// AppInitMs: the function's own "init done" initMs (main to handler
	// built).
	AppInitMs []float64 `json:"appInitMs,omitempty"`
	// PkgInitMs: the sum of the package initializers' clock time
	// (GODEBUG=inittrace=1, with SSP2_LAMBDA_TIMING_INITTRACE=1).
	PkgInitMs []float64 `json:"pkgInitMs,omitempty"`
	// TopInits: the costliest package initializers of the first cold
	// start (inittrace), "package ms".
	TopInits []string `json:"topInits,omitempty"`
	// ReportInitMs and ReportMs: the emulator's REPORT "Init Duration" and
	// "Duration" of the first invoke. This emulator does not wait for the
	// runtime's init, so Init Duration is ~0 and Duration holds the init.
	ReportInitMs []float64 `json:"reportInitMs"`
	ReportMs     []float64 `json:"reportMs"`
	// WarmMs: round trip of each warm invoke through the emulator (all
	// from the last cold start's process).
	WarmMs      []float64 `json:"warmMs"`
	BinaryBytes int64     `json:"binaryBytes"`
	// HWMKiB: the bootstrap's VmHWM after the warm invokes.
	HWMKiB int64 `json:"hwmKiB"`
}

type timingRun struct {
	Source     string          `json:"source"`
	Commit     string          `json:"commit"`
	GoArch     string          `json:"goarch"`
	LoadBefore string          `json:"loadBefore"`
	LoadAfter  string          `json:"loadAfter"`
	Cold, Warm int             `json:"-"`
	Results    []*timingResult `json:"results"`
}

// timingEntry is one measured function and its representative event;
// event(i) is the i-th invoke's payload of a process (push needs a fresh
// commit id every time).
type timingEntry struct {
	name, fn string
	event    func(i int) []byte
}

func TestLambdaTiming(t *testing.T) {
	if os.Getenv("SSP2_LAMBDA_TIMING") != "1" {
		t.Skip("set SSP2_LAMBDA_TIMING=1 (make lambda-timing) to measure the functions under the emulator")
	}
	src := os.Getenv("SSP2_LAMBDA_TIMING_SRC")
	if src == "" {
		src = ".."
	}
	src, err := filepath.Abs(src)
	if err != nil {
		t.Fatal(err)
	}
	run := &timingRun{Source: src, GoArch: runtime.GOARCH, LoadBefore: loadAvg(), Cold: envInt(t, "SSP2_LAMBDA_TIMING_COLD", 5), Warm: envInt(t, "SSP2_LAMBDA_TIMING_WARM", 200)}
	if b, err := exec.Command("git", "-C", src, "rev-parse", "--short", "HEAD").Output(); err == nil {
		run.Commit = strings.TrimSpace(string(b))
	}
	fns := []string{"push", "pull", "segment", "blob", "prune", "migratehook", "fanout"}
	bins := map[string]string{}
	binDir := t.TempDir()
	schemaJSON, err := os.ReadFile(filepath.Join(src, "examples/todo/schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range fns {
		bins[fn] = buildTimed(t, src, fn, filepath.Join(binDir, fn))
		if err := os.WriteFile(filepath.Join(binDir, fn, "schema.json"), schemaJSON, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// One table and bucket for the run, seeded through this tree's push.
	env := storageEnv(t)
	env["AWS_LAMBDA_FUNCTION_TIMEOUT"] = "60"

	tok := devToken(t, env["SYNC_HS256_SECRET"])
	entries := timingEntries(t, bins, env, tok)
	if only := os.Getenv("SSP2_LAMBDA_TIMING_ONLY"); only != "" {
		keep := strings.Split(only, ",")
		entries = slices.DeleteFunc(entries, func(e timingEntry) bool { return !slices.Contains(keep, e.name) })
	}
	for _, e := range entries {
		res := &timingResult{Name: e.name}
		if fi, err := os.Stat(bins[e.fn]); err == nil {
			res.BinaryBytes = fi.Size()
		}
		// Each function sees its template.yaml memory size, as in Lambda
		// (the emulator enforces no limit; the functions size their GC by it).
		fenv := maps.Clone(env)
		fenv["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] = memorySize(t, e.fn)
		if os.Getenv("SSP2_LAMBDA_TIMING_INITTRACE") == "1" {
			fenv["GODEBUG"] = "inittrace=1"
		}
		for c := 0; c < run.Cold; c++ {
			warm := 0
			if c == run.Cold-1 {
				warm = run.Warm
			}
			t.Run(fmt.Sprintf("%s/cold%d", e.name, c), func(t *testing.T) { measureCold(t, bins[e.fn], fenv, e, warm, res) })
		}
		run.Results = append(run.Results, res)
	}
	run.LoadAfter = loadAvg()
	for _, r := range run.Results {
		if len(r.TopInits) > 0 {
			t.Logf("%s: costliest package initializers (ms clock): %s", r.Name, strings.Join(r.TopInits, ", "))
		}
	}

	t.Logf("functions of %s (%s), %s, %d cold starts, %d warm invokes; load average before %s, after %s\n%s",
		run.Source, run.Commit, run.GoArch, run.Cold, run.Warm, run.LoadBefore, run.LoadAfter, timingTable(run))
	if out := os.Getenv("SSP2_LAMBDA_TIMING_OUT"); out != "" {
		b, _ := json.MarshalIndent(run, "", "  ")
		if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if base := os.Getenv("SSP2_LAMBDA_TIMING_BASELINE"); base != "" {
		b, err := os.ReadFile(base)
		if err != nil {
			t.Fatal(err)
		}
		var before timingRun
		if err := json.Unmarshal(b, &before); err != nil {
			t.Fatalf("%s: %v", base, err)
		}
		t.Logf("before %s (%s, load %s → %s) vs this run (%s, load %s → %s)\n%s",
			before.Source, before.Commit, before.LoadBefore, before.LoadAfter, run.Commit, run.LoadBefore, run.LoadAfter, compareTable(&before, run))
	}
}

// TestLambdaTimingCompare prints saved runs side by side without
// measuring: SSP2_LAMBDA_TIMING_COMPARE=before1.json,before2.json=after1.json,after2.json
// (make lambda-timing-compare). The runs of each side are pooled (their
// samples concatenated, the peak RSS the largest), so alternating before
// and after runs spreads the box's load over both sides.
func TestLambdaTimingCompare(t *testing.T) {
	spec := os.Getenv("SSP2_LAMBDA_TIMING_COMPARE")
	if spec == "" {
		t.Skip("set SSP2_LAMBDA_TIMING_COMPARE=before.json[,…]=after.json[,…]")
	}
	b, a, ok := strings.Cut(spec, "=")
	if !ok {
		t.Fatalf("SSP2_LAMBDA_TIMING_COMPARE=%q: want before files = after files", spec)
	}
	before, after := pooledRuns(t, b), pooledRuns(t, a)
	t.Logf("before: %s\n%s\nafter: %s\n%s\nbefore → after\n%s", runInfo(before), timingTable(before), runInfo(after), timingTable(after), compareTable(before, after))
}

func runInfo(r *timingRun) string {
	return fmt.Sprintf("%s (%s), %s; load average (1, 5, 15 min) at start → end of each run: %s", r.Source, r.Commit, r.GoArch, r.LoadBefore)
}

// pooledRuns reads a comma list of saved runs and pools them.
func pooledRuns(t *testing.T, files string) *timingRun {
	out := &timingRun{}
	var loads []string
	for _, f := range strings.Split(files, ",") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var r timingRun
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out.Source, out.Commit, out.GoArch = r.Source, r.Commit, r.GoArch
		loads = append(loads, "["+r.LoadBefore+" → "+r.LoadAfter+"]")
		for _, x := range r.Results {
			i := slices.IndexFunc(out.Results, func(y *timingResult) bool { return y.Name == x.Name })
			if i < 0 {
				out.Results = append(out.Results, x)
				continue
			}
			y := out.Results[i]
			y.ColdMs = append(y.ColdMs, x.ColdMs...)
			y.UpMs = append(y.UpMs, x.UpMs...)
			y.FirstMs = append(y.FirstMs, x.FirstMs...)
			y.InitDoneMs = append(y.InitDoneMs, x.InitDoneMs...)
			y.AppInitMs = append(y.AppInitMs, x.AppInitMs...)
			y.ReportInitMs = append(y.ReportInitMs, x.ReportInitMs...)
			y.ReportMs = append(y.ReportMs, x.ReportMs...)
			y.PkgInitMs = append(y.PkgInitMs, x.PkgInitMs...)
			y.WarmMs = append(y.WarmMs, x.WarmMs...)
			y.HWMKiB = max(y.HWMKiB, x.HWMKiB)
		}
	}
	out.LoadBefore = strings.Join(loads, " ")
	return out
}

// memorySize is fn's MemorySize in template.yaml (its own or the
// Globals'; a parameter's Default when it references one).
func memorySize(t *testing.T, fn string) string {
	root := loadYAML(t)
	id := strings.ToUpper(fn[:1]) + fn[1:] + "Function"
	if fn == "migratehook" {
		id = "MigrateHookFunction"
	}
	if n := get(root, "Resources", id, "Properties", "MemorySize"); n != nil {
		if n.Tag == "!Ref" {
			return scalar(get(root, "Parameters", n.Value, "Default"))
		}
		return scalar(n)
	}
	if v := scalar(get(root, "Globals", "Function", "MemorySize")); v != "" {
		return v
	}
	t.Fatalf("template.yaml: no MemorySize for %s", id)
	return ""
}

// buildTimed builds functions/<fn> of the module at src into dir/bootstrap.
func buildTimed(t *testing.T, src, fn, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "bootstrap")
	cmd := exec.Command("go", "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags", "-s -w", "-o", out, "./functions/"+fn)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+runtime.GOARCH, "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s in %s: %v\n%s", fn, src, err, b)
	}
	return out
}

// timingEntries seeds the table through this tree's push and pull
// functions and returns the measured entries with their events:
// a 1-op push; a quiet pull (cursor at the head) and a pull with data (a
// 20-row inline bootstrap); a segment download; a blob re-upload; and
// quick runs of the jobs on the seeded table.
func timingEntries(t *testing.T, bins map[string]string, env map[string]string, tok string) []timingEntry {
	sch := todo(t)
	var (
		quietPull, dataPull, segEvent []byte
	)
	t.Run("seed", func(t *testing.T) {
		rie := map[string]*testenv.RIE{"push": testenv.LambdaRIE(t, bins["push"], env), "pull": testenv.LambdaRIE(t, bins["pull"], env)}
		d := &apptest.Deployment{Schema: sch, Invoke: func(t testing.TB, fn string, ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
			return invokeHTTP(t, rie[fn], apptest.MustJSON(t, ev))
		}}
		epoch := d.Epoch(t, "push", "/sync", tok, "timing-seed")
		ops := []wire.Operation{apptest.Upsert("projects", "p1", 0, d.Project(t, "p1")), apptest.Upsert("projects", "p2", 0, d.Project(t, "p2"))}
		for i := range 20 {
			id := fmt.Sprintf("t%02d", i)
			ops = append(ops, apptest.Upsert("tasks", id, 0, d.Task(t, id, "p1", "seeded task "+id)))
		}
		d.Push(t, tok, "timing-seed", epoch, wire.PushCommit{ClientCommitID: "seed-1", Operations: ops})
		hdr := wire.ReqHeader{ClientID: "timing-reader", SchemaVersion: sch.Latest, LogEpoch: wire.Some(epoch)}
		sub := func(cursor int64) *wire.Subscription {
			return &wire.Subscription{ID: "tasks-p1", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: cursor}
		}
		inline := wire.PullHeader{Accept: wire.AcceptInlineRows}
		sec := d.Pull(t, tok, "timing-reader", epoch, inline, *sub(-1))
		if sec.End == nil || len(sec.Inline) == 0 {
			t.Fatalf("seed pull: no inline bootstrap: %+v", sec)
		}
		quietPull = pullEvent(t, tok, apptest.Request(t, wire.Version2, hdr, &inline, sub(sec.End.NextCursor)))
		dataPull = pullEvent(t, tok, apptest.Request(t, wire.Version2, hdr, &inline, sub(-1)))
		ext := wire.PullHeader{Accept: wire.AcceptExternalRows}
		sec = d.Pull(t, tok, "timing-reader", epoch, ext, *sub(-1))
		if len(sec.Refs) != 1 {
			t.Fatalf("seed pull: want one SEGMENT_REF, got %+v", sec)
		}
		sc, _ := json.Marshal(map[string][]string{"project_id": {"p1"}})
		segEvent = apptest.MustJSON(t, apptest.Event("GET", "/segments/"+sec.Refs[0].SegmentID, map[string]string{
			"Authorization": "Bearer " + tok, "X-Syncular-Scopes": string(sc), "Accept-Encoding": "gzip",
		}, nil))
	})
	if t.Failed() {
		t.FailNow()
	}
	blobID := blobs.IDOfBytes(sampleBlob)
	blobEvent := apptest.MustJSON(t, apptest.Event("PUT", "/blobs/"+blobID, map[string]string{
		"Authorization": "Bearer " + tok, "Content-Type": "application/octet-stream",
	}, sampleBlob))
	fixed := func(b []byte) func(int) []byte { return func(int) []byte { return b } }
	// Push: one upsert per invoke in a project of its own, a fresh commit
	// id each time (wire version 1: no epoch round trip).
	var pushSeq int
	push := func(int) []byte {
		pushSeq++
		id := fmt.Sprintf("w%06d", pushSeq)
		d := &apptest.Deployment{Schema: sch}
		body := apptest.Request(t, wire.Version1, wire.ReqHeader{ClientID: "timing-writer", SchemaVersion: sch.Latest},
			&wire.PushCommit{ClientCommitID: id, Operations: []wire.Operation{apptest.Upsert("tasks", id, 0, d.Task(t, id, "p2", "timed"))}})
		return pullEvent(t, tok, body, "/push")
	}
	// The reads come before the push entry, so the quiet pull stays quiet.
	return []timingEntry{
		{"pull-quiet", "pull", fixed(quietPull)},
		{"pull-data", "pull", fixed(dataPull)},
		{"segment", "segment", fixed(segEvent)},
		{"blob", "blob", fixed(blobEvent)},
		{"push", "push", push},
		{"prune", "prune", fixed([]byte(`{}`))},
		{"migratehook", "migratehook", fixed([]byte(`{}`))},
		{"fanout", "fanout", fixed([]byte(`{"Records":[]}`))},
	}
}

// pullEvent wraps an SSP2 body as an HTTP API event to route (default /pull).
func pullEvent(t testing.TB, tok string, body []byte, route ...string) []byte {
	r := "/pull"
	if len(route) > 0 {
		r = route[0]
	}
	return apptest.MustJSON(t, apptest.Event("POST", r, map[string]string{
		"Authorization": "Bearer " + tok, "Content-Type": apptest.ContentType, "Accept-Encoding": "gzip",
	}, body))
}

// invokeHTTP invokes an HTTP function and requires a 200.
func invokeHTTP(t testing.TB, r *testenv.RIE, ev []byte) events.APIGatewayV2HTTPResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := r.Invoke(ctx, ev)
	if err != nil {
		t.Fatalf("%v\n%s", err, r.Logs())
	}
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(out, &resp); err != nil || resp.StatusCode != 200 {
		t.Fatalf("not a 200 response: %s\n%s", out, r.Logs())
	}
	return resp
}

// checkInvoke sends one event and fails on an emulator error, a function
// error document or a non-200 HTTP response.
func checkInvoke(t *testing.T, r *testenv.RIE, ev []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := r.Invoke(ctx, ev)
	if err != nil {
		t.Fatalf("%v\n%s", err, r.Logs())
	}
	if strings.Contains(string(out), `"errorMessage"`) {
		t.Fatalf("function error: %s\n%s", out, r.Logs())
	}
	var resp struct {
		StatusCode int `json:"statusCode"`
	}
	if json.Unmarshal(out, &resp) == nil && resp.StatusCode != 0 && resp.StatusCode != 200 {
		t.Fatalf("HTTP %d: %s", resp.StatusCode, out)
	}
}

var (
	reportInit = regexp.MustCompile(`REPORT RequestId: \S+\s+Init Duration: ([0-9.]+) ms\s+Duration: ([0-9.]+) ms`)
	initTrace  = regexp.MustCompile(`(?m)^init (\S+) @[0-9.]+ ms, ([0-9.]+) ms clock`)
	appInit    = regexp.MustCompile(`"time":"([^"]+)"[^\n]*"msg":"init done"[^\n]*"initMs":([0-9.]+)`)
)

// measureCold starts a fresh emulator, times the first invoke, then warm
// invokes, and reads the bootstrap's peak RSS.
func measureCold(t *testing.T, bin string, env map[string]string, e timingEntry, warm int, res *timingResult) {
	start := time.Now()
	r := testenv.LambdaRIE(t, bin, env)
	up := time.Now()
	// The emulator sees GODEBUG too and has initialized by now: package
	// init lines after this offset are the bootstrap's.
	emulatorLogs := len(r.Logs())
	checkInvoke(t, r, e.event(0))
	res.ColdMs = append(res.ColdMs, ms(time.Since(start)))
	res.UpMs = append(res.UpMs, ms(up.Sub(start)))
	res.FirstMs = append(res.FirstMs, ms(time.Since(up)))
	// The emulator prints REPORT after it has answered; wait for it.
	var m []string
	for deadline := time.Now().Add(5 * time.Second); m == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		m = reportInit.FindStringSubmatch(r.Logs())
	}
	if m == nil {
		t.Fatalf("no REPORT line with Init Duration:\n%s", r.Logs())
	}
	res.ReportInitMs = append(res.ReportInitMs, parseF(m[1]))
	res.ReportMs = append(res.ReportMs, parseF(m[2]))
	if m := appInit.FindStringSubmatch(r.Logs()); m != nil {
		res.AppInitMs = append(res.AppInitMs, parseF(m[2]))
		if at, err := time.Parse(time.RFC3339Nano, m[1]); err == nil {
			res.InitDoneMs = append(res.InitDoneMs, ms(at.Sub(up)))
		}
	}
	if traces := initTrace.FindAllStringSubmatch(r.Logs()[emulatorLogs:], -1); len(traces) > 0 {
		type pkg struct {
			name string
			ms   float64
		}
		var sum float64
		var pkgs []pkg
		for _, m := range traces {
			sum += parseF(m[2])
			pkgs = append(pkgs, pkg{m[1], parseF(m[2])})
		}
		res.PkgInitMs = append(res.PkgInitMs, sum)
		if res.TopInits == nil {
			slices.SortFunc(pkgs, func(a, b pkg) int { return cmp.Compare(b.ms, a.ms) })
			for _, p := range pkgs[:min(len(pkgs), 5)] {
				res.TopInits = append(res.TopInits, fmt.Sprintf("%s %.2f", p.name, p.ms))
			}
		}
	}
	for i := 1; i <= warm; i++ {
		ev := e.event(i)
		s := time.Now()
		checkInvoke(t, r, ev)
		res.WarmMs = append(res.WarmMs, ms(time.Since(s)))
	}
	if warm > 0 {
		res.HWMKiB = bootstrapHWM(t, r)
	}
}

// bootstrapHWM reads VmHWM of the process below the emulator named
// bootstrap.
func bootstrapHWM(t *testing.T, r *testenv.RIE) int64 {
	for _, pid := range r.FunctionPIDs() {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if strings.TrimSpace(string(comm)) != "bootstrap" {
			continue
		}
		f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				return n
			}
		}
	}
	t.Log("no bootstrap process found below the emulator; RSS not measured")
	return 0
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func parseF(s string) float64 { f, _ := strconv.ParseFloat(s, 64); return f }

func envInt(t *testing.T, k string, def int) int {
	v := os.Getenv(k)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", k, v)
	}
	return n
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// quantile is the nearest-rank q-quantile of xs (0 when empty).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// p50s formats the median of xs, "–" when there are none.
func p50s(xs []float64, format string) string {
	if len(xs) == 0 {
		return "–"
	}
	return fmt.Sprintf(format, quantile(xs, .5))
}

func timingTable(run *timingRun) string {
	var b strings.Builder
	b.WriteString("| function | cold p50 (min–max) ms | emulator up | first invoke | invoke→init done | package init | app init | warm p50 / p95 ms | binary MiB | VmHWM MiB |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range run.Results {
		if len(r.ColdMs) == 0 {
			continue
		}
		fmt.Fprintf(&b, "| %s | %.0f (%.0f–%.0f) | %s | %s | %s | %s | %s | %.2f / %.2f | %.1f | %.1f |\n", r.Name,
			quantile(r.ColdMs, .5), slices.Min(r.ColdMs), slices.Max(r.ColdMs),
			p50s(r.UpMs, "%.0f"), p50s(r.FirstMs, "%.1f"), p50s(r.InitDoneMs, "%.1f"), p50s(r.PkgInitMs, "%.1f"), p50s(r.AppInitMs, "%.1f"),
			quantile(r.WarmMs, .5), quantile(r.WarmMs, .95), float64(r.BinaryBytes)/(1<<20), float64(r.HWMKiB)/1024)
	}
	return b.String()
}

func compareTable(before, after *timingRun) string {
	var b strings.Builder
	b.WriteString("| function | cold p50 (min–max) ms, before → after | first invoke p50 ms | invoke→init done p50 ms | package init p50 ms | app init p50 ms | warm p50 ms | warm p95 ms | binary MiB | VmHWM MiB |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, a := range after.Results {
		i := slices.IndexFunc(before.Results, func(r *timingResult) bool { return r.Name == a.Name })
		if i < 0 || len(a.ColdMs) == 0 || len(before.Results[i].ColdMs) == 0 {
			continue
		}
		p := before.Results[i]
		fmt.Fprintf(&b, "| %s | %.0f (%.0f–%.0f) → %.0f (%.0f–%.0f) | %s → %s | %s → %s | %s → %s | %s → %s | %.2f → %.2f | %.2f → %.2f | %.1f → %.1f | %.1f → %.1f |\n", a.Name,
			quantile(p.ColdMs, .5), slices.Min(p.ColdMs), slices.Max(p.ColdMs), quantile(a.ColdMs, .5), slices.Min(a.ColdMs), slices.Max(a.ColdMs),
			p50s(p.FirstMs, "%.1f"), p50s(a.FirstMs, "%.1f"), p50s(p.InitDoneMs, "%.1f"), p50s(a.InitDoneMs, "%.1f"), p50s(p.PkgInitMs, "%.1f"), p50s(a.PkgInitMs, "%.1f"), p50s(p.AppInitMs, "%.1f"), p50s(a.AppInitMs, "%.1f"),
			quantile(p.WarmMs, .5), quantile(a.WarmMs, .5), quantile(p.WarmMs, .95), quantile(a.WarmMs, .95),
			float64(p.BinaryBytes)/(1<<20), float64(a.BinaryBytes)/(1<<20), float64(p.HWMKiB)/1024, float64(a.HWMKiB)/1024)
	}
	return b.String()
}
