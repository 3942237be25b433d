// Package blobs holds the storage-independent half of SSP2 blobs (§5.9):
// blob ids and canonical BlobRef values (§5.9.1), the blob store contract
// (§5.9.2), content-address verification (§5.9.3) and the reference-index
// naming shared with the declared-reference index (§5.9.4). Backends live
// in packages named by technology (memblobs, s3blobs); the engine enforces
// the push-time existence check (§5.9.6) and download authorization
// (§5.9.5) over this contract. No AWS import.
//
// Storage model. Blobs are stored per partition: a blob uploaded in one
// partition does not exist in another, so a reference across partitions
// fails the §5.9.6 existence check like an absent blob. Within a
// partition, a blob counts as present only once its bytes were verified
// against the blob id; a presigned upload lands in a per-actor staging
// slot and is verified (and promoted, or deleted on mismatch) the first
// time it is looked up. Every verified upload also records a possession
// proof for the uploading actor, which the engine uses so that knowing a
// blob id never lets an actor reference (and so download) bytes it never
// held (§5.9.5: a blobId is never a capability).
package blobs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash"
	"io"
	"strings"

	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
)

// IDPrefix starts every blob id (§5.9.1, the §5.1 content-address form).
const IDPrefix = "sha256:"

// ParseID returns the SHA-256 digest a canonical blob id names:
// "sha256:" followed by exactly 64 lowercase hex digits (§5.9.1).
func ParseID(id string) (sum [32]byte, ok bool) {
	h, found := strings.CutPrefix(id, IDPrefix)
	if !found || len(h) != 64 {
		return sum, false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return sum, false
		}
	}
	if _, err := hex.Decode(sum[:], []byte(h)); err != nil {
		return sum, false
	}
	return sum, true
}

// ValidID reports whether id is a canonical blob id.
func ValidID(id string) bool { _, ok := ParseID(id); return ok }

// IDOf is the blob id of bytes with digest sum.
func IDOf(sum [32]byte) string { return IDPrefix + hex.EncodeToString(sum[:]) }

// IDOfBytes is the blob id of b.
func IDOfBytes(b []byte) string { return IDOf(sha256.Sum256(b)) }

// Ref is the part of a canonical BlobRef the server uses (§5.9.1); the
// advisory mediaType and name are never trusted.
type Ref struct {
	BlobID     string
	ByteLength int64
}

// ParseRef reads a blob_ref column value. The row codec has already
// validated the shape at decode (§5.9.1); ok is false only for text that
// is not a canonical BlobRef.
func ParseRef(s string) (Ref, bool) {
	if !rowcodec.ValidBlobRef(s) {
		return Ref{}, false
	}
	var doc struct {
		BlobID     string `json:"blobId"`
		ByteLength int64  `json:"byteLength"`
	}
	if err := json.Unmarshal([]byte(s), &doc); err != nil || !ValidID(doc.BlobID) {
		return Ref{}, false
	}
	return Ref{BlobID: doc.BlobID, ByteLength: doc.ByteLength}, true
}

// IndexColumn is the reference-index column name under which the rows
// whose blob_ref column `column` holds a blob are indexed (§5.9.4). Blob
// entries share the store's reference index (store.RefEntry with
// ParentID = blob id) with declared references (§6.11); the "_sync"
// prefix is reserved by the schema compiler for server storage, so no
// declared reference column can collide with it.
func IndexColumn(column string) string { return "_sync_blob:" + column }

// Errors backends return (wrapped or not).
var (
	// ErrNotFound: no verified blob under that id in the partition.
	ErrNotFound = errors.New("blobs: not found")
	// ErrHashMismatch: the bytes do not hash to the blob id (§5.9.3).
	ErrHashMismatch = errors.New("blobs: content does not match the blob id")
	// ErrTooLarge: the bytes exceed the size limit (§5.9.3).
	ErrTooLarge = errors.New("blobs: blob exceeds the size limit")
)

// Status is what a lookup learns about one blob of a partition for one
// actor.
type Status struct {
	// Present: verified bytes are stored under the id (§5.9.2).
	Present bool
	// Proven: the actor uploaded these bytes itself (a verified direct
	// upload, or a staged presigned upload that verified) within the
	// backend's proof lifetime.
	Proven bool
	// Size is the stored byte length when Present.
	Size int64
	// TouchedAtMs is when the blob was last uploaded or touched: the age
	// the orphan sweep measures (§5.9.2).
	TouchedAtMs int64
}

// Object is one stored object as the orphan sweep sees it.
type Object struct {
	Partition string
	BlobID    string
	// Staged marks an unverified presigned upload of Actor (never
	// present); otherwise the object is a verified blob.
	Staged      bool
	Actor       string
	Size        int64
	TouchedAtMs int64
}

// Store holds blob bytes by (partition, blob id) (§5.9.2). Blobs are
// durable: only Delete (the orphan sweep) removes a verified blob.
type Store interface {
	// Lookup reports the blob's status for actor. When the blob is not
	// yet present but actor has a staged upload of it, Lookup verifies
	// the staged bytes: matching bytes within maxBytes become the present
	// blob (and actor's proof); anything else is deleted, and the blob
	// stays absent.
	Lookup(ctx context.Context, partition, blobID, actor string, maxBytes int64) (Status, error)
	// Put stores body as blobID for actor, reading at most maxBytes+1
	// bytes. It stores nothing and returns ErrHashMismatch when the bytes
	// do not hash to blobID, ErrTooLarge when there are more than
	// maxBytes. A blob already present is not rewritten; either way the
	// actor's possession proof is recorded and the blob touched.
	Put(ctx context.Context, partition, blobID, actor string, body io.Reader, maxBytes int64) error
	// Touch resets the blob's age for the orphan sweep (§5.9.2).
	Touch(ctx context.Context, partition, blobID string, nowMs int64) error
	// Open streams a present blob, or ErrNotFound.
	Open(ctx context.Context, partition, blobID string) (io.ReadCloser, int64, error)
	// Delete removes the object (a verified blob with its proofs, or one
	// actor's staged upload when obj.Staged).
	Delete(ctx context.Context, obj Object) error
	// List calls fn for every stored object, staged ones included, until
	// fn returns false.
	List(ctx context.Context, fn func(Object) bool) error
}

// Presigner issues direct-to-storage URLs (§5.9.3 upload grant, §5.9.5
// presigned download). Expiries are epoch ms, never later than
// nowMs+ttlMs.
type Presigner interface {
	// PresignPut grants one PUT of exactly byteLength bytes into actor's
	// staging slot for blobID.
	PresignPut(ctx context.Context, partition, blobID, actor string, byteLength, nowMs, ttlMs int64) (url string, expiresAtMs int64, err error)
	// PresignGet grants GETs of the present blob.
	PresignGet(ctx context.Context, partition, blobID string, nowMs, ttlMs int64) (url string, expiresAtMs int64, err error)
}

// Verifier hashes bytes as they stream and checks them against a blob id
// and a size limit (§5.9.3: the server recomputes the content address).
type Verifier struct {
	want [32]byte
	max  int64
	n    int64
	h    hash.Hash
}

// NewVerifier checks bytes against blobID (which must be canonical) and
// maxBytes.
func NewVerifier(blobID string, maxBytes int64) (*Verifier, bool) {
	sum, ok := ParseID(blobID)
	if !ok {
		return nil, false
	}
	return &Verifier{want: sum, max: maxBytes, h: sha256.New()}, true
}

// Write implements io.Writer.
func (v *Verifier) Write(p []byte) (int, error) {
	v.n += int64(len(p))
	if v.n > v.max {
		return 0, ErrTooLarge
	}
	return v.h.Write(p)
}

// Len is the byte count written so far.
func (v *Verifier) Len() int64 { return v.n }

// Check reports ErrTooLarge or ErrHashMismatch for the bytes written.
func (v *Verifier) Check() error {
	if v.n > v.max {
		return ErrTooLarge
	}
	var got [32]byte
	v.h.Sum(got[:0])
	if got != v.want {
		return ErrHashMismatch
	}
	return nil
}

// ReadVerified reads all of r (at most maxBytes+1 bytes) and returns it
// when it is exactly the blob blobID within maxBytes.
func ReadVerified(r io.Reader, blobID string, maxBytes int64) ([]byte, error) {
	v, ok := NewVerifier(blobID, maxBytes)
	if !ok {
		return nil, ErrHashMismatch
	}
	b, err := io.ReadAll(io.LimitReader(r, maxBytes+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > maxBytes {
		return nil, ErrTooLarge
	}
	_, _ = v.Write(b)
	if err := v.Check(); err != nil {
		return nil, err
	}
	return b, nil
}
