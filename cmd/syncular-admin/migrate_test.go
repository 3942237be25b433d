package main

import (
	"context"
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// TestMigrate: the operator path on DynamoDB Local. The step raises the
// marker to the schema's latest version and declares the checkpoint
// table-wide (every partition gates it); with -backfill it materialises
// it in every partition, fencing each, and activates it; re-running
// changes nothing and lists the same activated checkpoints.
func TestMigrate(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, p := range []string{"a", "b"} {
		if _, err := f.store.TouchPartition(ctx, p, 1, "e-"+p); err != nil {
			t.Fatal(err)
		}
	}
	f.env["SYNC_CHECKPOINTS"] = "tasks-projection=tasks"
	r := f.run("migrate")
	if r.code != exitOK {
		t.Fatalf("migrate exit %d", r.code)
	}
	// The marker from the table: ReadGate's may be this store's cached
	// copy, read before the command ran (dynamostore's markerCache).
	if m, err := f.store.SchemaMarker(ctx); err != nil || m != 1 {
		t.Fatalf("marker after migrate: %d, %v", m, err)
	}
	for _, p := range []string{"a", "b"} {
		g, err := f.store.ReadGate(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if g.StoredSchema != 1 || g.Unmaterialized == 0 || len(g.Pending) != 1 {
			t.Fatalf("gate of %s after migrate: %+v", p, g)
		}
	}
	r = f.run("migrate", "-backfill")
	if r.code != exitOK || !strings.Contains(r.stderr, "2 checkpoint(s) activated, 0 incomplete") {
		t.Fatalf("migrate -backfill: %d %q", r.code, r.stderr)
	}
	rows := f.rows(r, "partition\tcheckpoint\tstate\twatermark\tobservedRows")
	if len(rows) != 2 || rows["a"][1] != string(store.CheckpointActivated) {
		t.Fatalf("progress lines %v", rows)
	}
	for _, p := range []string{"a", "b"} {
		if g, _ := f.store.ReadGate(ctx, p); len(g.Pending) != 0 || g.WriterFence != 1 || g.Unmaterialized != 0 {
			t.Fatalf("%s after the backfill: %+v", p, g)
		}
	}
	r = f.run("migrate", "-backfill")
	if rows := f.rows(r, "partition\tcheckpoint\tstate\twatermark\tobservedRows"); r.code != exitOK || len(rows) != 2 || rows["b"][1] != string(store.CheckpointActivated) {
		t.Fatalf("re-run exit %d, progress lines %v", r.code, rows)
	}
	f.env["SYNC_CHECKPOINTS"] = "broken"
	if r := f.run("migrate"); r.code != exitUsage {
		t.Fatalf("bad SYNC_CHECKPOINTS exit %d", r.code)
	}
}
