package engine_test

import (
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// Issue 9 item 1, with version-2 clients only (the wire version the
// server spoke when the hole was found): a push in an older served schema
// version whose table declares fewer scope patterns is authorized by the
// latest version's patterns — cross-scope update, delete and insert are
// forbidden, and the owner scope column cannot be re-homed.
func TestOlderSchemaVersionCannotBypassScopes(t *testing.T) {
	h := newHarness(t, enginetest.Options{Schema: enginetest.ScopedTasksV2, OlderSchemas: []string{enginetest.ScopedTasksV1}})
	h.Grants.Set("alice", engine.ScopeMap{"project_id": {"p1"}, "owner_id": {"alice"}})
	h.Grants.Set("mallory", engine.ScopeMap{"project_id": {"p1"}, "owner_id": {"mallory"}})
	alice := h.Client("tenant", "alice", "alice-1")
	alice.Schema = 2
	m := h.Client("tenant", "mallory", "m-1")
	m.Schema = 1
	row := func(c *enginetest.Client, id, owner, title string) []byte {
		return c.Row("tasks", enginetest.Cols{"id": enginetest.S(id), "project_id": enginetest.S("p1"), "owner_id": enginetest.S(owner), "title": enginetest.S(title)})
	}
	wantApplied(t, alice.Push("a1", up("tasks", "t1", row(alice, "t1", "alice", "private"), -1)))
	wantRejected(t, m.Push("upd", up("tasks", "t1", row(m, "t1", "alice", "defaced"), -1)), 0, wire.OpError, syncerr.Forbidden)
	wantRejected(t, m.Push("del", del("tasks", "t1")), 0, wire.OpError, syncerr.Forbidden)
	wantRejected(t, m.Push("ins", up("tasks", "t2", row(m, "t2", "alice", "planted"), -1)), 0, wire.OpError, syncerr.Forbidden)
	wantApplied(t, m.Push("own", up("tasks", "m1", row(m, "m1", "mallory", "mine"), -1)))
	wantApplied(t, m.Push("rehome", up("tasks", "m1", row(m, "m1", "alice", "mine"), -1)))
	if s := h.StoredRow("tenant", "tasks", "m1"); s.Values["owner_id"].Str != "mallory" {
		t.Fatalf("the older client re-homed its row: owner %q, scopes %+v", s.Values["owner_id"].Str, s.Scopes)
	}
	if s := h.StoredRow("tenant", "tasks", "t1"); s.Version != 1 || s.Values["title"].Str != "private" {
		t.Fatalf("alice's row changed: %+v", s.Values)
	}
	if s := h.StoredRow("tenant", "tasks", "t2"); s != nil {
		t.Fatal("the cross-scope insert was stored")
	}
}

// Issue 9 item 6 and the CRDT parity point, with version-2 clients: a
// blob reference is refused with blob.not_found (no blob storage exists),
// and a CRDT value aimed at a scope the actor lacks is sync.forbidden.
func TestBlobRefAndCRDTAuthorizationOrder(t *testing.T) {
	h := newHarness(t, enginetest.Options{Schema: enginetest.PushRulesSchema})
	h.Grants.Set("alice", projects("p1"))
	h.Grants.Set("mallory", projects("p9"))
	a := h.Client("tenant", "alice", "a")
	m := h.Client("tenant", "mallory", "m")
	S := enginetest.S
	blob := S(`{"blobId":"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","byteLength":5}`)
	wantRejected(t, a.Push("blob", up("attachments", "f1", a.Row("attachments", enginetest.Cols{"id": S("f1"), "project_id": S("p1"), "file": blob}), -1)), 0, wire.OpError, syncerr.BlobNotFound)
	if s := h.StoredRow("tenant", "attachments", "f1"); s != nil {
		t.Fatal("a dangling blob reference was stored")
	}
	wantApplied(t, a.Push("n1", up("notes", "n1", a.Row("notes", enginetest.Cols{"id": S("n1"), "project_id": S("p1"), "title": S("t")}), -1)))
	doc := enginetest.Cols{"id": S("n1"), "project_id": S("p1"), "title": S("x")}
	doc["doc"] = enginetest.Bytes([]byte{1})
	wantRejected(t, m.Push("crdt", up("notes", "n1", m.Row("notes", doc), -1)), 0, wire.OpError, syncerr.Forbidden)
	wantRejected(t, a.Push("crdt-own", up("notes", "n1", a.Row("notes", doc), -1)), 0, wire.OpError, syncerr.CrdtMergeFailed)
}
