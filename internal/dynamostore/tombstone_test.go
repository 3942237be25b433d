package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
)

// rawRowItem is a row item as stored before column versions and
// tombstones existed: key, v, cs, sc, d.
func rawRowItem(p, table, id string, version, seq int64, payload []byte) map[string]types.AttributeValue {
	item := dynamostore.Key(dynamostore.PartitionPK(p)+"#T#"+table, "R"+id)
	item["v"], item["cs"], item["d"] = dynamostore.N(version), dynamostore.N(seq), dynamostore.B(payload)
	return item
}

func putRaw(t *testing.T, c *dynamodb.Client, table string, items ...map[string]types.AttributeValue) {
	t.Helper()
	for len(items) > 0 {
		n := min(len(items), 25)
		var reqs []types.WriteRequest
		for _, it := range items[:n] {
			reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: it}})
		}
		out, err := c.BatchWriteItem(context.Background(), &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{table: reqs}})
		if err != nil || len(out.UnprocessedItems) > 0 {
			t.Fatalf("raw put: %v (%d unprocessed)", err, len(out.UnprocessedItems[table]))
		}
		items = items[n:]
	}
}

// TestLegacyRowItems: rows written before this layout (no column-version
// attribute, no tombstone flag) read as live rows with nil column
// versions, and a delete turns one into a tombstone.
func TestLegacyRowItems(t *testing.T) {
	s, c, table, p := setup(t, dynamostore.Options{})
	ctx := context.Background()
	putRaw(t, c, table, rawRowItem(p, "tasks", "old", 4, 0, []byte("legacy")))
	want := store.Row{RowID: "old", Version: 4, Payload: []byte("legacy")}
	m, err := s.GetRows(ctx, p, "tasks", []string{"old"})
	if err != nil || m["old"] == nil {
		t.Fatalf("GetRows: %v %v", m, err)
	}
	if r := m["old"]; r.Deleted || r.Version != 4 || string(r.Payload) != "legacy" || r.ColumnVersions != nil {
		t.Errorf("legacy row read as %+v, want %+v", *r, want)
	}
	var scanned []*store.Row
	if err := s.ScanRows(ctx, p, "tasks", "", false, func(r *store.Row) bool { scanned = append(scanned, r); return true }); err != nil {
		t.Fatal(err)
	}
	if len(scanned) != 1 || scanned[0].RowID != "old" || scanned[0].ColumnVersions != nil || scanned[0].Deleted {
		t.Errorf("ScanRows of a legacy row: %+v", scanned)
	}
	del := store.RowWrite{Table: "tasks", Delete: true, Row: store.Row{RowID: "old"}}
	if err := s.Commit(ctx, p, commitOf(0, "d", del)); err != nil {
		t.Fatal(err)
	}
	m, err = s.GetRows(ctx, p, "tasks", []string{"old"})
	if err != nil || m["old"] == nil || !m["old"].Deleted || m["old"].CommitSeq != 1 {
		t.Errorf("after delete: %+v %v, want a tombstone at 1", m["old"], err)
	}
}

// TestRollForwardWritesTombstonesAndColumnVersions: a commit too large
// for one transaction whose committer dies after the log write is
// finished by the next reader, with its tombstones and column versions,
// from derived and from explicit rows; replaying it changes nothing.
func TestRollForwardWritesTombstonesAndColumnVersions(t *testing.T) {
	for _, explicit := range []bool{false, true} {
		t.Run(fmt.Sprintf("explicit=%v", explicit), func(t *testing.T) {
			crash := errors.New("injected crash")
			s, c, table, p := setup(t, dynamostore.Options{AfterLogWrite: func() error { return crash }})
			plain := dynamostore.New(c, table, dynamostore.Options{})
			ctx := context.Background()
			var ins []store.RowWrite
			var ids []string
			for i := range 150 {
				id := fmt.Sprintf("r%03d", i)
				ids = append(ids, id)
				ins = append(ins, up(id, 1, payload(50)))
			}
			if err := plain.Commit(ctx, p, commitOf(0, "ins", ins...)); err != nil {
				t.Fatal(err)
			}
			// Commit 2: delete the even rows, update the odd ones with
			// column versions.
			var ws []store.RowWrite
			for i, id := range ids {
				if i%2 == 0 {
					ws = append(ws, store.RowWrite{Table: "tasks", Delete: true, Row: store.Row{RowID: id}})
					continue
				}
				w := up(id, 2, payload(60))
				w.Row.ColumnVersions = []int64{1, 2, int64(i % 3)}
				ws = append(ws, w)
			}
			req := commitOf(1, "big", ws...)
			if explicit { // rows not in change order: logged explicitly
				slices.Reverse(req.Rows)
			}
			if err := s.Commit(ctx, p, req); !errors.Is(err, crash) {
				t.Fatalf("Commit: %v, want the injected crash", err)
			}
			if mx, ap := rawHead(t, c, table, p); mx != "2" || ap != "1" {
				t.Fatalf("after crash mx=%s ap=%s, want 2/1", mx, ap)
			}
			check := func(when string) {
				t.Helper()
				m, err := plain.GetRows(ctx, p, "tasks", ids)
				if err != nil {
					t.Fatal(err)
				}
				for i, id := range ids {
					r := m[id]
					switch {
					case r == nil:
						t.Fatalf("%s: %s missing", when, id)
					case i%2 == 0 && (!r.Deleted || r.CommitSeq != 2):
						t.Fatalf("%s: %s = %+v, want a tombstone at 2", when, id, *r)
					case i%2 == 1 && (r.Deleted || r.Version != 2 || !slices.Equal(r.ColumnVersions, []int64{1, 2, int64(i % 3)})):
						t.Fatalf("%s: %s = %+v, want version 2 with column versions", when, id, *r)
					}
				}
			}
			check("after roll-forward")
			if mx, ap := rawHead(t, c, table, p); mx != "2" || ap != "2" {
				t.Fatalf("after roll-forward mx=%s ap=%s, want 2/2", mx, ap)
			}
			// Pruning then drops exactly the tombstones, read from the log.
			if n, err := plain.Prune(ctx, p, 2); err != nil || n != 2 {
				t.Fatalf("Prune: %d %v", n, err)
			}
			m, err := plain.GetRows(ctx, p, "tasks", ids)
			if err != nil || len(m) != 75 {
				t.Fatalf("after prune %d rows (%v), want the 75 live ones", len(m), err)
			}
			for _, r := range m {
				if r.Deleted {
					t.Fatalf("tombstone %s survived pruning", r.RowID)
				}
			}
		})
	}
}

// TestPruneDoesNotScanRows: pruning a commit with one delete costs the
// same however many rows the table holds (a scan of the 2,000 rows of
// 1 KB here would cost some 500 RCU).
func TestPruneDoesNotScanRows(t *testing.T) {
	s, c, table, p := setup(t, dynamostore.Options{})
	ctx := context.Background()
	var items []map[string]types.AttributeValue
	for i := range 2000 {
		items = append(items, rawRowItem(p, "tasks", fmt.Sprintf("bulk%04d", i), 1, 0, payload(1000)))
	}
	putRaw(t, c, table, items...)
	del := store.RowWrite{Table: "tasks", Delete: true, Row: store.Row{RowID: "bulk0500"}}
	if err := s.Commit(ctx, p, commitOf(0, "d", del)); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, p, commitOf(1, "u", up("bulk0007", 2, payload(10)))); err != nil {
		t.Fatal(err)
	}
	cctx, usage := dynamostore.WithCapacity(ctx)
	if n, err := s.Prune(cctx, p, 2); err != nil || n != 2 {
		t.Fatalf("Prune: %d %v", n, err)
	}
	u := usage.Snapshot()
	t.Logf("prune of 2 commits, 1 tombstone: %d round trips, est %.1f RCU / %.1f WCU", u.RoundTrips, u.EstRCU, u.EstWCU)
	// Head read, horizon update, one log query, one tombstone delete, one
	// batch delete of the log items; and, since the horizon reaches the
	// head's last commit, a small one still pending (fast.go), the read
	// of its log item and the update marking it applied.
	if u.RoundTrips > 7 || u.EstRCU > 5 {
		t.Errorf("Prune cost %d round trips / %.1f RCU; want ≤ 7 / ≤ 5 (no row scan)", u.RoundTrips, u.EstRCU)
	}
	m, err := s.GetRows(ctx, p, "tasks", []string{"bulk0500", "bulk0007", "bulk0501"})
	if err != nil || len(m) != 2 || m["bulk0500"] != nil || m["bulk0007"].Version != 2 {
		t.Errorf("after prune: %v %v", m, err)
	}
	// The raw item is gone, not merely hidden.
	out, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: dynamostore.Key(dynamostore.PartitionPK(p)+"#T#tasks", "Rbulk0500")})
	if err != nil || out.Item != nil {
		t.Errorf("tombstone item after prune: %v %v", out.Item, err)
	}
}

// TestTombstoneItemIsSmall: a tombstone is the key plus two small
// attributes, whatever the deleted row's size, so the delete's Put
// costs one write unit (two in the transaction).
func TestTombstoneItemIsSmall(t *testing.T) {
	s, c, table, p := setup(t, dynamostore.Options{})
	ctx := context.Background()
	if err := s.Commit(ctx, p, commitOf(0, "i", up("r", 1, payload(3000)))); err != nil {
		t.Fatal(err)
	}
	del := store.RowWrite{Table: "tasks", Delete: true, Row: store.Row{RowID: "r"}}
	if err := s.Commit(ctx, p, commitOf(1, "d", del)); err != nil {
		t.Fatal(err)
	}
	out, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: dynamostore.Key(dynamostore.PartitionPK(p)+"#T#tasks", "Rr")})
	if err != nil || out.Item == nil {
		t.Fatalf("tombstone item: %v", err)
	}
	var names []string
	for k := range out.Item {
		names = append(names, k)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"cs", "dl", "pk", "sk"}) {
		t.Errorf("tombstone attributes %v, want [cs dl pk sk]", names)
	}
	if n := dynamostore.ItemSize(out.Item); n > 100 {
		t.Errorf("tombstone item %d bytes", n)
	}
}
