package dynamostore_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
)

// TestScopeBackfillResumes (issue 23): a scope-copy backfill cut off by
// its deadline (the prune run's) keeps the pages it finished: the next
// run reads only the rows after the last one, and the partition ends
// with every live row's copies.
func TestScopeBackfillResumes(t *testing.T) {
	const rows, orgs, page = 320, 32, 50
	s, c, table, p := setup(t, dynamostore.Options{})
	org := func(i int) string { return fmt.Sprintf("o%02d", i%orgs) }
	for b := range rows / 40 {
		var ws []store.RowWrite
		for i := range 40 {
			n := b*40 + i
			ws = append(ws, store.RowWrite{Table: "tasks", Row: store.Row{RowID: fmt.Sprintf("r%03d", n), Version: 1,
				Payload: []byte("x"), Scopes: wire.StoredScopes{{Key: "org", Value: org(n)}}}})
		}
		if err := s.Commit(context.Background(), p, commitOf(int64(b), fmt.Sprint("b", b), ws...)); err != nil {
			t.Fatal(err)
		}
	}

	// One UpdateItem turns copies on, one marks the last seed commit (a
	// small one, pending on the head) applied, then plain puts of the
	// copies and an UpdateItem recording each page of 50: cut off before
	// the third page is recorded.
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	cc := &cutOffClient{base: c.Options().HTTPClient, cancel: cancel, budget: 2 + 2}
	cut := dynamostore.New(dynamodb.New(c.Options(), func(o *dynamodb.Options) { o.HTTPClient = cc }), table, dynamostore.Options{ScanPageSize: page})
	if rep, err := cut.BackfillScopeIndex(ctx, p, []string{"tasks"}); err == nil || rep.Marked {
		t.Fatalf("cut-off backfill: %+v %v, want it stopped unmarked", rep, err)
	}
	out, err := c.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: dynamostore.Key(dynamostore.PartitionPK(p), "HEAD")})
	if err != nil {
		t.Fatal(err)
	}
	fill, _ := out.Item["sf"].(*types.AttributeValueMemberS)
	if fill == nil || !strings.HasSuffix(fill.Value, "\x00tasks\x00r099") {
		t.Fatalf("progress on the head after two pages: %+v, want the last row of the second page", out.Item["sf"])
	}

	// A row of a finished page changes meanwhile (its commit, after copies
	// were turned on, writes its own copy).
	if err := s.Commit(context.Background(), p, commitOf(rows/40, "late", store.RowWrite{Table: "tasks", Row: store.Row{
		RowID: "r007", Version: 2, Payload: []byte("late"), Scopes: wire.StoredScopes{{Key: "org", Value: org(7)}}}})); err != nil {
		t.Fatal(err)
	}
	// A run over the same tables resumes after the recorded page.
	rep, err := dynamostore.New(c, table, dynamostore.Options{ScanPageSize: page}).BackfillScopeIndex(context.Background(), p, []string{"tasks"})
	if err != nil || !rep.Marked || rep.Rows != rows-2*page {
		t.Fatalf("resumed backfill: %+v %v; want the %d rows after the second page read and the head marked", rep, err, rows-2*page)
	}
	for i := range orgs {
		var want, got []string
		for n := i; n < rows; n += orgs {
			want = append(want, fmt.Sprintf("r%03d", n))
		}
		if err := s.ScanScopedRows(context.Background(), p, "tasks", "org", []string{org(i)}, nil, 0, func(_ string, r *store.Row) bool {
			got = append(got, r.RowID)
			if r.RowID == "r007" && string(r.Payload) != "late" {
				t.Errorf("copy of r007: %q, want the late commit's row", r.Payload)
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("copies of %s after the resumed backfill: %v, want %v", org(i), got, want)
		}
	}
}
