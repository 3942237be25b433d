// Package config reads the deployment configuration of the Lambda
// functions from environment variables. It is pure (no AWS calls): secret
// references are recorded here and resolved by the caller at init, so a
// bad value is reported before any network round trip.
//
// Every variable is declared once in Vars; docs/CONFIG.md is generated from
// that table and a test keeps the two (and template.yaml) in step.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/limits"
	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// Auth modes (SYNC_AUTH_MODE).
const (
	// AuthJWTAuthorizer trusts the claims API Gateway's JWT authorizer
	// verified and placed in requestContext.authorizer.jwt.claims.
	AuthJWTAuthorizer = "jwt-authorizer"
	// AuthHS256 verifies an HS256 bearer token in-process (local runs,
	// tests, or a backend that mints its own tokens).
	AuthHS256 = "hs256"
)

// Scope resolver modes (SYNC_SCOPES_MODE).
const (
	// ScopesClaim reads the allowed scopes from a claim holding a JSON
	// scope map.
	ScopesClaim = "claim"
	// ScopesTable reads grant items from the DynamoDB table.
	ScopesTable = "table"
)

// Signed URL modes (SYNC_SIGNED_URLS).
const (
	SignedNative  = "native"
	SignedPresign = "presign"
	SignedOff     = "off"
)

// Config is the validated configuration of one function instance.
type Config struct {
	TableName string
	Bucket    string
	// SchemaPath is the schema document; DefaultSchemaPath when unset.
	SchemaPath string
	// ValidatorsPath is the declarative validators document (§6.7,
	// §6.8); when unset, DefaultValidatorsPath if that file exists.
	ValidatorsPath string
	// Checkpoints (SYNC_CHECKPOINTS) are the backfill checkpoints this
	// build declares, "name=table+table,..." (internal/core/migrate): it
	// serves partitions while they backfill, and syncular-admin migrate
	// and the post-traffic hook declare and run them.
	Checkpoints string
	// Mount is the route prefix without a trailing slash ("" = routes at /sync).
	Mount string
	// PublicURL, when set, is the scheme://host[/base] that native signed
	// URLs point at instead of the request's own host.
	PublicURL string

	AuthMode         string
	ActorClaim       string
	PartitionClaim   string
	DefaultPartition string
	// HS256Secret (local) or HS256SecretRef (SSM/Secrets Manager) key the
	// hs256 mode; Issuer and Audience are checked when set.
	HS256Secret    []byte
	HS256SecretRef string
	JWTIssuer      string
	JWTAudience    string

	ScopesMode  string
	ScopesClaim string

	SignedURLs    string
	SignedURLTTL  time.Duration
	SigningKey    []byte
	SigningKeyRef string

	// AuthLeases turns §7.3 auth leases on, each sliding AuthLeaseTTL.
	AuthLeases   bool
	AuthLeaseTTL time.Duration

	// Reactions is false when the deployment plans no §6.9 reactions
	// (SYNC_REACTIONS_ENABLED=false): engine.Config.NoReactions.
	Reactions bool

	MaxOperations         int
	ResponseBudgetBytes   int
	InlineSegmentMaxBytes int
	SegmentMaxBytes       int
	SegmentTTL            time.Duration
	// OutcomeTTL is the idempotency window of push outcomes (§2.3; the
	// stores' OutcomeTTL, store.DefaultOutcomeWindow by default).
	OutcomeTTL time.Duration
	// SegmentObjectDays is the bucket lifecycle expiration of segment
	// objects; it must outlive every publication (see s3segments).
	SegmentObjectDays int
	MaxBodyBytes      int
	// BlobMaxBytes caps one blob (§5.9.3 blob.too_large).
	BlobMaxBytes int64

	LogLevel slog.Level
	// MetricsNamespace is the CloudWatch namespace of the EMF metrics.
	MetricsNamespace string

	DynamoDBEndpoint string
	S3Endpoint       string
	S3PathStyle      bool

	// Forward lets a build the serve gate refuses answer through a newer
	// build of its function (app.Forwarder); LambdaEndpoint overrides the
	// Lambda API endpoint it invokes (the emulator in tests).
	Forward        bool
	LambdaEndpoint string

	// The realtime tier (cmd/syncular-realtime, docs/REALTIME.md).
	RealtimeAddr string // <mount>/realtime and /healthz
	HintAddr     string // /internal/hints and /internal/presence
	// HintAdvertise is the base URL peers and the fanout function post
	// hints to; empty derives it from the ECS task metadata.
	HintAdvertise string
	// InstanceID names this instance in the registry; empty is random.
	InstanceID            string
	RealtimeMaxRoundBytes int
	RealtimeDrainDelay    time.Duration
	// TLSCertRef (a Secrets Manager ARN or SSM SecureString) holds the
	// certificate chain and private key the tier serves its realtime
	// port with; empty serves plain HTTP (TLS ends at the load balancer,
	// or nowhere in development). Re-read every TLSReloadInterval.
	TLSCertRef        string
	TLSReloadInterval time.Duration
}

// Var documents one environment variable.
type Var struct {
	Name    string
	Default string
	Doc     string
}

// Vars is the single table of every variable Load reads, in documentation
// order.
var Vars = []Var{
	{"SYNC_TABLE_NAME", "(required)", "DynamoDB table holding the commit log, rows, client records, segment publications and scope grants."},
	{"SYNC_BUCKET", "(required)", "S3 bucket holding bootstrap segments (`segments/<id>`)."},
	{"SYNC_SCHEMA_PATH", "`schema.json` next to the `bootstrap` binary", "Schema document (driver shape or `syncular.ir.json`). The SAM build copies it into each function package."},
	{"SYNC_VALIDATORS_PATH", "`validators.json` next to the `bootstrap` binary, when present", "Declarative write validators (SPEC §6.7 per table, §6.8 per commit): a JSON document of rules (docs/OPERATIONS.md, \"Validators\"). A set path that cannot be read or compiled fails startup. Without one: `validators.json` beside the binary if present, else the same members (`validators`, `commitValidators`) in the schema file, else none; rules in both a document and the schema file fail startup. The SAM build copies `VALIDATORS` (a Makefile variable) into each function package."},
	{"SYNC_CHECKPOINTS", "none", "Backfill checkpoints this build declares, `name=table+table,...` (rolling schema upgrades, docs/OPERATIONS.md): the build serves partitions while they backfill; `syncular-admin migrate` and the post-traffic hook declare and run them."},
	{"SYNC_MOUNT", "empty", "Route prefix, e.g. `/api` serves `/api/sync`. Empty serves `/sync`, `/push`, `/pull`, `/segments/{id}`."},
	{"SYNC_PUBLIC_URL", "none", "`https://host[/base]` that native signed segment URLs point at; required with `SYNC_SIGNED_URLS=native`. Never derived from the request's `Host` header."},
	{"SYNC_AUTH_MODE", "`jwt-authorizer`", "`jwt-authorizer`: trust the claims of API Gateway's JWT authorizer. `hs256`: verify an HS256 bearer token in-process."},
	{"SYNC_ACTOR_CLAIM", "`sub`", "Claim that becomes the actorId."},
	{"SYNC_PARTITION_CLAIM", "empty", "Claim that becomes the partition (e.g. `custom:tenant`). A request without it is rejected (401). Empty uses SYNC_DEFAULT_PARTITION for everyone."},
	{"SYNC_DEFAULT_PARTITION", "`default`", "Partition of every request when SYNC_PARTITION_CLAIM is empty."},
	{"SYNC_HS256_SECRET", "empty", "hs256 mode: the verification key itself (local runs and tests only; at least 32 bytes)."},
	{"SYNC_HS256_SECRET_REF", "empty", "hs256 mode: SSM SecureString name/ARN or Secrets Manager ARN holding the key, read once at init."},
	{"SYNC_JWT_ISSUER", "empty", "hs256 mode: required `iss` when set. jwt-authorizer mode: the realtime tier verifies socket tokens against this issuer (OIDC discovery keys); the stack sets it from `JwtIssuer`."},
	{"SYNC_JWT_AUDIENCE", "empty", "hs256 mode: required `aud` when set. jwt-authorizer mode: accepted audiences (comma list) of the realtime tier's socket tokens."},
	{"SYNC_SCOPES_MODE", "`claim`", "`claim`: allowed scopes come from SYNC_SCOPES_CLAIM. `table`: from grant items in the table (pk `GRANT#<partition>`, sk `<actorId>`, attribute `scopes`). Both fail closed."},
	{"SYNC_SCOPES_CLAIM", "`syncular_scopes`", "Claim holding the allowed scope map as a JSON object or a JSON string, e.g. `{\"project_id\":[\"p1\",\"p2\"]}`; `\"*\"` allows every value."},
	{"SYNC_SIGNED_URLS", "`presign`", "How SEGMENT_REF urls are minted for clients that accept them: `presign` (S3 presigned GET), `native` (HMAC `st` token served by the segment function) or `off` (clients use the authenticated segment route)."},
	{"SYNC_SIGNED_URL_TTL", "`5m`", "Lifetime of signed URLs (Go duration, at most `15m`)."},
	{"SYNC_SIGNING_KEY", "empty", "native mode: the HMAC key itself (local runs only; at least 32 bytes)."},
	{"SYNC_SIGNING_KEY_REF", "empty", "native mode: SSM SecureString name/ARN or Secrets Manager ARN holding the HMAC key, read once at init."},
	{"SYNC_AUTH_LEASES", "`off`", "`on`: auth leases (SPEC §7.3). Every authorized round issues or slides its client's lease (kept in the table, pk `P#<partition>#LS`) and returns it in a LEASE frame; while the scope resolver is unavailable (table mode: the grant read fails) a round is served from a valid lease instead of failing, and a client without one gets `sync.auth_lease_required`. Revoke one with `syncular-admin revoke-lease`. `off`: no leases, an unavailable resolver fails the round retryably."},
	{"SYNC_AUTH_LEASE_TTL", "`15m`", "Sliding lifetime of an auth lease (Go duration, 1m to 720h): how long a client keeps syncing on it through a resolver outage after its last authorized round."},
	{"SYNC_REACTIONS_ENABLED", "`true`", "`false`: the deployment plans no SPEC §6.9 reactions (the stack passes its `ReactionsEnabled` parameter), so prune skips enqueueing them before it deletes commits (a reaction cursor read, a read of the pruned log and a cursor write per partition pruned). A function whose app registers a reaction planner refuses to start with `false`: deploy such an app with `ReactionsEnabled=true`. `true`: prune enqueues the reactions of the commits it deletes first."},
	{"SYNC_MAX_OPERATIONS", "`500`", "Operations allowed across the PUSH_COMMIT frames of one request."},
	{"SYNC_RESPONSE_BUDGET_BYTES", "`4194304`", "Raw bytes where a response stops adding push results, commits and inline pages (at most 4444160: Lambda's 6 MB response includes base64)."},
	{"SYNC_INLINE_SEGMENT_MAX_BYTES", "`262144`", "Largest rows segment sent inline in a pull response."},
	{"SYNC_SEGMENT_MAX_BYTES", "`4194304`", "Largest rows segment; every segment must fit the segment function's response."},
	{"SYNC_SEGMENT_TTL", "`24h`", "Lifetime of a segment publication. The bucket's lifecycle rule must outlive it (SYNC_SEGMENT_OBJECT_DAYS)."},
	{"SYNC_OUTCOME_TTL", "`720h`", "Idempotency window of push outcomes (§2.3): a retry within it replays the recorded result; DynamoDB TTL deletes the outcome after it (docs/OPERATIONS.md, \"Idempotency window\", says what a later retry gets). 30 days by default, the §4.6 age force limit; between `24h` and `87600h`."},
	{"SYNC_SEGMENT_OBJECT_DAYS", "`2`", "Days after which the bucket's lifecycle rule expires segment objects (template parameter SegmentObjectExpirationDays passes the same number to both). Must exceed SYNC_SEGMENT_TTL + 15 min + 1 h."},
	{"SYNC_MAX_BODY_BYTES", "`33554432`", "Request body cap after gzip decoding (413 above); at least 4669440, the largest body Lambda can receive, so an uncompressed request is always read and oversized commits in it are rejected one by one (see Size limits)."},
	{"SYNC_BLOB_MAX_BYTES", "`67108864`", "Largest blob (§5.9.3), checked at upload grant issuance and on direct uploads (413 `blob.too_large`). A direct upload through the blob function is further bounded by what Lambda accepts (about 6 MB); larger blobs use the presigned upload grant."},
	{"SYNC_LOG_LEVEL", "`info`", "`debug`, `info`, `warn` or `error`. Logs are JSON on stdout; tokens and payloads are never logged."},
	{"SYNC_METRICS_NAMESPACE", "`Syncular`", "CloudWatch namespace of the metrics each request line carries in Embedded Metric Format (template parameter MetricsNamespace; the alarms use the same). Catalogue: docs/OPERATIONS.md."},
	{"SYNC_DYNAMODB_ENDPOINT", "empty", "DynamoDB endpoint override (DynamoDB Local for `sam local`)."},
	{"SYNC_S3_ENDPOINT", "empty", "S3 endpoint override (a local S3 API server)."},
	{"SYNC_S3_PATH_STYLE", "`false`", "Path-style S3 addressing (needed by most local S3 servers)."},
	{"SYNC_FORWARD", "`on`", "`on`: during a rolling schema upgrade (and after its rollback) a function version that a partition's writer fence refuses hands the request to the newest version of the same function past the fence (one synchronous `lambda:Invoke` of that version with the unchanged event) and relays its answer instead of answering `sync.schema_not_ready`; each published version records itself in the table's build registry at cold start (docs/OPERATIONS.md, Rolling schema upgrades). `off`: refuse (retryable). Needs `AWS_LAMBDA_FUNCTION_VERSION` to be a published version (never `$LATEST`). Template parameter `ForwardRefusedRequests`."},
	{"SYNC_LAMBDA_ENDPOINT", "empty", "Lambda API endpoint override for forwarding (the Lambda emulator in tests)."},
	{"SYNC_REALTIME_ADDR", "`:8080`", "Realtime tier (`cmd/syncular-realtime`): listen address of `<mount>/realtime` (the §8 WebSocket) and `GET /healthz` (the load balancer's health check)."},
	{"SYNC_HINT_ADDR", "`:8081`", "Realtime tier: listen address of `POST /internal/hints` and `POST /internal/presence` (reachable only from the fanout function and the other tier tasks)."},
	{"SYNC_HINT_ADVERTISE", "the task's private IP from the ECS task metadata endpoint v4 and the port of SYNC_HINT_ADDR", "Realtime tier: base URL (`http://host:port`) the instance registers for the fanout function and its peers."},
	{"SYNC_INSTANCE_ID", "random", "Realtime tier: this instance's id in the instance registry (pk `RTI`) and the origin of its presence events."},
	{"SYNC_REALTIME_MAX_ROUND_BYTES", "`33554432`", "Realtime tier: cap of one socket round's request stream (§8.7); above Lambda's 6 MB event, so a large offline queue is never wedged."},
	{"SYNC_REALTIME_DRAIN_DELAY", "`5s`", "Realtime tier: on SIGTERM, time between leaving the registry (and failing `/healthz`) and closing every socket with going-away (1001)."},
	{"SYNC_TLS_CERT_REF", "empty (plain HTTP)", "Realtime tier: Secrets Manager ARN or SSM SecureString name/ARN holding the certificate chain and private key (PEM) of the realtime port, as JSON `{\"certificate\": \"<chain PEM>\", \"privateKey\": \"<key PEM>\"}` or as one PEM text with both; the port then serves TLS 1.2+ (HTTP/1.1) and the load balancer forwards TCP. A missing or bad certificate stops the start. docs/REALTIME.md, TLS."},
	{"SYNC_TLS_RELOAD_INTERVAL", "`1h`", "Realtime tier: how often SYNC_TLS_CERT_REF is re-read, so a renewed certificate is served without a restart (a bad value read later is logged and the current certificate kept)."},
}

// Limits of the protocol and the platform that configuration may not pass.
const (
	MaxSignedURLTTL = 15 * time.Minute // §5.4
	// MaxResponseBudget keeps base64 of the budget plus framing under
	// Lambda's 6 MB buffered response (derived in internal/core/limits).
	MaxResponseBudget = limits.MaxResponseBudgetBytes
	// MinKeyBytes is the shortest accepted HMAC key.
	MinKeyBytes = 32
)

// FromEnv reads the process environment.
func FromEnv() (*Config, error) { return Load(os.Getenv) }

// Load reads configuration through getenv. Empty values count as unset (SAM
// declares every variable, empty, so `sam local` can override it). All
// problems are reported together, each naming its variable.
func Load(getenv func(string) string) (*Config, error) {
	l := &loader{getenv: getenv}
	c := &Config{
		TableName:      l.str("SYNC_TABLE_NAME", ""),
		Bucket:         l.str("SYNC_BUCKET", ""),
		SchemaPath:     l.str("SYNC_SCHEMA_PATH", ""),
		ValidatorsPath: l.str("SYNC_VALIDATORS_PATH", ""),
		Checkpoints:    l.str("SYNC_CHECKPOINTS", ""),
		Mount:          l.mount("SYNC_MOUNT"),
		PublicURL:      l.publicURL("SYNC_PUBLIC_URL"),

		AuthMode:         l.oneOf("SYNC_AUTH_MODE", AuthJWTAuthorizer, AuthJWTAuthorizer, AuthHS256),
		ActorClaim:       l.str("SYNC_ACTOR_CLAIM", "sub"),
		PartitionClaim:   l.str("SYNC_PARTITION_CLAIM", ""),
		DefaultPartition: l.str("SYNC_DEFAULT_PARTITION", "default"),
		HS256Secret:      []byte(l.str("SYNC_HS256_SECRET", "")),
		HS256SecretRef:   l.str("SYNC_HS256_SECRET_REF", ""),
		JWTIssuer:        l.str("SYNC_JWT_ISSUER", ""),
		JWTAudience:      l.str("SYNC_JWT_AUDIENCE", ""),

		ScopesMode:  l.oneOf("SYNC_SCOPES_MODE", ScopesClaim, ScopesClaim, ScopesTable),
		ScopesClaim: l.str("SYNC_SCOPES_CLAIM", "syncular_scopes"),

		SignedURLs:    l.oneOf("SYNC_SIGNED_URLS", SignedPresign, SignedNative, SignedPresign, SignedOff),
		SignedURLTTL:  l.duration("SYNC_SIGNED_URL_TTL", 5*time.Minute, time.Second, MaxSignedURLTTL),
		SigningKey:    []byte(l.str("SYNC_SIGNING_KEY", "")),
		SigningKeyRef: l.str("SYNC_SIGNING_KEY_REF", ""),

		AuthLeases:   l.oneOf("SYNC_AUTH_LEASES", "off", "off", "on") == "on",
		AuthLeaseTTL: l.duration("SYNC_AUTH_LEASE_TTL", 15*time.Minute, time.Minute, 720*time.Hour),

		Reactions: l.oneOf("SYNC_REACTIONS_ENABLED", "true", "true", "false") == "true",

		MaxOperations:         l.integer("SYNC_MAX_OPERATIONS", 500, 1, 100_000),
		ResponseBudgetBytes:   l.integer("SYNC_RESPONSE_BUDGET_BYTES", limits.DefaultResponseBudgetBytes, 64<<10, MaxResponseBudget),
		InlineSegmentMaxBytes: l.integer("SYNC_INLINE_SEGMENT_MAX_BYTES", 256<<10, 1<<10, MaxResponseBudget),
		SegmentMaxBytes:       l.integer("SYNC_SEGMENT_MAX_BYTES", 4<<20, 64<<10, MaxResponseBudget),
		SegmentTTL:            l.duration("SYNC_SEGMENT_TTL", 24*time.Hour, time.Minute, 30*24*time.Hour),
		SegmentObjectDays:     l.integer("SYNC_SEGMENT_OBJECT_DAYS", 2, 1, 3650),
		OutcomeTTL:            l.duration("SYNC_OUTCOME_TTL", store.DefaultOutcomeWindow, 24*time.Hour, 3650*24*time.Hour),
		MaxBodyBytes:          l.integer("SYNC_MAX_BODY_BYTES", limits.DefaultDecodedBodyBytes, limits.MaxRequestBodyBytes, limits.MaxDecodedBodyBytes),
		BlobMaxBytes:          int64(l.integer("SYNC_BLOB_MAX_BYTES", 64<<20, 1, 5<<30)),

		LogLevel:         l.level("SYNC_LOG_LEVEL"),
		MetricsNamespace: l.str("SYNC_METRICS_NAMESPACE", "Syncular"),

		DynamoDBEndpoint: l.endpoint("SYNC_DYNAMODB_ENDPOINT"),
		S3Endpoint:       l.endpoint("SYNC_S3_ENDPOINT"),
		S3PathStyle:      l.boolean("SYNC_S3_PATH_STYLE"),
		Forward:          l.oneOf("SYNC_FORWARD", "on", "on", "off") == "on",
		LambdaEndpoint:   l.endpoint("SYNC_LAMBDA_ENDPOINT"),

		RealtimeAddr:          l.str("SYNC_REALTIME_ADDR", ":8080"),
		HintAddr:              l.str("SYNC_HINT_ADDR", ":8081"),
		HintAdvertise:         l.endpoint("SYNC_HINT_ADVERTISE"),
		InstanceID:            l.str("SYNC_INSTANCE_ID", ""),
		RealtimeMaxRoundBytes: l.integer("SYNC_REALTIME_MAX_ROUND_BYTES", 32<<20, 64<<10, 1<<30),
		RealtimeDrainDelay:    l.duration("SYNC_REALTIME_DRAIN_DELAY", 5*time.Second, 0, 10*time.Minute),
		TLSCertRef:            l.str("SYNC_TLS_CERT_REF", ""),
		TLSReloadInterval:     l.duration("SYNC_TLS_RELOAD_INTERVAL", time.Hour, time.Second, 24*time.Hour),
	}
	c.validate(l)
	if len(l.problems) > 0 {
		return nil, &Error{Problems: l.problems}
	}
	return c, nil
}

// validate checks combinations that single variables cannot.
func (c *Config) validate(l *loader) {
	if c.TableName == "" {
		l.fail("SYNC_TABLE_NAME", "is required")
	}
	if c.Bucket == "" {
		l.fail("SYNC_BUCKET", "is required")
	}
	if c.ActorClaim == "" {
		l.fail("SYNC_ACTOR_CLAIM", "must not be empty")
	}
	if c.PartitionClaim == "" && c.DefaultPartition == "" {
		l.fail("SYNC_DEFAULT_PARTITION", "must not be empty when SYNC_PARTITION_CLAIM is unset")
	}
	if c.AuthMode == AuthHS256 {
		l.key("SYNC_HS256_SECRET", c.HS256Secret, c.HS256SecretRef, "hs256 auth")
	} else if len(c.HS256Secret) > 0 || c.HS256SecretRef != "" {
		l.fail("SYNC_AUTH_MODE", "is %s but an HS256 secret is set; set SYNC_AUTH_MODE=hs256 or remove the secret", c.AuthMode)
	}
	if c.ScopesMode == ScopesClaim && c.ScopesClaim == "" {
		l.fail("SYNC_SCOPES_CLAIM", "must not be empty when SYNC_SCOPES_MODE=claim")
	}
	if c.SignedURLs == SignedNative {
		l.key("SYNC_SIGNING_KEY", c.SigningKey, c.SigningKeyRef, "native signed URLs")
		// Native URLs are built only from configuration, never from the
		// request's Host header (a forged Host would point clients, and
		// their tokens, at another server).
		if c.PublicURL == "" {
			l.fail("SYNC_PUBLIC_URL", "is required with SYNC_SIGNED_URLS=native (native segment URLs are never built from the request's Host header)")
		}
	}
	// s3segments records a publication only while its object is guaranteed
	// to exist for the publication's life plus a URL TTL and a margin.
	if need := c.SegmentTTL + MaxSignedURLTTL + time.Hour; time.Duration(c.SegmentObjectDays)*24*time.Hour <= need {
		l.fail("SYNC_SEGMENT_OBJECT_DAYS", "(%d) must exceed SYNC_SEGMENT_TTL (%s) + 15m + 1h", c.SegmentObjectDays, c.SegmentTTL)
	}
	if c.InlineSegmentMaxBytes > c.ResponseBudgetBytes {
		l.fail("SYNC_INLINE_SEGMENT_MAX_BYTES", "(%d) exceeds SYNC_RESPONSE_BUDGET_BYTES (%d)", c.InlineSegmentMaxBytes, c.ResponseBudgetBytes)
	}
}

// DefaultSchemaPath is schema.json beside the running executable, where the
// SAM makefile build places it.
func DefaultSchemaPath() string {
	exe, err := os.Executable()
	if err != nil {
		return "schema.json"
	}
	return filepath.Join(filepath.Dir(exe), "schema.json")
}

// SchemaFile returns the schema path to read.
func (c *Config) SchemaFile() string {
	if c.SchemaPath != "" {
		return c.SchemaPath
	}
	return DefaultSchemaPath()
}

// DefaultValidatorsPath is validators.json beside the running
// executable, where the SAM build puts VALIDATORS.
func DefaultValidatorsPath() string {
	exe, err := os.Executable()
	if err != nil {
		return "validators.json"
	}
	return filepath.Join(filepath.Dir(exe), "validators.json")
}

// ValidatorsFile returns the validators document to read and whether it
// must exist (a path was set explicitly).
func (c *Config) ValidatorsFile() (path string, required bool) {
	if c.ValidatorsPath != "" {
		return c.ValidatorsPath, true
	}
	return DefaultValidatorsPath(), false
}

// Error lists every configuration problem.
type Error struct{ Problems []string }

func (e *Error) Error() string {
	return "invalid configuration: " + strings.Join(e.Problems, "; ")
}

// IsConfigError reports whether err came from Load.
func IsConfigError(err error) bool {
	var ce *Error
	return errors.As(err, &ce)
}

type loader struct {
	getenv   func(string) string
	problems []string
}

func (l *loader) fail(name, format string, args ...any) {
	sep := " "
	if strings.HasPrefix(format, "=") {
		sep = ""
	}
	l.problems = append(l.problems, name+sep+fmt.Sprintf(format, args...))
}

func (l *loader) str(name, def string) string {
	if v := strings.TrimSpace(l.getenv(name)); v != "" {
		return v
	}
	return def
}

func (l *loader) oneOf(name, def string, allowed ...string) string {
	v := strings.ToLower(l.str(name, def))
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	l.fail(name, "=%q: must be one of %s", v, strings.Join(allowed, ", "))
	return def
}

func (l *loader) integer(name string, def, lo, hi int) int {
	s := l.str(name, "")
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		l.fail(name, "=%q: not an integer", s)
		return def
	}
	if n < lo || n > hi {
		l.fail(name, "=%d: must be between %d and %d", n, lo, hi)
		return def
	}
	return n
}

func (l *loader) duration(name string, def, lo, hi time.Duration) time.Duration {
	s := l.str(name, "")
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		l.fail(name, "=%q: not a duration (e.g. 5m, 24h)", s)
		return def
	}
	if d < lo || d > hi {
		l.fail(name, "=%s: must be between %s and %s", d, lo, hi)
		return def
	}
	return d
}

func (l *loader) boolean(name string) bool {
	s := l.str(name, "")
	if s == "" {
		return false
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		l.fail(name, "=%q: must be true or false", s)
	}
	return b
}

func (l *loader) level(name string) slog.Level {
	var lv slog.Level
	s := l.str(name, "info")
	if err := lv.UnmarshalText([]byte(s)); err != nil {
		l.fail(name, "=%q: must be debug, info, warn or error", s)
		return slog.LevelInfo
	}
	return lv
}

func (l *loader) mount(name string) string {
	s := l.str(name, "")
	if s == "" || s == "/" {
		return ""
	}
	if !strings.HasPrefix(s, "/") || strings.ContainsAny(s, "?#%") || strings.Contains(s, "//") {
		l.fail(name, "=%q: must be a path like /api", s)
		return ""
	}
	return strings.TrimRight(s, "/")
}

func (l *loader) publicURL(name string) string {
	s := l.str(name, "")
	if s == "" {
		return ""
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		l.fail(name, "=%q: must be an absolute http(s) URL without query", s)
		return ""
	}
	return strings.TrimRight(s, "/")
}

func (l *loader) endpoint(name string) string {
	s := l.str(name, "")
	if s == "" {
		return ""
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		l.fail(name, "=%q: must be an http(s) URL", s)
		return ""
	}
	return s
}

// key checks a (value, reference) pair: exactly one, and a literal value
// long enough for HMAC-SHA256.
func (l *loader) key(name string, value []byte, ref, what string) {
	switch {
	case len(value) > 0 && ref != "":
		l.fail(name, "and %s_REF are both set; use one", name)
	case len(value) == 0 && ref == "":
		l.fail(name, "or %s_REF is required for %s", name, what)
	case len(value) > 0 && len(value) < MinKeyBytes:
		l.fail(name, "must be at least %d bytes (got %d)", MinKeyBytes, len(value))
	}
}
