package functions

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/app/apptest"
	"github.com/skyfold/syncular-lambda/internal/auth"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/realtime"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/lambdahttp"
	"github.com/skyfold/syncular-lambda/internal/memblobs"
	"github.com/skyfold/syncular-lambda/internal/memstore"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// mgmtAPI stands in for API Gateway's management API: it records the
// body of every signed PostToConnection per connection id.
type mgmtAPI struct {
	mu    sync.Mutex
	posts map[string][][]byte
	bad   []string
}

func (m *mgmtAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, ok := strings.CutPrefix(r.URL.Path, "/realtime/@connections/")
	body, _ := io.ReadAll(r.Body)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !ok || r.Method != http.MethodPost || !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ") ||
		!strings.Contains(r.Header.Get("Authorization"), "/execute-api/aws4_request") {
		m.bad = append(m.bad, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	m.posts[id] = append(m.posts[id], body)
}

func (m *mgmtAPI) of(id string) [][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([][]byte(nil), m.posts[id]...)
}

// The realtime and fanout function binaries under the Lambda emulator,
// against DynamoDB Local, with a local HTTP server as the management API
// (SYNC_REALTIME_ENDPOINT). Push and pull run in process over the same
// table. §8.1: $connect authenticates like /sync (token query parameter)
// and registers the connection; a bad token is refused. The stream
// records the fanout receives are the ones template.yaml's event source
// mapping lets through (INSERTs): the connection item's INSERT yields the
// hello, a commit's first log item the 0x00 delta (§8.2); a replayed
// batch posts nothing twice. An ack on $default persists the client's
// cursor; $disconnect deletes the connection and its index entries.
func TestRealtimeFunctionsUnderEmulator(t *testing.T) {
	ddb := testenv.DynamoDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db := ddb.Client(t)
	table := testenv.UniqueName(t, "rt")
	if err := dynamostore.CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	mgmt := &mgmtAPI{posts: map[string][][]byte{}}
	srv := httptest.NewServer(mgmt)
	t.Cleanup(srv.Close)

	env := envLocal(t)
	env["SYNC_DYNAMODB_ENDPOINT"] = ddb.Endpoint
	env["SYNC_S3_ENDPOINT"] = "http://127.0.0.1:1" // never reached by these functions
	env["SYNC_TABLE_NAME"] = table
	env["SYNC_REALTIME_ENDPOINT"] = srv.URL + "/realtime"
	schemaJSON, err := os.ReadFile(schemaPath)
	if err != nil {
		t.Fatal(err)
	}
	rie := map[string]*testenv.RIE{}
	for _, f := range []app.Function{app.RealtimeJob, app.FanoutJob} {
		bin := testenv.BuildFunction(t, "./"+f.Dir)
		if err := os.WriteFile(filepath.Join(filepath.Dir(bin), "schema.json"), schemaJSON, 0o644); err != nil {
			t.Fatal(err)
		}
		rie[f.Name] = testenv.LambdaRIE(t, bin, env)
	}
	invoke := func(fn string, ev any) []byte {
		t.Helper()
		out, err := rie[fn].Invoke(ctx, apptest.MustJSON(t, ev))
		if err != nil || strings.Contains(string(out), "errorMessage") {
			t.Fatalf("%s: %v %s\n%s", fn, err, out, rie[fn].Logs())
		}
		return out
	}
	route := func(routeKey, connID string, query map[string]string, body string) events.APIGatewayProxyResponse {
		t.Helper()
		ev := events.APIGatewayWebsocketProxyRequest{
			QueryStringParameters: query, Body: body,
			RequestContext: events.APIGatewayWebsocketProxyRequestContext{
				RouteKey: routeKey, ConnectionID: connID, EventType: map[string]string{"$connect": "CONNECT", "$disconnect": "DISCONNECT"}[routeKey],
				RequestID: "rt-" + connID, Stage: "realtime", DomainName: "example.execute-api.us-east-1.amazonaws.com",
			},
		}
		if ev.RequestContext.EventType == "" {
			ev.RequestContext.EventType = "MESSAGE"
		}
		var resp events.APIGatewayProxyResponse
		if out := invoke("realtime", ev); json.Unmarshal(out, &resp) != nil || resp.StatusCode == 0 {
			t.Fatalf("realtime %s: not a proxy response: %s", routeKey, out)
		}
		return resp
	}
	item := func(pk, sk string) map[string]types.AttributeValue {
		t.Helper()
		out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: dynamostore.Key(pk, sk), ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		return out.Item
	}

	// Push and pull in process over the same table.
	cfg := localEnvConfig(t, env, nil)
	st := dynamostore.New(db, table, dynamostore.Options{})
	deps := app.Deps{Schema: todo(t), Store: st, Segments: memstore.NewSegments(), Blobs: memblobs.New(memblobs.Options{})}
	hs := map[string]*lambdahttp.Handler{}
	for _, f := range []app.Function{app.Push, app.Pull} {
		if hs[f.Name], err = app.Build(cfg, f, deps); err != nil {
			t.Fatal(err)
		}
	}
	d := &apptest.Deployment{Schema: deps.Schema, Invoke: func(t testing.TB, fn string, ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
		out, err := hs[fn].Invoke(ctx, apptest.MustJSON(t, ev))
		if err != nil {
			t.Fatal(err)
		}
		var resp events.APIGatewayV2HTTPResponse
		if err := json.Unmarshal(out, &resp); err != nil {
			t.Fatal(err)
		}
		return resp
	}}
	token := func(actor string) string {
		tok, err := auth.MintHS256([]byte(env["SYNC_HS256_SECRET"]), auth.Claims{"sub": actor, "syncular_scopes": map[string][]string{"project_id": {"p1"}}}, time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	writerTok, readerTok := token("alice"), token("bob")
	epoch := d.Epoch(t, "push", "/sync", writerTok, "writer")
	d.Push(t, writerTok, "writer", epoch, wire.PushCommit{ClientCommitID: "w0", Operations: []wire.Operation{apptest.Upsert("projects", "p1", 0, d.Project(t, "p1"))}})
	sub := wire.Subscription{ID: "s", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1}
	if sec := d.Pull(t, readerTok, "reader", epoch, wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows}, sub); sec.Start.Status != wire.SubActive {
		t.Fatalf("reader pull: %+v", sec.Start)
	}

	// $connect: a bad token is refused and registers nothing.
	if resp := route("$connect", "conn-bad", map[string]string{"token": token("bob") + "x", "clientId": "reader"}, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("$connect with a bad signature: HTTP %d %s, want 401", resp.StatusCode, resp.Body)
	}
	if resp := route("$connect", "conn-none", map[string]string{"clientId": "reader"}, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("$connect without a token: HTTP %d %s, want 401", resp.StatusCode, resp.Body)
	}
	if item("RTC#conn-bad", "C") != nil || item("RTC#conn-none", "C") != nil {
		t.Fatal("a refused $connect wrote a connection item")
	}
	// A valid token in the query string (what browsers send).
	if resp := route("$connect", "conn-reader", map[string]string{"token": readerTok, "clientId": "reader"}, ""); resp.StatusCode != 200 {
		t.Fatalf("$connect: HTTP %d %s", resp.StatusCode, resp.Body)
	}
	conn := item("RTC#conn-reader", "C")
	if conn == nil {
		t.Fatal("$connect wrote no connection item")
	}
	part := conn["part"].(*types.AttributeValueMemberS).Value
	if c, _ := conn["client"].(*types.AttributeValueMemberS); c == nil || c.Value != "reader" {
		t.Fatalf("connection item client = %v, want reader", conn["client"])
	}
	// The todo schema's tasks scope pattern is project:{project_id}.
	if keys, _ := conn["keys"].(*types.AttributeValueMemberL); keys == nil || len(keys.Value) != 1 ||
		keys.Value[0].(*types.AttributeValueMemberS).Value != "project:p1" {
		t.Fatalf("connection scope keys %v, want [project:p1]", conn["keys"])
	}
	indexPK := dynamostore.PartitionPK(part) + "#RK#project:p1"
	if item(indexPK, "conn-reader") == nil {
		t.Fatal("no scope-key index entry for the connection's registration")
	}

	// The stream: the connection item's INSERT, then the commit's.
	rec := func(pk, sk string) events.DynamoDBEventRecord {
		return events.DynamoDBEventRecord{
			EventName: "INSERT", EventSource: "aws:dynamodb", AWSRegion: testenv.Region, EventVersion: "1.1",
			Change: events.DynamoDBStreamRecord{
				Keys:           map[string]events.DynamoDBAttributeValue{"pk": events.NewStringAttribute(pk), "sk": events.NewStringAttribute(sk)},
				StreamViewType: "KEYS_ONLY",
			},
		}
	}
	invoke("fanout", events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{rec("RTC#conn-reader", "C")}})
	got := mgmt.of("conn-reader")
	if len(got) != 1 {
		t.Fatalf("want one hello, got %q (rejected: %q)\n%s", got, mgmt.bad, rie["fanout"].Logs())
	}
	if m, err := realtime.Parse(got[0]); err != nil {
		t.Fatalf("hello: %v %s", err, got[0])
	} else if h, ok := m.(*realtime.Hello); !ok || h.SessionID != "conn-reader" || h.ClientID != "reader" {
		t.Fatalf("hello: %s", got[0])
	}

	d.Push(t, writerTok, "writer", epoch, wire.PushCommit{ClientCommitID: "w1", Operations: []wire.Operation{apptest.Upsert("tasks", "t1", 0, d.Task(t, "t1", "p1", "first"))}})
	head, _, err := st.Head(ctx, part)
	if err != nil {
		t.Fatal(err)
	}
	commit := events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{rec(dynamostore.PartitionPK(part)+"#L", fmt.Sprintf("%020d", head.MaxCommitSeq))}}
	invoke("fanout", commit)
	got = mgmt.of("conn-reader")
	if len(got) != 2 {
		t.Fatalf("want hello + delta, got %d messages (rejected: %q)\n%s", len(got), mgmt.bad, rie["fanout"].Logs())
	}
	if got[1][0] != realtime.TagDelta {
		t.Fatalf("not a 0x00 delta: %q", got[1])
	}
	m, err := wire.Decode(got[1][1:])
	if err != nil {
		t.Fatal(err)
	}
	secs, err := enginetest.ParseSections(m)
	if err != nil || len(secs) != 1 || len(secs[0].Commits) != 1 || len(secs[0].Commits[0].Changes) != 1 || secs[0].Commits[0].Changes[0].RowID != "t1" {
		t.Fatalf("delta: %v %+v", err, secs)
	}
	if secs[0].End.NextCursor != head.MaxCommitSeq {
		t.Errorf("delta next cursor %d, want %d", secs[0].End.NextCursor, head.MaxCommitSeq)
	}
	// Lambda retries a failed batch: the replay posts nothing again.
	invoke("fanout", commit)
	if got := mgmt.of("conn-reader"); len(got) != 2 {
		t.Fatalf("a replayed stream batch posted again: %d messages", len(got))
	}

	// The heartbeat schedule's event (template.yaml Heartbeat input): a
	// §8.5 heartbeat to the registered connection.
	invoke("fanout", app.HeartbeatEvent{Heartbeat: true})
	if got := mgmt.of("conn-reader"); len(got) != 3 {
		t.Fatalf("heartbeat event: want a third message, got %d\n%s", len(got), rie["fanout"].Logs())
	} else if hb, err := realtime.Parse(got[2]); err != nil {
		t.Fatalf("heartbeat: %s (%v)", got[2], err)
	} else if _, ok := hb.(*realtime.Heartbeat); !ok {
		t.Fatalf("not a heartbeat: %s", got[2])
	}

	// $default: an ack persists the client's cursor.
	if resp := route("$default", "conn-reader", nil, string(realtime.EncodeAck(head.MaxCommitSeq))); resp.StatusCode != 200 {
		t.Fatalf("$default ack: HTTP %d %s", resp.StatusCode, resp.Body)
	}
	if c, err := st.GetClient(ctx, part, "reader"); err != nil || c == nil || c.Cursor != head.MaxCommitSeq {
		t.Fatalf("after the ack: client %+v (%v), want cursor %d", c, err, head.MaxCommitSeq)
	}

	// $disconnect deletes the connection and its index entry.
	if resp := route("$disconnect", "conn-reader", nil, ""); resp.StatusCode != 200 {
		t.Fatalf("$disconnect: HTTP %d %s", resp.StatusCode, resp.Body)
	}
	if item("RTC#conn-reader", "C") != nil || item(indexPK, "conn-reader") != nil {
		t.Fatal("$disconnect left the connection's items")
	}
	if len(mgmt.bad) != 0 {
		t.Errorf("management API requests not shaped like signed PostToConnection: %q", mgmt.bad)
	}
}
