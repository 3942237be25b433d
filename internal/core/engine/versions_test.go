package engine_test

import (
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/segment"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// A server may keep serving an older schema version it still has codecs
// for (§9, §2.4): every row reaching a client is encoded for the client's
// own schemaVersion — segments, COMMIT rows and conflict serverRows — and
// an older client's writes never erase the columns it does not know.
func TestOlderSchemaVersionIsTranscoded(t *testing.T) {
	v2 := strings.Replace(enginetest.TodoSchema, `"version": 1`, `"version": 2`, 1)
	v2 = strings.Replace(v2, `{"name": "priority", "type": "integer", "nullable": true}`,
		`{"name": "priority", "type": "integer", "nullable": true},
       {"name": "notes", "type": "string", "nullable": true}`, 1)
	if v2 == enginetest.TodoSchema || !strings.Contains(v2, `"notes"`) {
		t.Fatal("test schema rewrite failed")
	}
	h := newHarness(t, enginetest.Options{Schema: v2, OlderSchemas: []string{enginetest.TodoSchema}})
	grantAll(h, projects("p1"), "old", "new")
	oldC := h.Client("tenant", "old", "old-device") // schemaVersion 1
	newC := h.Client("tenant", "new", "new-device")
	newC.Schema = 2
	newRow := func(id, title, notes string) []byte {
		b, err := newC.Codec("tasks").Codec.Append(nil, []rowcodec.Value{{Str: id}, {Str: "p1"}, {Str: title}, {Bool: false}, {Null: true}, {Str: notes}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	// The newer client writes a column the old one does not have.
	if r := newC.Push("n1", up("tasks", "t1", newRow("t1", "from new", "keep me"), 0)); r.Status != wire.PushApplied {
		t.Fatalf("new push: %+v", r)
	}
	// The old client updates the row last-write-wins with its 5 columns.
	if r := oldC.Push("o1", up("tasks", "t1", oldC.Task("t1", "p1", "from old", true), -1)); r.Status != wire.PushApplied {
		t.Fatalf("old push: %+v", r)
	}

	// Old client bootstrap: the segment is encoded for version 1.
	secs, err := oldC.Pull(pullHdr(acceptRows), wire.Subscription{ID: "s", Table: "tasks", Scopes: p1Scopes("p1"), Cursor: -1})
	if err != nil {
		t.Fatal(err)
	}
	seg := secs[0].Segments[0]
	if seg.SchemaVersion != 1 {
		t.Fatalf("segment schemaVersion %d, want the client's 1", seg.SchemaVersion)
	}
	if err := segment.CheckColumns(seg.Columns, oldC.Codec("tasks").Columns); err != nil {
		t.Fatalf("segment columns are not version 1's: %v", err)
	}
	if vals := seg.Blocks[0][0].Values; vals[2].Str != "from old" || !vals[3].Bool || seg.Blocks[0][0].ServerVersion != 2 {
		t.Fatalf("old client's row: %+v v%d", vals, seg.Blocks[0][0].ServerVersion)
	}

	// The new client still has its column: the old write did not erase it.
	secs, err = newC.Pull(pullHdr(acceptRows), wire.Subscription{ID: "s", Table: "tasks", Scopes: p1Scopes("p1"), Cursor: -1})
	if err != nil {
		t.Fatal(err)
	}
	nv := secs[0].Segments[0].Blocks[0][0].Values
	if len(nv) != 6 || nv[2].Str != "from old" || nv[5].Null || nv[5].Str != "keep me" {
		t.Fatalf("new client's row after the old client's update: %+v", nv)
	}

	// Incremental COMMIT rows and conflict serverRows decode with v1's codec.
	if r := newC.Push("n2", up("tasks", "t1", newRow("t1", "again", "still"), 2)); r.Status != wire.PushApplied {
		t.Fatalf("new push 2: %+v", r)
	}
	secs, err = oldC.Pull(pullHdr(acceptRows), wire.Subscription{ID: "s", Table: "tasks", Scopes: p1Scopes("p1"), Cursor: 2})
	if err != nil {
		t.Fatal(err)
	}
	ch := secs[0].Commits[0].Changes[0]
	if vals := decodeTask(t, oldC, ch.Row.Value); vals[2].Str != "again" {
		t.Fatalf("incremental row for v1: %+v", vals)
	}
	r := oldC.Push("o2", up("tasks", "t1", oldC.Task("t1", "p1", "stale", false), 1))
	if r.Status != wire.PushRejected || r.Results[0].Status != wire.OpConflict || r.Results[0].ServerVersion != 3 {
		t.Fatalf("stale old push: %+v", r)
	}
	if vals := decodeTask(t, oldC, r.Results[0].ServerRow); vals[2].Str != "again" {
		t.Fatalf("conflict serverRow for v1: %+v", vals)
	}
}
