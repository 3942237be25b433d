package s3blobs_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/blobs"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/memstore"
	"github.com/skyfold/syncular-lambda/internal/s3blobs"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

func newStore(t testing.TB) *s3blobs.Store {
	srv := testenv.S3(t)
	srv.CreateBucket(t, "bucket")
	return s3blobs.New(srv.Client(t), "bucket", "")
}

func objects(t *testing.T, s *s3blobs.Store) []blobs.Object {
	t.Helper()
	var out []blobs.Object
	if err := s.List(context.Background(), func(o blobs.Object) bool { out = append(out, o); return true }); err != nil {
		t.Fatal(err)
	}
	return out
}

// do sends a request with plain net/http and no host authentication, as a
// client consuming a presigned URL does (§5.4, §5.9.3).
func do(t *testing.T, method, u string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == nil {
		req.Body = nil
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func TestPresignedUploadVerifiedThenDownloaded(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	body := []byte("a photo, in bytes")
	id := blobs.IDOfBytes(body)
	u, exp, err := s.PresignPut(ctx, "tenant/1", id, "alice", int64(len(body)), 1_000, 60_000)
	if err != nil {
		t.Fatal(err)
	}
	if exp <= 1_000 || exp > 61_000 {
		t.Fatalf("expiry %d outside (now, now+ttl]", exp)
	}
	// The grant binds the length: content-length is a signed header.
	pu, _ := url.Parse(u)
	if sh := pu.Query().Get("X-Amz-SignedHeaders"); !strings.Contains(sh, "content-length") {
		t.Fatalf("signed headers %q do not bind content-length", sh)
	}
	if st, b := do(t, http.MethodPut, u, body); st != http.StatusOK {
		t.Fatalf("presigned PUT: %d %s", st, b)
	}
	// Staged, not present: another actor's lookup does not promote it.
	st, err := s.Lookup(ctx, "tenant/1", id, "bob", 1<<20)
	if err != nil || st.Present {
		t.Fatalf("before verification: %+v %v", st, err)
	}
	st, err = s.Lookup(ctx, "tenant/1", id, "alice", 1<<20)
	if err != nil || !st.Present || !st.Proven || st.Size != int64(len(body)) {
		t.Fatalf("after alice's lookup: %+v %v", st, err)
	}
	if objs := objects(t, s); len(objs) != 1 || objs[0].Staged || objs[0].Partition != "tenant/1" || objs[0].BlobID != id {
		t.Fatalf("objects after promotion: %+v", objs)
	}
	if st, err := s.Lookup(ctx, "tenant/1", id, "bob", 1<<20); err != nil || !st.Present || st.Proven {
		t.Fatalf("bob: %+v %v", st, err)
	}
	if st, err := s.Lookup(ctx, "tenant/2", id, "alice", 1<<20); err != nil || st.Present {
		t.Fatalf("another partition: %+v %v", st, err)
	}
	g, _, err := s.PresignGet(ctx, "tenant/1", id, 1_000, 60_000)
	if err != nil {
		t.Fatal(err)
	}
	if st, b := do(t, http.MethodGet, g, nil); st != http.StatusOK || !bytes.Equal(b, body) {
		t.Fatalf("presigned GET: %d %q", st, b)
	}
	// Sweep deletion removes the blob and its proofs.
	if err := s.Delete(ctx, blobs.Object{Partition: "tenant/1", BlobID: id}); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Lookup(ctx, "tenant/1", id, "alice", 1<<20); err != nil || st.Present || st.Proven {
		t.Fatalf("after delete: %+v %v", st, err)
	}
}

func TestPresignedUploadOfOtherBytesIsDeleted(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	body := []byte("the real bytes")
	forged := []byte("forged bytes!!")
	id := blobs.IDOfBytes(body)
	u, _, err := s.PresignPut(ctx, "p", id, "mallory", int64(len(body)), 1_000, 60_000)
	if err != nil {
		t.Fatal(err)
	}
	// gofakes3 does not verify signatures, so the bytes land; the
	// server's verification is what keeps them out.
	if st, b := do(t, http.MethodPut, u, forged); st != http.StatusOK {
		t.Fatalf("PUT: %d %s", st, b)
	}
	if objs := objects(t, s); len(objs) != 1 || !objs[0].Staged || objs[0].Actor != "mallory" {
		t.Fatalf("staged upload not listed: %+v", objs)
	}
	st, err := s.Lookup(ctx, "p", id, "mallory", 1<<20)
	if err != nil || st.Present || st.Proven {
		t.Fatalf("forged upload counted: %+v %v", st, err)
	}
	if objs := objects(t, s); len(objs) != 0 {
		t.Fatalf("forged upload kept: %+v", objs)
	}
	// Over the size limit is dropped the same way.
	u, _, _ = s.PresignPut(ctx, "p", id, "mallory", int64(len(body)), 1_000, 60_000)
	do(t, http.MethodPut, u, body)
	if st, err := s.Lookup(ctx, "p", id, "mallory", 4); err != nil || st.Present {
		t.Fatalf("oversized upload counted: %+v %v", st, err)
	}
	if objs := objects(t, s); len(objs) != 0 {
		t.Fatalf("oversized upload kept: %+v", objs)
	}
}

func TestDirectPutRejectsBadBytes(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	body := []byte("hello")
	id := blobs.IDOfBytes(body)
	if err := s.Put(ctx, "p", id, "a", bytes.NewReader([]byte("hellO")), 100); !errors.Is(err, blobs.ErrHashMismatch) {
		t.Fatalf("wrong bytes: %v", err)
	}
	if err := s.Put(ctx, "p", id, "a", bytes.NewReader(body), 4); !errors.Is(err, blobs.ErrTooLarge) {
		t.Fatalf("too large: %v", err)
	}
	if err := s.Put(ctx, "p", "sha256:nothex", "a", bytes.NewReader(body), 100); !errors.Is(err, blobs.ErrHashMismatch) {
		t.Fatalf("malformed id: %v", err)
	}
	if objs := objects(t, s); len(objs) != 0 {
		t.Fatalf("bad uploads stored: %+v", objs)
	}
	for range 2 { // the second upload is idempotent
		if err := s.Put(ctx, "p", id, "a", bytes.NewReader(body), 100); err != nil {
			t.Fatal(err)
		}
	}
	rc, n, err := s.Open(ctx, "p", id)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if n != 5 || !bytes.Equal(got, body) {
		t.Fatalf("open: %d %q", n, got)
	}
}

// The engine's §5.9 scenarios (upload → reference → download →
// unreference → sweep, authorization, bad input) over S3.
func TestEngineBlobsOverS3(t *testing.T) {
	enginetest.Blobs(t, func(testing.TB) (store.Store, store.SegmentStore) {
		return memstore.New(), memstore.NewSegments()
	}, func(t testing.TB, now func() int64) blobs.Store {
		return newStore(t).WithClock(now)
	})
}
