package engine_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// pushRetrying sends one commit, retrying request-level sync.rate_limited
// (lost optimistic races) the way a client would.
func pushRetrying(c *enginetest.Client, commit wire.PushCommit) (*wire.PushResult, int, error) {
	for attempt := 0; ; attempt++ {
		res, err := c.PushCommits(commit)
		if enginetest.ErrCode(err) == syncerr.RateLimited && attempt < 100 {
			continue
		}
		if err != nil {
			return nil, attempt, err
		}
		return res[0], attempt, nil
	}
}

// §2.1 / §2.3 / §6.4 under -race: 8 clients push to one partition, each
// commit delivered twice concurrently (a primary and a shadow delivery of
// the same outbox). commitSeq is gapless, every idempotency key applies
// exactly once with one commitSeq, and no update is lost.
func TestConcurrentPushers(t *testing.T) {
	h := newHarness(t, enginetest.Options{})
	h.Grants.Set("alice", projects("p1"))
	const workers, perWorker = 8, 40
	clients := make([]*enginetest.Client, workers)
	for i := range clients {
		clients[i] = h.Client("tenant", "alice", fmt.Sprintf("c%d", i))
	}
	type outcome struct {
		seq    int64
		status wire.PushStatus
	}
	results := make([][2][]outcome, workers)
	var retries atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 2*workers)
	for w := 0; w < workers; w++ {
		for d := 0; d < 2; d++ {
			wg.Add(1)
			go func(w, d int) {
				defer wg.Done()
				c := clients[w]
				row := fmt.Sprintf("row%d", w)
				out := make([]outcome, perWorker)
				for k := 0; k < perWorker; k++ {
					commit := cmt(fmt.Sprintf("w%d-k%d", w, k), up("tasks", row, c.Task(row, "p1", fmt.Sprintf("w%d k%d", w, k), false), -1))
					res, n, err := pushRetrying(c, commit)
					retries.Add(int64(n))
					if err != nil {
						errs <- fmt.Errorf("worker %d/%d commit %d: %w", w, d, k, err)
						return
					}
					if (res.Status != wire.PushApplied && res.Status != wire.PushCached) || !res.CommitSeq.Present {
						errs <- fmt.Errorf("worker %d/%d commit %d: status %d %+v", w, d, k, res.Status, res.Results)
						return
					}
					out[k] = outcome{res.CommitSeq.Value, res.Status}
				}
				results[w][d] = out
			}(w, d)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := int64(workers * perWorker)
	if hd := head(t, h, "tenant"); hd.MaxCommitSeq != total {
		t.Fatalf("maxCommitSeq %d, want %d (one commit per idempotency key)", hd.MaxCommitSeq, total)
	}
	seqs := logSeqs(t, h, "tenant")
	for i, s := range seqs {
		if s != int64(i+1) {
			t.Fatalf("log not gapless at %d: %v…", i, seqs[:min(len(seqs), i+3)])
		}
	}
	keys := map[string]int64{}
	_ = h.Store.ReadLog(context.Background(), "tenant", 0, total, func(c *store.Commit) bool {
		k := c.ClientID + "/" + c.ClientCommitID
		if _, dup := keys[k]; dup {
			t.Errorf("idempotency key %s applied twice", k)
		}
		keys[k] = c.Seq
		return true
	})
	for w := 0; w < workers; w++ {
		applied := 0
		for k := 0; k < perWorker; k++ {
			a, b := results[w][0][k], results[w][1][k]
			if a.seq != b.seq || a.seq != keys[fmt.Sprintf("c%d/w%d-k%d", w, w, k)] {
				t.Fatalf("worker %d commit %d: deliveries saw seq %d and %d, log has %d", w, k, a.seq, b.seq, keys[fmt.Sprintf("c%d/w%d-k%d", w, w, k)])
			}
			for _, o := range []outcome{a, b} {
				if o.status == wire.PushApplied {
					applied++
				}
			}
			if k > 0 && a.seq <= results[w][0][k-1].seq {
				t.Fatalf("worker %d: commit %d landed before commit %d", w, k, k-1)
			}
		}
		if applied != perWorker {
			t.Fatalf("worker %d: %d applied answers for %d commits (each key exactly one applied, one cached)", w, applied, perWorker)
		}
	}
	rows := h.ServerRows("tenant", "tasks")
	c := clients[0]
	for w := 0; w < workers; w++ {
		r := rows[fmt.Sprintf("row%d", w)]
		if r.Version != perWorker {
			t.Fatalf("row%d version %d, want %d (lost update)", w, r.Version, perWorker)
		}
		if got := decodeTask(t, c, r.Payload)[2].Str; got != fmt.Sprintf("w%d k%d", w, perWorker-1) {
			t.Fatalf("row%d holds %q", w, got)
		}
	}
	t.Logf("%d lost-race retries", retries.Load())
}

// §6.2 baseVersion = 0 race: two clients insert the same rows
// concurrently; each row has exactly one winner and the loser's conflict
// carries the winner's row and version.
func TestConcurrentInsertRace(t *testing.T) {
	h := newHarness(t, enginetest.Options{})
	grantAll(h, projects("p1"), "alice", "bob")
	cs := []*enginetest.Client{h.Client("tenant", "alice", "a"), h.Client("tenant", "bob", "b")}
	const n = 60
	res := make([][]*wire.PushResult, 2)
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func(i int, c *enginetest.Client) {
			defer wg.Done()
			for k := 0; k < n; k++ {
				id := fmt.Sprintf("x%d", k)
				r, _, err := pushRetrying(c, cmt(id, up("tasks", id, c.Task(id, "p1", c.ID, false), 0)))
				if err != nil {
					t.Error(err)
					return
				}
				res[i] = append(res[i], r)
			}
		}(i, c)
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	rows := h.ServerRows("tenant", "tasks")
	for k := 0; k < n; k++ {
		a, b := res[0][k], res[1][k]
		if (a.Status == wire.PushApplied) == (b.Status == wire.PushApplied) {
			t.Fatalf("row x%d: statuses %d and %d, want exactly one winner", k, a.Status, b.Status)
		}
		loser := a
		if a.Status == wire.PushApplied {
			loser = b
		}
		conf := wantRejected(t, loser, 0, wire.OpConflict, syncerr.VersionConflict)
		stored := rows[fmt.Sprintf("x%d", k)]
		if stored.Version != 1 || conf.ServerVersion != 1 || !sameBytes(conf.ServerRow, stored.Payload) {
			t.Fatalf("row x%d: conflict %+v, stored %+v", k, conf, stored)
		}
	}
}

// A 10,000-row bootstrap paged across many pulls while another goroutine
// keeps pushing inserts, updates and deletes; then incremental pulls
// until caught up. Both replicas (inline and external delivery) end equal
// to the server rows exactly.
func TestConcurrentBootstrapUnderWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	h := newHarness(t, enginetest.Options{})
	grantAll(h, projects("p1", "p2"), "writer", "reader")
	w := h.Client("tenant", "writer", "w")
	const rows = 10_000
	var batch []wire.Operation
	for i := 0; i < rows; i++ {
		id := fmt.Sprintf("t%05d", i)
		proj := "p1"
		if i%10 == 9 {
			proj = "p2"
		}
		batch = append(batch, up("tasks", id, w.Task(id, proj, "seed", false), 0))
		if len(batch) == 500 {
			wantApplied(t, w.Push(fmt.Sprint("seed", i), batch...))
			batch = nil
		}
	}
	stop := make(chan struct{})
	var writes atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(7, 11))
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			var ops []wire.Operation
			for j := 0; j < 1+rng.IntN(5); j++ {
				id := fmt.Sprintf("t%05d", rng.IntN(rows+2000)) // some ids beyond the seed: inserts
				proj := "p1"
				if rng.IntN(10) == 0 {
					proj = "p2"
				}
				switch rng.IntN(4) {
				case 0:
					ops = append(ops, del("tasks", id))
				default:
					ops = append(ops, up("tasks", id, w.Task(id, proj, fmt.Sprint("write ", k), k%2 == 0), -1))
				}
			}
			if _, _, err := pushRetrying(w, cmt(fmt.Sprint("live", k), ops...)); err != nil {
				t.Error(err)
				return
			}
			writes.Add(1)
		}
	}()
	readers := []*enginetest.Replica{
		h.Client("tenant", "reader", "r-inline").NewReplica("s", "tasks", p1Scopes("p1")),
		h.Client("tenant", "reader", "r-external").NewReplica("s", "tasks", p1Scopes("p1")),
	}
	accepts := []uint8{acceptInline, acceptExternal}
	hdr := func(i int) wire.PullHeader {
		return wire.PullHeader{Accept: accepts[i], LimitSnapshotRows: 150, MaxSnapshotPages: 2, LimitCommits: 200}
	}
	var rwg sync.WaitGroup
	for i, r := range readers {
		rwg.Add(1)
		go func(i int, r *enginetest.Replica) {
			defer rwg.Done()
			for pulls := 0; r.Sub.Cursor < 0 || r.Sub.BootstrapState.Present; pulls++ {
				if _, err := r.Pull(hdr(i)); err != nil {
					t.Error(err)
					return
				}
				if pulls > 1000 {
					t.Error("bootstrap never completed")
					return
				}
			}
		}(i, r)
	}
	rwg.Wait()
	// Let the writer run on a little past the bootstrap, then stop.
	for n := writes.Load(); writes.Load() < n+20 && !t.Failed(); {
		if _, err := readers[0].Pull(hdr(0)); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if t.Failed() {
		return
	}
	want := filterProject(t, w, h.ServerRows("tenant", "tasks"), "p1")
	for i, r := range readers {
		if r.Pulls < 20 {
			t.Fatalf("reader %d bootstrapped in %d pulls: not paged", i, r.Pulls)
		}
		if err := r.Sync(hdr(i), 10_000); err != nil {
			t.Fatal(err)
		}
		wantRows(t, want, r.Rows, fmt.Sprintf("reader %d", i))
	}
	t.Logf("%d concurrent writes; pulls %d/%d", writes.Load(), readers[0].Pulls, readers[1].Pulls)
}

// raceClients is the lost-race tests' set-up on st: a victim client and
// another writer, which *other makes commit a new task (counted in *n).
func raceClients(t *testing.T, st store.Store, other *func()) (h *enginetest.Harness, victim, writer *enginetest.Client, n *int) {
	h = enginetest.New(t, st, memstore.NewSegments(), enginetest.Options{})
	h.Grants.Set("alice", projects("p1"))
	victim = h.Client("tenant", "alice", "victim")
	writer = h.Client("tenant", "alice", "other")
	n = new(int)
	*other = func() {
		*n++
		id := fmt.Sprintf("o%d", *n)
		mustPushAll(t, writer, cmt(id, up("tasks", id, writer.Task(id, "p1", id, false), -1)))
	}
	return h, victim, writer, n
}

// writesBetweenAttempts is a memstore on which another writer commits
// whenever the victim client's commit attempt is about to run (the first
// time only) and right after each of its lost races, i.e. while it
// backs off: a partition under steady write load.
type writesBetweenAttempts struct {
	store.Store
	victim   string
	other    func()
	first    bool
	attempts int
	during   int // further commits by others, one per lost race
}

func (s *writesBetweenAttempts) Commit(ctx context.Context, partition string, req *store.CommitRequest) error {
	if req.Commit.ClientID != s.victim {
		return s.Store.Commit(ctx, partition, req)
	}
	s.attempts++
	if s.first {
		s.first = false
		s.other()
	}
	err := s.Store.Commit(ctx, partition, req)
	if errors.Is(err, store.ErrHeadMoved) && s.during > 0 {
		s.during--
		s.other()
	}
	return err
}

// §2.1: a commit conditions on the partition head, so a writer that lost
// a race must retry from the head as it is after its backoff. Others
// commit during every backoff here; retrying from the head the lost race
// returned (stale by then) lost every time, until "lost 64 races" under
// steady load. Reading the head after the wait wins on the next attempt.
func TestLostRaceRetriesFromCurrentHead(t *testing.T) {
	st := &writesBetweenAttempts{Store: memstore.New(), victim: "victim", first: true, during: 5}
	h, victim, other, n := raceClients(t, st, &st.other)
	mustPushAll(t, other, cmt("o0", up("tasks", "o0", other.Task("o0", "p1", "o0", false), -1)))
	res := mustPushAll(t, victim, cmt("v", up("tasks", "v", victim.Task("v", "p1", "v", false), -1)))
	seq := wantApplied(t, res[0])
	if st.attempts != 2 {
		t.Fatalf("victim needed %d commit attempts, want 2 (one lost race, then a commit on the head read after the backoff)", st.attempts)
	}
	if want := int64(*n + 2); seq != want || head(t, h, "tenant").MaxCommitSeq != want {
		t.Fatalf("victim commitSeq %d, head %d, want %d (gapless after %d other commits)", seq, head(t, h, "tenant").MaxCommitSeq, want, *n+1)
	}
}

// racesBeforeCommit is a memstore deciding commits in process
// (store.LocalCommits) on which another writer commits right before each
// of the victim's first races commit attempts: after the victim read its
// head, so each of those attempts loses.
type racesBeforeCommit struct {
	*memstore.Store
	victim   string
	other    func()
	races    int
	attempts int
}

func (s *racesBeforeCommit) Commit(ctx context.Context, partition string, req *store.CommitRequest) error {
	if req.Commit.ClientID == s.victim {
		s.attempts++
		if s.races > 0 {
			s.races--
			s.other()
		}
	}
	return s.Store.Commit(ctx, partition, req)
}

// A store deciding commits in process retries its first lost races at
// once, and each retry conditions on the head as it is then: three lost
// races in a row, then the fourth attempt lands, gapless.
func TestLocalLostRacesRetryFromCurrentHead(t *testing.T) {
	st := &racesBeforeCommit{Store: memstore.New(), victim: "victim", races: 3}
	h, victim, _, n := raceClients(t, st, &st.other)
	res := mustPushAll(t, victim, cmt("v", up("tasks", "v", victim.Task("v", "p1", "v", false), -1)))
	seq := wantApplied(t, res[0])
	if st.attempts != 4 {
		t.Fatalf("victim needed %d commit attempts, want 4 (three lost races, then a commit on the head read after them)", st.attempts)
	}
	if want := int64(*n + 1); seq != want || head(t, h, "tenant").MaxCommitSeq != want {
		t.Fatalf("victim commitSeq %d, head %d, want %d (gapless after %d other commits)", seq, head(t, h, "tenant").MaxCommitSeq, want, *n)
	}
}
