// Package engine implements SSP2 server semantics over the storage
// interfaces of package store: push with idempotency and optimistic
// concurrency (§6), pull with incremental windows and paged pinned
// bootstrap (§4, §5), scopes and authorization (§3), segment delivery and
// signed URLs (§5.4, §5.5), and pruning (§4.6). It has no AWS import and no
// transport: callers hand it authenticated request bytes and an io.Writer.
package engine

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/blobs"
	"github.com/skyfold/syncular-lambda/internal/core/crdt"
	"github.com/skyfold/syncular-lambda/internal/core/limits"
	"github.com/skyfold/syncular-lambda/internal/core/reactions"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/validate"
)

// ScopeMap is variable → allowed or effective values (§3.2).
type ScopeMap map[string][]string

// ScopeResolver returns the allowed scopes of an actor (§3.2 rule 3). It is
// called at most once per request. An actor without any grant is an empty
// map (or an error wrapping ErrNoGrant): its subscriptions revoke and its
// writes are forbidden. A resolver that could not reach its authority (an
// outage, throttling, a timeout) returns an error wrapping
// ErrResolverUnavailable, or one carrying a retryable catalog code: the
// request fails with a retryable error and nothing is applied, recorded,
// revoked or purged. Any other error is a resolver that threw (a malformed
// grant, a bug): it fails loud, exactly like "no grant" (§3.2 rule 5,
// §3.4 step 4). The engine only reads the returned map, so a resolver may
// share one between requests.
type ScopeResolver interface {
	ResolveScopes(ctx context.Context, partition, actorID, clientID string) (ScopeMap, error)
}

// ErrNoGrant is what a resolver returns (wrapped or not) to say the actor
// holds no grant at all; the engine treats it exactly like an empty map.
var ErrNoGrant = errors.New("engine: the actor holds no scope grant")

// ErrResolverUnavailable is what a resolver returns (wrapped) when its
// authority could not be reached: the spec's "unavailable" signal (§7.3.3),
// not a throw. The request fails retryably and nothing is revoked.
var ErrResolverUnavailable = errors.New("engine: the scope authority is unavailable")

// ResolverFunc adapts a function to ScopeResolver.
type ResolverFunc func(ctx context.Context, partition, actorID, clientID string) (ScopeMap, error)

// ResolveScopes calls f.
func (f ResolverFunc) ResolveScopes(ctx context.Context, partition, actorID, clientID string) (ScopeMap, error) {
	return f(ctx, partition, actorID, clientID)
}

// Auth is the host's authentication output: the engine trusts it and never
// sees credentials (§1.1).
type Auth struct {
	Partition string
	ActorID   string
}

// SignedURLMode selects how SEGMENT_REF urls are minted (§5.4).
type SignedURLMode int

const (
	// SignedURLsOff never sets url: clients use the direct endpoint.
	SignedURLsOff SignedURLMode = iota
	// SignedURLsNative mints HMAC `st` tokens verified by this server.
	SignedURLsNative
	// SignedURLsPresign delegates to the configured store.Presigner.
	SignedURLsPresign
)

// Limits are the host-configurable bounds. Zero fields take the defaults.
type Limits struct {
	// MaxOperations caps operations across all PUSH_COMMIT frames of one
	// request (§6.1).
	MaxOperations int
	// ResponseBudgetBytes is where a pull stops adding commits and inline
	// pages: a Lambda buffered response (6 MB with base64) must hold it.
	ResponseBudgetBytes int
	// InlineSegmentMaxBytes is the largest rows segment sent inline (§5.7).
	InlineSegmentMaxBytes int
	// SegmentMaxBytes caps one rows segment, so every segment fits the
	// segment function's response too.
	SegmentMaxBytes int
	// SegmentTTL is a publication's lifetime (§5.1).
	SegmentTTL time.Duration
	// SignedURLTTL is the lifetime of minted URLs (§5.4, at most 15 min).
	SignedURLTTL time.Duration
	// CursorRecordMaxAge is how old a client cursor record may get before
	// an unchanged cursor is rewritten anyway (§4.6 active window input).
	CursorRecordMaxAge time.Duration
	// CursorRecordInterval is how old a client record must be before a
	// cursor that moved up is written (a lower one is written at once):
	// the stored cursor may lag by this much, which only holds the §4.6
	// horizon lower (recordClient). Keep it far below ActiveWindow.
	CursorRecordInterval time.Duration
	// MaxCommitBytes, MaxRowBytes and MaxCommitFrameBytes bound what one
	// commit may store and deliver (see package limits); a commit over
	// any of them is rejected with sync.constraint_violation on every
	// store. Tests lower them; hosts keep the derived defaults.
	MaxCommitBytes      int
	MaxRowBytes         int
	MaxCommitFrameBytes int
	// Retention floors (§4.6); hosts may only raise them.
	ActiveWindow       time.Duration
	AgeForce           time.Duration
	MinRetainedCommits int64
	// MaxCascadeOperationsPerCommit caps the operations declared
	// references append to one commit (§6.11 CASCADE and SET NULL);
	// past it the commit is rejected with reason cascade_limit.
	MaxCascadeOperationsPerCommit int
	// Work budgets (issue 11). MaxSubscriptions caps the subscriptions of
	// one request and MaxScopeValues the scope values they request in
	// total (each value is a storage query of a bootstrap page); past
	// either the request is refused with sync.invalid_request before any
	// storage read.
	MaxSubscriptions int
	MaxScopeValues   int
	// RequestTimeout bounds one sync request: its context ends after it,
	// so a request stuck in storage ends with an SSP2 error (and a log
	// line) rather than the function's own timeout. Keep it under the
	// gateway's limit (API Gateway: 29 s).
	RequestTimeout time.Duration
	// DeadlineReserve: a pull stops adding pages and commits once less
	// than this is left before the request's deadline (its context's,
	// or RequestTimeout), and returns what it has with resumable state,
	// as when the byte budget ends it.
	DeadlineReserve time.Duration
	// MaxRowsScannedPerPage bounds the stored rows one bootstrap page
	// reads (rows read by one scope variable and then filtered out by
	// another count too); the page then ends early with a cursor past the
	// rows read, so every page's work is bounded whatever the filter.
	MaxRowsScannedPerPage int
	// MaxBlobBytes caps one blob (§5.9.3 blob.too_large), checked on
	// the declared length, the streamed bytes and at grant issuance.
	MaxBlobBytes int64
	// BlobOrphanGrace is how long an unreferenced blob survives the
	// orphan sweep (§5.9.2, default 24 h).
	BlobOrphanGrace time.Duration
}

// Defaults of Limits.
const (
	DefaultMaxOperations         = 500
	DefaultResponseBudgetBytes   = limits.DefaultResponseBudgetBytes
	DefaultInlineSegmentMaxBytes = 256 << 10
	DefaultSegmentMaxBytes       = 4 << 20
	DefaultSegmentTTL            = 24 * time.Hour
	DefaultSignedURLTTL          = 5 * time.Minute
	MaxSignedURLTTL              = 15 * time.Minute
	DefaultCursorRecordMaxAge    = 6 * time.Hour
	DefaultCursorRecordInterval  = 5 * time.Minute
	DefaultActiveWindow          = 14 * 24 * time.Hour
	DefaultAgeForce              = 30 * 24 * time.Hour
	DefaultMinRetainedCommits    = 1000
	// DefaultMaxCascadeOperations is the §6.11 reference default.
	DefaultMaxCascadeOperations = 1000
	DefaultMaxSubscriptions     = 100
	DefaultMaxScopeValues       = 1000
	DefaultRequestTimeout       = 25 * time.Second
	DefaultDeadlineReserve      = 3 * time.Second
	DefaultMaxRowsScanned       = 20000
	// DefaultMaxBlobBytes is the §5.9.3 host size cap.
	DefaultMaxBlobBytes = 64 << 20
	// DefaultBlobOrphanGrace is the §5.9.2 default grace period.
	DefaultBlobOrphanGrace = 24 * time.Hour
)

func (l Limits) withDefaults() Limits {
	orDefault(&l.MaxOperations, DefaultMaxOperations)
	orDefault(&l.ResponseBudgetBytes, DefaultResponseBudgetBytes)
	orDefault(&l.InlineSegmentMaxBytes, DefaultInlineSegmentMaxBytes)
	orDefault(&l.SegmentMaxBytes, DefaultSegmentMaxBytes)
	orDefault(&l.SegmentTTL, DefaultSegmentTTL)
	orDefault(&l.SignedURLTTL, DefaultSignedURLTTL)
	l.SignedURLTTL = min(l.SignedURLTTL, MaxSignedURLTTL)
	orDefault(&l.MaxCommitBytes, limits.MaxCommitBytes)
	orDefault(&l.MaxSubscriptions, DefaultMaxSubscriptions)
	orDefault(&l.MaxScopeValues, DefaultMaxScopeValues)
	orDefault(&l.RequestTimeout, DefaultRequestTimeout)
	orDefault(&l.DeadlineReserve, DefaultDeadlineReserve)
	orDefault(&l.MaxRowsScannedPerPage, DefaultMaxRowsScanned)
	orDefault(&l.MaxRowBytes, limits.MaxRowBytes)
	orDefault(&l.MaxCommitFrameBytes, limits.MaxCommitFrameBytes)
	orDefault(&l.CursorRecordMaxAge, DefaultCursorRecordMaxAge)
	orDefault(&l.CursorRecordInterval, DefaultCursorRecordInterval)
	orDefault(&l.MaxCascadeOperationsPerCommit, DefaultMaxCascadeOperations)
	orDefault(&l.MaxBlobBytes, DefaultMaxBlobBytes)
	orDefault(&l.BlobOrphanGrace, DefaultBlobOrphanGrace)
	// §4.6 retention floors: hosts may only raise them.
	l.ActiveWindow = max(l.ActiveWindow, DefaultActiveWindow)
	l.AgeForce = max(l.AgeForce, DefaultAgeForce)
	l.MinRetainedCommits = max(l.MinRetainedCommits, DefaultMinRetainedCommits)
	return l
}

// orDefault sets *v to d when it is zero or negative (an unset limit).
func orDefault[T int | int64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// Config wires an Engine.
type Config struct {
	Schema    *schema.Schema
	Store     store.Store
	Segments  store.SegmentStore
	Resolver  ScopeResolver
	Presigner store.Presigner // used with SignedURLsPresign
	// Blobs stores blob bytes (§5.9); nil serves no blob routes and
	// rejects every blob reference with blob.not_found (§6.6).
	// BlobPresigner, when set, mints upload grants and download URLs
	// (§5.9.3, §5.9.5).
	Blobs         blobs.Store
	BlobPresigner blobs.Presigner
	// SignedURLs selects url minting; SigningKey is required for native
	// tokens (and keys the partition-derived `aud`).
	SignedURLs SignedURLMode
	SigningKey []byte
	Limits     Limits
	// Clock returns the current time in epoch ms; nil means the wall clock.
	Clock func() int64
	// NewEpoch mints an unpredictable log epoch; nil means 128 random bits.
	NewEpoch func() string
	Logger   *slog.Logger
	// Checkpoints names the backfill checkpoints this build declares
	// (gate.go): it serves a partition while they backfill, where a build
	// that did not declare them answers sync.schema_not_ready.
	Checkpoints []string
	// NoSchemaGate turns the serve gate off even when Store implements
	// store.SchemaStore (tests of other concerns; never in production:
	// commits still carry the writer version and the fence still holds).
	NoSchemaGate bool
	// Leases and LeaseTTL, both set, turn auth leases on (§7.3): each
	// live-authorized round issues or slides its client's lease for
	// LeaseTTL and sends it in a LEASE frame, and a round whose resolver
	// signals an outage (ErrResolverUnavailable) is authorized by a valid
	// lease instead of failing (leases.go). Both unset: the feature is
	// off and no LEASE frame is ever written.
	Leases   store.LeaseStore
	LeaseTTL time.Duration
	// OnCommit, when set, is called synchronously after each commit is
	// durably appended, with the stored commit (§8.2 fanout input for an
	// in-process realtime hub). It must not block for long and must not
	// modify c.
	OnCommit func(partition string, c *store.Commit)
	// Validators are the host's write-validation hooks (§6.7 per table,
	// §6.8 per commit); nil validates nothing. SetValidators replaces
	// them at run time.
	Validators *validate.Hooks
	// Reactions, when set, plans the §6.9 durable reactions of every
	// accepted commit; Store must then implement store.ReactionStore.
	Reactions reactions.Planner
	// NoReactions says no engine of the deployment plans §6.9 reactions
	// (SYNC_REACTIONS_ENABLED=false), so no commit in the log carries any: Prune
	// then skips enqueueing them before it deletes commits (a reaction
	// cursor read, a read of the pruned log and a cursor write per
	// partition pruned). It is the deployment's word, not this engine's:
	// the prune function's engine never has a planner even where the push
	// function's does, so a nil Reactions alone proves nothing. New
	// refuses it together with a planner.
	NoReactions bool
	// NoGroupCommit turns group commit (groupcommit.go) off on a store
	// that supports it: every queued commit lands alone in its turn.
	NoGroupCommit bool
	// CRDTMergers merges pushed crdt column values into the stored ones
	// (§5.10.2); crdt.Default() holds yjs-doc. With none, a push carrying
	// a crdt value fails with sync.crdt_merge_failed; with a registry, New
	// refuses a schema naming a crdtType it lacks (§5.10.1).
	CRDTMergers crdt.Registry
}

// Engine serves SSP2 requests. It is safe for concurrent use.
type Engine struct {
	cfg     Config
	limits  Limits
	schema  *schema.Schema
	store   store.Store
	segs    store.SegmentStore
	now     func() int64
	epoch   func() string
	log     *slog.Logger
	clients *clientCache
	blobs   blobs.Store
	// blobPresign is swapped at run time by test drivers.
	blobPresign atomic.Pointer[blobs.Presigner]
	// variables is the union of scope variables of every served version.
	variables map[string]bool
	// gates is the store's rolling-upgrade side, nil when it has none or
	// the gate is off; declared holds Config.Checkpoints.
	gates    store.SchemaStore
	declared map[string]bool
	// readerFloors: per storage table, the oldest build version that
	// reads its rows (gate.go).
	readerFloors map[string]int64
	// cheapScopedLog: the store's ReadLogScoped is read for every
	// incremental window (store.CheapScopedLog).
	cheapScopedLog bool
	// localCommits: a lost commit race is retried at once a few times
	// before backing off (store.LocalCommits).
	localCommits bool
	// queueMemo: the commit turns this instance saw (queue.go).
	queueMemo queueMemo
	// spareEpoch: a minted epoch that no partition took (sync.go).
	spareEpoch spareEpoch
	// hooks are the installed validators, nil for none (validators.go).
	hooks atomic.Pointer[validate.Hooks]
	// leases is Config.Leases when auth leases are on (leases.go), with
	// the TTL in ms.
	leases   store.LeaseStore
	leaseTTL int64
}

// New validates cfg and returns an Engine.
func New(cfg Config) (*Engine, error) {
	if cfg.Schema == nil {
		return nil, errors.New("engine: Config.Schema is required")
	}
	if cfg.Store == nil {
		return nil, errors.New("engine: Config.Store is required")
	}
	if cfg.CRDTMergers != nil {
		if err := cfg.Schema.CheckCRDTTypes(cfg.CRDTMergers.Has); err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
	}
	if cfg.Segments == nil {
		return nil, errors.New("engine: Config.Segments is required")
	}
	if cfg.Resolver == nil {
		return nil, errors.New("engine: Config.Resolver is required")
	}
	if _, ok := cfg.Store.(store.ReactionStore); cfg.Reactions != nil && !ok {
		// §6.9: a planner without transactional enqueue fails before any
		// row could change.
		return nil, errors.New("engine: Config.Reactions needs a store that implements store.ReactionStore")
	}
	if cfg.Reactions != nil && cfg.NoReactions {
		// §6.9: prune would delete the planned records unenqueued.
		return nil, errors.New("engine: Config.Reactions plans reactions but Config.NoReactions says the deployment has none (SYNC_REACTIONS_ENABLED=false)")
	}
	if (cfg.Leases == nil) != (cfg.LeaseTTL <= 0) {
		return nil, errors.New("engine: auth leases need both Config.Leases and a positive Config.LeaseTTL")
	}
	switch cfg.SignedURLs {
	case SignedURLsOff:
	case SignedURLsNative:
		if len(cfg.SigningKey) < 32 {
			return nil, errors.New("engine: native signed URLs need a SigningKey of at least 32 bytes")
		}
	case SignedURLsPresign:
		if cfg.Presigner == nil {
			return nil, errors.New("engine: presigned URLs need a Presigner")
		}
	default:
		return nil, fmt.Errorf("engine: unknown signed URL mode %d", cfg.SignedURLs)
	}
	// §3.2 rule 3: resolver keys are checked against the variables of
	// every served version, so an older client is not failed because a
	// newer version added a variable.
	vars := map[string]bool{}
	for _, v := range cfg.Schema.Versions {
		for _, name := range v.Variables() {
			vars[name] = true
		}
	}
	e := &Engine{
		cfg:       cfg,
		variables: vars,
		limits:    cfg.Limits.withDefaults(),
		schema:    cfg.Schema,
		store:     cfg.Store,
		segs:      cfg.Segments,
		now:       cfg.Clock,
		epoch:     cfg.NewEpoch,
		log:       cfg.Logger,
		clients:   newClientCache(4096),
		blobs:     cfg.Blobs,
		leases:    cfg.Leases,
		leaseTTL:  cfg.LeaseTTL.Milliseconds(),
	}
	if cfg.BlobPresigner != nil {
		e.SetBlobPresigner(cfg.BlobPresigner)
	}
	if err := e.SetValidators(cfg.Validators); err != nil {
		return nil, err
	}
	if c, ok := cfg.Store.(store.CheapScopedLog); ok {
		e.cheapScopedLog = c.CheapScopedLog()
	}
	if c, ok := cfg.Store.(store.LocalCommits); ok {
		e.localCommits = c.LocalCommits()
	}
	if ss, ok := cfg.Store.(store.SchemaStore); ok && !cfg.NoSchemaGate {
		e.gates = ss
	}
	e.readerFloors = readerFloors(cfg.Schema)
	e.declared = make(map[string]bool, len(cfg.Checkpoints))
	for _, n := range cfg.Checkpoints {
		e.declared[n] = true
	}
	if e.now == nil {
		e.now = func() int64 { return time.Now().UnixMilli() }
	}
	if e.epoch == nil {
		e.epoch = RandomEpoch
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	return e, nil
}

// Limits returns the effective limits (defaults applied).
func (e *Engine) Limits() Limits { return e.limits }

// SetSignedURLTTL changes the lifetime of minted URLs (capped at 15 min).
// Intended for hosts and test drivers; not synchronized with requests in
// flight beyond a plain field write, so call it between requests.
func (e *Engine) SetSignedURLTTL(d time.Duration) {
	if d > MaxSignedURLTTL {
		d = MaxSignedURLTTL
	}
	e.limits.SignedURLTTL = d
}

// RandomEpoch returns 128 random bits, base64url encoded.
func RandomEpoch() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("engine: crypto/rand failed: %v", err))
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}
