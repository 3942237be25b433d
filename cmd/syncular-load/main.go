// Command syncular-load drives SSP2 sync rounds over HTTP against a local
// runner (cmd/syncular-local) and reports throughput, latency percentiles
// and, given the server's pid, its CPU time per request and peak RSS.
//
// It is a measuring tool for this repository's own server on this
// machine: it only talks to loopback addresses, every round is bounded by
// -duration and -max-requests, and it mints its bearer tokens from the
// runner's -secret.
//
// Mixes (one request = one POST /sync):
//
//	push-pull   each virtual user owns a project; every request pushes one
//	            upsert (20 rows per user, overwritten in turn) and pulls its
//	            subscription in the same round
//	quiet-pull  each virtual user pulls its bootstrapped, unchanging project
//	            at the head: the most frequent request of an idle app
//	bootstrap   -seed-rows rows in one shared project; every virtual user
//	            bootstraps it from scratch as a fresh client, page by page,
//	            over and over
//
// A round answered with a retryable in-band error (sync.rate_limited when
// pushes contend for one partition's log) is counted in the "retry"
// column and the user goes on, as a client would; any other error ends
// the run.
//
// make load runs it against a freshly started runner (scripts/load.sh).
package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/skyfold/syncular-lambda/internal/auth"
	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "syncular-load:", err)
		os.Exit(1)
	}
}

type options struct {
	base        string
	secret      string
	schemaPath  string
	mix         string
	vus         []int
	duration    time.Duration
	maxRequests int
	runs        int
	seedRows    int
	pageRows    int
	pid         int
	acceptEnc   string
	table       string
	scopeVar    string
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("syncular-load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	vus := fs.String("vus", "10", "virtual users per round; a comma-separated list runs one round per value (e.g. 10,50,100)")
	fs.StringVar(&o.base, "url", "http://127.0.0.1:8787", "runner base URL including any mount (loopback only)")
	fs.StringVar(&o.secret, "secret", "", "the runner's -secret, to mint bearer tokens (required)")
	fs.StringVar(&o.schemaPath, "schema", "examples/todo/schema.json", "the schema the runner serves")
	fs.StringVar(&o.table, "table", "tasks", "table the virtual users write and subscribe to")
	fs.StringVar(&o.mix, "mix", "push-pull", "push-pull, quiet-pull or bootstrap")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "length of each round (at most 10m)")
	fs.IntVar(&o.maxRequests, "max-requests", 200_000, "stop a round after this many requests")
	fs.IntVar(&o.runs, "runs", 1, "repeat the list of rounds this many times (interleaved)")
	fs.IntVar(&o.seedRows, "seed-rows", 2000, "rows in the shared project of the bootstrap mix")
	fs.IntVar(&o.pageRows, "page-rows", 500, "limitSnapshotRows of bootstrap pulls")
	fs.IntVar(&o.pid, "pid", 0, "server process id: report its CPU per request and peak RSS from /proc")
	fs.StringVar(&o.acceptEnc, "accept-encoding", "zstd, gzip", "Accept-Encoding of every request (empty: identity)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, s := range strings.Split(*vus, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 2000 {
			return fmt.Errorf("-vus: %q is not a number of users in 1..2000", s)
		}
		o.vus = append(o.vus, n)
	}
	if o.duration <= 0 || o.duration > 10*time.Minute {
		return errors.New("-duration must be in (0, 10m]")
	}
	if o.maxRequests < 1 || o.runs < 1 || o.runs > 20 {
		return errors.New("-max-requests must be ≥ 1 and -runs in 1..20")
	}
	if o.secret == "" {
		return errors.New("-secret is required (start the runner with the same -secret)")
	}
	if err := loopbackOnly(o.base); err != nil {
		return err
	}
	switch o.mix {
	case "push-pull", "quiet-pull", "bootstrap":
	default:
		return fmt.Errorf("-mix %q: want push-pull, quiet-pull or bootstrap", o.mix)
	}
	sch, err := schema.ReadFile(o.schemaPath)
	if err != nil {
		return err
	}
	tbl, ok := sch.Versions[sch.Latest].Table(o.table)
	if !ok {
		return fmt.Errorf("schema has no table %q", o.table)
	}
	vars := tbl.ScopeVariables()
	if len(vars) != 1 {
		return fmt.Errorf("table %q needs exactly one scope variable, has %d", o.table, len(vars))
	}
	o.scopeVar = vars[0]
	tok, err := auth.MintHS256([]byte(o.secret), auth.Claims{"sub": "load", "syncular_scopes": map[string]any{o.scopeVar: []any{"*"}}}, 2*time.Hour, time.Now())
	if err != nil {
		return err
	}
	l := &loader{o: o, schemaVersion: sch.Latest, table: tbl, token: tok, client: &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			MaxIdleConnsPerHost: 2100,
			DisableCompression:  true, // we decode ourselves and count compressed bytes
		},
	}}
	if o.mix == "bootstrap" {
		if err := l.seed(ctx); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
	}
	fmt.Fprintf(stdout, "mix %s, %s per round, server pid %d, url %s\n", o.mix, o.duration, o.pid, o.base)
	fmt.Fprintf(stdout, "%-5s %-4s %9s %6s %9s %8s %8s %8s %8s %11s %9s %9s %s\n", "run", "vus", "requests", "retry", "ops/s", "p50ms", "p95ms", "p99ms", "maxms", "cpu/req µs", "rssMB", "hwmMB", "load")
	for r := 1; r <= o.runs; r++ {
		for _, n := range o.vus {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			res, err := l.round(ctx, n)
			if err != nil {
				return fmt.Errorf("round vus=%d: %w", n, err)
			}
			fmt.Fprintln(stdout, res.line(r, n))
		}
	}
	return nil
}

// loopbackOnly refuses a base URL that is not on this machine: the tool
// produces heavy traffic and must never be pointed at a shared service.
func loopbackOnly(base string) error {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("-url %q is not an http(s) URL", base)
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("-url %q: only loopback targets (127.0.0.0/8, ::1, localhost) are allowed", base)
}

type loader struct {
	o             options
	schemaVersion int32
	table         *schema.Table
	token         string
	client        *http.Client
	clientSeq     atomic.Int64
}

type result struct {
	requests  int
	retried   int // rounds answered with a retryable in-band error
	wall      time.Duration
	lat       []time.Duration
	cpu       time.Duration // server CPU during the round, -1 unknown
	rss, hwm  int64         // server RSS at the end and its peak, bytes
	loadStart string
	loadEnd   string
}

func (r *result) line(run, vus int) string {
	pct := func(p float64) string {
		if len(r.lat) == 0 {
			return "-"
		}
		i := int(p*float64(len(r.lat))+0.5) - 1
		i = max(0, min(i, len(r.lat)-1))
		return fmt.Sprintf("%.2f", float64(r.lat[i].Microseconds())/1000)
	}
	cpu, rss, hwm := "-", "-", "-"
	if r.cpu >= 0 && r.requests > 0 {
		cpu = fmt.Sprintf("%.1f", float64(r.cpu.Microseconds())/float64(r.requests+r.retried))
	}
	if r.rss > 0 {
		rss, hwm = fmt.Sprintf("%.1f", float64(r.rss)/(1<<20)), fmt.Sprintf("%.1f", float64(r.hwm)/(1<<20))
	}
	return fmt.Sprintf("%-5d %-4d %9d %6d %9.0f %8s %8s %8s %8s %11s %9s %9s %s→%s", run, vus, r.requests, r.retried,
		float64(r.requests)/r.wall.Seconds(), pct(0.50), pct(0.95), pct(0.99), pct(1), cpu, rss, hwm, r.loadStart, r.loadEnd)
}

// vu is one virtual user: a client id, its subscription and log epoch.
type vu struct {
	clientID string
	project  string
	epoch    string
	sub      wire.Subscription
	seq      int
}

// round runs n virtual users for the configured duration and request cap.
func (l *loader) round(ctx context.Context, n int) (*result, error) {
	users := make([]*vu, n)
	for i := range users {
		u, err := l.newVU(ctx, i)
		if err != nil {
			return nil, err
		}
		users[i] = u
	}
	res := &result{cpu: -1, loadStart: loadAvg()}
	cpu0, cpuOK := procCPU(l.o.pid)
	rctx, cancel := context.WithTimeout(ctx, l.o.duration)
	defer cancel()
	var budget, retried atomic.Int64
	budget.Store(int64(l.o.maxRequests))
	lats := make([][]time.Duration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i, u := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rctx.Err() == nil && budget.Add(-1) >= 0 {
				t0 := time.Now()
				if err := l.step(rctx, u); err != nil {
					if _, ok := err.(*retryableError); ok {
						retried.Add(1)
						continue
					}
					if rctx.Err() == nil {
						errs[i] = err
						cancel()
					}
					return
				}
				lats[i] = append(lats[i], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	res.wall = time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cpu1, ok := procCPU(l.o.pid); ok && cpuOK {
		res.cpu = cpu1 - cpu0
	}
	res.rss, res.hwm = procMem(l.o.pid)
	res.loadEnd = loadAvg()
	for _, s := range lats {
		res.lat = append(res.lat, s...)
	}
	res.requests = len(res.lat)
	res.retried = int(retried.Load())
	slices.Sort(res.lat)
	return res, nil
}

// newVU prepares one user: its log epoch and, for the pull mixes, a
// subscription already at the head of its project.
func (l *loader) newVU(ctx context.Context, i int) (*vu, error) {
	id := l.clientSeq.Add(1)
	u := &vu{clientID: fmt.Sprintf("load-%d", id), project: fmt.Sprintf("vu-%05d", i)}
	if l.o.mix == "bootstrap" {
		u.project = "storm"
	}
	u.sub = wire.Subscription{ID: "s", Table: l.table.Name, Scopes: wire.ScopeMap{{Key: l.o.scopeVar, Values: []string{u.project}}}, Cursor: -1}
	m, err := l.send(ctx, u, &wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows})
	if err != nil {
		return nil, err
	}
	for _, f := range m.Frames {
		if h, ok := f.(*wire.RespHeader); ok {
			u.epoch = h.LogEpoch
		}
	}
	if u.epoch == "" {
		return nil, errors.New("no log epoch in the first response")
	}
	if l.o.mix == "quiet-pull" {
		// One row, so the pull has something behind its cursor.
		if _, err := l.send(ctx, u, l.upsert(u, u.project+"-r0")); err != nil {
			return nil, err
		}
	}
	if l.o.mix != "bootstrap" {
		for u.sub.Cursor < 0 || u.sub.BootstrapState.Present {
			if err := l.pull(ctx, u, nil); err != nil {
				return nil, err
			}
		}
	}
	return u, nil
}

// step is one request of the mix.
func (l *loader) step(ctx context.Context, u *vu) error {
	switch l.o.mix {
	case "push-pull":
		u.seq++
		return l.pull(ctx, u, l.upsert(u, fmt.Sprintf("%s-r%d", u.project, u.seq%20)))
	case "quiet-pull":
		return l.pull(ctx, u, nil)
	}
	// bootstrap: a finished bootstrap starts over as a fresh client.
	if u.sub.Cursor >= 0 && !u.sub.BootstrapState.Present {
		u.sub.Cursor, u.sub.BootstrapState = -1, wire.Opt[wire.JSON]{}
	}
	return l.pull(ctx, u, nil)
}

func (l *loader) upsert(u *vu, rowID string) *wire.PushCommit {
	u.seq++
	vals := make([]rowcodec.Value, len(l.table.Columns))
	for i, c := range l.table.Columns {
		switch {
		case c.Name == l.table.PrimaryKey:
			vals[i] = rowcodec.Value{Str: rowID}
		case c.Name == l.o.scopeVar:
			vals[i] = rowcodec.Value{Str: u.project}
		case c.Nullable:
			vals[i] = rowcodec.Value{Null: true}
		case c.Type == rowcodec.TypeString:
			vals[i] = rowcodec.Value{Str: fmt.Sprintf("load %s @%d", rowID, u.seq)}
		case c.Type == rowcodec.TypeBoolean:
			vals[i] = rowcodec.Value{Bool: u.seq%2 == 0}
		case c.Type == rowcodec.TypeInteger:
			vals[i] = rowcodec.Value{Int: 1_750_000_000_000 + int64(u.seq)}
		default:
			vals[i] = rowcodec.Value{Null: true}
		}
	}
	payload, err := l.table.Codec.Append(nil, vals)
	if err != nil {
		panic(fmt.Sprintf("encode row of %s: %v", l.table.Name, err)) // the schema's own columns
	}
	return &wire.PushCommit{ClientCommitID: fmt.Sprintf("%s-c%d", u.clientID, u.seq), Operations: []wire.Operation{
		{Table: l.table.Name, RowID: rowID, Op: wire.OpUpsert, Payload: wire.Some(payload)},
	}}
}

// pull sends push (optional), a pull header and the user's subscription,
// and advances the subscription.
func (l *loader) pull(ctx context.Context, u *vu, push *wire.PushCommit) error {
	hdr := &wire.PullHeader{LimitCommits: 100, LimitSnapshotRows: int32(l.o.pageRows), MaxSnapshotPages: 1, Accept: wire.AcceptInlineRows | wire.AcceptExternalRows}
	sub := u.sub
	frames := []wire.Frame{}
	if push != nil {
		frames = append(frames, push)
	}
	frames = append(frames, hdr, &sub)
	m, err := l.send(ctx, u, frames...)
	if err != nil {
		return err
	}
	for _, f := range m.Frames {
		switch f := f.(type) {
		case *wire.SubEnd:
			u.sub.Cursor, u.sub.BootstrapState = f.NextCursor, f.BootstrapState
		case *wire.PushResult:
			if f.Status != wire.PushApplied {
				return fmt.Errorf("push %s: status %v", f.ClientCommitID, f.Status)
			}
		}
	}
	return nil
}

// seed writes -seed-rows rows into the shared bootstrap project.
func (l *loader) seed(ctx context.Context) error {
	u := &vu{clientID: "load-seeder", project: "storm"}
	u.sub = wire.Subscription{ID: "s", Table: l.table.Name, Scopes: wire.ScopeMap{{Key: l.o.scopeVar, Values: []string{u.project}}}, Cursor: -1}
	m, err := l.send(ctx, u, &wire.PullHeader{Accept: wire.AcceptInlineRows})
	if err != nil {
		return err
	}
	for _, f := range m.Frames {
		if h, ok := f.(*wire.RespHeader); ok {
			u.epoch = h.LogEpoch
		}
	}
	for done := 0; done < l.o.seedRows; {
		var frames []wire.Frame
		for c := 0; c < 10 && done < l.o.seedRows; c++ {
			pc := &wire.PushCommit{ClientCommitID: fmt.Sprintf("seed-%d", done)}
			for k := 0; k < 50 && done < l.o.seedRows; k++ {
				op := l.upsert(u, fmt.Sprintf("storm-%07d", done)).Operations[0]
				pc.Operations = append(pc.Operations, op)
				done++
			}
			frames = append(frames, pc)
		}
		m, err := l.send(ctx, u, frames...)
		if err != nil {
			return err
		}
		for _, f := range m.Frames {
			if r, ok := f.(*wire.PushResult); ok && r.Status != wire.PushApplied {
				return fmt.Errorf("seed commit %s: status %v", r.ClientCommitID, r.Status)
			}
		}
	}
	return nil
}

// send posts one request message and decodes the response; an HTTP error
// or an in-band ERROR frame is an error (the mixes expect none).
func (l *loader) send(ctx context.Context, u *vu, frames ...wire.Frame) (*wire.Message, error) {
	hdr := &wire.ReqHeader{ClientID: u.clientID, SchemaVersion: l.schemaVersion}
	if u.epoch != "" {
		hdr.LogEpoch = wire.Some(u.epoch)
	}
	body, err := wire.Encode(&wire.Message{WireVersion: wire.Version2, Kind: wire.KindRequest, Frames: append([]wire.Frame{hdr}, frames...)})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(l.o.base, "/")+"/sync", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/vnd.syncular.sync.v2")
	req.Header.Set("Authorization", "Bearer "+l.token)
	if l.o.acceptEnc != "" {
		req.Header.Set("Accept-Encoding", l.o.acceptEnc)
	}
	resp, err := l.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d: %.300s", resp.StatusCode, raw)
	}
	plain, err := decompress(resp.Header.Get("Content-Encoding"), raw)
	if err != nil {
		return nil, err
	}
	m, err := wire.Decode(plain)
	if err != nil {
		return nil, fmt.Errorf("decode response: %w", err)
	}
	for _, f := range m.Frames {
		if e, ok := f.(*wire.ErrorFrame); ok {
			err := fmt.Errorf("in-band error %s: %s", e.Code, e.Message)
			if e.Retryable {
				err = &retryableError{err}
			}
			return nil, err
		}
	}
	return m, nil
}

// retryableError is an in-band error the client is told to retry (e.g.
// sync.rate_limited when pushes contend for the partition's log): a
// client would retry the round, so the round counts it and goes on.
type retryableError struct{ error }

var zstdDecoders = sync.Pool{New: func() any {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
	if err != nil {
		panic(err) // static options
	}
	return d
}}

func decompress(enc string, b []byte) ([]byte, error) {
	switch strings.ToLower(enc) {
	case "", "identity":
		return b, nil
	case "zstd":
		d := zstdDecoders.Get().(*zstd.Decoder)
		defer zstdDecoders.Put(d)
		return d.DecodeAll(b, nil)
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		return io.ReadAll(zr)
	}
	return nil, fmt.Errorf("unexpected Content-Encoding %q", enc)
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat CPU times: 100 on
// every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// procCPU reads utime+stime of pid.
func procCPU(pid int) (time.Duration, bool) {
	if pid <= 0 {
		return 0, false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// Fields after the parenthesised command name; utime and stime are
	// fields 14 and 15 of the whole line.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(ut+st) * clockTick, true
}

// procMem reads VmRSS and VmHWM (peak RSS) of pid.
func procMem(pid int) (rss, hwm int64) {
	if pid <= 0 {
		return 0, 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		switch k {
		case "VmRSS":
			rss = n << 10
		case "VmHWM":
			hwm = n << 10
		}
	}
	return rss, hwm
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "?"
}
