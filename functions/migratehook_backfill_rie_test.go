package functions

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// The post-traffic hook takes its backfill from the schema document it
// is deployed with: under the Lambda emulator against DynamoDB Local, a
// manual invocation declares the document's backfill, rewrites the rows
// it names as server commits and activates it.
func TestMigrateHookBackfillsFromSchema(t *testing.T) {
	ddb := testenv.DynamoDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := ddb.Client(t)
	table := testenv.UniqueName(t, "hookbf")
	if err := dynamostore.CreateTable(ctx, c, table); err != nil {
		t.Fatal(err)
	}
	st := dynamostore.New(c, table, dynamostore.Options{})

	raw, err := os.ReadFile(schemaPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Replace(string(raw), `"version": 1`, `"version": 2`, 1)
	i := strings.LastIndex(doc, "}")
	doc = doc[:i] + `, "backfills": [{"name": "notes-from-title", "table": "tasks", "set": [
	  {"column": "notes", "derive": {"concat": [{"const": "about "}, {"lower": {"column": "title"}}]}}]}]}`
	sch, err := schema.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	tasks, _ := sch.Versions[2].Table("tasks")

	now := time.Now().UnixMilli()
	if _, err := st.TouchPartition(ctx, "p", now, "e-p"); err != nil {
		t.Fatal(err)
	}
	titles := map[string]string{"t1": "Buy MILK", "t2": "Walk"}
	for seq, id := range []string{"t1", "t2"} {
		payload, err := tasks.Codec.Append(nil, []rowcodec.Value{{Str: id}, {Str: "p1"}, {Str: titles[id]}, {Bool: false}, {Null: true}, {Null: true}, {Null: true}, {Int: 1}})
		if err != nil {
			t.Fatal(err)
		}
		s := int64(seq + 1)
		if err := st.Commit(ctx, "p", &store.CommitRequest{
			ExpectedMaxSeq: s - 1, WriterVersion: 1,
			Commit:  store.Commit{Seq: s, CreatedAtMs: now, ClientID: "c", ClientCommitID: id, Changes: []store.Change{{Table: "tasks", RowID: id, Op: wire.OpUpsert, RowVersion: 1, Row: payload}}},
			Rows:    []store.RowWrite{{Table: "tasks", Row: store.Row{RowID: id, Version: 1, Payload: payload, CommitSeq: s}}},
			Outcome: store.Outcome{Applied: true, CommitSeq: s, RecordedAtMs: now},
		}); err != nil {
			t.Fatal(err)
		}
	}

	rie := hookUnderEmulator(t, ddb.Endpoint, table, []byte(doc), nil)
	res := invokeJob[app.HookResult](t, ctx, rie, `{}`)
	if res.Status != "Succeeded" || res.Activated != 1 || res.Incomplete != 0 || res.Marker != 2 {
		t.Fatalf("hook: %+v", res)
	}
	if h, _, _ := st.Head(ctx, "p"); h.MaxCommitSeq != 3 {
		t.Fatalf("head %d, want 3 (one backfill commit)", h.MaxCommitSeq)
	}
	rows, err := st.GetRows(ctx, "p", "tasks", []string{"t1", "t2"})
	if err != nil {
		t.Fatal(err)
	}
	for id, title := range titles {
		vals, err := tasks.Codec.Decode(rows[id].Payload, nil)
		if err != nil || vals[5].Str != "about "+strings.ToLower(title) || rows[id].Version != 2 {
			t.Fatalf("row %s: %+v v%d %v", id, vals, rows[id].Version, err)
		}
	}
	if ck, err := st.GetCheckpoint(ctx, "p", "notes-from-title"); err != nil || ck == nil || ck.State != store.CheckpointActivated {
		t.Fatalf("checkpoint %+v %v", ck, err)
	}
}
