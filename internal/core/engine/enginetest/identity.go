package enginetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// gatedClients holds every GetClient of one clientId until n callers
// have read it (or a timeout passes), so n requests all see "no record"
// and race the first write of the binding: the window a check-then-write
// binding leaves open.
type gatedClients struct {
	store.Store
	clientID string
	mu       sync.Mutex
	waiting  int
	n        int
	open     chan struct{}
}

func (g *gatedClients) GetClient(ctx context.Context, partition, clientID string) (*store.Client, error) {
	c, err := g.Store.GetClient(ctx, partition, clientID)
	if clientID != g.clientID {
		return c, err
	}
	g.mu.Lock()
	g.waiting++
	if g.waiting == g.n {
		close(g.open)
	}
	g.mu.Unlock()
	select {
	case <-g.open:
	case <-time.After(5 * time.Second):
	}
	return c, err
}

// RunBindRace has n actors (each on its own engine instance, like n
// Lambda instances) send the first push of one clientId at the same time
// (§1.5). Exactly one actor's commit applies; every other actor is
// refused with sync.invalid_client_id and receives no result at all — in
// particular never the winner's outcome as "cached" for a commit of its
// own that was never applied. st must not hold the partition yet.
func RunBindRace(t *testing.T, st store.Store, segs store.SegmentStore, n int) {
	t.Helper()
	const partition, clientID = "race-tenant", "shared-device"
	g := &gatedClients{Store: st, clientID: clientID, n: n, open: make(chan struct{})}
	clients := make([]*Client, n)
	for i := range n {
		h := New(t, g, segs, Options{})
		actor := fmt.Sprintf("actor-%d", i)
		h.Grants.Set(actor, engine.ScopeMap{"project_id": {"p1"}})
		clients[i] = h.Client(partition, actor, clientID)
	}
	type outcome struct {
		res *wire.PushResult
		err error
	}
	out := make([]outcome, n)
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			row := fmt.Sprintf("t-%d", i)
			resp, err := c.Send(c.Request([]wire.PushCommit{Commit("c1", Upsert("tasks", row, c.Task(row, "p1", "mine", false), 0))}, nil, nil))
			if err != nil {
				out[i].err = err
				return
			}
			for _, f := range resp.Frames {
				switch f := f.(type) {
				case *wire.PushResult:
					out[i].res = f
				case *wire.ErrorFrame:
					out[i].err = syncerr.New(syncerr.Code(f.Code), "%s", f.Message)
				}
			}
		}()
	}
	wg.Wait()
	winner := -1
	for i, o := range out {
		switch {
		case o.err == nil && o.res != nil && o.res.Status == wire.PushApplied:
			if winner >= 0 {
				t.Fatalf("actors %d and %d both pushed under one clientId", winner, i)
			}
			winner = i
		case ErrCode(o.err) == syncerr.InvalidClientID:
		default:
			t.Fatalf("actor %d: result %+v, error %v; want applied (one winner) or sync.invalid_client_id", i, o.res, o.err)
		}
	}
	if winner < 0 {
		t.Fatal("no actor's push applied")
	}
	rows := 0
	err := st.ScanRows(context.Background(), partition, "tasks", "", false, func(r *store.Row) bool {
		rows++
		if r.RowID != fmt.Sprintf("t-%d", winner) {
			t.Errorf("row %s stored; only the winner's row may be", r.RowID)
		}
		return true
	})
	if err != nil || rows != 1 {
		t.Fatalf("%d rows stored (%v); want the winner's one", rows, err)
	}
	c, err := st.GetClient(context.Background(), partition, clientID)
	if err != nil || c == nil || c.ActorID != fmt.Sprintf("actor-%d", winner) {
		t.Fatalf("client record %+v (%v): want bound to the winner actor-%d", c, err, winner)
	}
}
