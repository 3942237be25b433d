package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/skyfold/syncular-lambda/internal/core/blobs"
	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// blobCheck is one blob reference a commit writes that §5.9.6 must check.
type blobCheck struct {
	op     int
	column string
	blobID string
}

// collectBlobRefs records the non-NULL blob_ref values an upsert presents
// (storage columns). A value equal to the stored row's is not re-checked:
// it was checked when written and a referenced blob is durable (§5.9.2).
func (e *Engine) collectBlobRefs(ev *evaluation, i int, st *schema.Table, stored, nr *store.Row, present []bool) error {
	if len(st.BlobRefColumns) == 0 {
		return nil
	}
	vals, err := st.Codec.Decode(nr.Payload, nil)
	if err != nil {
		return syncerr.Wrap(err, syncerr.OperationExecutionFailed, "staged row does not decode")
	}
	var old []rowcodec.Value
	if stored != nil {
		if old, _, err = e.storedRow(st, stored, nil); err != nil {
			return syncerr.Wrap(err, syncerr.OperationExecutionFailed, "stored row does not decode")
		}
	}
	for _, j := range st.BlobRefColumns {
		if !present[j] || vals[j].Null {
			continue
		}
		if old != nil && !old[j].Null && old[j].Str == vals[j].Str {
			continue
		}
		ref, ok := blobs.ParseRef(vals[j].Str)
		if !ok { // the codec validated the shape at decode (§5.9.1)
			return syncerr.New(syncerr.OperationExecutionFailed, "blob_ref value passed decode but does not parse")
		}
		ev.blobChecks = append(ev.blobChecks, blobCheck{op: i, column: st.Columns[j].Name, blobID: ref.BlobID})
	}
	return nil
}

// checkBlobs is the §5.9.6 / §6.6 push-time existence check over every
// blob reference the commit writes, in operation order. A blob the
// partition does not hold rejects the operation with blob.not_found. So
// does a present blob the actor neither uploaded itself nor may download
// (§5.9.5): otherwise knowing a blob id from another scope would let an
// actor reference it from its own row and download it — a blobId is
// never a capability. Both answers read the same, so the rejection does
// not tell the two apart.
func (e *Engine) checkBlobs(ctx context.Context, rs *reqState, ev *evaluation, g writeGrant) error {
	if len(ev.blobChecks) == 0 {
		return nil
	}
	done := map[string]bool{}
	for _, c := range ev.blobChecks {
		if done[c.blobID] {
			continue
		}
		ok, err := e.mayReference(ctx, rs, c.blobID, g)
		if err != nil {
			return err
		}
		if !ok {
			ev.reject = opError(c.op, syncerr.BlobNotFound, fmt.Sprintf("column %q references blob %s, which this partition does not hold for this actor; upload it before pushing (§5.9.6)", c.column, c.blobID))
			return nil
		}
		done[c.blobID] = true
	}
	return nil
}

func (e *Engine) mayReference(ctx context.Context, rs *reqState, blobID string, g writeGrant) (bool, error) {
	if e.blobs == nil {
		return false, nil
	}
	st, err := e.blobs.Lookup(ctx, rs.auth.Partition, blobID, rs.auth.ActorID, e.limits.MaxBlobBytes)
	if err != nil {
		return false, storeErr(err, "look up blob")
	}
	if !st.Present {
		return false, nil
	}
	if !st.Proven {
		if g.err != nil {
			return false, nil // fail closed (§3.4)
		}
		visible, err := e.blobVisible(ctx, rs.auth.Partition, blobID, g.allowed)
		if err != nil || !visible {
			return false, err
		}
	}
	// §5.9.2: the sweep deletes blobs unreferenced for longer than the
	// grace period; a blob about to be referenced restarts its age when
	// half of that has passed, so no sweep can race this commit.
	if rs.now-st.TouchedAtMs > e.limits.BlobOrphanGrace.Milliseconds()/2 {
		if err := e.blobs.Touch(ctx, rs.auth.Partition, blobID, rs.now); err != nil {
			return false, storeErr(err, "touch blob")
		}
	}
	return true, nil
}

// blobIndexColumns lists the (table, blob_ref column) pairs of the
// storage schema: the reference-index keys one blob can appear under.
func (e *Engine) blobIndexColumns() []store.ChildQuery {
	sv := e.schema.Versions[e.schema.Latest]
	var out []store.ChildQuery
	for _, t := range sv.Tables {
		for _, j := range t.BlobRefColumns {
			out = append(out, store.ChildQuery{ChildTable: t.Name, Column: blobs.IndexColumn(t.Columns[j].Name)})
		}
	}
	return out
}

// blobReferencers lists, per (table, column), the rows of the partition
// that reference blobID, at most limit each (§5.9.4).
func (e *Engine) blobReferencers(ctx context.Context, partition, blobID string, limit int) ([]store.ChildQuery, [][]string, error) {
	qs := e.blobIndexColumns()
	for i := range qs {
		qs[i].ParentID = blobID
	}
	if len(qs) == 0 {
		return nil, nil, nil
	}
	ids, err := e.store.ListChildren(ctx, partition, qs, limit)
	if err != nil {
		return nil, nil, storeErr(err, "read blob reference index")
	}
	return qs, ids, nil
}

// maxBlobCandidates bounds the referencing rows one authorization reads
// per (table, column).
const maxBlobCandidates = 1000

// blobVisible is the §5.9.5 rule: some row of the reference index for
// (partition, blobID) passes the §3.4 stored-row check against allowed.
func (e *Engine) blobVisible(ctx context.Context, partition, blobID string, allowed ScopeMap) (bool, error) {
	qs, ids, err := e.blobReferencers(ctx, partition, blobID, maxBlobCandidates)
	if err != nil {
		return false, err
	}
	sv := e.schema.Versions[e.schema.Latest]
	for i, q := range qs {
		if len(ids[i]) == 0 {
			continue
		}
		t, _ := sv.Table(q.ChildTable)
		rows, err := e.store.GetRows(ctx, partition, q.ChildTable, ids[i])
		if err != nil {
			return false, storeErr(err, "read referencing rows")
		}
		for _, id := range ids[i] {
			if r := rows[id]; r != nil && !r.Deleted && authorizeRow(t, r.Scopes, allowed) {
				return true, nil
			}
		}
	}
	return false, nil
}

// blobIndexWrites derives the commit's net blob reference-index changes
// (§5.9.4) from the pre-commit and final state of every row it writes,
// cascaded ones included, and appends them to ev.refs.
func (e *Engine) blobIndexWrites(ctx context.Context, rs *reqState, ev *evaluation) error {
	sv := e.schema.Versions[e.schema.Latest]
	final := map[rowKey]*store.RowWrite{}
	var keys []rowKey
	for i := range ev.rows {
		w := &ev.rows[i]
		t, ok := sv.Table(w.Table)
		if !ok || len(t.BlobRefColumns) == 0 {
			continue
		}
		k := rowKey{w.Table, w.Row.RowID}
		if _, seen := final[k]; !seen {
			keys = append(keys, k)
		}
		final[k] = w
	}
	if len(keys) == 0 {
		return nil
	}
	// Rows the operations did not name (cascaded deletes) were not read.
	missing := map[string][]string{}
	for _, k := range keys {
		if _, ok := ev.stored.lookup(k); !ok {
			missing[k.table] = append(missing[k.table], k.rowID)
		}
	}
	before := func(k rowKey) *store.Row { return ev.stored.get(k) }
	if len(missing) > 0 {
		extra := map[rowKey]*store.Row{}
		for table, ids := range missing {
			rows, err := e.store.GetRows(ctx, rs.auth.Partition, table, ids)
			if err != nil {
				return storeErr(err, "read rows")
			}
			for id, r := range rows {
				extra[rowKey{table, id}] = r
			}
		}
		before = func(k rowKey) *store.Row {
			if r, ok := ev.stored.lookup(k); ok {
				return r
			}
			return extra[k]
		}
	}
	slices.SortFunc(keys, func(a, b rowKey) int {
		if a.table != b.table {
			return compareStrings(a.table, b.table)
		}
		return compareStrings(a.rowID, b.rowID)
	})
	refsOf := func(t *schema.Table, r *store.Row) ([]string, error) {
		out := make([]string, len(t.BlobRefColumns))
		if r == nil || r.Deleted {
			return out, nil
		}
		vals, _, err := e.storedRow(t, r, nil)
		if err != nil {
			return nil, syncerr.Wrap(err, syncerr.OperationExecutionFailed, "row %s/%s does not decode", t.Name, r.RowID)
		}
		for n, j := range t.BlobRefColumns {
			if !vals[j].Null {
				if ref, ok := blobs.ParseRef(vals[j].Str); ok {
					out[n] = ref.BlobID
				}
			}
		}
		return out, nil
	}
	for _, k := range keys {
		t, _ := sv.Table(k.table)
		old, err := refsOf(t, before(k))
		if err != nil {
			return err
		}
		w := final[k]
		var after *store.Row
		if !w.Delete {
			after = &w.Row
		}
		cur, err := refsOf(t, after)
		if err != nil {
			return err
		}
		for n, j := range t.BlobRefColumns {
			if old[n] == cur[n] {
				continue
			}
			col := blobs.IndexColumn(t.Columns[j].Name)
			if old[n] != "" {
				ev.refs = append(ev.refs, store.RefWrite{RefEntry: store.RefEntry{ChildTable: k.table, Column: col, ParentID: old[n], ChildID: k.rowID}, Remove: true})
			}
			if cur[n] != "" {
				ev.refs = append(ev.refs, store.RefWrite{RefEntry: store.RefEntry{ChildTable: k.table, Column: col, ParentID: cur[n], ChildID: k.rowID}})
			}
		}
	}
	return nil
}

// BlobsEnabled reports whether a blob store is configured (§5.9).
func (e *Engine) BlobsEnabled() bool { return e.blobs != nil }

// BlobPresignEnabled reports whether grants and download URLs are minted.
func (e *Engine) BlobPresignEnabled() bool { return e.blobs != nil && e.blobSigner() != nil }

func (e *Engine) blobSigner() blobs.Presigner {
	if p := e.blobPresign.Load(); p != nil {
		return *p
	}
	return nil
}

// SetBlobPresigner replaces the blob presigner at run time (nil: serve
// uploads and downloads through the server only).
func (e *Engine) SetBlobPresigner(p blobs.Presigner) {
	if p == nil {
		e.blobPresign.Store(nil)
		return
	}
	e.blobPresign.Store(&p)
}

func (e *Engine) requireBlobs() error {
	if e.blobs == nil {
		return syncerr.New(syncerr.BlobNotFound, "this server has no blob store (§5.9)")
	}
	return nil
}

// UploadBlob is the direct upload (§5.9.3): the bytes must hash to
// blobID and fit the size limit; declaredLength (-1: unknown) is checked
// before reading. Nothing is stored on any failure.
func (e *Engine) UploadBlob(ctx context.Context, auth Auth, blobID string, declaredLength int64, body io.Reader) error {
	if err := e.requireBlobs(); err != nil {
		return err
	}
	if !blobs.ValidID(blobID) {
		return syncerr.New(syncerr.BlobHashMismatch, "blob id is not a canonical sha256:<64 lowercase hex> content address (§5.9.1)")
	}
	if declaredLength > e.limits.MaxBlobBytes {
		return syncerr.New(syncerr.BlobTooLarge, "blob of %d bytes exceeds the %d-byte limit (§5.9.3)", declaredLength, e.limits.MaxBlobBytes)
	}
	err := e.blobs.Put(ctx, auth.Partition, blobID, auth.ActorID, body, e.limits.MaxBlobBytes)
	return blobErr(err, "store blob")
}

func blobErr(err error, what string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, blobs.ErrTooLarge):
		return syncerr.New(syncerr.BlobTooLarge, "blob exceeds the %s limit (§5.9.3)", "size")
	case errors.Is(err, blobs.ErrHashMismatch):
		return syncerr.New(syncerr.BlobHashMismatch, "the SHA-256 of the bytes does not match the blob id (§5.9.3)")
	case errors.Is(err, blobs.ErrNotFound):
		return syncerr.New(syncerr.BlobNotFound, "unknown blob (§5.9.5)")
	}
	return storeErr(err, what)
}

// BlobGrant is an upload grant (§5.9.3): a presigned PUT, or Present
// when the blob already exists for this actor.
type BlobGrant struct {
	Present     bool
	URL         string
	ExpiresAtMs int64
}

// GrantBlobUpload answers POST <mount>/blobs/{blobId}/upload-grant
// (§5.9.3): host authentication only, the size cap applied up front. The
// grant is a PUT of exactly byteLength bytes into the actor's staging
// slot, verified against the blob id before it counts as present. A
// present marker is returned only when the actor may already reference
// the blob (it uploaded it, or may download it): otherwise a grant
// would confirm another scope's blob without proof of possession.
func (e *Engine) GrantBlobUpload(ctx context.Context, auth Auth, blobID string, byteLength int64) (*BlobGrant, error) {
	if err := e.requireBlobs(); err != nil {
		return nil, err
	}
	if !blobs.ValidID(blobID) {
		return nil, syncerr.New(syncerr.BlobHashMismatch, "blob id is not a canonical sha256:<64 lowercase hex> content address (§5.9.1)")
	}
	if byteLength < 0 || byteLength > wire.MaxSafeInt {
		return nil, syncerr.New(syncerr.InvalidRequest, "byteLength must be a non-negative safe integer (§5.9.3)")
	}
	if byteLength > e.limits.MaxBlobBytes {
		return nil, syncerr.New(syncerr.BlobTooLarge, "blob of %d bytes exceeds the %d-byte limit (§5.9.3)", byteLength, e.limits.MaxBlobBytes)
	}
	now := e.now()
	st, err := e.blobs.Lookup(ctx, auth.Partition, blobID, auth.ActorID, e.limits.MaxBlobBytes)
	if err != nil {
		return nil, storeErr(err, "look up blob")
	}
	if st.Present && st.Proven {
		if err := e.blobs.Touch(ctx, auth.Partition, blobID, now); err != nil {
			return nil, storeErr(err, "touch blob")
		}
		return &BlobGrant{Present: true}, nil
	}
	p := e.blobSigner()
	if p == nil {
		// §5.9.3: no presign config — the direct PUT is the path.
		return &BlobGrant{}, nil
	}
	url, exp, err := p.PresignPut(ctx, auth.Partition, blobID, auth.ActorID, byteLength, now, e.limits.SignedURLTTL.Milliseconds())
	if err != nil {
		return nil, storeErr(err, "presign blob upload")
	}
	return &BlobGrant{URL: url, ExpiresAtMs: exp}, nil
}

// BlobDownload is an authorized download (§5.9.5): a presigned URL when
// the host configured one (always-issue), otherwise the bytes.
type BlobDownload struct {
	BlobID      string
	ByteLength  int64
	URL         string
	ExpiresAtMs int64
	// Open streams the bytes when URL is empty.
	Open func(ctx context.Context) (io.ReadCloser, error)
}

// AuthorizeBlob answers GET <mount>/blobs/{blobId} (§5.9.5): 404
// blob.not_found when the partition holds no such blob, 403
// blob.forbidden unless a row of the reference index passes the actor's
// allowed scopes (re-resolved on every request); inline selects the
// streamed answer even when presigned URLs are configured.
func (e *Engine) AuthorizeBlob(ctx context.Context, auth Auth, blobID string, inline bool) (*BlobDownload, error) {
	if err := e.requireBlobs(); err != nil {
		return nil, err
	}
	if !blobs.ValidID(blobID) {
		return nil, syncerr.New(syncerr.BlobNotFound, "blob id is not canonical; no such blob (§5.9.1)")
	}
	st, err := e.blobs.Lookup(ctx, auth.Partition, blobID, auth.ActorID, e.limits.MaxBlobBytes)
	if err != nil {
		return nil, storeErr(err, "look up blob")
	}
	if !st.Present {
		return nil, syncerr.New(syncerr.BlobNotFound, "unknown blob (§5.9.5)")
	}
	allowed, rerr := e.resolve(ctx, auth, "")
	if rerr != nil {
		return nil, syncerr.New(syncerr.BlobForbidden, "scope resolution failed; the download is denied (§5.9.5)")
	}
	ok, err := e.blobVisible(ctx, auth.Partition, blobID, allowed)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, syncerr.New(syncerr.BlobForbidden, "no row this actor may see references the blob (§5.9.5)")
	}
	dl := &BlobDownload{BlobID: blobID, ByteLength: st.Size}
	if p := e.blobSigner(); p != nil && !inline {
		url, exp, err := p.PresignGet(ctx, auth.Partition, blobID, e.now(), e.limits.SignedURLTTL.Milliseconds())
		if err != nil {
			return nil, storeErr(err, "presign blob download")
		}
		dl.URL, dl.ExpiresAtMs = url, exp
		return dl, nil
	}
	dl.Open = func(ctx context.Context) (io.ReadCloser, error) {
		rc, _, err := e.blobs.Open(ctx, auth.Partition, blobID)
		if err != nil {
			return nil, blobErr(err, "open blob")
		}
		return rc, nil
	}
	return dl, nil
}

// SweepBlobs is the host-scheduled orphan sweep (§5.9.2): it deletes
// verified blobs untouched for longer than the grace period that no row
// of their partition references, and staged uploads older than the
// grace period (a grant lives at most 15 minutes, so such an upload was
// never referenced). It returns how many objects it deleted.
func (e *Engine) SweepBlobs(ctx context.Context) (int, error) {
	if e.blobs == nil {
		return 0, nil
	}
	cutoff := e.now() - e.limits.BlobOrphanGrace.Milliseconds()
	var victims []blobs.Object
	err := e.blobs.List(ctx, func(o blobs.Object) bool {
		if o.TouchedAtMs < cutoff {
			victims = append(victims, o)
		}
		return true
	})
	if err != nil {
		return 0, storeErr(err, "list blobs")
	}
	n := 0
	for _, o := range victims {
		if !o.Staged {
			_, ids, err := e.blobReferencers(ctx, o.Partition, o.BlobID, 1)
			if err != nil {
				return n, err
			}
			if slices.ContainsFunc(ids, func(s []string) bool { return len(s) > 0 }) {
				continue // live reference: never deleted
			}
		}
		if !o.Staged {
			// A push that referenced the blob since the listing touched it
			// first (mayReference), so a fresh age means keep it.
			st, err := e.blobs.Lookup(ctx, o.Partition, o.BlobID, "", e.limits.MaxBlobBytes)
			if err != nil {
				return n, storeErr(err, "look up blob")
			}
			if !st.Present || st.TouchedAtMs >= cutoff {
				continue
			}
		}
		if err := e.blobs.Delete(ctx, o); err != nil {
			return n, storeErr(err, "delete blob")
		}
		n++
	}
	return n, nil
}
