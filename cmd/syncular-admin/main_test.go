package main

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// payloadMarker is row payload and client data that must never be printed.
const payloadMarker = "PAYLOAD-MARKER-do-not-print"

const day = 24 * time.Hour

// fixture is one fresh table on the shared DynamoDB Local, with the env
// the command reads and a store for seeding and checking.
type fixture struct {
	t     *testing.T
	table string
	store *dynamostore.Store
	env   map[string]string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	d := testenv.DynamoDB(t)
	c := d.Client(t)
	table := testenv.UniqueName(t, "admin")
	if err := dynamostore.CreateTable(context.Background(), c, table); err != nil {
		t.Fatal(err)
	}
	return &fixture{
		t:     t,
		table: table,
		store: dynamostore.New(c, table, dynamostore.Options{}),
		env: map[string]string{
			"SYNC_TABLE_NAME":        table,
			"SYNC_BUCKET":            "admin-unused-bucket",
			"SYNC_SCHEMA_PATH":       "../../examples/todo/schema.json",
			"SYNC_DYNAMODB_ENDPOINT": d.Endpoint,
			"AWS_REGION":             testenv.Region,
			"AWS_ACCESS_KEY_ID":      "testenv",
			"AWS_SECRET_ACCESS_KEY":  "testenv",
		},
	}
}

// result is one run of the command.
type result struct {
	code           int
	stdout, stderr string
}

func runWith(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, func(k string) string { return env[k] }, &out, &errb)
	r := result{code, out.String(), errb.String()}
	t.Logf("syncular-admin %s → %d\nstdout:\n%sstderr:\n%s", strings.Join(args, " "), code, r.stdout, r.stderr)
	for _, s := range []string{r.stdout, r.stderr} {
		if strings.Contains(s, payloadMarker) || strings.Contains(s, "testenv") {
			t.Errorf("output leaks a payload or a credential:\n%s", s)
		}
	}
	return r
}

func (f *fixture) run(args ...string) result {
	f.t.Helper()
	return runWith(f.t, f.env, args...)
}

// rows parses the tab-separated output: header fields, then the fields of
// each line by unquoted partition name.
func (f *fixture) rows(r result, header string) map[string][]string {
	f.t.Helper()
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if lines[0] != header {
		f.t.Fatalf("header %q, want %q", lines[0], header)
	}
	m := map[string][]string{}
	for _, l := range lines[1:] {
		fields := strings.Split(l, "\t")
		p, err := strconv.Unquote(fields[0])
		if err != nil {
			f.t.Fatalf("partition field %q: %v", fields[0], err)
		}
		if _, dup := m[p]; dup {
			f.t.Fatalf("partition %q printed twice", p)
		}
		m[p] = fields[1:]
	}
	return m
}

func (f *fixture) head(p string) store.Head {
	f.t.Helper()
	h, ok, err := f.store.Head(context.Background(), p)
	if err != nil || !ok {
		f.t.Fatalf("Head(%q): ok=%v err=%v", p, ok, err)
	}
	return h
}

func (f *fixture) clients(p string) int {
	f.t.Helper()
	n := 0
	if err := f.store.ListClients(context.Background(), p, func(*store.Client) bool { n++; return true }); err != nil {
		f.t.Fatal(err)
	}
	return n
}

func (f *fixture) touch(p string) {
	f.t.Helper()
	if _, err := f.store.TouchPartition(context.Background(), p, time.Now().UnixMilli(), engine.RandomEpoch()); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) putClient(p, id string, cursor int64, updated time.Time) {
	f.t.Helper()
	c := &store.Client{ClientID: id, ActorID: payloadMarker, Cursor: cursor, UpdatedAtMs: updated.UnixMilli(), WireVersion: 2}
	if err := f.store.PutClient(context.Background(), p, c); err != nil {
		f.t.Fatal(err)
	}
}

// seed appends n commits to p through Store.Commit, each following the
// head it expects; created gives a commit's createdAtMs by seq. The first
// commit writes a row whose payload is payloadMarker.
func seed(s *dynamostore.Store, p string, n int, created func(seq int64) int64) error {
	ctx := context.Background()
	h, ok, err := s.Head(ctx, p)
	if err != nil || !ok {
		return fmt.Errorf("head of %q: ok=%v err=%v", p, ok, err)
	}
	for expected := h.MaxCommitSeq; expected < h.MaxCommitSeq+int64(n); expected++ {
		seq := expected + 1
		c := store.Commit{Seq: seq, CreatedAtMs: created(seq), ActorID: "actor", ClientID: "seeder", ClientCommitID: strconv.FormatInt(seq, 10)}
		var rows []store.RowWrite
		if seq == 1 {
			c.Changes = []store.Change{{Table: "tasks", RowID: "r1", Op: wire.OpUpsert, RowVersion: 1, Row: []byte(payloadMarker)}}
			rows = []store.RowWrite{{Table: "tasks", Row: store.Row{RowID: "r1", Version: 1, Payload: []byte(payloadMarker), CommitSeq: 1}}}
		}
		req := &store.CommitRequest{ExpectedMaxSeq: expected, Commit: c, Rows: rows, Outcome: store.Outcome{Applied: true, CommitSeq: seq, RecordedAtMs: c.CreatedAtMs}}
		if err := s.Commit(ctx, p, req); err != nil {
			return fmt.Errorf("commit %d of %q: %w", seq, p, err)
		}
	}
	return nil
}

// seedAll seeds several partitions concurrently (one writer each, so the
// ExpectedMaxSeq chain never races).
func (f *fixture) seedAll(plan map[string]int, created func(p string, seq int64) int64) {
	f.t.Helper()
	var wg sync.WaitGroup
	for p, n := range plan {
		wg.Go(func() {
			if err := seed(f.store, p, n, func(seq int64) int64 { return created(p, seq) }); err != nil {
				f.t.Error(err)
			}
		})
	}
	wg.Wait()
	if f.t.Failed() {
		f.t.FailNow()
	}
}

func TestUsage(t *testing.T) {
	env := map[string]string{
		"SYNC_TABLE_NAME":        "t",
		"SYNC_BUCKET":            "b",
		"SYNC_DYNAMODB_ENDPOINT": "http://127.0.0.1:1", // never dialled
		"SYNC_SCHEMA_PATH":       "does-not-exist.json",
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		code int
		want string // in stdout+stderr
	}{
		{nil, env, exitUsage, "usage: syncular-admin"},
		{[]string{"bogus"}, env, exitUsage, `unknown command "bogus"`},
		{[]string{"help"}, env, exitOK, "rotate-epoch (-partition P | -all) [-yes]"},
		{[]string{"rotate-epoch"}, env, exitUsage, "exactly one of -partition NAME or -all"},
		{[]string{"rotate-epoch", "-all", "-partition", "x", "-yes"}, env, exitUsage, "exactly one of"},
		{[]string{"prune"}, env, exitUsage, "exactly one of"},
		{[]string{"prune", "-all", "-yes"}, env, exitUsage, "flag provided but not defined: -yes"},
		{[]string{"prune", "-all", "extra"}, env, exitUsage, `unexpected argument "extra"`},
		{[]string{"partitions", "-all"}, env, exitUsage, "flag provided but not defined: -all"},
		{[]string{"prune", "-h"}, env, exitOK, "every partition in the table"},
		{[]string{"partitions"}, map[string]string{}, exitUsage, "SYNC_TABLE_NAME is required"},
		{[]string{"rotate-epoch", "-all"}, map[string]string{"SYNC_TABLE_NAME": "t", "SYNC_BUCKET": "b", "SYNC_MAX_OPERATIONS": "x"}, exitUsage, "SYNC_MAX_OPERATIONS"},
		{[]string{"prune", "-all"}, env, exitUsage, "SYNC_SCHEMA_PATH"},
	} {
		r := runWith(t, tc.env, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stdout+r.stderr, tc.want) {
			t.Errorf("%q: exit %d, want %d with %q in the output", tc.args, r.code, tc.code, tc.want)
		}
	}
}

func TestRotateEpoch(t *testing.T) {
	f := newFixture(t)
	parts := []string{"alpha", "beta", "gam#ma 100%"}
	now := time.Now()
	for _, p := range parts {
		f.touch(p)
		f.putClient(p, "c1", 0, now)
		f.putClient(p, "c2", 0, now)
	}
	f.seedAll(map[string]int{"alpha": 3, "gam#ma 100%": 2}, func(string, int64) int64 { return now.UnixMilli() })
	before := map[string]store.Head{}
	for _, p := range parts {
		before[p] = f.head(p)
	}
	unchanged := func(ps ...string) {
		t.Helper()
		for _, p := range ps {
			if h := f.head(p); h.LogEpoch != before[p].LogEpoch || h.EpochRequired || f.clients(p) != 2 {
				t.Fatalf("partition %q changed: %+v, %d clients", p, h, f.clients(p))
			}
		}
	}

	// Dry runs report and change nothing.
	r := f.run("rotate-epoch", "-partition", "alpha")
	if r.code != exitFailure || !strings.Contains(r.stderr, "dry run") || !strings.Contains(r.stderr, "-yes") {
		t.Fatalf("dry run: exit %d, want 1 and a dry-run note", r.code)
	}
	got := f.rows(r, "partition\tepoch\tepochRequired\tclients")
	if want := map[string][]string{"alpha": {before["alpha"].LogEpoch, "false", "2"}}; !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("dry run rows %q, want %q", got, want)
	}
	r = f.run("rotate-epoch", "-all")
	if r.code != exitFailure || len(f.rows(r, "partition\tepoch\tepochRequired\tclients")) != 3 {
		t.Fatalf("dry run -all: exit %d, want 1 listing 3 partitions", r.code)
	}
	unchanged(parts...)

	// One partition.
	r = f.run("rotate-epoch", "-partition", "alpha", "-yes")
	if r.code != exitOK {
		t.Fatalf("rotate alpha: exit %d", r.code)
	}
	got = f.rows(r, "partition\toldEpoch\tnewEpoch")
	h := f.head("alpha")
	if want := map[string][]string{"alpha": {before["alpha"].LogEpoch, h.LogEpoch}}; !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("rotate alpha rows %q, want %q", got, want)
	}
	if h.LogEpoch == before["alpha"].LogEpoch || !h.EpochRequired || f.clients("alpha") != 0 {
		t.Fatalf("alpha after rotation: %+v, %d clients", h, f.clients("alpha"))
	}
	if h.MaxCommitSeq != 3 || h.HorizonSeq != 0 {
		t.Fatalf("rotation touched the log: %+v", h)
	}
	unchanged("beta", "gam#ma 100%")
	before["alpha"] = h

	// Every partition.
	r = f.run("rotate-epoch", "-all", "-yes")
	if r.code != exitOK || !strings.Contains(r.stderr, "rotated the log epoch of 3 of 3 partition(s)") {
		t.Fatalf("rotate -all: exit %d", r.code)
	}
	got = f.rows(r, "partition\toldEpoch\tnewEpoch")
	if len(got) != 3 {
		t.Fatalf("rotate -all printed %d rows, want 3", len(got))
	}
	for _, p := range parts {
		h := f.head(p)
		if want := []string{before[p].LogEpoch, h.LogEpoch}; !slices.Equal(got[p], want) {
			t.Errorf("%q: printed %q, want old and new epoch %q", p, got[p], want)
		}
		if h.LogEpoch == before[p].LogEpoch || !h.EpochRequired || f.clients(p) != 0 {
			t.Errorf("%q after rotation: %+v, %d clients", p, h, f.clients(p))
		}
		if h.MaxCommitSeq != before[p].MaxCommitSeq {
			t.Errorf("%q: rotation changed maxCommitSeq %d → %d", p, before[p].MaxCommitSeq, h.MaxCommitSeq)
		}
	}

	// An unknown partition fails and is not created.
	r = f.run("rotate-epoch", "-partition", "nope", "-yes")
	if r.code != exitFailure || !strings.Contains(r.stderr, "unknown partition") {
		t.Fatalf("unknown partition: exit %d", r.code)
	}
	if _, ok, _ := f.store.Head(context.Background(), "nope"); ok {
		t.Fatal("rotating an unknown partition created it")
	}
}

func TestPrune(t *testing.T) {
	f := newFixture(t)
	now := time.Now()
	old := now.Add(-40 * day).UnixMilli() // past the 30-day age force
	plan := map[string]int{
		"floor":   1100, // no clients: the newest 1000 stay
		"laggard": 1020, // an active client at cursor 10 holds the horizon
		"aged":    1100, // commits 1..80 are 40 days old: they go past a laggard
		"small":   5,    // under the floor: nothing to do
	}
	for p := range plan {
		f.touch(p)
	}
	f.putClient("laggard", "active", 10, now)
	f.putClient("laggard", "idle", 2, now.Add(-20*day)) // outside the 14-day window
	f.putClient("aged", "active", 30, now)
	start := time.Now()
	f.seedAll(plan, func(p string, seq int64) int64 {
		if p == "aged" && seq <= 80 {
			return old
		}
		return now.UnixMilli()
	})
	t.Logf("seeded %d commits in %v", 1100+1020+1100+5, time.Since(start).Round(time.Millisecond))

	header := "partition\toldHorizon\tnewHorizon\tremoved"
	r := f.run("prune", "-partition", "small")
	if r.code != exitOK {
		t.Fatalf("prune small: exit %d", r.code)
	}
	if got, want := f.rows(r, header), map[string][]string{"small": {"0", "0", "0"}}; !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("prune small rows %q, want %q", got, want)
	}

	r = f.run("prune", "-all")
	if r.code != exitOK || !strings.Contains(r.stderr, "pruned 4 of 4 partition(s)") || !strings.Contains(r.stderr, "removed 190 commit(s)") {
		t.Fatalf("prune -all: exit %d", r.code)
	}
	want := map[string][]string{
		"floor":   {"0", "100", "100"},
		"laggard": {"0", "10", "10"},
		"aged":    {"0", "80", "80"},
		"small":   {"0", "0", "0"},
	}
	if got := f.rows(r, header); !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("prune -all rows %q, want %q", got, want)
	}
	for p, n := range plan {
		h := f.head(p)
		wantHorizon, _ := strconv.ParseInt(want[p][1], 10, 64)
		if h.HorizonSeq != wantHorizon || h.MaxCommitSeq != int64(n) {
			t.Errorf("%q head after prune: %+v", p, h)
		}
		first := int64(0)
		err := f.store.CommitTimes(context.Background(), p, 0, func(seq, _ int64) bool { first = seq; return false })
		if err != nil || first != wantHorizon+1 {
			t.Errorf("%q: oldest remaining commit %d (%v), want %d", p, first, err, wantHorizon+1)
		}
	}

	// A second pass has nothing left to do.
	r = f.run("prune", "-all")
	for p, w := range want {
		want[p] = []string{w[1], w[1], "0"}
	}
	if got := f.rows(r, header); r.code != exitOK || !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("second prune: exit %d, rows %q, want %q", r.code, got, want)
	}

	r = f.run("prune", "-partition", "nope")
	if r.code != exitFailure || !strings.Contains(r.stderr, "unknown partition") {
		t.Fatalf("prune unknown partition: exit %d", r.code)
	}
}

func TestPartitions(t *testing.T) {
	f := newFixture(t)
	// Loopback endpoint without AWS credentials in env: placeholders.
	delete(f.env, "AWS_ACCESS_KEY_ID")
	delete(f.env, "AWS_SECRET_ACCESS_KEY")
	delete(f.env, "AWS_REGION")
	header := "partition\tepoch\tepochRequired\tmaxCommitSeq\thorizonSeq\tlastSeen"

	r := f.run("partitions")
	if r.code != exitOK || r.stdout != header+"\n" || !strings.Contains(r.stderr, "0 partition(s)") {
		t.Fatalf("empty table: exit %d", r.code)
	}

	parts := []string{"default", "a#b", "100%", "ünï#cødé 🚀", "tab\tand \"quote\""}
	now := time.Now()
	for _, p := range parts {
		f.touch(p)
	}
	f.seedAll(map[string]int{"a#b": 4, "100%": 1}, func(string, int64) int64 { return now.UnixMilli() })
	if err := f.store.RotateEpoch(context.Background(), "100%", engine.RandomEpoch(), now.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Prune(context.Background(), "a#b", 2); err != nil {
		t.Fatal(err)
	}

	r = f.run("partitions")
	if r.code != exitOK {
		t.Fatalf("partitions: exit %d", r.code)
	}
	got := f.rows(r, header)
	want := map[string][]string{}
	for _, p := range parts {
		h := f.head(p)
		want[p] = []string{h.LogEpoch, strconv.FormatBool(h.EpochRequired), strconv.FormatInt(h.MaxCommitSeq, 10),
			strconv.FormatInt(h.HorizonSeq, 10), time.UnixMilli(h.LastSeenAtMs).UTC().Format(time.RFC3339)}
	}
	if !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("partitions rows %q\nwant %q", got, want)
	}
	if w := want["a#b"]; w[2] != "4" || w[3] != "2" || want["100%"][1] != "true" {
		t.Fatalf("fixture heads not as set up: %q", want)
	}
}

// cancelAfter cancels a context once n lines were written to it.
type cancelAfter struct {
	bytes.Buffer
	n      int
	cancel context.CancelFunc
}

func (w *cancelAfter) Write(p []byte) (int, error) {
	n, err := w.Buffer.Write(p)
	if strings.Count(w.String(), "\n") >= w.n {
		w.cancel()
	}
	return n, err
}

// TestInterrupted: an interrupt (Ctrl-C) stops the partition loop at once
// with exit 1 instead of failing every remaining partition.
func TestInterrupted(t *testing.T) {
	f := newFixture(t)
	for _, p := range []string{"p1", "p2", "p3"} {
		f.touch(p)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &cancelAfter{n: 2, cancel: cancel} // header and one partition
	var errb bytes.Buffer
	code := run(ctx, []string{"rotate-epoch", "-all", "-yes"}, func(k string) string { return f.env[k] }, out, &errb)
	t.Logf("stdout:\n%sstderr:\n%s", out.String(), errb.String())
	if code != exitFailure || strings.Count(errb.String(), "syncular-admin: interrupted") != 1 ||
		!strings.Contains(errb.String(), "rotated the log epoch of 1 of 3 partition(s)") {
		t.Fatalf("interrupted rotation: exit %d", code)
	}
	rotated := 0
	for _, p := range []string{"p1", "p2", "p3"} {
		if f.head(p).EpochRequired {
			rotated++
		}
	}
	if rotated != 1 {
		t.Fatalf("%d partitions rotated, want 1", rotated)
	}
}

// TestBackfillScopes: the command marks each partition after copying its
// rows (dynamostore.TestScopeIndexBackfill covers the copies), reports an
// unknown partition as a failure, and a rerun is a no-op.
func TestBackfillScopes(t *testing.T) {
	f := newFixture(t)
	f.touch("a")
	f.touch("b")
	r := f.run("backfill-scopes", "-all")
	if r.code != exitOK {
		t.Fatalf("exit %d", r.code)
	}
	got := f.rows(r, "partition\trows\twritten\tskipped\tmarked")
	for _, p := range []string{"a", "b"} {
		if fmt.Sprint(got[p]) != "[0 0 0 true]" {
			t.Errorf("partition %s: %v", p, got[p])
		}
	}
	if r := f.run("backfill-scopes", "-partition", "nope"); r.code != exitFailure {
		t.Errorf("unknown partition: exit %d, want %d", r.code, exitFailure)
	}
	if r := f.run("backfill-scopes", "-partition", "a"); r.code != exitOK {
		t.Errorf("rerun: exit %d", r.code)
	}
}
