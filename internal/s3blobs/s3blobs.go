// Package s3blobs is the S3 blob store (§5.9.2) with delegated presign
// (§5.9.3 upload grants, §5.9.5 downloads).
//
// Object layout under the configured prefix (default "blobs/"), with the
// partition and actor names base64url-encoded so any name is a valid key:
//
//	<prefix><partition>/<hex>                      verified blob bytes
//	<prefix><partition>/staged/<hex>/<actor>       a presigned upload, unverified
//	<prefix><partition>/proof/<hex>/<actor>        empty: actor's possession proof
//
// Only the server writes a verified key, after hashing the bytes: a direct
// upload is hashed as it arrives; a presigned upload lands in the actor's
// staged slot, and the first lookup of the blob by that actor (the push
// existence check, or a later grant) reads it back, verifies SHA-256 and
// size, and copies it to the verified key — or deletes it. So a grant can
// never place other bytes under a content address (§5.9.3), even though S3
// itself is not asked to check the hash: stock clients PUT the body with
// no checksum header, so binding x-amz-checksum-sha256 into the signature
// would break them. The grant does bind Content-Length (a signed header),
// so the object cannot exceed the granted size.
//
// A verified object's LastModified is the blob's age for the orphan
// sweep; Touch rewrites it with an in-place copy (no data transfer).
package s3blobs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/skyfold/syncular-lambda/internal/core/blobs"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/s3errs"
)

// DefaultPrefix is where blobs live in the bucket (the IAM policy of the
// blob function is scoped to it).
const DefaultPrefix = "blobs/"

// ProofTTL is how long an upload proves possession (the default orphan
// grace period, §5.9.2).
const ProofTTL = 24 * time.Hour

// MaxURLTTL caps presigned URL lifetimes (§5.4: at most 15 minutes).
const MaxURLTTL = 15 * time.Minute

// credentialSkew is kept between a URL's expiry and its credentials'.
const credentialSkew = 30 * time.Second

// Store implements blobs.Store and blobs.Presigner over one bucket.
type Store struct {
	s3     *s3.Client
	bucket string
	prefix string
	// now stamps touch and proof times (metadata "touched"/"at", epoch
	// ms), which lookups prefer over LastModified; tests share the
	// engine's virtual clock through WithClock.
	now func() int64
}

// New returns a store; prefix "" means DefaultPrefix.
func New(c *s3.Client, bucket, prefix string) *Store {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return &Store{s3: c, bucket: bucket, prefix: prefix, now: func() int64 { return time.Now().UnixMilli() }}
}

// WithClock sets the clock that stamps touch and proof times.
func (s *Store) WithClock(now func() int64) *Store { s.now = now; return s }

// stamp is the object's recorded time: its metadata stamp when it has
// one, else LastModified.
func stamp(meta map[string]string, key string, lastModified time.Time) int64 {
	if v, err := strconv.ParseInt(meta[key], 10, 64); err == nil {
		return v
	}
	return lastModified.UnixMilli()
}

func enc(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func dec(s string) (string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	return string(b), err == nil
}

func hexOf(blobID string) (string, bool) {
	if !blobs.ValidID(blobID) {
		return "", false
	}
	return blobID[len(blobs.IDPrefix):], true
}

func (s *Store) blobKey(p, h string) string { return s.prefix + enc(p) + "/" + h }
func (s *Store) stagedKey(p, h, a string) string {
	return s.prefix + enc(p) + "/staged/" + h + "/" + enc(a)
}
func (s *Store) proofKey(p, h, a string) string {
	return s.prefix + enc(p) + "/proof/" + h + "/" + enc(a)
}

func notFound(err error) bool {
	return s3errs.IsStatus(err, http.StatusNotFound, "NoSuchKey") || s3errs.IsStatus(err, http.StatusNotFound, "NotFound")
}

// s3Err maps throttling and 5xx to sync.rate_limited.
func s3Err(op string, err error) error {
	if s3errs.Busy(err) {
		return syncerr.Wrap(err, syncerr.RateLimited, "object storage is busy (%s)", op)
	}
	return fmt.Errorf("s3blobs: %s: %w", op, err)
}

// head returns the object's size and time stamp (metadata stampKey, else
// LastModified), ok=false when absent.
func (s *Store) head(ctx context.Context, key, stampKey string) (int64, int64, bool, error) {
	out, err := s.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: aws.String(key)})
	if notFound(err) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, s3Err("head", err)
	}
	return aws.ToInt64(out.ContentLength), stamp(out.Metadata, stampKey, aws.ToTime(out.LastModified)), true, nil
}

// Lookup implements blobs.Store: HEAD of the blob and of the actor's
// proof; when the actor holds no proof, its staged upload (if any) is
// verified and promoted or deleted.
func (s *Store) Lookup(ctx context.Context, partition, blobID, actor string, maxBytes int64) (blobs.Status, error) {
	h, ok := hexOf(blobID)
	if !ok {
		return blobs.Status{}, nil
	}
	proven := false
	if actor != "" {
		_, at, ok, err := s.head(ctx, s.proofKey(partition, h, actor), "at")
		if err != nil {
			return blobs.Status{}, err
		}
		proven = ok && s.now()-at < ProofTTL.Milliseconds()
		if !proven {
			if proven, err = s.promote(ctx, partition, blobID, h, actor, maxBytes); err != nil {
				return blobs.Status{}, err
			}
		}
	}
	size, at, ok, err := s.head(ctx, s.blobKey(partition, h), "touched")
	if err != nil || !ok {
		return blobs.Status{}, err
	}
	return blobs.Status{Present: true, Proven: proven && actor != "", Size: size, TouchedAtMs: at}, nil
}

// promote verifies actor's staged upload of blobID, if there is one.
func (s *Store) promote(ctx context.Context, partition, blobID, h, actor string, maxBytes int64) (bool, error) {
	key := s.stagedKey(partition, h, actor)
	out, err := s.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: aws.String(key)})
	if notFound(err) {
		return false, nil
	}
	if err != nil {
		return false, s3Err("get staged upload", err)
	}
	data, verr := blobs.ReadVerified(out.Body, blobID, maxBytes)
	out.Body.Close()
	if verr == nil {
		if err := s.store(ctx, partition, h, actor, data); err != nil {
			return false, err
		}
	} else if !errors.Is(verr, blobs.ErrHashMismatch) && !errors.Is(verr, blobs.ErrTooLarge) {
		return false, s3Err("read staged upload", verr)
	}
	// Verified or not, the staged copy goes: mismatching bytes are never
	// referenced (§5.9.3).
	if _, err := s.s3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: aws.String(key)}); err != nil {
		return false, s3Err("delete staged upload", err)
	}
	return verr == nil, nil
}

// store writes verified bytes (once: If-None-Match) and actor's proof.
func (s *Store) store(ctx context.Context, partition, h, actor string, data []byte) error {
	sum := sha256.Sum256(data)
	_, err := s.s3.PutObject(ctx, &s3.PutObjectInput{
		Bucket: &s.bucket, Key: aws.String(s.blobKey(partition, h)),
		Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data))),
		ContentType: aws.String("application/octet-stream"),
		// S3 re-checks the digest we computed.
		ChecksumSHA256: aws.String(base64.StdEncoding.EncodeToString(sum[:])),
		IfNoneMatch:    aws.String("*"),
		Metadata:       map[string]string{"touched": strconv.FormatInt(s.now(), 10)},
	})
	switch {
	case s3errs.IsStatus(err, http.StatusPreconditionFailed, "PreconditionFailed") || s3errs.IsStatus(err, http.StatusConflict, "ConditionalRequestConflict"):
		// Already present: content addressing makes it the same bytes.
		if err := s.Touch(ctx, partition, blobs.IDPrefix+h, s.now()); err != nil {
			return err
		}
	case err != nil:
		return s3Err("put blob", err)
	}
	if _, err := s.s3.PutObject(ctx, &s3.PutObjectInput{
		Bucket: &s.bucket, Key: aws.String(s.proofKey(partition, h, actor)),
		Body: bytes.NewReader(nil), ContentLength: aws.Int64(0),
		Metadata: map[string]string{"at": strconv.FormatInt(s.now(), 10)},
	}); err != nil {
		return s3Err("put proof", err)
	}
	return nil
}

// Put implements blobs.Store: the bytes are hashed in memory (a direct
// upload is bounded by the request size) and stored only when they match.
func (s *Store) Put(ctx context.Context, partition, blobID, actor string, body io.Reader, maxBytes int64) error {
	h, ok := hexOf(blobID)
	if !ok {
		return blobs.ErrHashMismatch
	}
	data, err := blobs.ReadVerified(body, blobID, maxBytes)
	if err != nil {
		return err
	}
	return s.store(ctx, partition, h, actor, data)
}

// Touch implements blobs.Store: an in-place copy resets LastModified.
func (s *Store) Touch(ctx context.Context, partition, blobID string, nowMs int64) error {
	h, ok := hexOf(blobID)
	if !ok {
		return nil
	}
	key := s.blobKey(partition, h)
	_, err := s.s3.CopyObject(ctx, &s3.CopyObjectInput{
		Bucket: &s.bucket, Key: aws.String(key),
		CopySource:        aws.String(s.bucket + "/" + (&url.URL{Path: key}).EscapedPath()),
		MetadataDirective: types.MetadataDirectiveReplace,
		ContentType:       aws.String("application/octet-stream"),
		Metadata:          map[string]string{"touched": strconv.FormatInt(nowMs, 10)},
	})
	if notFound(err) {
		return nil
	}
	if err != nil {
		return s3Err("touch blob", err)
	}
	return nil
}

// Open implements blobs.Store.
func (s *Store) Open(ctx context.Context, partition, blobID string) (io.ReadCloser, int64, error) {
	h, ok := hexOf(blobID)
	if !ok {
		return nil, 0, blobs.ErrNotFound
	}
	out, err := s.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: aws.String(s.blobKey(partition, h))})
	if notFound(err) {
		return nil, 0, blobs.ErrNotFound
	}
	if err != nil {
		return nil, 0, s3Err("get blob", err)
	}
	return out.Body, aws.ToInt64(out.ContentLength), nil
}

// Delete implements blobs.Store: a verified blob goes with its proofs.
func (s *Store) Delete(ctx context.Context, o blobs.Object) error {
	h, ok := hexOf(o.BlobID)
	if !ok {
		return nil
	}
	keys := []string{}
	if o.Staged {
		keys = append(keys, s.stagedKey(o.Partition, h, o.Actor))
	} else {
		keys = append(keys, s.blobKey(o.Partition, h))
		err := s.list(ctx, s.prefix+enc(o.Partition)+"/proof/"+h+"/", func(k string, _ types.Object) bool {
			keys = append(keys, k)
			return true
		})
		if err != nil {
			return err
		}
	}
	for _, k := range keys {
		if _, err := s.s3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: aws.String(k)}); err != nil {
			return s3Err("delete", err)
		}
	}
	return nil
}

func (s *Store) list(ctx context.Context, prefix string, fn func(string, types.Object) bool) error {
	p := s3.NewListObjectsV2Paginator(s.s3, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(prefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return s3Err("list", err)
		}
		for _, o := range page.Contents {
			if !fn(aws.ToString(o.Key), o) {
				return nil
			}
		}
	}
	return nil
}

// List implements blobs.Store (verified blobs and staged uploads).
func (s *Store) List(ctx context.Context, fn func(blobs.Object) bool) error {
	return s.list(ctx, s.prefix, func(k string, o types.Object) bool {
		parts := strings.Split(strings.TrimPrefix(k, s.prefix), "/")
		p, ok := dec(parts[0])
		if !ok {
			return true
		}
		obj := blobs.Object{Partition: p, Size: aws.ToInt64(o.Size), TouchedAtMs: aws.ToTime(o.LastModified).UnixMilli()}
		switch {
		case len(parts) == 2:
			obj.BlobID = blobs.IDPrefix + parts[1]
		case len(parts) == 4 && parts[1] == "staged":
			a, ok := dec(parts[3])
			if !ok {
				return true
			}
			obj.BlobID, obj.Staged, obj.Actor = blobs.IDPrefix+parts[2], true, a
		default:
			return true // proofs go with their blob
		}
		if !blobs.ValidID(obj.BlobID) {
			return true
		}
		return fn(obj)
	})
}

// ttl bounds a URL lifetime by MaxURLTTL and the signing credentials.
func (s *Store) ttl(ctx context.Context, ttlMs int64) (time.Duration, error) {
	ttl := min(time.Duration(ttlMs)*time.Millisecond, MaxURLTTL)
	prov := s.s3.Options().Credentials
	if prov == nil {
		return 0, errors.New("s3blobs: the S3 client has no credentials to sign with")
	}
	creds, err := prov.Retrieve(ctx)
	if err != nil {
		return 0, fmt.Errorf("s3blobs: signing credentials: %w", err)
	}
	if creds.CanExpire {
		ttl = min(ttl, time.Until(creds.Expires)-credentialSkew)
	}
	ttl = ttl.Truncate(time.Second)
	if ttl < time.Second {
		return 0, errors.New("s3blobs: signing credentials expire too soon to presign a URL")
	}
	return ttl, nil
}

// PresignPut implements blobs.Presigner: a PUT into actor's staged slot
// with Content-Length signed to byteLength.
func (s *Store) PresignPut(ctx context.Context, partition, blobID, actor string, byteLength, nowMs, ttlMs int64) (string, int64, error) {
	h, ok := hexOf(blobID)
	if !ok {
		return "", 0, fmt.Errorf("s3blobs: malformed blob id %q", blobID)
	}
	ttl, err := s.ttl(ctx, ttlMs)
	if err != nil {
		return "", 0, err
	}
	req, err := s3.NewPresignClient(s.s3).PresignPutObject(ctx, &s3.PutObjectInput{
		Bucket: &s.bucket, Key: aws.String(s.stagedKey(partition, h, actor)),
		ContentLength: aws.Int64(byteLength),
	}, s3.WithPresignExpires(ttl))
	if err != nil {
		return "", 0, fmt.Errorf("s3blobs: presign put: %w", err)
	}
	return req.URL, nowMs + ttl.Milliseconds(), nil
}

// PresignGet implements blobs.Presigner.
func (s *Store) PresignGet(ctx context.Context, partition, blobID string, nowMs, ttlMs int64) (string, int64, error) {
	h, ok := hexOf(blobID)
	if !ok {
		return "", 0, fmt.Errorf("s3blobs: malformed blob id %q", blobID)
	}
	ttl, err := s.ttl(ctx, ttlMs)
	if err != nil {
		return "", 0, err
	}
	req, err := s3.NewPresignClient(s.s3).PresignGetObject(ctx, &s3.GetObjectInput{
		Bucket: &s.bucket, Key: aws.String(s.blobKey(partition, h)),
	}, s3.WithPresignExpires(ttl))
	if err != nil {
		return "", 0, fmt.Errorf("s3blobs: presign get: %w", err)
	}
	return req.URL, nowMs + ttl.Milliseconds(), nil
}
