package app_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/app/apptest"
	"github.com/skyfold/syncular-lambda/internal/auth"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// grantStore answers the table resolver's grant read with one grant for
// every actor, or fails like an unreachable table.
type grantStore struct{ down atomic.Bool }

func (g *grantStore) GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if g.down.Load() {
		return nil, errors.New("dial tcp: connection refused")
	}
	return &dynamodb.GetItemOutput{Item: map[string]types.AttributeValue{
		auth.GrantScopesAttr: &types.AttributeValueMemberS{Value: `{"project_id":["p1"]}`},
	}}, nil
}

// SYNC_AUTH_LEASES=on through the functions (§7.3): a table-mode push
// returns a LEASE frame; while the grant read fails, a pull is served
// from the lease and its request line counts leaseServed as a metric.
func TestAuthLeasesThroughTheFunctions(t *testing.T) {
	cfg := localConfig(t, map[string]string{"SYNC_SIGNED_URLS": "off", "SYNC_SCOPES_MODE": "table", "SYNC_AUTH_LEASES": "on"})
	sch := todoSchema(t)
	grants := &grantStore{}
	d, logs := loggedDeployment(t, cfg, app.Deps{Schema: sch, Store: memstore.New(), Segments: memstore.NewSegments(), Grants: grants, PKAttr: "pk", SKAttr: "sk"})
	tok, err := auth.MintHS256(secret, auth.Claims{"sub": "alice"}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	epoch := d.Epoch(t, "push", "/sync", tok, "c1")
	push := func(id string) *wire.Message {
		return d.Sync(t, "push", "/push", tok, apptest.Request(t, wire.Version2, wire.ReqHeader{ClientID: "c1", SchemaVersion: sch.Latest, LogEpoch: wire.Some(epoch)},
			&wire.PushCommit{ClientCommitID: id, Operations: []wire.Operation{apptest.Upsert("tasks", id, 0, d.Task(t, id, "p1", id))}}))
	}
	m := push("t1")
	if l := apptest.Find[*wire.Lease](m); len(l) != 1 || l[0].LeaseID == "" {
		t.Fatalf("a live-authorized push carries one LEASE frame, got %+v", m.Frames)
	}

	grants.down.Store(true)
	sub := wire.Subscription{ID: "s", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1}
	if s := d.Pull(t, tok, "c1", epoch, wire.PullHeader{Accept: wire.AcceptInlineRows}, sub); s.Start.Status != wire.SubActive {
		t.Fatalf("lease-served pull: %+v", s.Start)
	}
	// Another client of the actor holds no lease: 401 sync.auth_lease_required.
	resp := d.Call(t, "push", "/push", tok, apptest.Request(t, wire.Version2, wire.ReqHeader{ClientID: "c2", SchemaVersion: sch.Latest, LogEpoch: wire.Some(epoch)},
		&wire.PushCommit{ClientCommitID: "x", Operations: []wire.Operation{apptest.Upsert("tasks", "x", 0, d.Task(t, "x", "p1", "x"))}}), nil)
	if b := apptest.Body(t, &resp); resp.StatusCode != 401 || apptest.ErrorCode(b) != "sync.auth_lease_required" {
		t.Fatalf("push without a lease during the outage: HTTP %d %s", resp.StatusCode, b)
	}

	lines := requestLines(t, logs["pull"].Bytes())
	if len(lines) != 1 {
		t.Fatalf("%d pull request lines, want 1", len(lines))
	}
	if n, ok := lines[0].Number("leaseServed"); !ok || n != 1 || !slices.Contains(lines[0].Declared(), "leaseServed") {
		t.Fatalf("lease-served pull line: leaseServed = %v (%t), declared %v", n, ok, lines[0].Declared())
	}
	for _, l := range requestLines(t, logs["push"].Bytes()) {
		if _, ok := l["leaseServed"]; ok {
			t.Fatalf("a push line not served from a lease carries leaseServed: %v", l)
		}
	}
}
