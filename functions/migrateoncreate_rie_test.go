package functions

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// cfnResponses records the documents PUT to a custom resource request's
// ResponseURL (CloudFormation's presigned S3 URL).
type cfnResponses struct {
	mu   sync.Mutex
	docs []map[string]any
}

func (c *cfnResponses) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var doc map[string]any
	if r.Method != http.MethodPut || json.Unmarshal(body, &doc) != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	c.docs = append(c.docs, doc)
	c.mu.Unlock()
}

func (c *cfnResponses) all() []map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]map[string]any(nil), c.docs...)
}

// The hook function serves the MigrateOnCreate custom resource under the
// Lambda emulator against DynamoDB Local: a CloudFormation Create request
// on a new stack's table runs the migration step (schema marker to the
// schema's version, store-format level to this build's, as the hook does
// after a traffic shift) and answers SUCCESS to the request's
// ResponseURL with the request's ids; Update and Delete answer SUCCESS
// and change nothing (later deploys have the hook).
func TestMigrateOnCreateUnderEmulator(t *testing.T) {
	ddb := testenv.DynamoDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := ddb.Client(t)
	table := testenv.UniqueName(t, "oncreate")
	if err := dynamostore.CreateTable(ctx, c, table); err != nil {
		t.Fatal(err)
	}
	st := dynamostore.New(c, table, dynamostore.Options{})
	cfn := &cfnResponses{}
	srv := httptest.NewServer(cfn)
	t.Cleanup(srv.Close)

	sch, err := os.ReadFile(schemaPath)
	if err != nil {
		t.Fatal(err)
	}
	rie := hookUnderEmulator(t, ddb.Endpoint, table, sch, nil)

	request := func(kind, physical string) string {
		ev := map[string]any{
			"RequestType": kind, "ResponseURL": srv.URL + "/cfn-response?X-Amz-Signature=x",
			"StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/s/uuid", "RequestId": "req-" + kind,
			"ResourceType": "Custom::SyncularMigrateOnCreate", "LogicalResourceId": "MigrateOnCreate",
			"ResourceProperties": map[string]any{"ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:hook"},
		}
		if physical != "" {
			ev["PhysicalResourceId"] = physical
		}
		b, _ := json.Marshal(ev)
		return string(b)
	}
	state := func() (int64, int64) {
		t.Helper()
		m, err := st.SchemaMarker(ctx)
		if err != nil {
			t.Fatal(err)
		}
		l, err := st.StoredFormatLevel(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return m, l
	}
	answered := func(n int, kind, physical string) map[string]any {
		t.Helper()
		docs := cfn.all()
		if len(docs) != n {
			t.Fatalf("%d CloudFormation responses, want %d: %v", len(docs), n, docs)
		}
		d := docs[n-1]
		if d["Status"] != "SUCCESS" || d["RequestId"] != "req-"+kind || d["LogicalResourceId"] != "MigrateOnCreate" ||
			d["StackId"] != "arn:aws:cloudformation:us-east-1:123456789012:stack/s/uuid" || d["PhysicalResourceId"] != physical {
			t.Fatalf("%s response %v", kind, d)
		}
		return d
	}

	// An Update (a later deploy changed the resource) does not step.
	invokeJob[app.HookResult](t, ctx, rie, request("Update", "phys-1"))
	answered(1, "Update", "phys-1")
	if m, l := state(); m != 0 || l != 0 {
		t.Fatalf("an Update request stepped: marker %d, level %d", m, l)
	}

	// The stack's creation: the step the hook would run.
	version := int64(todo(t).Latest)
	res := invokeJob[app.HookResult](t, ctx, rie, request("Create", ""))
	d := answered(2, "Create", "syncular-migrate-on-create")
	if m, l := state(); m != version || l != dynamostore.FormatLevel || res.FormatLevel != l || res.Error != "" {
		t.Fatalf("after Create: marker %d, level %d, result %+v; want marker %d, level %d", m, l, res, version, dynamostore.FormatLevel)
	}
	if data, _ := d["Data"].(map[string]any); data["FormatLevel"] != float64(dynamostore.FormatLevel) {
		t.Errorf("Create response data %v, want the level reached", d["Data"])
	}

	// The stack's deletion answers at once.
	invokeJob[app.HookResult](t, ctx, rie, request("Delete", "syncular-migrate-on-create"))
	answered(3, "Delete", "syncular-migrate-on-create")
}
