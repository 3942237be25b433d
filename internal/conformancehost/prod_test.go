package conformancehost_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/coder/websocket"

	"github.com/skyfold/syncular-lambda/internal/conformancehost"
	"github.com/skyfold/syncular-lambda/internal/core/blobs"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/realtime"
	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// newProdEnv is a host whose instances run on the production stores
// (dynamostore on DynamoDB Local, s3segments and s3blobs on an S3 API
// server, realtime fed from the table stream).
func newProdEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, conformancehost.Options{Prod: &conformancehost.Prod{Endpoint: testenv.DynamoDB(t).Endpoint}})
}

// forStores runs fn on the in-memory and on the production stores.
func forStores(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Run("memory", func(t *testing.T) { fn(t, newEnv(t)) })
	t.Run("dynamodb", func(t *testing.T) { fn(t, newProdEnv(t)) })
}

// conformanceTables counts the host's tables on DynamoDB Local.
func conformanceTables(t *testing.T, db *dynamodb.Client) int {
	t.Helper()
	n := 0
	p := dynamodb.NewListTablesPaginator(db, &dynamodb.ListTablesInput{})
	for p.HasMorePages() {
		page, err := p.NextPage(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range page.TableNames {
			if strings.HasPrefix(name, "conformance-") {
				n++
			}
		}
	}
	return n
}

// TestProductionStores drives one instance on the production stores
// through the calls the catalog makes: its own table (gone with the
// instance), push and pull, a bootstrap served as an S3 segment, a blob
// upload and download (direct and presigned), and a realtime socket that
// receives as a delta a commit another writer pushed over HTTP. On these
// stores the /sync engine has no in-process path to the hub, so the delta
// can only have come from the table's stream.
func TestProductionStores(t *testing.T) {
	e := newProdEnv(t)
	db := testenv.DynamoDB(t).Client(t)
	before := conformanceTables(t, db)
	start := time.Now()
	id := e.create(`, "limits": {"inlineSegmentMaxBytes": 0}`)
	t.Logf("instance created (table with stream, S3 server, bucket, engines, hint port): %v", time.Since(start).Round(time.Millisecond))
	if got := conformanceTables(t, db); got != before+1 {
		t.Fatalf("instance tables: %d, want %d", got, before+1)
	}
	e.call(id, "setAllowedScopes", nil, "writer", map[string][]string{"project_id": {"p1"}})
	e.call(id, "setAllowedScopes", nil, "reader", map[string][]string{"project_id": {"p1"}})
	w := e.client(id, "writer", "client-w")
	r := e.client(id, "reader", "client-r")

	if res := w.push("c1", upsert("n1", e.note("n1", "p1", "one", 1, nil))); res.Status != wire.PushApplied {
		t.Fatalf("push: %+v", res)
	}
	// Bootstrap as a segment (inlineSegmentMaxBytes 0), fetched by id.
	m := r.pull(sub("s", "p1", -1), wire.AcceptExternalRows)
	refs := frames[*wire.SegmentRef](m)
	if len(refs) != 1 {
		t.Fatalf("bootstrap: want one SEGMENT_REF, got %d", len(refs))
	}
	var br bytesResult
	e.call(id, "downloadSegment", &br, "reader", refs[0].SegmentID, `{"project_id":["p1"]}`)
	if seg := br.data(t); len(seg) == 0 {
		t.Fatal("empty segment")
	}
	secs, err := enginetest.ParseSections(m)
	if err != nil || len(secs) != 1 {
		t.Fatalf("bootstrap sections: %v %+v", err, secs)
	}
	cursor := secs[0].End.NextCursor

	testBlobsOnS3(t, e)

	// Realtime: the reader's socket gets the writer's HTTP commit.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	u := "ws" + strings.TrimPrefix(e.srv.URL, "http") + "/i/" + id + "/realtime?clientId=client-r&actor=reader"
	ws, _, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer ws.CloseNow()
	typ, b, err := ws.Read(ctx)
	if err != nil || typ != websocket.MessageText {
		t.Fatalf("hello: %v %v", typ, err)
	}
	if msg, err := realtime.Parse(b); err != nil {
		t.Fatalf("hello: %v", err)
	} else if h, isHello := msg.(*realtime.Hello); !isHello || h.Cursor != cursor {
		t.Fatalf("first message %s, want a hello at cursor %d", b, cursor)
	}
	start = time.Now()
	w.push("c2", upsert("n2", e.note("n2", "p1", "two", 2, nil)))
	for {
		typ, b, err := ws.Read(ctx)
		if err != nil {
			t.Fatalf("waiting for the delta: %v", err)
		}
		if typ != websocket.MessageBinary {
			continue // heartbeats
		}
		if b[0] != realtime.TagDelta {
			t.Fatalf("want a 0x00 delta, got tag 0x%02x", b[0])
		}
		dm, err := wire.Decode(b[1:])
		if err != nil {
			t.Fatal(err)
		}
		ds, err := enginetest.ParseSections(dm)
		if err != nil || len(ds) != 1 || len(ds[0].Commits) != 1 || ds[0].Commits[0].Changes[0].RowID != "n2" {
			t.Fatalf("delta: %v %+v", err, ds)
		}
		t.Logf("HTTP push → delta on the socket through the table stream: %v", time.Since(start).Round(time.Millisecond))
		break
	}

	// A revoked grant reaches the open socket through the hub's own
	// periodic authorization re-check (setAllowedScopes pushes nothing):
	// a catchup-required wake-up, so the next pull sees the revocation.
	e.call(id, "setAllowedScopes", nil, "reader", map[string][]string{"project_id": {"p2"}})
	start = time.Now()
	for {
		typ, b, err := ws.Read(ctx)
		if err != nil {
			t.Fatalf("waiting for the revocation wake-up: %v", err)
		}
		if typ != websocket.MessageText {
			t.Fatalf("binary message after the revocation (tag 0x%02x)", b[0])
		}
		if msg, err := realtime.Parse(b); err == nil {
			if w, isWake := msg.(*realtime.Wake); isWake {
				if w.Reason != realtime.ReasonCatchupRequired {
					t.Fatalf("wake-up %s, want catchup-required", b)
				}
				break
			}
		}
	}
	t.Logf("grant revoked → catchup-required on the open socket: %v", time.Since(start).Round(time.Millisecond))
	ws.Close(websocket.StatusNormalClosure, "")

	if st, _, b := e.do(http.MethodDelete, "/i/"+id, nil, nil); st != http.StatusNoContent {
		t.Fatalf("drop: %d %s", st, b)
	}
	if got := conformanceTables(t, db); got != before {
		t.Fatalf("tables after the drop: %d, want %d", got, before)
	}
}

// attachmentsSchema has a blob_ref column: a blob download is authorized
// by a row the actor can see that references it (§5.9.5).
const attachmentsSchema = `{
  "version": 1,
  "tables": [
    {"name": "attachments", "primaryKey": "id",
     "columns": [
       {"name": "id", "type": "string", "nullable": false},
       {"name": "project_id", "type": "string", "nullable": false},
       {"name": "file", "type": "blob_ref", "nullable": true}
     ],
     "scopes": [{"pattern": "project:{project_id}"}]}
  ]
}`

// testBlobsOnS3: a direct upload, a referencing row, a direct download
// and a presigned download served by the instance's S3 server.
func testBlobsOnS3(t *testing.T, e *env) {
	st, _, b := e.do(http.MethodPost, "/__conformance/instances", nil, []byte(`{"schema": `+attachmentsSchema+`, "partition": "part-b", "nowMs": 1750000000000}`))
	if st != http.StatusOK {
		t.Fatalf("create: %d %s", st, b)
	}
	var created struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(b, &created); err != nil {
		t.Fatal(err)
	}
	id := created.ID
	sc, err := schema.Parse([]byte(attachmentsSchema))
	if err != nil {
		t.Fatal(err)
	}
	tbl, _ := sc.Versions[1].Table("attachments")
	e.call(id, "setAllowedScopes", nil, "writer", map[string][]string{"project_id": {"p1"}})

	payload := []byte("blob bytes on s3")
	blobID := blobs.IDOfBytes(payload)
	var ok struct {
		OK bool `json:"ok"`
	}
	e.call(id, "uploadBlob", &ok, "writer", blobID, map[string]string{"$u8": base64.StdEncoding.EncodeToString(payload)})
	if !ok.OK {
		t.Fatal("uploadBlob failed")
	}
	row, err := tbl.Codec.Append(nil, []rowcodec.Value{{Str: "a1"}, {Str: "p1"}, {Str: enginetest.BlobRef(payload)}})
	if err != nil {
		t.Fatal(err)
	}
	w := e.client(id, "writer", "client-w")
	if res := w.push("c1", wire.Operation{Table: "attachments", RowID: "a1", Op: wire.OpUpsert, Payload: wire.Some(row)}); res.Status != wire.PushApplied {
		t.Fatalf("push referencing the blob: %+v", res)
	}
	var br bytesResult
	e.call(id, "downloadBlob", &br, "writer", blobID)
	if !bytes.Equal(br.data(t), payload) {
		t.Fatal("downloadBlob returned other bytes")
	}
	e.call(id, "setBlobPresign", nil, true)
	var dl struct {
		OK  bool   `json:"ok"`
		URL string `json:"url"`
	}
	e.call(id, "downloadBlob", &dl, "writer", blobID)
	if !dl.OK || !strings.Contains(dl.URL, "X-Amz-Signature=") {
		t.Fatalf("presigned download: %+v", dl)
	}
	e.call(id, "fetchBlobUrl", &br, dl.URL)
	if !bytes.Equal(br.data(t), payload) {
		t.Fatal("fetchBlobUrl returned other bytes")
	}
	// The S3 server checks presigned signatures, as S3 does: an edited
	// URL is refused.
	edited := strings.Replace(dl.URL, "X-Amz-Expires=", "X-Amz-Expires=1", 1)
	e.call(id, "fetchBlobUrl", &br, edited)
	if br.OK {
		t.Fatal("a presigned URL with an edited expiry was served")
	}
	// A presigned upload grant binds the length: other bytes are refused,
	// the granted ones land.
	other := []byte("granted upload bytes")
	otherID := blobs.IDOfBytes(other)
	var grant struct {
		OK    bool `json:"ok"`
		Grant struct {
			Kind string `json:"kind"`
			URL  string `json:"url"`
		} `json:"grant"`
	}
	e.call(id, "uploadBlobGrant", &grant, "writer", otherID, len(other))
	if !grant.OK || grant.Grant.Kind != "url" {
		t.Fatalf("upload grant: %+v", grant)
	}
	u8 := func(b []byte) map[string]string {
		return map[string]string{"$u8": base64.StdEncoding.EncodeToString(b)}
	}
	e.call(id, "putBlobUrl", &ok, grant.Grant.URL, u8(append(other, '!')))
	if ok.OK {
		t.Fatal("a presigned PUT longer than its grant was accepted")
	}
	e.call(id, "putBlobUrl", &ok, grant.Grant.URL, u8(other))
	if !ok.OK {
		t.Fatal("the granted presigned PUT was refused")
	}
	if st, _, b := e.do(http.MethodDelete, "/i/"+id, nil, nil); st != http.StatusNoContent {
		t.Fatalf("drop: %d %s", st, b)
	}
}

// TestResolverFailureIsRetryable: the catalog's throwing scope resolver
// is answered as production answers a resolver that could not find out
// (README, "Scope resolver outages"): a retryable error, nothing applied
// and no subscription revoked — not the decided "no grant" that revokes.
func TestResolverThrowFailsLoud(t *testing.T) { forStores(t, testResolverThrowFailsLoud) }

// §3.2 rule 5 / §3.4 step 4: a resolver that throws revokes the
// subscription and rejects the writes with sync.forbidden, in the same
// round, on both stores; nothing is applied, and once the resolver
// answers again a fresh subscription syncs.
func testResolverThrowFailsLoud(t *testing.T, e *env) {
	id := e.create("")
	e.call(id, "setAllowedScopes", nil, "actor-a", map[string][]string{"project_id": {"p1"}})
	c := e.client(id, "actor-a", "client-a")
	c.push("c1", upsert("n1", e.note("n1", "p1", "one", 1, nil)))
	e.call(id, "setResolverFailing", nil, true)
	m := c.send([]wire.PushCommit{{ClientCommitID: "c2", Operations: []wire.Operation{upsert("n2", e.note("n2", "p1", "two", 2, nil))}}},
		&wire.PullHeader{Accept: wire.AcceptInlineRows}, []wire.Subscription{sub("s", "p1", 1)})
	var rejected, revoked bool
	for _, f := range m.Frames {
		switch f := f.(type) {
		case *wire.PushResult:
			for _, r := range f.Results {
				if r.Status == wire.OpError && r.Code == string(syncerr.Forbidden) {
					rejected = true
				}
			}
			if f.Status == wire.PushApplied {
				t.Fatalf("a commit applied while the resolver threw: %+v", f)
			}
		case *wire.SubStart:
			revoked = f.Status == wire.SubRevoked
		}
	}
	if !rejected || !revoked {
		t.Fatalf("resolver threw: write rejected %v (want sync.forbidden), subscription revoked %v; frames %+v", rejected, revoked, m.Frames)
	}
	if got := e.callInt(id, "getMaxCommitSeq"); got != 1 {
		t.Fatalf("maxCommitSeq = %d after the failed round, want 1 (nothing applied)", got)
	}
	e.call(id, "setResolverFailing", nil, false)
	m = c.send(nil, &wire.PullHeader{Accept: wire.AcceptInlineRows}, []wire.Subscription{sub("s2", "p1", -1)})
	for _, f := range m.Frames {
		if sr, ok := f.(*wire.SubStart); ok && sr.Status != wire.SubActive {
			t.Fatalf("a fresh subscription after recovery: %+v, want active", sr)
		}
	}
}
