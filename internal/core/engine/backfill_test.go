package engine_test

import (
	"fmt"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// TestBackfillWrites is issue 20 item 2 on memstore; the DynamoDB Local
// run is in internal/dynamostore.
func TestBackfillWrites(t *testing.T) {
	t.Run("ClientReceivesBackfill", func(t *testing.T) {
		enginetest.BackfillWrites(t, memstore.New(), memstore.NewSegments())
	})
	t.Run("ConcurrentDrivers", func(t *testing.T) {
		enginetest.BackfillConcurrentDrivers(t, memstore.New(), memstore.NewSegments())
	})
}

// Between a deploy that changed a table's columns and the end of its
// backfill, rows written by the previous build are still in its layout:
// the new build reads them in that layout, serves them in each client's
// version, and an update rewrites them in the current one (a write, not
// an error), from a client of either version.
func TestOldLayoutRowsServedBeforeBackfill(t *testing.T) {
	st, segs := memstore.New(), memstore.NewSegments()
	h1 := enginetest.New(t, st, segs, enginetest.Options{})
	grantAll(h1, projects("p1"), "a")
	c1 := h1.Client("tenant", "a", "old-device")
	for _, id := range []string{"t1", "t2"} {
		if r := c1.Push("c"+id, enginetest.Upsert("tasks", id, c1.Task(id, "p1", "title "+id, false), 0)); r.Status != wire.PushApplied {
			t.Fatalf("push %s: %+v", id, r)
		}
	}
	h2 := enginetest.New(t, st, segs, enginetest.Options{Schema: enginetest.BackfillSchemaV2(), OlderSchemas: []string{enginetest.TodoSchema}})
	grantAll(h2, projects("p1"), "a")
	c2 := h2.Client("tenant", "a", "new-device")
	c2.Schema = 2
	tasks := c2.Codec("tasks")
	// Schema 2: update t1 by version (a conflict check on old column
	// versions), setting the new column.
	row := c2.Row("tasks", enginetest.Cols{"id": enginetest.S("t1"), "project_id": enginetest.S("p1"), "title": enginetest.S("new title"),
		"done": enginetest.B(true), "priority": enginetest.Null(), "status": enginetest.S("doing"), "title_key": enginetest.Null()})
	if r := c2.Push("u1", enginetest.Upsert("tasks", "t1", row, 1)); r.Status != wire.PushApplied {
		t.Fatalf("schema-2 update of an old-layout row: %+v", r)
	}
	// Schema 1, on the new build: update t2.
	c1.H = h2
	if r := c1.Push("u2", enginetest.Upsert("tasks", "t2", c1.Task("t2", "p1", "renamed", true), 1)); r.Status != wire.PushApplied {
		t.Fatalf("schema-1 update of an old-layout row: %+v", r)
	}
	rep := c2.NewReplica("s", "tasks", p1Scopes("p1"))
	if err := rep.Sync(pullHdr(acceptRows), 8); err != nil {
		t.Fatal(err)
	}
	want := map[string][3]string{"t1": {"new title", "doing", "2"}, "t2": {"renamed", "", "2"}}
	for id, w := range want {
		vals, err := tasks.Codec.Decode(rep.Rows[id].Payload, nil)
		if err != nil {
			t.Fatalf("row %s: %v", id, err)
		}
		status := vals[tasks.ColumnIndex("status")]
		if vals[2].Str != w[0] || (w[1] == "" && !status.Null) || (w[1] != "" && status.Str != w[1]) || fmt.Sprint(rep.Rows[id].Version) != w[2] {
			t.Fatalf("row %s: %+v v%d, want %v", id, vals, rep.Rows[id].Version, w)
		}
	}
	// Every stored row is now in the current layout.
	for id, rs := range h2.ServerRows("tenant", "tasks") {
		if _, err := tasks.Codec.Decode(rs.Payload, nil); err != nil {
			t.Fatalf("stored %s not in schema 2's layout: %v", id, err)
		}
	}
}
