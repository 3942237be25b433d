package httpapi_test

import (
	"bytes"
	"net/url"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/blobs"
	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/httpapi"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/memblobs"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// §5.9.3/§5.9.5 through the routes: a direct upload, then the streamed
// download of a referenced blob carries the same immutable-object
// headers as a segment (ETag = blobId), answers If-None-Match with an
// empty 304 and HEAD with headers only; an unreferenced blob is 403.
func TestBlobDownloadCaching(t *testing.T) {
	h := enginetest.New(t, memstore.New(), memstore.NewSegments(), enginetest.Options{
		Schema: enginetest.PushRulesSchema, Blobs: memblobs.New(memblobs.Options{}),
	})
	h.Grants.Set("alice", engine.ScopeMap{"project_id": {"p1"}})
	api := &httpapi.Handler{Engine: h.Engine, Mount: "/api", Routes: httpapi.RouteAll, MaxBodyBytes: 1 << 20}
	f := &fixture{h: h, api: api, client: h.Client("tenant", "alice", "a")}

	body := []byte("attachment bytes")
	id := blobs.IDOfBytes(body)
	path := "/api/blobs/" + url.PathEscape(id)
	if r := f.do("PUT", path, nil, body); r.Status/100 != 2 {
		t.Fatalf("upload: %d %s", r.Status, r.Body)
	}
	if r := f.do("GET", path, nil, nil); r.Status != 403 || errorBody(t, r).Code != syncerr.BlobForbidden {
		t.Fatalf("unreferenced download: %d %s", r.Status, r.Body)
	}
	ref := enginetest.BlobRef(body)
	row := f.client.Row("attachments", enginetest.Cols{"id": enginetest.S("f1"), "project_id": enginetest.S("p1"), "file": enginetest.S(ref)})
	if res := f.client.Push("c1", enginetest.Upsert("attachments", "f1", row, 0)); res.Status != wire.PushApplied {
		t.Fatalf("push referencing the blob: %+v", res)
	}

	r := f.do("GET", path, nil, nil)
	if r.Status != 200 || !bytes.Equal(r.Body, body) {
		t.Fatalf("download: %d %q", r.Status, r.Body)
	}
	etag := `"` + id + `"`
	if r.Header.Get("ETag") != etag || r.Header.Get("Cache-Control") != "private, max-age=0" || r.Header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("headers: %v", r.Header)
	}
	r = f.do("GET", path, map[string]string{"If-None-Match": etag}, nil)
	if r.Status != 304 || len(r.Body) != 0 || r.Header.Get("ETag") != etag {
		t.Fatalf("If-None-Match: %d %q %v", r.Status, r.Body, r.Header)
	}
	r = f.do("HEAD", path, nil, nil)
	if r.Status != 200 || len(r.Body) != 0 || r.Header.Get("ETag") != etag {
		t.Fatalf("HEAD: %d %q %v", r.Status, r.Body, r.Header)
	}
}
