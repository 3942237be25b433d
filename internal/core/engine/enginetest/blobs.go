package enginetest

import (
	"bytes"
	"context"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/blobs"
	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// NewBlobStore builds a blob store for one scenario over the harness clock.
type NewBlobStore func(t testing.TB, now func() int64) blobs.Store

// BlobRef renders a canonical BlobRef (§5.9.1) for body.
func BlobRef(body []byte) string {
	return `{"blobId":"` + blobs.IDOfBytes(body) + `","byteLength":` + strconv.Itoa(len(body)) + `}`
}

// UploadBlob is a direct upload (§5.9.3) by c's actor.
func (c *Client) UploadBlob(body []byte) error {
	return c.H.Engine.UploadBlob(context.Background(), engine.Auth{Partition: c.Partition, ActorID: c.Actor}, blobs.IDOfBytes(body), int64(len(body)), bytes.NewReader(body))
}

// DownloadBlob is an inline download (§5.9.5) by c's actor.
func (c *Client) DownloadBlob(blobID string) ([]byte, error) {
	dl, err := c.H.Engine.AuthorizeBlob(context.Background(), engine.Auth{Partition: c.Partition, ActorID: c.Actor}, blobID, true)
	if err != nil {
		return nil, err
	}
	rc, err := dl.Open(context.Background())
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func (c *Client) attachment(id, project string, ref *string) wire.Operation {
	cols := Cols{"id": S(id), "project_id": S(project), "file": Null()}
	if ref != nil {
		cols["file"] = S(*ref)
	}
	return Upsert("attachments", id, c.Row("attachments", cols), -1)
}

func wantCode(t testing.TB, err error, code syncerr.Code) {
	t.Helper()
	if got := ErrCode(err); got != code {
		t.Fatalf("want %s, got %v", code, err)
	}
}

func wantBlob(t testing.TB, c *Client, body []byte) {
	t.Helper()
	got, err := c.DownloadBlob(blobs.IDOfBytes(body))
	if err != nil {
		t.Fatalf("%s downloads %s: %v", c.Actor, blobs.IDOfBytes(body), err)
	}
	if !bytes.Equal(got, body) {
		t.Fatalf("%s downloaded %q, want %q", c.Actor, got, body)
	}
}

// blobScenarios exercise §5.9 end to end over the engine: upload,
// push-time existence check, reference index, download authorization and
// the orphan sweep, with every bad input of issue 13.
var blobScenarios = []struct {
	name string
	run  func(t *testing.T, h *Harness, bs blobs.Store)
}{
	{"upload-reference-download", func(t *testing.T, h *Harness, _ blobs.Store) {
		h.Grants.Set("author", p1)
		h.Grants.Set("reader", p1)
		h.Grants.Set("intruder", engine.ScopeMap{"project_id": {"p2"}})
		a := h.ClientV3("tenant", "author", "c-author")
		r := h.ClientV3("tenant", "reader", "c-reader")
		x := h.ClientV3("tenant", "intruder", "c-intruder")
		body := []byte("hello, file")
		id := blobs.IDOfBytes(body)
		if err := a.UploadBlob(body); err != nil {
			t.Fatal(err)
		}
		// Idempotent re-upload (§5.9.3).
		if err := a.UploadBlob(body); err != nil {
			t.Fatal(err)
		}
		// §5.9.5: no referencing row yet — even the uploader is refused,
		// with 403, not 404.
		_, err := a.DownloadBlob(id)
		wantCode(t, err, syncerr.BlobForbidden)
		ref := BlobRef(body)
		applied(t, a.Push("ref", a.attachment("f1", "p1", &ref)))
		wantBlob(t, r, body)
		wantBlob(t, a, body)
		_, err = x.DownloadBlob(id)
		wantCode(t, err, syncerr.BlobForbidden)
		_, err = r.DownloadBlob(blobs.IDOfBytes([]byte("never uploaded")))
		wantCode(t, err, syncerr.BlobNotFound)
		_, err = r.DownloadBlob("sha256:ABC")
		wantCode(t, err, syncerr.BlobNotFound)
		// A failing resolver denies (§5.9.5), it does not leak.
		h.Grants.Fail(true)
		_, err = r.DownloadBlob(id)
		wantCode(t, err, syncerr.BlobForbidden)
		h.Grants.Fail(false)
		// Revoking the reader's grant revokes the download.
		h.Grants.Set("reader", engine.ScopeMap{})
		_, err = r.DownloadBlob(id)
		wantCode(t, err, syncerr.BlobForbidden)
	}},
	{"push-missing-blob-rejected", func(t *testing.T, h *Harness, _ blobs.Store) {
		h.Grants.Set("author", p1)
		a := h.ClientV3("tenant", "author", "c-author")
		ref := BlobRef([]byte("never uploaded"))
		rejected(t, a.Push("bad", a.attachment("f1", "p1", &ref)), 0, wire.OpError, syncerr.BlobNotFound)
		wantAbsent(t, h, "attachments", "f1")
		// The commit rolls back whole (§6.4): an earlier valid op too.
		rejected(t, a.Push("bad2", a.attachment("f0", "p1", nil), a.attachment("f1", "p1", &ref)), 1, wire.OpError, syncerr.BlobNotFound)
		wantAbsent(t, h, "attachments", "f0")
		// Wire 2 (full rows) is checked the same way.
		v2 := h.Client("tenant", "author", "c-author-v2")
		rejected(t, v2.Push("bad-v2", v2.attachment("f1", "p1", &ref)), 0, wire.OpError, syncerr.BlobNotFound)
		// Uploading and re-pushing succeeds (the client's recovery).
		if err := a.UploadBlob([]byte("never uploaded")); err != nil {
			t.Fatal(err)
		}
		applied(t, a.Push("good", a.attachment("f1", "p1", &ref)))
	}},
	{"bad-uploads-store-nothing", func(t *testing.T, h *Harness, bs blobs.Store) {
		h.Grants.Set("author", p1)
		a := h.ClientV3("tenant", "author", "c-author")
		auth := engine.Auth{Partition: "tenant", ActorID: "author"}
		ctx := context.Background()
		body := []byte("0123456789abcdef0123") // 20 bytes, over the 16-byte test cap
		small := []byte("small")
		// Wrong hash: the bytes of another blob under small's id.
		err := h.Engine.UploadBlob(ctx, auth, blobs.IDOfBytes(small), -1, bytes.NewReader([]byte("other")))
		wantCode(t, err, syncerr.BlobHashMismatch)
		// Non-canonical ids: uppercase hex, other algorithm, short.
		up := "sha256:" + string(bytes.ToUpper([]byte(blobs.IDOfBytes(small)[7:])))
		for _, id := range []string{up, "sha512:" + blobs.IDOfBytes(small)[7:], "sha256:abc", ""} {
			err = h.Engine.UploadBlob(ctx, auth, id, -1, bytes.NewReader(small))
			wantCode(t, err, syncerr.BlobHashMismatch)
			_, err = h.Engine.GrantBlobUpload(ctx, auth, id, 5)
			wantCode(t, err, syncerr.BlobHashMismatch)
		}
		// Over the size limit: declared, streamed, and at grant issuance.
		err = h.Engine.UploadBlob(ctx, auth, blobs.IDOfBytes(body), int64(len(body)), bytes.NewReader(body))
		wantCode(t, err, syncerr.BlobTooLarge)
		err = h.Engine.UploadBlob(ctx, auth, blobs.IDOfBytes(body), -1, bytes.NewReader(body))
		wantCode(t, err, syncerr.BlobTooLarge)
		_, err = h.Engine.GrantBlobUpload(ctx, auth, blobs.IDOfBytes(body), int64(len(body)))
		wantCode(t, err, syncerr.BlobTooLarge)
		_, err = h.Engine.GrantBlobUpload(ctx, auth, blobs.IDOfBytes(small), -1)
		wantCode(t, err, syncerr.InvalidRequest)
		n := 0
		if err := bs.List(ctx, func(blobs.Object) bool { n++; return true }); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("bad uploads stored %d objects", n)
		}
		// Nothing is referenceable either.
		ref := BlobRef(small)
		rejected(t, a.Push("ref", a.attachment("f1", "p1", &ref)), 0, wire.OpError, syncerr.BlobNotFound)
		// Without a presigner a grant is empty: the direct PUT is the path.
		g, err := h.Engine.GrantBlobUpload(ctx, auth, blobs.IDOfBytes(small), 5)
		if err != nil || g.Present || g.URL != "" {
			t.Fatalf("grant without presigner: %+v, %v", g, err)
		}
		if err := a.UploadBlob(small); err != nil {
			t.Fatal(err)
		}
		g, err = h.Engine.GrantBlobUpload(ctx, auth, blobs.IDOfBytes(small), 5)
		if err != nil || !g.Present {
			t.Fatalf("grant of an uploaded blob: %+v, %v", g, err)
		}
	}},
	{"other-partition-and-scope", func(t *testing.T, h *Harness, _ blobs.Store) {
		h.Grants.Set("author", p1)
		h.Grants.Set("intruder", engine.ScopeMap{"project_id": {"p2"}})
		a := h.ClientV3("tenant", "author", "c-author")
		other := h.ClientV3("other-tenant", "author", "c-author-2")
		x := h.ClientV3("tenant", "intruder", "c-intruder")
		body := []byte("p1 secret")
		ref := BlobRef(body)
		if err := a.UploadBlob(body); err != nil {
			t.Fatal(err)
		}
		applied(t, a.Push("ref", a.attachment("f1", "p1", &ref)))
		// Another partition does not hold the blob.
		rejected(t, other.Push("ref", other.attachment("f1", "p1", &ref)), 0, wire.OpError, syncerr.BlobNotFound)
		_, err := other.DownloadBlob(blobs.IDOfBytes(body))
		wantCode(t, err, syncerr.BlobNotFound)
		// An actor of another scope that only knows the id cannot turn it
		// into a capability by referencing it from its own row.
		rejected(t, x.Push("steal", x.attachment("x1", "p2", &ref)), 0, wire.OpError, syncerr.BlobNotFound)
		_, err = x.DownloadBlob(blobs.IDOfBytes(body))
		wantCode(t, err, syncerr.BlobForbidden)
		// Holding the bytes (uploading them) is the proof that suffices.
		if err := x.UploadBlob(body); err != nil {
			t.Fatal(err)
		}
		applied(t, x.Push("own", x.attachment("x1", "p2", &ref)))
		wantBlob(t, x, body)
		// A p1 reader that did not upload may reference what it can see.
		h.Grants.Set("reader", p1)
		r := h.ClientV3("tenant", "reader", "c-reader")
		applied(t, r.Push("copy", r.attachment("f2", "p1", &ref)))
	}},
	{"unreference-and-sweep", func(t *testing.T, h *Harness, bs blobs.Store) {
		h.Grants.Set("author", p1)
		a := h.ClientV3("tenant", "author", "c-author")
		ctx := context.Background()
		kept, dropped, orphan := []byte("kept"), []byte("dropped"), []byte("orphan")
		for _, b := range [][]byte{kept, dropped, orphan} {
			if err := a.UploadBlob(b); err != nil {
				t.Fatal(err)
			}
		}
		rk, rd := BlobRef(kept), BlobRef(dropped)
		applied(t, a.Push("refs", a.attachment("f1", "p1", &rk), a.attachment("f2", "p1", &rd), a.attachment("f3", "p1", &rd)))
		// Two rows share `dropped`: deleting one keeps it downloadable.
		applied(t, a.Push("del", Delete("attachments", "f2")))
		wantBlob(t, a, dropped)
		// Changing the column to NULL removes the last reference.
		applied(t, a.Push("null", Upsert("attachments", "f3", a.Patch("attachments", Cols{"id": S("f3"), "file": Null()}), -1)))
		_, err := a.DownloadBlob(blobs.IDOfBytes(dropped))
		wantCode(t, err, syncerr.BlobForbidden)
		// Within the grace period nothing is swept.
		if n, err := h.Engine.SweepBlobs(ctx); err != nil || n != 0 {
			t.Fatalf("sweep within grace: %d, %v", n, err)
		}
		h.Clock.Advance((engine.DefaultBlobOrphanGrace + time.Minute).Milliseconds())
		n, err := h.Engine.SweepBlobs(ctx)
		if err != nil || n != 2 {
			t.Fatalf("sweep past grace deleted %d (want dropped and orphan), %v", n, err)
		}
		// The referenced blob survives and still downloads; the swept
		// ones are gone, so a push referencing them fails loud again.
		wantBlob(t, a, kept)
		for _, b := range [][]byte{dropped, orphan} {
			st, err := bs.Lookup(ctx, "tenant", blobs.IDOfBytes(b), "author", 1<<20)
			if err != nil || st.Present {
				t.Fatalf("swept blob %q still present: %+v %v", b, st, err)
			}
		}
		rejected(t, a.Push("stale", a.attachment("f4", "p1", &rd)), 0, wire.OpError, syncerr.BlobNotFound)
		// Referencing an old blob restarts its age: the sweep keeps a
		// blob a push checked, even once it is unreferenced again, until
		// a full grace period passed since that push.
		if err := a.UploadBlob(orphan); err != nil {
			t.Fatal(err)
		}
		h.Clock.Advance((engine.DefaultBlobOrphanGrace - time.Minute).Milliseconds())
		ro := BlobRef(orphan)
		applied(t, a.Push("late", a.attachment("f5", "p1", &ro)))
		applied(t, a.Push("late-del", Delete("attachments", "f5")))
		h.Clock.Advance((2 * time.Minute).Milliseconds())
		if n, err := h.Engine.SweepBlobs(ctx); err != nil || n != 0 {
			t.Fatalf("sweep after a fresh reference: %d, %v", n, err)
		}
	}},
}

// Blobs runs the §5.9 scenarios over fresh stores per scenario.
func Blobs(t *testing.T, stores Stores, newBlobs NewBlobStore) {
	for _, sc := range blobScenarios {
		t.Run(sc.name, func(t *testing.T) {
			st, segs := stores(t)
			var h *Harness
			bs := newBlobs(t, func() int64 { return h.Clock.Now() })
			h = New(t, st, segs, Options{Schema: PushRulesSchema, Blobs: bs, Limits: engine.Limits{MaxBlobBytes: 16}})
			// Start at the wall clock: an object store stamps objects with
			// its own time (S3 LastModified), which the sweep's listing reads.
			h.Clock.Advance(time.Now().UnixMilli() - h.Clock.Now())
			sc.run(t, h, bs)
		})
	}
}
