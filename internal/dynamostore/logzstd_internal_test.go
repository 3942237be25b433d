package dynamostore

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// todoTasks are n changes shaped like make cost's 50-op push: rows of
// the todo example's tasks table whose 32-character titles do not repeat
// (hex of a hash of the id), one project scope.
func todoTasks(t *testing.T, n int) []store.Change {
	t.Helper()
	sc, err := schema.ReadFile(filepath.Join("..", "..", "examples", "todo", "schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	tbl, ok := sc.Versions[sc.Latest].Table("tasks")
	if !ok {
		t.Fatal("todo schema has no tasks table")
	}
	changes := make([]store.Change, n)
	for i := range changes {
		id := fmt.Sprintf("t%06d", i+1)
		sum := sha256.Sum256([]byte(id))
		vals := make([]rowcodec.Value, len(tbl.Columns))
		for j, c := range tbl.Columns {
			switch c.Name {
			case "id":
				vals[j] = rowcodec.Value{Str: id}
			case "project_id":
				vals[j] = rowcodec.Value{Str: "p1"}
			case "title":
				vals[j] = rowcodec.Value{Str: hex.EncodeToString(sum[:16])}
			case "done":
				vals[j] = rowcodec.Value{Bool: false}
			case "updated_at":
				vals[j] = rowcodec.Value{Int: 1}
			default:
				vals[j] = rowcodec.Value{Null: true}
			}
		}
		row, err := tbl.Codec.Append(nil, vals)
		if err != nil {
			t.Fatal(err)
		}
		changes[i] = store.Change{Table: "tasks", RowID: id, Op: wire.OpUpsert, RowVersion: 1,
			Scopes: wire.StoredScopes{{Key: "project_id", Value: "p1"}}, Row: row}
	}
	return changes
}

// randomTasks are n changes whose rows are random bytes (incompressible).
func randomTasks(n, rowBytes int) []store.Change {
	changes := make([]store.Change, n)
	for i := range changes {
		row := make([]byte, rowBytes)
		_, _ = rand.Read(row)
		changes[i] = store.Change{Table: "tasks", RowID: fmt.Sprintf("t%06d", i+1), Op: wire.OpUpsert, RowVersion: 1,
			Scopes: wire.StoredScopes{{Key: "project_id", Value: "p1"}}, Row: row}
	}
	return changes
}

// TestLogBodyCompression (issue 23): a large body is stored compressed
// (format 3) when that is smaller and decodes to exactly what the plain
// body decodes to; a small or incompressible body stays plain (format 2);
// plain bodies written before format 3 still decode; a corrupt or nested
// compressed body is refused. It logs the ratios, for make cost's 50-op
// rows and for random rows.
func TestLogBodyCompression(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		name     string
		changes  []store.Change
		compress *bool // nil: either, as long as it is not larger
	}{
		{"50 todo tasks (make cost's push)", todoTasks(t, 50), &yes},
		{"500 todo tasks", todoTasks(t, 500), &yes},
		{"1 todo task", todoTasks(t, 1), &no},
		{"50 random 60-byte rows", randomTasks(50, 60), nil},
		{"50 random 1 KB rows", randomTasks(50, 1024), nil},
		{"1 random 4 KB row", randomTasks(1, 4096), &no},
	} {
		cvs := changeCVs(tc.changes, nil)
		plain := encodeLogBody(tc.changes, cvs, nil, nil, nil)
		stored := packLogBody(plain)
		t.Logf("%s: body %d → %d bytes (%.2f×), format %d", tc.name, len(plain), len(stored), float64(len(plain))/float64(len(stored)), stored[0])
		if got := stored[0] == logFormatZstd; tc.compress != nil && got != *tc.compress {
			t.Errorf("%s: stored compressed %v, want %v", tc.name, got, *tc.compress)
		}
		if len(stored) > len(plain) {
			t.Errorf("%s: stored body of %d bytes is larger than the plain %d", tc.name, len(stored), len(plain))
		}
		want, err := decodeLogBody(plain, 7)
		if err != nil {
			t.Fatalf("%s: plain body: %v", tc.name, err)
		}
		got, err := decodeLogBody(stored, 7)
		if err != nil {
			t.Fatalf("%s: stored body: %v", tc.name, err)
		}
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(got.changes, tc.changes) {
			t.Errorf("%s: the stored body decodes to other changes", tc.name)
		}
	}

	plain := encodeLogBody(todoTasks(t, 50), nil, nil, nil, nil)
	stored := packLogBody(plain)
	if stored[0] != logFormatZstd {
		t.Fatal("50 todo tasks were not compressed")
	}
	for cut := 1; cut < len(stored); cut += 7 {
		if _, err := decodeLogBody(stored[:cut], 1); err == nil {
			t.Fatalf("a compressed body cut at %d of %d bytes decoded", cut, len(stored))
		}
	}
	flipped := bytes.Clone(stored)
	flipped[len(flipped)/2] ^= 0xff
	if lb, err := decodeLogBody(flipped, 1); err == nil && reflect.DeepEqual(lb.changes, todoTasks(t, 50)) {
		t.Fatal("a corrupted compressed body decoded to the original changes")
	}
	nested := append([]byte{logFormatZstd}, logZstdEncoder().EncodeAll(stored, nil)...)
	if _, err := decodeLogBody(nested, 1); err == nil {
		t.Fatal("a compressed body inside a compressed body decoded")
	}
	empty := append([]byte{logFormatZstd}, logZstdEncoder().EncodeAll(nil, nil)...)
	if _, err := decodeLogBody(empty, 1); err == nil {
		t.Fatal("an empty compressed body decoded")
	}
}

// TestCompressedLogOverDynamoDB: a 50-row commit's log item is stored
// compressed (format 3) and smaller than its plain body, and everything
// that reads the log reads it: a pull's ReadLog returns the commit's
// changes, and roll-forward materializes its rows after the writer
// stopped right after the commit point. The table is at this build's
// store-format level, as a deployed stack is after its post-traffic hook
// (formats.go; TestFormatLevelReadFirstWriteLater covers the shift).
func TestCompressedLogOverDynamoDB(t *testing.T) {
	c := testenv.DynamoDB(t).Client(t)
	table := testenv.UniqueName(t, "zlog")
	ctx := context.Background()
	if err := CreateTable(ctx, c, table); err != nil {
		t.Fatal(err)
	}
	crash := errors.New("injected crash")
	// Scope copies on from the partition's creation: the 50 rows and their
	// copies do not fit one transaction, so the log item lands first.
	w := New(c, table, Options{AfterLogWrite: func() error { return crash }, ScopeCopiesNewPartitions: true})
	if l, err := w.RaiseFormatLevel(ctx); err != nil || l.Level != FormatLevel {
		t.Fatalf("RaiseFormatLevel: %d, %v", l.Level, err)
	}
	p := "zlog"
	if _, err := w.TouchPartition(ctx, p, 1, "e"); err != nil {
		t.Fatal(err)
	}
	changes := todoTasks(t, 50)
	req := &store.CommitRequest{Commit: store.Commit{Seq: 1, ClientID: "c", ClientCommitID: "1", Changes: changes}, Outcome: store.Outcome{Applied: true, CommitSeq: 1}}
	for _, ch := range changes {
		req.Rows = append(req.Rows, store.RowWrite{Table: ch.Table, Row: store.Row{RowID: ch.RowID, Version: ch.RowVersion, Scopes: ch.Scopes, Payload: ch.Row, CommitSeq: 1}})
	}
	if err := w.Commit(ctx, p, req); !errors.Is(err, crash) {
		t.Fatalf("Commit: %v, want the injected crash after the log", err)
	}
	item, err := w.getItem(ctx, "test", logPK(p), chunkSK(1, 0), nil)
	if err != nil || item == nil {
		t.Fatalf("log item: %v %v", item, err)
	}
	d, _ := getB(item, lData)
	plain := encodeLogBody(changes, changeCVs(changes, req.Rows), nil, nil, nil)
	if len(d) == 0 || d[0] != logFormatZstd || len(d) >= len(plain) {
		t.Fatalf("log body stored as format %d in %d bytes (plain %d), want format 3 and smaller", d[0], len(d), len(plain))
	}
	t.Logf("log item %d bytes, body %d bytes (plain %d)", ItemSize(item), len(d), len(plain))

	s := New(c, table, Options{})
	var got []store.Change
	if err := s.ReadLog(ctx, p, 0, 1, func(cm *store.Commit) bool { got = cm.Changes; return true }); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, changes) {
		t.Fatalf("ReadLog returned %d changes unlike the %d committed", len(got), len(changes))
	}
	ids := make([]string, len(changes))
	for i := range changes {
		ids[i] = changes[i].RowID
	}
	rows, err := s.GetRows(ctx, p, "tasks", ids) // rolls the commit forward first
	if err != nil || len(rows) != len(changes) {
		t.Fatalf("GetRows: %d rows, %v", len(rows), err)
	}
	for _, ch := range changes {
		if r := rows[ch.RowID]; r == nil || !bytes.Equal(r.Payload, ch.Row) || r.CommitSeq != 1 || r.Version != 1 {
			t.Fatalf("row %s after roll-forward: %+v", ch.RowID, r)
		}
	}
}

// FuzzLogBodyDecode: any stored bytes decode or fail with errCorrupt,
// never panic, whether plain or compressed; a body that decodes encodes
// and packs back into one that decodes to the same changes.
func FuzzLogBodyDecode(f *testing.F) {
	changes := randomTasks(3, 40)
	plain := encodeLogBody(changes, changeCVs(changes, nil), nil, nil, nil)
	f.Add(plain)
	f.Add(append([]byte{logFormatZstd}, logZstdEncoder().EncodeAll(plain, nil)...))
	f.Add([]byte{logFormatZstd})
	f.Fuzz(func(t *testing.T, b []byte) {
		lb, err := decodeLogBody(b, 1)
		if err != nil {
			if !errors.Is(err, errCorrupt) {
				t.Fatalf("decode error %v is not errCorrupt", err)
			}
			return
		}
		again, err := decodeLogBody(packLogBody(encodeLogBody(lb.changes, lb.cvs, lb.rows, lb.refs, lb.reactions)), 1)
		if err != nil || !reflect.DeepEqual(again.changes, lb.changes) {
			t.Fatalf("re-encoded body: %v", err)
		}
	})
}
