// Package syncerr is the SSP2 error catalog (SPEC §10): one Go error type,
// carried from the point of failure to the wire, with the fixed category,
// retryable flag, recommended action and HTTP status of every code.
//
// Code never matches on error messages: callers use errors.As to find the
// *Error and read its Code.
package syncerr

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Code is a stable machine identifier from the §10.2 catalog.
type Code string

// The §10.2 wire catalog.
const (
	OperationUnknown            Code = "operation.unknown"
	OperationForbidden          Code = "operation.forbidden"
	OperationInvalidRequest     Code = "operation.invalid_request"
	OperationResultTooLarge     Code = "operation.result_too_large"
	OperationStorageUnsupported Code = "operation.storage_unsupported"
	OperationQueryFailed        Code = "operation.query_failed"
	OperationExecutionFailed    Code = "operation.execution_failed"
	AuthRequired                Code = "sync.auth_required"
	AuthLeaseRequired           Code = "sync.auth_lease_required"
	AuthLeaseRevoked            Code = "sync.auth_lease_revoked"
	Forbidden                   Code = "sync.forbidden"
	InvalidRequest              Code = "sync.invalid_request"
	InvalidClientID             Code = "sync.invalid_client_id"
	InvalidSubscription         Code = "sync.invalid_subscription"
	EmptyCommit                 Code = "sync.empty_commit"
	UnknownTable                Code = "sync.unknown_table"
	RowMissing                  Code = "sync.row_missing"
	VersionConflict             Code = "sync.version_conflict"
	ConstraintViolation         Code = "sync.constraint_violation"
	MissingScopes               Code = "sync.missing_scopes"
	CrdtMergeFailed             Code = "sync.crdt_merge_failed"
	IdempotencyCacheMiss        Code = "sync.idempotency_cache_miss"
	TooManyOperations           Code = "sync.too_many_operations"
	NotFound                    Code = "sync.not_found"
	SegmentExpired              Code = "sync.segment_expired"
	CursorExpired               Code = "sync.cursor_expired"
	ScopeRevoked                Code = "sync.scope_revoked"
	RateLimited                 Code = "sync.rate_limited"
	SchemaMismatch              Code = "sync.schema_mismatch"
	ClientSchemaUnsupported     Code = "sync.client_schema_unsupported"
	ClientWireUnsupported       Code = "sync.client_wire_unsupported"
	WebsocketConnectionLimit    Code = "sync.websocket_connection_limit"
	BlobNotFound                Code = "blob.not_found"
	BlobForbidden               Code = "blob.forbidden"
	BlobHashMismatch            Code = "blob.hash_mismatch"
	BlobTooLarge                Code = "blob.too_large"

	// Added by wire version 3 (§10.2 of the 0.21+ spec). A version-2
	// client never receives them: the engine maps each to the nearest
	// version-2 code at the edge (see ForWire).
	RowDeleted         Code = "sync.row_deleted"
	ReferenceViolation Code = "sync.reference_violation"
	SchemaNotReady     Code = "sync.schema_not_ready"
	InternalError      Code = "sync.internal_error"
	StorageStaleRead   Code = "sync.storage_stale_read"
)

// Entry is the fixed metadata of one catalog code (§10.1): clients may
// hardcode it, so it never varies per instance.
type Entry struct {
	Category          string
	Retryable         bool
	RecommendedAction string
	// HTTPStatus is the status an HTTP-level error of this code carries.
	HTTPStatus int
}

var catalog = map[Code]Entry{
	OperationUnknown:            {"not-found", false, "regenerateClient", 404},
	OperationForbidden:          {"forbidden", false, "checkPermissions", 403},
	OperationInvalidRequest:     {"invalid-request", false, "fixRequest", 400},
	OperationResultTooLarge:     {"invalid-request", false, "fixRequest", 400},
	OperationStorageUnsupported: {"internal", false, "inspectServer", 500},
	OperationQueryFailed:        {"internal", false, "inspectServer", 500},
	OperationExecutionFailed:    {"internal", false, "inspectServer", 500},
	AuthRequired:                {"auth-required", true, "refreshAuth", 401},
	AuthLeaseRequired:           {"auth-required", true, "refreshAuth", 401},
	AuthLeaseRevoked:            {"auth-required", true, "refreshAuth", 401},
	Forbidden:                   {"forbidden", false, "checkPermissions", 403},
	InvalidRequest:              {"invalid-request", false, "fixRequest", 400},
	InvalidClientID:             {"invalid-request", false, "resetClientId", 400},
	InvalidSubscription:         {"invalid-request", false, "fixRequest", 400},
	EmptyCommit:                 {"invalid-request", false, "fixRequest", 400},
	UnknownTable:                {"schema-mismatch", false, "regenerateClient", 400},
	RowMissing:                  {"not-found", false, "forceResync", 404},
	VersionConflict:             {"conflict", false, "resolveConflict", 409},
	ConstraintViolation:         {"invalid-request", false, "fixRequest", 400},
	MissingScopes:               {"internal", false, "inspectServer", 500},
	CrdtMergeFailed:             {"internal", false, "inspectServer", 500},
	IdempotencyCacheMiss:        {"internal", true, "retryLater", 500},
	TooManyOperations:           {"invalid-request", false, "splitBatch", 400},
	NotFound:                    {"not-found", false, "forceResync", 404},
	SegmentExpired:              {"not-found", true, "retryLater", 404},
	CursorExpired:               {"reset-required", false, "rebootstrap", 400},
	ScopeRevoked:                {"scope-revoked", false, "checkPermissions", 403},
	RateLimited:                 {"rate-limited", true, "retryLater", 429},
	SchemaMismatch:              {"schema-mismatch", false, "regenerateClient", 400},
	ClientSchemaUnsupported:     {"schema-mismatch", false, "upgradeClient", 400},
	ClientWireUnsupported:       {"schema-mismatch", false, "upgradeClient", 400},
	WebsocketConnectionLimit:    {"rate-limited", true, "retryLater", 429},
	BlobNotFound:                {"not-found", false, "fixRequest", 404},
	BlobForbidden:               {"forbidden", false, "checkPermissions", 403},
	BlobHashMismatch:            {"invalid-request", false, "fixRequest", 400},
	BlobTooLarge:                {"invalid-request", false, "fixRequest", 413},
	RowDeleted:                  {"not-found", false, "fixRequest", 404},
	ReferenceViolation:          {"invalid-request", false, "fixRequest", 400},
	SchemaNotReady:              {"internal", true, "retryLater", 503},
	InternalError:               {"internal", true, "retryLater", 500},
	StorageStaleRead:            {"internal", false, "inspectServer", 500},
}

// Lookup returns the catalog entry of code; ok is false for codes outside
// the closed §10.2 catalog.
func Lookup(code Code) (Entry, bool) {
	e, ok := catalog[code]
	return e, ok
}

// Codes lists every catalog code (order unspecified).
func Codes() []Code {
	out := make([]Code, 0, len(catalog))
	for c := range catalog {
		out = append(out, c)
	}
	return out
}

// Error is the one protocol error type. Its catalog metadata comes from
// Code; Message is human-readable and never parsed.
type Error struct {
	Code    Code
	Message string
	// Details is an optional JSON object (§10.1), already encoded.
	Details json.RawMessage
	// Status overrides the catalog HTTP status when non-zero (e.g. the
	// 415 of a wrong content type, which the catalog reports as
	// sync.invalid_request).
	Status int
	cause  error
}

// New returns an *Error for code. It panics on a code outside the catalog:
// that is a programming error, never input-dependent.
func New(code Code, format string, args ...any) *Error {
	if _, ok := catalog[code]; !ok {
		panic(fmt.Sprintf("syncerr: code %q is not in the §10.2 catalog", code))
	}
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns an *Error for code that keeps cause for errors.Is/As and logs.
func Wrap(cause error, code Code, format string, args ...any) *Error {
	e := New(code, format, args...)
	e.cause = cause
	return e
}

// WithStatus returns a copy of e that maps to HTTP status s.
func (e *Error) WithStatus(s int) *Error {
	c := *e
	c.Status = s
	return &c
}

func (e *Error) Error() string {
	if e.cause != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.cause)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.cause }

// Entry returns the catalog metadata of e's code.
func (e *Error) Entry() Entry { return catalog[e.Code] }

// HTTPStatus is the status an HTTP-level response for e carries.
func (e *Error) HTTPStatus() int {
	if e.Status != 0 {
		return e.Status
	}
	return catalog[e.Code].HTTPStatus
}

// Body is the §10.1 JSON shape.
type Body struct {
	Code              Code            `json:"code"`
	Category          string          `json:"category"`
	Retryable         bool            `json:"retryable"`
	RecommendedAction string          `json:"recommendedAction"`
	Message           string          `json:"message"`
	Details           json.RawMessage `json:"details,omitempty"`
}

// Body renders e in the §10.1 shape.
func (e *Error) Body() Body {
	en := catalog[e.Code]
	return Body{
		Code:              e.Code,
		Category:          en.Category,
		Retryable:         en.Retryable,
		RecommendedAction: en.RecommendedAction,
		Message:           e.Message,
		Details:           e.Details,
	}
}

// MarshalJSON encodes e as its §10.1 body.
func (e *Error) MarshalJSON() ([]byte, error) { return json.Marshal(e.Body()) }

// As returns the *Error inside err, or nil.
func As(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// HasCode reports whether err carries a catalog error with code.
func HasCode(err error, code Code) bool {
	e := As(err)
	return e != nil && e.Code == code
}

// InternalMessage is the fixed public message of sync.internal_error: the
// text of an unexpected failure never reaches the wire (§6.7, §10.2).
const InternalMessage = "internal server error"

// Internal wraps an unexpected server fault (storage, network, a bug) for
// the wire as sync.internal_error — retryable, HTTP 500, fixed message
// (§10.2 of the 0.21+ catalog). The cause stays available to logs through
// Unwrap. A version-2 client receives it mapped by ForWire.
func Internal(cause error) *Error {
	if e := As(cause); e != nil {
		return e
	}
	e := New(InternalError, InternalMessage)
	e.cause = cause
	return e
}

// ForWire returns the code a client of wire version v may receive in place
// of code. Wire version 3 added codes that version-2 clients (0.15.48
// catalog) do not know; each maps to the version-2 code whose category,
// retryability and action a stock version-2 client handles the same way.
// sync.client_wire_unsupported left the catalog with version 3.
func ForWire(code Code, v uint16) Code {
	if v >= 3 {
		if code == ClientWireUnsupported {
			return ClientSchemaUnsupported
		}
		return code
	}
	switch code {
	case RowDeleted:
		return RowMissing
	case ReferenceViolation:
		return ConstraintViolation
	case SchemaNotReady, InternalError:
		// Both are retryable; the nearest retryable request-level code a
		// version-2 client backs off on.
		return RateLimited
	case StorageStaleRead:
		return OperationExecutionFailed
	}
	return code
}
