package main

import (
	"context"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/memstore"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// TestRestoreRunbook runs the point-in-time restore of docs/OPERATIONS.md
// end to end on DynamoDB Local: data written through the engine, the
// table restored into a new one (DynamoDB Local has no point-in-time
// restore, so the items are copied into a table created as a restore
// creates it: no stream), restore-prepare enabling the stream the
// template's fanout mapping needs and printing the deploy line, the §2.1
// epoch rotation, and a client that synced past the restore point being
// told to reset and re-bootstrapping exactly the restored rows. The
// runbook's syncular-admin commands and deploy line are the ones run here.
func TestRestoreRunbook(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	db := testenv.DynamoDB(t).Client(t)
	pull := wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows}

	// Data through the engine on the live table.
	live := enginetest.New(t, f.store, memstore.NewSegments(), enginetest.Options{})
	live.Grants.Set("alice", engine.ScopeMap{"project_id": {"p1"}})
	c := live.Client("tenant#1", "alice", "client-1")
	for _, id := range []string{"t1", "t2"} {
		if r := c.Push("c-"+id, enginetest.Upsert("tasks", id, c.Task(id, "p1", "title "+id, false), -1)); r.Status != wire.PushApplied {
			t.Fatalf("push %s: status %d", id, r.Status)
		}
	}
	rep := c.NewReplica("tasks", "tasks", enginetest.Scopes("project_id", "p1"))
	if err := rep.Sync(pull, 10); err != nil {
		t.Fatal(err)
	}
	restored := maps.Clone(rep.Rows) // what the restore point holds
	if len(restored) != 2 {
		t.Fatalf("replica holds %d rows before the restore point, want 2", len(restored))
	}

	// Step 2: restore into a new table, as DynamoDB does: same items, no
	// stream.
	target := f.table + "-restored"
	if err := dynamostore.CreateTable(ctx, db, target); err != nil {
		t.Fatal(err)
	}
	copyItems(t, db, f.table, target)
	if d := describe(t, db, target); d.StreamSpecification != nil && aws.ToBool(d.StreamSpecification.StreamEnabled) {
		t.Fatal("the restored table must start without a stream")
	}

	// The client keeps syncing on the old table past the restore point.
	if r := c.Push("c-t3", enginetest.Upsert("tasks", "t3", c.Task("t3", "p1", "after the restore point", false), -1)); r.Status != wire.PushApplied {
		t.Fatalf("push t3: status %d", r.Status)
	}
	if r := c.Push("c-del-t1", enginetest.Delete("tasks", "t1")); r.Status != wire.PushApplied {
		t.Fatalf("delete t1: status %d", r.Status)
	}
	if err := rep.Sync(pull, 10); err != nil {
		t.Fatal(err)
	}
	if _, ok := rep.Rows["t3"]; !ok || len(rep.Rows) != 2 {
		t.Fatalf("replica did not see the commits after the restore point: %v", slices.Sorted(maps.Keys(rep.Rows)))
	}
	cursorBefore, epochBefore := rep.Sub.Cursor, c.Epoch

	// Steps 3 and 4, as the runbook runs them against the restored table.
	env := maps.Clone(f.env)
	env["SYNC_TABLE_NAME"] = target
	ran := map[string]bool{}
	admin := func(wantCode int, args ...string) result {
		t.Helper()
		ran[strings.Join(args, " ")] = true
		r := runWith(t, env, args...)
		if r.code != wantCode {
			t.Fatalf("syncular-admin %s: exit %d, want %d", strings.Join(args, " "), r.code, wantCode)
		}
		return r
	}

	prep := admin(exitOK, "restore-prepare", "-table", target)
	d := describe(t, db, target)
	if s := d.StreamSpecification; s == nil || !aws.ToBool(s.StreamEnabled) || s.StreamViewType != types.StreamViewTypeKeysOnly {
		t.Fatalf("restore-prepare left the stream %+v, want an enabled KEYS_ONLY stream (the template's SyncTable)", s)
	}
	arn := aws.ToString(d.LatestStreamArn)
	if arn == "" || !strings.Contains(arn, ":table/"+target+"/stream/") {
		t.Fatalf("stream ARN %q is not a stream of %s", arn, target)
	}
	if want := "table\tstreamViewType\tstreamArn\n" + target + "\tKEYS_ONLY\t" + arn + "\n"; prep.stdout != want {
		t.Errorf("restore-prepare stdout %q, want %q", prep.stdout, want)
	}
	deploy := "sam deploy --parameter-overrides ExistingTableName=" + target + " ExistingTableStreamArn=" + arn
	if !strings.Contains(prep.stderr, deploy) {
		t.Errorf("restore-prepare does not print the deploy line %q", deploy)
	}
	// Idempotent: a second run keeps the stream.
	if again := admin(exitOK, "restore-prepare", "-table", target); again.stdout != prep.stdout {
		t.Errorf("second restore-prepare printed %q, want %q", again.stdout, prep.stdout)
	}

	admin(exitFailure, "rotate-epoch", "-all") // dry run
	rs := dynamostore.New(db, target, dynamostore.Options{})
	if h, ok, err := rs.Head(ctx, "tenant#1"); err != nil || !ok || h.LogEpoch != epochBefore || h.EpochRequired {
		t.Fatalf("after the dry run: head %+v ok=%v err=%v, want it unchanged", h, ok, err)
	}
	admin(exitOK, "rotate-epoch", "-all", "-yes")
	parts := admin(exitOK, "partitions")
	rows := f.rows(parts, "partition\tepoch\tepochRequired\tmaxCommitSeq\thorizonSeq\tlastSeen")
	if r, ok := rows["tenant#1"]; !ok || r[1] != "true" || r[0] == epochBefore {
		t.Fatalf("partitions after the rotation: %v, want a new epoch with epochRequired true", rows)
	}

	// Step 5: the stack serves the restored table. The client that synced
	// past the restore point is told to reset (§2.1) ...
	served := enginetest.New(t, rs, memstore.NewSegments(), enginetest.Options{})
	served.Grants.Set("alice", engine.ScopeMap{"project_id": {"p1"}})
	oldClient := *c
	oldClient.H = served
	resp, err := oldClient.Send(oldClient.Request(nil, &pull, []wire.Subscription{rep.Sub}))
	if err != nil {
		t.Fatal(err)
	}
	hdr := resp.Frames[0].(*wire.RespHeader)
	if len(resp.Frames) != 1 || !hdr.ResetRequired || hdr.LogEpoch == "" || hdr.LogEpoch == epochBefore {
		t.Fatalf("old-epoch client (cursor %d) got %d frames, header %+v; want only resetRequired with a new epoch",
			cursorBefore, len(resp.Frames), hdr)
	}
	// ... adopts the new epoch, drops its cursors and re-bootstraps, and
	// then holds exactly the restored rows: t1 back, t3 gone.
	oldClient.Epoch = hdr.LogEpoch
	rep.C = &oldClient
	rep.Sub.Cursor, rep.Sub.BootstrapState = -1, wire.Opt[wire.JSON]{}
	if err := rep.Sync(pull, 10); err != nil {
		t.Fatal(err)
	}
	if diff := enginetest.DiffRows(restored, rep.Rows); diff != "" {
		t.Errorf("after the re-bootstrap the client differs from the restored data:\n%s", diff)
	}
	if diff := enginetest.DiffRows(served.ServerRows("tenant#1", "tasks"), rep.Rows); diff != "" {
		t.Errorf("after the re-bootstrap the client differs from the restored table:\n%s", diff)
	}
	// A new commit on the restored table reaches it incrementally.
	if r := oldClient.Push("c-t4", enginetest.Upsert("tasks", "t4", oldClient.Task("t4", "p1", "after the restore", false), -1)); r.Status != wire.PushApplied {
		t.Fatalf("push t4 after the restore: status %d", r.Status)
	}
	if err := rep.Sync(pull, 10); err != nil {
		t.Fatal(err)
	}
	if _, ok := rep.Rows["t4"]; !ok || len(rep.Rows) != 3 {
		t.Errorf("after a new commit the client holds %v, want t1 t2 t4", slices.Sorted(maps.Keys(rep.Rows)))
	}

	checkRunbookText(t, ran, target, arn)
}

// checkRunbookText holds docs/OPERATIONS.md's restore section to the
// commands the test ran: every syncular-admin line in its shell blocks is
// one of them (with <TableName>-restored standing for the table) and the
// other way round, and its deploy line is the one restore-prepare prints.
func checkRunbookText(t *testing.T, ran map[string]bool, table, arn string) {
	t.Helper()
	b, err := os.ReadFile("../../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n## Point-in-time restore\n")
	if start < 0 {
		t.Fatal("docs/OPERATIONS.md has no \"## Point-in-time restore\" section")
	}
	section := doc[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	fill := strings.NewReplacer("<TableName>-restored", table, "<StreamArn>", arn)
	documented := map[string]bool{}
	var deployLines []string
	inBlock := false
	for _, line := range strings.Split(section, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			inBlock = !inBlock
			continue
		}
		if !inBlock {
			continue
		}
		if i := strings.Index(trimmed, " #"); i >= 0 {
			trimmed = strings.TrimSpace(trimmed[:i])
		}
		trimmed = fill.Replace(trimmed)
		if cmd, ok := strings.CutPrefix(trimmed, "syncular-admin "); ok {
			documented[strings.Join(strings.Fields(cmd), " ")] = true
		}
		if strings.Contains(trimmed, "ExistingTableStreamArn=") {
			deployLines = append(deployLines, trimmed)
		}
	}
	if got, want := slices.Sorted(maps.Keys(documented)), slices.Sorted(maps.Keys(ran)); !slices.Equal(got, want) {
		t.Errorf("the runbook's syncular-admin commands %q, the test ran %q", got, want)
	}
	deploy := "sam deploy --parameter-overrides ExistingTableName=" + table + " ExistingTableStreamArn=" + arn
	if len(deployLines) == 0 || !slices.ContainsFunc(deployLines, func(l string) bool { return strings.HasPrefix(l, deploy) }) {
		t.Errorf("the runbook's deploy lines %q do not start with the printed %q", deployLines, deploy)
	}
}

// copyItems copies every item of table from into table to, as a restore
// reproduces them.
func copyItems(t *testing.T, db *dynamodb.Client, from, to string) {
	t.Helper()
	ctx := context.Background()
	var batch []types.WriteRequest
	flush := func() {
		req := map[string][]types.WriteRequest{to: batch}
		for len(req) > 0 && len(req[to]) > 0 {
			out, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: req})
			if err != nil {
				t.Fatalf("copy items: %v", err)
			}
			req = out.UnprocessedItems
		}
		batch = nil
	}
	n := 0
	p := dynamodb.NewScanPaginator(db, &dynamodb.ScanInput{TableName: aws.String(from), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatalf("scan %s: %v", from, err)
		}
		for _, item := range page.Items {
			batch = append(batch, types.WriteRequest{PutRequest: &types.PutRequest{Item: item}})
			n++
			if len(batch) == 25 {
				flush()
			}
		}
	}
	if len(batch) > 0 {
		flush()
	}
	t.Logf("restored %d items from %s into %s", n, from, to)
}

func describe(t *testing.T, db *dynamodb.Client, table string) *types.TableDescription {
	t.Helper()
	out, err := db.DescribeTable(context.Background(), &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatal(err)
	}
	return out.Table
}
