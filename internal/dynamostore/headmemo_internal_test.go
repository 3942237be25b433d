package dynamostore

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// TestSmallCommitHeadNotRemembered (fast.go, "The head wave 1
// follows"): a small commit whose Store has no usable head (too old,
// or one that would refuse the commit) reads the head on its own before
// its first wave, one more call at the same read units as the head in
// that wave cost, and decides on that read: a remembered head whose
// refusal is stale does not send the commit the transactional way.
func TestSmallCommitHeadNotRemembered(t *testing.T) {
	c := testenv.DynamoDB(t).Client(t)
	table := testenv.UniqueName(t, "memo")
	ctx := context.Background()
	if err := CreateTable(ctx, c, table); err != nil {
		t.Fatal(err)
	}
	s := New(c, table, Options{})
	if _, err := s.RaiseFormatLevel(ctx); err != nil {
		t.Fatal(err)
	}
	p := "memo"
	if _, err := s.TouchPartition(ctx, p, 1, "e"); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, p, orgCommit(1, "r1", "o1")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		spoil  func(seenHead) seenHead
		commit int64
	}{
		{"older than headMemoAge", func(h seenHead) seenHead {
			h.at = h.at.Add(-headMemoAge - time.Second)
			return h
		}, 2},
		{"refusing", func(h seenHead) seenHead {
			// As if commit 2 were a large commit not materialized yet
			// (appliedSeq behind, nothing pending): the memory says
			// "transactional way", the head says "small".
			it := maps.Clone(h.item)
			it[hApplied] = N(1)
			delete(it, hPendSeq)
			h.item = it
			return h
		}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.TouchPartition(ctx, p, 1, "e"); err != nil {
				t.Fatal(err)
			}
			s.heads.mu.Lock()
			s.heads.m[headPK(p)] = tc.spoil(s.heads.m[headPK(p)])
			s.heads.mu.Unlock()
			mctx, capacity := WithCapacity(ctx)
			if err := s.Commit(mctx, p, orgCommit(tc.commit, "r"+string(rune('0'+tc.commit)), "o1")); err != nil {
				t.Fatal(err)
			}
			u := capacity.Snapshot()
			t.Logf("%d calls, %.1f RCU, %.1f WCU", u.RoundTrips, u.EstRCU, u.EstWCU)
			// head, then the outcome key (commit E's log item is this
			// Store's own: not read); a small commit's 4 calls and 4 WCU
			// after it (no scope copy in a new partition, scopeindex.go).
			if u.RoundTrips != 6 || u.EstRCU != 2 || u.EstWCU != 4 {
				t.Errorf("%d calls, %.1f RCU, %.1f WCU; want 6, 2, 4 (a head read, then the small commit)", u.RoundTrips, u.EstRCU, u.EstWCU)
			}
		})
	}
}
