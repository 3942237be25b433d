package functions

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// TestPruneBackfillsScopeCopies (issue 23, adaptive scope copies): the
// scheduled prune run backfills the scope copies of a partition whose
// bootstrap turned them on (its rows spread over 64 orgs), from the head
// Prune reads anyway, and leaves a partition whose copies stayed off (one
// org) alone; the next run finds nothing to do.
func TestPruneBackfillsScopeCopies(t *testing.T) {
	c := testenv.DynamoDB(t).Client(t)
	ctx := context.Background()
	table := testenv.UniqueName(t, "prunescopes")
	if err := dynamostore.CreateTable(ctx, c, table); err != nil {
		t.Fatal(err)
	}
	st := dynamostore.New(c, table, dynamostore.Options{})
	now := time.Now().UnixMilli()
	orgs := map[string]int{"wide": 64, "narrow": 1}
	for _, p := range []string{"wide", "narrow"} {
		if _, err := st.TouchPartition(ctx, p, now, "e"); err != nil {
			t.Fatal(err)
		}
		for b := range 6 { // 300 rows, 50 per commit
			seq := int64(b + 1)
			req := &store.CommitRequest{ExpectedMaxSeq: seq - 1,
				Commit:  store.Commit{Seq: seq, CreatedAtMs: now, ClientID: "c", ClientCommitID: fmt.Sprint(seq)},
				Outcome: store.Outcome{Applied: true, CommitSeq: seq, RecordedAtMs: now}}
			for i := range 50 {
				n := b*50 + i
				id, sc := fmt.Sprintf("r%03d", n), wire.StoredScopes{{Key: "org", Value: fmt.Sprintf("o%02d", n%orgs[p])}}
				req.Commit.Changes = append(req.Commit.Changes, store.Change{Table: "tasks", RowID: id, Op: wire.OpUpsert, RowVersion: 1, Row: []byte(id), Scopes: sc})
				req.Rows = append(req.Rows, store.RowWrite{Table: "tasks", Row: store.Row{RowID: id, Version: 1, Payload: []byte(id), Scopes: sc, CommitSeq: seq}})
			}
			if err := st.Commit(ctx, p, req); err != nil {
				t.Fatal(err)
			}
		}
	}
	scoped := func(p, org string) []string {
		var got []string
		if err := st.ScanScopedRows(ctx, p, "tasks", "org", []string{org}, nil, 0, func(_ string, r *store.Row) bool {
			got = append(got, r.RowID)
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	var want []string
	for n := 5; n < 300; n += 64 {
		want = append(want, fmt.Sprintf("r%03d", n))
	}
	// Bootstraps: the wide partition's turns its copies on, the narrow
	// one's (every row matches) does not.
	if got := scoped("wide", "o05"); !slices.Equal(got, want) {
		t.Fatalf("wide bootstrap: %v, want %v", got, want)
	}
	if got := scoped("narrow", "o00"); len(got) != 300 {
		t.Fatalf("narrow bootstrap: %d rows, want 300", len(got))
	}

	p := keepNewestPruner(t, st)
	p.Tables = []string{"tasks"}
	res, err := p.Run(ctx, app.PruneEvent{Restart: true})
	if err != nil || res.ScopesBackfilled != 1 || res.Failed != 0 {
		t.Fatalf("prune run: %+v, %v; want one partition's copies backfilled", res, err)
	}
	// Marked: a backfill now has nothing to read.
	if rep, err := st.BackfillScopeIndex(ctx, "wide", p.Tables); err != nil || !rep.Marked || rep.Rows != 0 {
		t.Fatalf("wide partition after the prune run: %+v %v, want marked with nothing left", rep, err)
	}
	if got := scoped("wide", "o05"); !slices.Equal(got, want) {
		t.Fatalf("wide bootstrap from the copies: %v, want %v", got, want)
	}
	again, err := p.Run(ctx, app.PruneEvent{Restart: true})
	if err != nil || again.ScopesBackfilled != 0 {
		t.Fatalf("next prune run: %+v, %v; want nothing to backfill", again, err)
	}
	if st.ScopeBackfillDue("narrow") {
		t.Fatal("the narrow partition's head asks for copies")
	}
}
