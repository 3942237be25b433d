package rtaws_test

import (
	"context"
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/realtime"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
)

// §8.6 on AWS, over DynamoDB Local and the local management API: a
// publish on a registered scope key reaches exactly the other connections
// registered on it (join, then update; never the publisher, never a
// connection on another key); an unregistered key is presence.forbidden
// and a document over the cap presence.too_large, both to the publisher
// only; a connection arriving later gets the present documents as joins
// after its hello; doc null and $disconnect leave; a gone scope-mate is
// dropped with its items.
func TestPresence(t *testing.T) {
	e := newEnv(t)
	e.svc.MaxPresenceBytes = 64
	ctx := context.Background()
	e.synced(t, "actor-a", "writer", "p1")
	e.synced(t, "actor-b", "reader", "p1")
	e.synced(t, "actor-d", "other", "p2")
	e.synced(t, "actor-b", "late", "p1")
	e.connect(t, "c-a", "actor-a", "writer")
	e.connect(t, "c-b", "actor-b", "reader")
	e.connect(t, "c-d", "actor-d", "other")
	e.pollUntil(t, "three hellos", e.posted(1, "c-a", "c-b", "c-d"))

	send := func(id, body string) {
		t.Helper()
		if err := e.svc.Message(ctx, id, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	// last parses the n-th message (from 0) of a connection; it must exist.
	msg := func(id string, n int) any {
		t.Helper()
		got := e.mgmt.of(id)
		if len(got) <= n {
			t.Fatalf("%s: %d messages, want message %d", id, len(got), n)
		}
		m, err := realtime.Parse(got[n])
		if err != nil {
			t.Fatalf("%s message %d: %v (%s)", id, n, err, got[n])
		}
		return m
	}
	count := func(id string, want int) {
		t.Helper()
		if got := len(e.mgmt.of(id)); got != want {
			t.Fatalf("%s: %d messages, want %d: %q", id, got, want, e.mgmt.of(id))
		}
	}
	fanout := func(id string, n int, kind, actor, client, doc string) {
		t.Helper()
		p, ok := msg(id, n).(*realtime.PresenceFanout)
		if !ok || p.Kind != kind || p.ScopeKey != "project:p1" || p.ActorID != actor || p.ClientID != client || string(p.Doc) != doc {
			t.Fatalf("%s message %d: want %s of %s/%s doc %s, got %s", id, n, kind, actor, client, doc, e.mgmt.of(id)[n])
		}
	}
	presErr := func(id string, n int, code string) {
		t.Helper()
		if p, ok := msg(id, n).(*realtime.PresenceError); !ok || p.Error != code || p.ScopeKey != "project:p1" {
			t.Fatalf("%s message %d: want %s, got %s", id, n, code, e.mgmt.of(id)[n])
		}
	}

	send("c-a", `{"event":"presence","data":{"scopeKey":"project:p1","doc":{"cursor":1}}}`)
	fanout("c-b", 1, realtime.KindJoin, "actor-a", "writer", `{"cursor":1}`)
	send("c-a", `{"event":"presence","data":{"scopeKey":"project:p1","doc":{"cursor":2}}}`)
	fanout("c-b", 2, realtime.KindUpdate, "actor-a", "writer", `{"cursor":2}`)
	count("c-a", 1) // the publisher hears nothing of its own
	count("c-d", 1) // registered on project:p2 only

	// Not registered on the key: forbidden, to the publisher only.
	send("c-d", `{"event":"presence","data":{"scopeKey":"project:p1","doc":{"x":1}}}`)
	presErr("c-d", 1, realtime.PresenceForbidden)
	// Over the cap: too large, nothing stored or fanned.
	send("c-b", `{"event":"presence","data":{"scopeKey":"project:p1","doc":{"x":"`+strings.Repeat("y", 80)+`"}}}`)
	presErr("c-b", 3, realtime.PresenceTooLarge)
	count("c-a", 1)
	if e.exists(t, dynamostore.PartitionPK("part")+"#PR#project:p1", "c-b") {
		t.Fatal("an oversize document was stored")
	}

	// A later connection: hello, then the documents present (§8.6.3).
	e.connect(t, "c-late", "actor-b", "late")
	e.pollUntil(t, "hello and join burst", e.posted(2, "c-late"))
	if _, ok := msg("c-late", 0).(*realtime.Hello); !ok {
		t.Fatalf("c-late: first message is not hello: %s", e.mgmt.of("c-late")[0])
	}
	fanout("c-late", 1, realtime.KindJoin, "actor-a", "writer", `{"cursor":2}`)
	count("c-late", 2)

	// doc null leaves; a new publish joins again.
	send("c-a", `{"event":"presence","data":{"scopeKey":"project:p1","doc":null}}`)
	fanout("c-b", 4, realtime.KindLeave, "actor-a", "writer", "")
	fanout("c-late", 2, realtime.KindLeave, "actor-a", "writer", "")
	send("c-a", `{"event":"presence","data":{"scopeKey":"project:p1","doc":{"cursor":3}}}`)
	fanout("c-b", 5, realtime.KindJoin, "actor-a", "writer", `{"cursor":3}`)

	// A gone scope-mate is dropped when a presence post finds it gone.
	e.mgmt.mu.Lock()
	e.mgmt.gone["c-late"] = true
	e.mgmt.mu.Unlock()
	send("c-b", `{"event":"presence","data":{"scopeKey":"project:p1","doc":{"me":"b"}}}`)
	fanout("c-a", 1, realtime.KindJoin, "actor-b", "reader", `{"me":"b"}`)
	if e.exists(t, "RTC#c-late", "C") || e.exists(t, dynamostore.PartitionPK("part")+"#RK#project:p1", "c-late") {
		t.Fatal("a gone connection survived a presence fanout")
	}

	// $disconnect: the documents leave, to the remaining scope-mates.
	if err := e.svc.Disconnect(ctx, "c-a"); err != nil {
		t.Fatal(err)
	}
	fanout("c-b", 6, realtime.KindLeave, "actor-a", "writer", "")
	if e.exists(t, dynamostore.PartitionPK("part")+"#PR#project:p1", "c-a") || e.exists(t, "RTC#c-a", "C") {
		t.Fatal("a disconnected connection's items survived")
	}
	count("c-b", 7)
	count("c-d", 2)
}
