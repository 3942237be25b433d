package dynamostore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/httpapi"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/memstore"
	"github.com/skyfold/syncular-lambda/internal/metrics"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// Issue 20 item 7: group commits are visible on the push function's
// request lines as EMF metrics. 16 writers on one partition, each its
// own engine and handler (a Lambda instance) over DynamoDB Local with
// 8 ms added to every request (so the queue forms as on a real table),
// write the lines the functions write at info. Summed over the lines,
// the commits landed in another push's transaction (grouped) are the
// commits the holders carried (carried), which are the store's own count
// of group members; every such line declares its counters in its EMF
// directive. (An uncontended push's line has none of them and keeps its
// size, TestRequestLinesKeepAlarmMetrics in internal/costmodel.)
func TestGroupCommitMetrics(t *testing.T) {
	ddb := testenv.DynamoDB(t)
	c := ddbClient(t)
	gc := &groupCounter{Store: dynamostore.New(ddb.SlowClient(t, 8*time.Millisecond), newTable(t, c), dynamostore.Options{})}
	const writers, each = 16, 4
	segs := memstore.NewSegments()
	logs := make([]*bytes.Buffer, writers)
	var wg sync.WaitGroup
	for i := range writers {
		h := enginetest.New(t, gc, segs, enginetest.Options{})
		h.Grants.Set("alice", engine.ScopeMap{"project_id": {"p1"}})
		cl := h.Client("q", "alice", fmt.Sprintf("w%02d", i))
		logs[i] = &bytes.Buffer{}
		api := &httpapi.Handler{
			Engine: h.Engine, Mount: "/api", Routes: httpapi.RouteAll, MaxBodyBytes: 1 << 20,
			Logger: slog.New(metrics.NewJSONHandler(logs[i], nil)).With("function", "push"),
			Line:   (&metrics.EMF{Namespace: "Syncular", Fixed: map[string]string{metrics.DimFunction: "push"}}).RequestLine,
		}
		wg.Go(func() {
			for n := range each {
				cc := fmt.Sprintf("w%02d-%d", i, n)
				body, err := wire.Encode(cl.Request([]wire.PushCommit{{ClientCommitID: cc, Operations: []wire.Operation{
					enginetest.Upsert("tasks", cc, cl.Task(cc, "p1", cc, false), 0)}}}, nil, nil))
				if err != nil {
					t.Error(err)
					return
				}
				r := api.Serve(context.Background(), &httpapi.Request{
					Method: "POST", Path: "/api/sync", Header: http.Header{"Content-Type": {httpapi.ContentType}}, Body: body,
					Auth: &engine.Auth{Partition: "q", ActorID: "alice"}, BaseURL: "https://sync.example.com",
				})
				if r.Status != 200 {
					t.Errorf("push %s: HTTP %d", cc, r.Status)
					return
				}
			}
		})
	}
	wg.Wait()

	names := []string{"carried", "leftOut", "grouped"}
	sum := map[string]float64{}
	lines, longest := 0, 0
	for _, b := range logs {
		for line := range bytes.Lines(b.Bytes()) {
			line = bytes.TrimSpace(line)
			var m map[string]any
			if err := json.Unmarshal(line, &m); err != nil {
				t.Fatalf("%v: %s", err, line)
			}
			lines++
			var declared []string
			if aws, ok := m["_aws"].(map[string]any); ok {
				for _, d := range aws["CloudWatchMetrics"].([]any) {
					for _, mm := range d.(map[string]any)["Metrics"].([]any) {
						declared = append(declared, mm.(map[string]any)["Name"].(string))
					}
				}
			}
			present := false
			for _, n := range names {
				v, ok := m[n].(float64)
				if !ok {
					continue
				}
				present = true
				sum[n] += v
				if !slices.Contains(declared, n) {
					t.Errorf("line has %s but its directive declares only %v: %s", n, declared, line)
				}
			}
			if present {
				longest = max(longest, len(line))
			}
		}
	}
	t.Logf("%d request lines: %v, the longest with a group counter %d bytes; the store landed %d groups carrying %d commits",
		lines, sum, longest, gc.groups.Load(), gc.members.Load())
	if lines != writers*each {
		t.Errorf("%d request lines, want %d", lines, writers*each)
	}
	if gc.members.Load() == 0 {
		t.Fatal("no commit landed in a group")
	}
	if sum["carried"] != float64(gc.members.Load()) {
		t.Errorf("lines say %v commits carried, the store landed %d members", sum["carried"], gc.members.Load())
	}
	if sum["grouped"] != sum["carried"] {
		t.Errorf("lines say %v commits grouped by another push, %v carried", sum["grouped"], sum["carried"])
	}
}
