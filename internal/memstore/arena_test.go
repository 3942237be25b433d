package memstore

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// arenaCommit is commit seq of the arena tests: one change in one of
// seven projects, a payload that varies with seq, an outcome whose
// result does too.
func arenaCommit(seq int64) *store.CommitRequest {
	proj := fmt.Sprintf("p%d", seq%7)
	row := make([]byte, 150+seq%97)
	for i := range row {
		row[i] = byte(seq + int64(i))
	}
	sc := wire.StoredScopes{{Key: "project_id", Value: proj}}
	id := fmt.Sprintf("r%d", seq%40)
	return &store.CommitRequest{
		ExpectedMaxSeq: seq - 1,
		Commit: store.Commit{Seq: seq, CreatedAtMs: 1000 + seq, ActorID: "a" + proj, ClientID: "c" + proj,
			ClientCommitID: fmt.Sprintf("cc-%d", seq),
			Changes:        []store.Change{{Table: "t", RowID: id, Op: wire.OpUpsert, RowVersion: seq, Scopes: sc, Row: row}}},
		Rows:    []store.RowWrite{{Table: "t", Row: store.Row{RowID: id, Version: seq, Scopes: sc, Payload: row}}},
		Outcome: store.Outcome{Applied: true, CommitSeq: seq, RecordedAtMs: seq, ActorID: "a" + proj, Result: row[:seq%5]},
	}
}

// arenaRejection is the rejection recorded after commit seq (every
// seventh).
func arenaRejection(seq int64) (clientID, commitID string, o store.Outcome) {
	return "rej", fmt.Sprintf("rej-%d", seq), store.Outcome{RecordedAtMs: seq, ActorID: "x", Result: []byte(fmt.Sprint("refused ", seq))}
}

// Pruning drops the log chunks that hold only pruned commits (all of
// them once the whole log is pruned) while every read still sees exactly
// the unpruned commits and every outcome — of a logged commit, a pruned
// one or a rejection — stays readable and keeps refusing its key. Run
// with maphash and with every key hashing alike, so the overflow index
// carries all keys but one through the same steps.
func TestArenaPruneReleasesChunksKeepsOutcomes(t *testing.T) {
	for _, collide := range []bool{false, true} {
		t.Run(fmt.Sprintf("collide=%v", collide), func(t *testing.T) {
			testArenaPrune(t, collide)
		})
	}
}

func testArenaPrune(t *testing.T, collide bool) {
	ctx := context.Background()
	s := New()
	if _, err := s.TouchPartition(ctx, "p", 1, "e"); err != nil {
		t.Fatal(err)
	}
	p := s.lookup("p")
	p.outcomes.collide = collide
	var head int64
	commitTo := func(n int64) {
		for ; head < n; head++ {
			if err := s.Commit(ctx, "p", arenaCommit(head+1)); err != nil {
				t.Fatal(err)
			}
			if (head+1)%7 == 0 {
				c, id, o := arenaRejection(head + 1)
				if err := s.PutRejection(ctx, "p", c, id, o, store.WriterCheck{}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	check := func(horizon int64) {
		t.Helper()
		var got []int64
		err := s.ReadLog(ctx, "p", 0, -1, func(c *store.Commit) bool {
			if want := arenaCommit(c.Seq).Commit; !reflect.DeepEqual(*c, want) {
				t.Fatalf("commit %d read back as %+v", c.Seq, *c)
			}
			got = append(got, c.Seq)
			return true
		})
		if err != nil || int64(len(got)) != head-horizon || (len(got) > 0 && (got[0] != horizon+1 || got[len(got)-1] != head)) {
			t.Fatalf("horizon %d: ReadLog gave %d commits (%v), want %d..%d", horizon, len(got), err, horizon+1, head)
		}
		n := 0
		if _, err := s.ReadLogScoped(ctx, "p", "t", "project_id", []string{"p3"}, 0, -1, func(c *store.Commit) bool {
			if c.Seq <= horizon || c.Seq%7 != 3 {
				t.Fatalf("horizon %d: scoped read gave commit %d", horizon, c.Seq)
			}
			n++
			return true
		}); err != nil {
			t.Fatal(err)
		}
		want := 0
		for q := horizon + 1; q <= head; q++ {
			if q%7 == 3 {
				want++
			}
		}
		if n != want {
			t.Fatalf("horizon %d: scoped read gave %d commits, want %d", horizon, n, want)
		}
		for q := int64(1); q <= head; q++ {
			req := arenaCommit(q)
			o, err := s.GetOutcome(ctx, "p", req.Commit.ClientID, req.Commit.ClientCommitID, 0)
			if err != nil || o == nil || !reflect.DeepEqual(*o, req.Outcome) {
				t.Fatalf("horizon %d: outcome of commit %d: %+v, %v; want %+v", horizon, q, o, err, req.Outcome)
			}
			if q%7 == 0 {
				c, id, want := arenaRejection(q)
				if o, err := s.GetOutcome(ctx, "p", c, id, 0); err != nil || o == nil || !reflect.DeepEqual(*o, want) {
					t.Fatalf("horizon %d: rejection %d: %+v, %v; want %+v", horizon, q, o, err, want)
				}
			}
		}
		// A replay of a pruned commit, of a logged one and of a
		// rejection is still refused.
		for _, q := range []int64{1, max(horizon, 1), head} {
			again := arenaCommit(q)
			again.ExpectedMaxSeq, again.Commit.Seq = head, head+1
			if err := s.Commit(ctx, "p", again); !errors.Is(err, store.ErrOutcomeExists) {
				t.Fatalf("horizon %d: re-commit of %d: %v, want ErrOutcomeExists", horizon, q, err)
			}
			if err := s.PutRejection(ctx, "p", again.Commit.ClientID, again.Commit.ClientCommitID, store.Outcome{}, store.WriterCheck{}); !errors.Is(err, store.ErrOutcomeExists) {
				t.Fatalf("horizon %d: rejection over commit %d: %v, want ErrOutcomeExists", horizon, q, err)
			}
		}
		if o, err := s.GetOutcome(ctx, "p", "c", "never", 0); o != nil || err != nil {
			t.Fatalf("outcome of an unknown key: %+v, %v", o, err)
		}
		// Only the chunk of the first unpruned commit and those after
		// it are kept.
		p.mu.RLock()
		defer p.mu.RUnlock()
		if i := p.logFirst - p.logBase; i < int64(len(p.log)) {
			if c := p.log[i].chunk; p.logArena.first != c || p.log[0].chunk != c {
				t.Fatalf("horizon %d: arena starts at chunk %d, log at %d, first unpruned commit in %d", horizon, p.logArena.first, p.log[0].chunk, c)
			}
		} else if len(p.log) != 0 || len(p.logArena.chunks) != 0 {
			t.Fatalf("horizon %d: whole log pruned, %d positions and %d chunks kept", horizon, len(p.log), len(p.logArena.chunks))
		}
		if collide && len(p.outcomes.byHash) != 1 {
			t.Fatalf("colliding hashes: %d keys in the hash map", len(p.outcomes.byHash))
		}
	}

	commitTo(3000)
	check(0)
	if n := len(p.logArena.chunks); n < 5 {
		t.Fatalf("3000 commits in %d chunks: the test needs several", n)
	}
	for _, h := range []int64{1, 10, 500, 1234, 2999, 3000} {
		if _, err := s.Prune(ctx, "p", h); err != nil {
			t.Fatal(err)
		}
		check(h)
	}
	// The log starts again after a full prune.
	commitTo(3500)
	check(3000)
	if _, err := s.Prune(ctx, "p", 3400); err != nil {
		t.Fatal(err)
	}
	check(3400)
}

// The arena's bytes are read without a lock while commits append into
// the same chunk and prunes drop chunks: the race detector checks that
// readers only ever see bytes written before their position was
// published.
func TestArenaConcurrentReadersAndPrune(t *testing.T) {
	ctx := context.Background()
	s := New()
	if _, err := s.TouchPartition(ctx, "p", 1, "e"); err != nil {
		t.Fatal(err)
	}
	const n = 2000
	var wg sync.WaitGroup
	done := make(chan struct{})
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				h, _, _ := s.Head(ctx, "p")
				if err := s.ReadLog(ctx, "p", 0, -1, func(c *store.Commit) bool {
					if want := arenaCommit(c.Seq).Commit; !reflect.DeepEqual(*c, want) {
						t.Errorf("commit %d read back as %+v", c.Seq, *c)
						return false
					}
					return true
				}); err != nil {
					t.Error(err)
					return
				}
				if q := h.MaxCommitSeq; q > 0 {
					req := arenaCommit(q)
					if o, err := s.GetOutcome(ctx, "p", req.Commit.ClientID, req.Commit.ClientCommitID, 0); err != nil || o == nil || !reflect.DeepEqual(*o, req.Outcome) {
						t.Errorf("outcome of %d: %+v, %v", q, o, err)
						return
					}
				}
			}
		})
	}
	for seq := int64(1); seq <= n; seq++ {
		if err := s.Commit(ctx, "p", arenaCommit(seq)); err != nil {
			t.Fatal(err)
		}
		if seq%150 == 0 {
			if _, err := s.Prune(ctx, "p", seq-100); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(done)
	wg.Wait()
}

// Chunks grow with what the arena holds, so its unused room stays within
// about what it uses (plus the tails of a few small chunks); an oversized entry gets a
// chunk of its own, and an arena emptied by pruning starts small again.
func TestArenaChunkSizing(t *testing.T) {
	var a arena
	used := 0
	put := func(n int) span {
		sp, b := a.alloc(n)
		for i := range b {
			b[i] = byte(n)
		}
		used += n
		return sp
	}
	first := put(300)
	if cap(a.chunks[0]) != minChunk {
		t.Fatalf("first chunk holds %d bytes, want %d", cap(a.chunks[0]), minChunk)
	}
	for range 5000 {
		put(300)
		if a.held > 2*used+8*minChunk {
			t.Fatalf("%d bytes used in %d held", used, a.held)
		}
	}
	for _, c := range a.chunks {
		if cap(c) > maxChunk {
			t.Fatalf("chunk of %d bytes", cap(c))
		}
	}
	big := put(3 * maxChunk)
	if big.off != 0 || cap(a.chunks[big.chunk-a.first]) != 3*maxChunk {
		t.Fatalf("oversized entry at offset %d of a %d-byte chunk", big.off, cap(a.chunks[big.chunk-a.first]))
	}
	if s := a.str(first); len(s) != 300 || s[0] != byte(300%256) || s[299] != byte(300%256) {
		t.Fatal("first entry changed")
	}
	a.dropBefore(a.end())
	if len(a.chunks) != 0 || a.held != 0 {
		t.Fatalf("emptied arena keeps %d chunks, %d bytes", len(a.chunks), a.held)
	}
	if sp := put(10); sp.chunk != big.chunk+1 || cap(a.chunks[0]) != minChunk {
		t.Fatalf("after emptying: chunk %d of %d bytes, want chunk %d of %d", sp.chunk, cap(a.chunks[0]), big.chunk+1, minChunk)
	}
}
