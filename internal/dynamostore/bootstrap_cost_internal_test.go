package dynamostore

import (
	"context"
	"fmt"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/memstore"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// TestBootstrapReadsOnlyItsPages: issue 11's bootstrap target (≤ 1.2×
// the read units of the scope's rows). A page of 1,000 rows looks at one
// row more to know whether another page follows; that lookahead must not
// cost a second full Query whose rows are read and dropped, which made a
// multi-page bootstrap read about twice its rows' bytes.
func TestBootstrapReadsOnlyItsPages(t *testing.T) {
	ctx := context.Background()
	client := testenv.DynamoDB(t).Client(t)
	table := testenv.UniqueName(t, "bootcost")
	if err := CreateTable(ctx, client, table); err != nil {
		t.Fatal(err)
	}
	st := New(client, table, Options{})
	h := enginetest.New(t, st, memstore.NewSegments(), enginetest.Options{})
	h.Grants.Set("alice", engine.ScopeMap{"project_id": {"p1", "p2"}})
	c := h.Client("boot", "alice", "device")

	// 2,500 rows in p1 (three pages of 1,000) and some in p2 beside them.
	const rows = 2500
	for b := 0; b < rows/50; b++ {
		ops := make([]wire.Operation, 0, 50)
		for i := range 50 {
			id := fmt.Sprintf("r%05d", b*50+i)
			ops = append(ops, enginetest.Upsert("tasks", id, c.Task(id, "p1", "a task title of some length, repeated to be realistic", false), 0))
		}
		if r := c.Push(fmt.Sprintf("seed%03d", b), ops...); r.Status != wire.PushApplied {
			t.Fatalf("seed push %d: %+v", b, r)
		}
	}
	for i := range 4 {
		id := fmt.Sprintf("q%05d", i)
		if r := c.Push("other"+id, enginetest.Upsert("tasks", id, c.Task(id, "p2", "other", false), 0)); r.Status != wire.PushApplied {
			t.Fatalf("p2 push: %+v", r)
		}
	}

	// The read units of the scope's rows: their scope-copy items, which
	// is what a bootstrap Queries.
	var bytes int
	if err := st.ScanScopedRows(ctx, "boot", "tasks", "project_id", []string{"p1"}, nil, 0, func(_ string, r *store.Row) bool {
		for _, a := range scopeIndexActions(st.table, "boot", r.CommitSeq, []store.RowWrite{{Table: "tasks", Row: *r}}) {
			bytes += a.size
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	dataRCU := float64(bytes) / 4096

	mctx, capacity := WithCapacity(ctx)
	c.Ctx = mctx
	got, requests := bootstrapAll(t, c, "p1")
	c.Ctx = nil
	u := capacity.Snapshot()
	t.Logf("bootstrap of %d rows (%.0f RCU of row data): %d requests, %d round trips, %.0f RCU (%.2f×)",
		got, dataRCU, requests, u.RoundTrips, u.EstRCU, u.EstRCU/dataRCU)
	if got != rows {
		t.Fatalf("bootstrap delivered %d rows, want %d", got, rows)
	}
	// Per request the head, the marker and the serve-gate re-check are a
	// few RCU more; the rows themselves must stay within 1.2×.
	if limit := 1.2*dataRCU + 4*float64(requests); u.EstRCU > limit {
		t.Errorf("bootstrap read %.0f RCU for %.0f RCU of rows; want ≤ %.0f", u.EstRCU, dataRCU, limit)
	}
}
