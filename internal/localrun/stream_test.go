package localrun

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/app/apptest"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/realtime"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// -dynamodb-endpoint -create: the runner enables the table's stream and
// its realtime fanout reads it through rtfanout.Poller, as the deployed
// fanout function does, instead of taking commits in-process. Two runners
// on one table stand for two Lambda instances: a commit pushed through
// one reaches a socket held by the other (§8.2), and a commit pushed
// through the socket's own runner arrives once, not once per path.
func TestRealtimeFanoutFromTableStream(t *testing.T) {
	ddb := testenv.DynamoDB(t)
	o := testOptions()
	o.dynamoEndpoint, o.create = ddb.Endpoint, true
	o.table = testenv.UniqueName(t, "rtstream")
	a, rnA := newRTRigOpts(t, o)
	o.create = false // the second instance finds the stream enabled
	b, rnB := newRTRigOpts(t, o)
	for _, rn := range []*runner{rnA, rnB} {
		if rn.poller == nil || !strings.Contains(rn.backend, "realtime fanout from the table stream") {
			t.Fatalf("runner over DynamoDB Local without stream fanout: %q", rn.backend)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go rnA.runFanout(ctx)
	go rnB.runFanout(ctx)

	wtok, rtok := a.token("writer"), a.token("reader")
	wepoch := b.d.Epoch(t, "push", "/sync", wtok, "w1")
	repoch := a.d.Epoch(t, "pull", "/pull", rtok, "r1")
	a.d.Pull(t, rtok, "r1", repoch, wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows}, tasksSub())
	ws, _, err := a.dial(rtok, "r1")
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	if _, hb := read(t, ws); func() bool { m, _ := realtime.Parse(hb); _, ok := m.(*realtime.Hello); return !ok }() {
		t.Fatalf("first message is not a hello: %s", hb)
	}
	delta := func() string {
		t.Helper()
		d := nextBinary(t, ws)
		if d[0] != realtime.TagDelta {
			t.Fatalf("want a 0x00 delta, got tag 0x%02x: %s", d[0], d[1:])
		}
		m, err := wire.Decode(d[1:])
		if err != nil {
			t.Fatal(err)
		}
		secs, err := enginetest.ParseSections(m)
		if err != nil || len(secs) != 1 || len(secs[0].Commits) != 1 {
			t.Fatalf("delta: %v %+v", err, secs)
		}
		return secs[0].Commits[0].Changes[0].RowID
	}
	push := func(r *rtRig, id string) {
		r.d.Push(t, wtok, "w1", wepoch, wire.PushCommit{ClientCommitID: id, Operations: []wire.Operation{apptest.Upsert("tasks", id, -1, r.d.Task(t, id, "p1", id))}})
	}
	for i, via := range []*rtRig{b, a, b} {
		id := "t" + string(rune('1'+i))
		start := time.Now()
		push(via, id)
		if got := delta(); got != id {
			t.Fatalf("delta %d: row %s, want %s (a commit delivered twice or out of order)", i+1, got, id)
		}
		t.Logf("push through runner %c → delta on runner A's socket via the stream: %v", "BAB"[i], time.Since(start).Round(time.Millisecond))
	}
}
