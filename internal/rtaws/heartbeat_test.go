package rtaws_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	awsmw "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"

	"github.com/skyfold/syncular-lambda/internal/core/realtime"
)

// opRecorder records the DynamoDB operations a client sends.
type opRecorder struct {
	mu  sync.Mutex
	ops map[string]int
}

func (r *opRecorder) client(db *dynamodb.Client) *dynamodb.Client {
	return dynamodb.New(db.Options(), func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
			return st.Initialize.Add(middleware.InitializeMiddlewareFunc("opRecorder", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				r.mu.Lock()
				r.ops[awsmw.GetOperationName(ctx)]++
				r.mu.Unlock()
				return next.HandleInitialize(ctx, in)
			}), middleware.After)
		})
	})
}

// §8.5 on AWS: a heartbeat pass posts one heartbeat message to every live
// connection (found through the connection registry, never a table
// Scan), spread over more connections than the posts in flight; a
// connection that answers GoneException is deleted with its registry
// entry, and the next pass no longer reaches it.
func TestHeartbeatReachesEveryConnection(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	var ids []string
	for i := range 40 {
		client := "hb-" + strconv.Itoa(i)
		e.synced(t, "actor-b", client, "p1")
		id := "c-" + client
		e.connect(t, id, "actor-b", client)
		ids = append(ids, id)
	}
	// A connection without index entries (no registrations) is registered too.
	e.connect(t, "c-bare", "actor-b", "never-pulled")
	ids = append(ids, "c-bare")
	gone := ids[7]
	e.mgmt.mu.Lock()
	e.mgmt.gone[gone] = true
	e.mgmt.mu.Unlock()

	rec := &opRecorder{ops: map[string]int{}}
	e.svc.DB = rec.client(e.db)
	now := e.h.Engine.Now()
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := e.svc.Heartbeat(dctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != len(ids)-1 || res.Gone != 1 || res.Failed != 0 || res.Stopped {
		t.Fatalf("pass: %+v, want %d sent, 1 gone", res, len(ids)-1)
	}
	for _, id := range ids {
		if id == gone {
			continue
		}
		got := e.mgmt.of(id)
		if len(got) != 1 {
			t.Fatalf("%s: want one heartbeat, got %q", id, got)
		}
		m, err := realtime.Parse(got[0])
		hb, ok := m.(*realtime.Heartbeat)
		if err != nil || !ok || hb.Timestamp != now {
			t.Fatalf("%s: not a §8.5 heartbeat: %s (%v)", id, got[0], err)
		}
	}
	if e.exists(t, "RTC#"+gone, "C") {
		t.Fatal("gone connection item still present")
	}
	rec.mu.Lock()
	if rec.ops["Scan"] != 0 || rec.ops["Query"] == 0 {
		t.Errorf("operations %v: want Queries and no Scan", rec.ops)
	}
	rec.mu.Unlock()

	res, err = e.svc.Heartbeat(dctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != len(ids)-1 || res.Gone != 0 {
		t.Fatalf("second pass: %+v: the gone connection must be unregistered", res)
	}
	// $disconnect unregisters too.
	if err := e.svc.Disconnect(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if res, err = e.svc.Heartbeat(dctx, 4); err != nil || res.Sent != len(ids)-2 {
		t.Fatalf("after $disconnect: %+v %v", res, err)
	}
	if n := len(e.mgmt.of(ids[0])); n != 2 {
		t.Fatalf("disconnected connection got %d heartbeats, want 2", n)
	}
}

// A pass whose deadline is (nearly) reached stops before posting.
func TestHeartbeatStopsBeforeDeadline(t *testing.T) {
	e := newEnv(t)
	e.synced(t, "actor-b", "late", "p1")
	e.connect(t, "c-late", "actor-b", "late")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	res, err := e.svc.Heartbeat(ctx, 4)
	if err != nil || !res.Stopped || res.Sent != 0 || len(e.mgmt.of("c-late")) != 0 {
		t.Fatalf("pass with 1s left: %+v %v, want stopped before posting", res, err)
	}
}
