// Package memblobs is an in-memory blobs.Store with a native presigner
// (HMAC-signed URLs this package also serves, playing the object host):
// the store of the local runner, the conformance host and engine tests.
package memblobs

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/blobs"
)

// ProofTTL is how long an upload counts as the uploader's proof of
// possession (the default orphan grace period, §5.9.2).
const ProofTTL = 24 * time.Hour

// Options configure a Store.
type Options struct {
	// Now is the clock in epoch ms; nil means the wall clock.
	Now func() int64
	// Key signs presigned URLs (at least 32 bytes for Presign to work).
	Key []byte
	// BaseURL prefixes presigned URLs: <BaseURL>/<blobId>?bt=<token>.
	BaseURL string
}

type blob struct {
	data    []byte
	touched int64
}

type staged struct {
	data []byte
	at   int64
}

type pkey struct{ partition, blobID string }

// Store is safe for concurrent use.
type Store struct {
	opts   Options
	mu     sync.Mutex
	blobs  map[pkey]*blob
	proofs map[pkey]map[string]int64
	staged map[pkey]map[string]*staged
}

// New returns an empty store.
func New(opts Options) *Store {
	if opts.Now == nil {
		opts.Now = func() int64 { return time.Now().UnixMilli() }
	}
	return &Store{opts: opts, blobs: map[pkey]*blob{}, proofs: map[pkey]map[string]int64{}, staged: map[pkey]map[string]*staged{}}
}

// Lookup implements blobs.Store.
func (s *Store) Lookup(_ context.Context, partition, blobID, actor string, maxBytes int64) (blobs.Status, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := pkey{partition, blobID}
	now := s.opts.Now()
	if st := s.staged[k][actor]; st != nil && actor != "" {
		// Verify the staged upload: promote it or drop it (§5.9.3).
		delete(s.staged[k], actor)
		if _, err := blobs.ReadVerified(bytes.NewReader(st.data), blobID, maxBytes); err == nil {
			s.storeLocked(k, actor, st.data, now)
		}
	}
	b := s.blobs[k]
	if b == nil {
		return blobs.Status{}, nil
	}
	at, ok := s.proofs[k][actor]
	return blobs.Status{Present: true, Proven: ok && actor != "" && now-at < ProofTTL.Milliseconds(), Size: int64(len(b.data)), TouchedAtMs: b.touched}, nil
}

func (s *Store) storeLocked(k pkey, actor string, data []byte, now int64) {
	if b := s.blobs[k]; b != nil {
		b.touched = now
	} else {
		s.blobs[k] = &blob{data: data, touched: now}
	}
	if s.proofs[k] == nil {
		s.proofs[k] = map[string]int64{}
	}
	s.proofs[k][actor] = now
}

// Put implements blobs.Store.
func (s *Store) Put(_ context.Context, partition, blobID, actor string, body io.Reader, maxBytes int64) error {
	data, err := blobs.ReadVerified(body, blobID, maxBytes)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.storeLocked(pkey{partition, blobID}, actor, data, s.opts.Now())
	return nil
}

// Touch implements blobs.Store.
func (s *Store) Touch(_ context.Context, partition, blobID string, nowMs int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.blobs[pkey{partition, blobID}]; b != nil {
		b.touched = nowMs
	}
	return nil
}

// Open implements blobs.Store.
func (s *Store) Open(_ context.Context, partition, blobID string) (io.ReadCloser, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.blobs[pkey{partition, blobID}]
	if b == nil {
		return nil, 0, blobs.ErrNotFound
	}
	return io.NopCloser(bytes.NewReader(b.data)), int64(len(b.data)), nil
}

// Delete implements blobs.Store.
func (s *Store) Delete(_ context.Context, o blobs.Object) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := pkey{o.Partition, o.BlobID}
	if o.Staged {
		delete(s.staged[k], o.Actor)
		return nil
	}
	delete(s.blobs, k)
	delete(s.proofs, k)
	return nil
}

// List implements blobs.Store.
func (s *Store) List(_ context.Context, fn func(blobs.Object) bool) error {
	s.mu.Lock()
	var objs []blobs.Object
	for k, b := range s.blobs {
		objs = append(objs, blobs.Object{Partition: k.partition, BlobID: k.blobID, Size: int64(len(b.data)), TouchedAtMs: b.touched})
	}
	for k, m := range s.staged {
		for a, st := range m {
			objs = append(objs, blobs.Object{Partition: k.partition, BlobID: k.blobID, Staged: true, Actor: a, Size: int64(len(st.data)), TouchedAtMs: st.at})
		}
	}
	s.mu.Unlock()
	for _, o := range objs {
		if !fn(o) {
			break
		}
	}
	return nil
}

// SetBaseURL changes the prefix of URLs minted from now on.
func (s *Store) SetBaseURL(base string) {
	s.mu.Lock()
	s.opts.BaseURL = base
	s.mu.Unlock()
}

// Len reports the number of verified blobs and staged uploads held.
func (s *Store) Len() (present, stagedN int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.staged {
		stagedN += len(m)
	}
	return len(s.blobs), stagedN
}

// Native presigned URLs: bt = base64url(claims) "." base64url(HMAC-SHA256).

type claims struct {
	Op  string `json:"op"` // "put" or "get"
	P   string `json:"p"`
	B   string `json:"b"`
	A   string `json:"a,omitempty"`
	N   int64  `json:"n"`
	Exp int64  `json:"exp"` // epoch ms
}

// ErrBadURL reports a presigned URL that does not verify (forged,
// expired, for another operation or blob, or the wrong length).
var ErrBadURL = errors.New("memblobs: presigned URL does not verify")

func (s *Store) sign(c claims) (string, error) {
	if len(s.opts.Key) < 32 {
		return "", errors.New("memblobs: no signing key configured")
	}
	payload, _ := json.Marshal(c)
	m := hmac.New(sha256.New, s.opts.Key)
	m.Write(payload)
	tok := base64.RawURLEncoding.EncodeToString(payload) + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
	s.mu.Lock()
	base := s.opts.BaseURL
	s.mu.Unlock()
	return strings.TrimRight(base, "/") + "/" + url.PathEscape(c.B) + "?bt=" + tok, nil
}

func (s *Store) verify(raw, op string) (claims, error) {
	var c claims
	u, err := url.Parse(raw)
	if err != nil {
		return c, ErrBadURL
	}
	payloadB64, macB64, ok := strings.Cut(u.Query().Get("bt"), ".")
	if !ok || len(s.opts.Key) < 32 {
		return c, ErrBadURL
	}
	payload, err1 := base64.RawURLEncoding.DecodeString(payloadB64)
	mac, err2 := base64.RawURLEncoding.DecodeString(macB64)
	if err1 != nil || err2 != nil {
		return c, ErrBadURL
	}
	m := hmac.New(sha256.New, s.opts.Key)
	m.Write(payload)
	if !hmac.Equal(mac, m.Sum(nil)) || json.Unmarshal(payload, &c) != nil {
		return c, ErrBadURL
	}
	name := u.Path[strings.LastIndexByte(u.Path, '/')+1:]
	if c.Op != op || name != c.B || s.opts.Now() >= c.Exp {
		return c, ErrBadURL
	}
	return c, nil
}

// PresignPut implements blobs.Presigner.
func (s *Store) PresignPut(_ context.Context, partition, blobID, actor string, byteLength, nowMs, ttlMs int64) (string, int64, error) {
	exp := nowMs + ttlMs
	u, err := s.sign(claims{Op: "put", P: partition, B: blobID, A: actor, N: byteLength, Exp: exp})
	return u, exp, err
}

// PresignGet implements blobs.Presigner.
func (s *Store) PresignGet(_ context.Context, partition, blobID string, nowMs, ttlMs int64) (string, int64, error) {
	exp := nowMs + ttlMs
	u, err := s.sign(claims{Op: "get", P: partition, B: blobID, Exp: exp})
	return u, exp, err
}

// ServePut plays the object host for a presigned PUT: the URL must
// verify and the body be exactly the granted length (the Content-Length
// binding); the bytes land in the actor's staging slot unverified, as on
// S3, and are verified when first looked up.
func (s *Store) ServePut(rawURL string, body []byte) error {
	c, err := s.verify(rawURL, "put")
	if err != nil {
		return err
	}
	if int64(len(body)) != c.N {
		return ErrBadURL
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := pkey{c.P, c.B}
	if s.staged[k] == nil {
		s.staged[k] = map[string]*staged{}
	}
	s.staged[k][c.A] = &staged{data: bytes.Clone(body), at: s.opts.Now()}
	return nil
}

// ServeGet plays the object host for a presigned GET.
func (s *Store) ServeGet(rawURL string) ([]byte, error) {
	c, err := s.verify(rawURL, "get")
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.blobs[pkey{c.P, c.B}]
	if b == nil {
		return nil, blobs.ErrNotFound
	}
	return bytes.Clone(b.data), nil
}
