package dynamostore_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/dynamostore"
)

// The partition registry lists every partition TouchPartition created,
// exactly once, resumable from any cursor it handed out, and with Queries
// only: listing costs the same on a table full of other items.
func TestPartitionRegistry(t *testing.T) {
	ctx := context.Background()
	c := ddbClient(t)
	s := dynamostore.New(c, newTable(t, c), dynamostore.Options{})
	want := []string{"default", "a#b", "100%", "", "ünï#cødé", "HEAD", strings.Repeat("long", 300)}
	for i := range 40 {
		want = append(want, "tenant-"+strings.Repeat("x", i%3)+string(rune('a'+i%26))+string(rune('0'+i/26)))
	}
	for _, p := range want {
		for range 2 { // the second touch finds the head and writes nothing
			if _, err := s.TouchPartition(ctx, p, 1, "e"); err != nil {
				t.Fatalf("touch %q: %v", p, err)
			}
		}
	}
	type entry struct{ p, cursor string }
	list := func(from string) []entry {
		t.Helper()
		var got []entry
		if err := s.ListRegisteredPartitions(ctx, from, func(p, cur string) bool {
			got = append(got, entry{p, cur})
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	all := list("")
	var names []string
	for _, e := range all {
		names = append(names, e.p)
	}
	slices.Sort(names)
	sorted := slices.Clone(want)
	slices.Sort(sorted)
	if !slices.Equal(names, sorted) {
		t.Fatalf("registry lists %d names %q, want %d", len(names), names, len(sorted))
	}
	// Resuming after the i-th entry yields exactly the rest, in order.
	for _, i := range []int{0, 5, len(all) / 2, len(all) - 2, len(all) - 1} {
		rest := list(all[i].cursor)
		if !slices.Equal(rest, all[i+1:]) {
			t.Errorf("resume after entry %d (%q): %d entries, want %d", i, all[i].cursor, len(rest), len(all)-i-1)
		}
	}
	// Stopping early stops.
	n := 0
	if err := s.ListRegisteredPartitions(ctx, "", func(string, string) bool { n++; return n < 3 }); err != nil || n != 3 {
		t.Errorf("early stop: %d calls, %v", n, err)
	}
	if err := s.ListRegisteredPartitions(ctx, "x", func(string, string) bool { return true }); err == nil {
		t.Error("a malformed cursor was accepted")
	}

	// Listing is one Query per shard (pages of registry items), no Scan.
	cost := func() dynamostore.Usage {
		cctx, acc := dynamostore.WithCapacity(ctx)
		if err := s.ListRegisteredPartitions(cctx, "", func(string, string) bool { return true }); err != nil {
			t.Fatal(err)
		}
		return acc.Snapshot()
	}
	before := cost()
	if err := s.RegisterPartition(ctx, "default"); err != nil { // idempotent
		t.Fatal(err)
	}
	if len(list("")) != len(all) {
		t.Error("re-registering added an entry")
	}
	if before.RoundTrips != dynamostore.RegistryShards {
		t.Errorf("listing took %d round trips, want one Query per shard (%d)", before.RoundTrips, dynamostore.RegistryShards)
	}
	// Job cursors round-trip and clear.
	if err := s.SetJobCursor(ctx, "prune", all[3].cursor, 5); err != nil {
		t.Fatal(err)
	}
	if got, err := s.JobCursor(ctx, "prune"); err != nil || got != all[3].cursor {
		t.Errorf("job cursor %q %v", got, err)
	}
	if err := s.SetJobCursor(ctx, "prune", "", 6); err != nil {
		t.Fatal(err)
	}
	if got, err := s.JobCursor(ctx, "prune"); err != nil || got != "" {
		t.Errorf("cleared job cursor %q %v", got, err)
	}
}
