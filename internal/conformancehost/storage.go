package conformancehost

import (
	"context"
	"crypto/rand"
	"errors"

	"github.com/skyfold/syncular-lambda/internal/core/blobs"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/memblobs"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// storage is one instance's stores and the storage-side control hooks the
// catalog drives (backups, the idempotency fault, the presigned object
// host). The memory backend journals a memstore; the production backend
// (prodstore.go) is dynamostore, s3segments and s3blobs on their own
// table and bucket.
type storage interface {
	// Store is what the engines serve over; its dynamic type keeps every
	// optional store extension of the backend (store.CommitQueue,
	// store.SchemaStore, …) so the engine takes the same paths it takes
	// in production.
	Store() store.Store
	// Schema is the store's rolling-upgrade side (declareBackfillCheckpoint).
	Schema() store.SchemaStore
	Segments() store.SegmentStore
	Blobs() blobs.Store
	BlobPresigner() blobs.Presigner
	// FetchBlobURL and PutBlobURL play the client's direct hop to the
	// object host behind a presigned URL.
	FetchBlobURL(ctx context.Context, rawURL string) ([]byte, error)
	PutBlobURL(ctx context.Context, rawURL string, body []byte) error
	// FailNextOutcomeRead makes the next idempotency lookup (a GetOutcome,
	// or the key check inside Commit or PutRejection) fail as unreadable.
	FailNextOutcomeRead()
	// Capture takes a backup; Restore brings it back (errNoBackup when
	// none was taken) and then runs after on the restored store (the
	// §2.1 epoch rotation).
	Capture(ctx context.Context) error
	Restore(ctx context.Context, after func(context.Context, store.Store) error) error
	// Close releases what the instance held (tables, buckets, pollers).
	Close()
}

// errNoBackup reports a restore without a captured backup.
var errNoBackup = errors.New("captureBackup must run before restoreBackup")

// memStorage is the default backend: a journaled memstore, in-memory
// segments and blobs (this host plays the blob object host).
type memStorage struct {
	journal *journalStore
	segs    *memstore.Segments
	blobs   *memblobs.Store
	backup  int // journal position of the captured backup; -1 none
}

func newMemStorage(id string, now func() int64) (*memStorage, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	return &memStorage{
		journal: newJournalStore(),
		segs:    memstore.NewSegments(),
		// §5.9: presigned grants and downloads are this host's own
		// tokens, verified by memblobs against the virtual clock.
		blobs:  memblobs.New(memblobs.Options{Now: now, Key: key, BaseURL: "http://blob-host.invalid/i/" + id + "/blob-urls"}),
		backup: -1,
	}, nil
}

func (m *memStorage) Store() store.Store             { return m.journal }
func (m *memStorage) Schema() store.SchemaStore      { return m.journal }
func (m *memStorage) Segments() store.SegmentStore   { return m.segs }
func (m *memStorage) Blobs() blobs.Store             { return m.blobs }
func (m *memStorage) BlobPresigner() blobs.Presigner { return m.blobs }
func (m *memStorage) FailNextOutcomeRead()           { m.journal.failGet.Store(true) }
func (m *memStorage) Close()                         {}

func (m *memStorage) FetchBlobURL(_ context.Context, rawURL string) ([]byte, error) {
	return m.blobs.ServeGet(rawURL)
}

func (m *memStorage) PutBlobURL(_ context.Context, rawURL string, body []byte) error {
	return m.blobs.ServePut(rawURL, body)
}

func (m *memStorage) Capture(context.Context) error {
	m.backup = m.journal.mark()
	return nil
}

func (m *memStorage) Restore(ctx context.Context, after func(context.Context, store.Store) error) error {
	if m.backup < 0 {
		return errNoBackup
	}
	return m.journal.restore(ctx, m.backup, after)
}
