package httpapi

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/skyfold/syncular-lambda/internal/core/limits"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// Requests whose body is over a cap.
//
// The deployed stack cannot receive a body over limits.MaxRequestBodyBytes:
// API Gateway answers 413 itself and no function runs (its answer cannot
// be customised on an HTTP API; the template counts it from the access
// log). Everywhere this code does answer — a host that refuses the body
// unread (the local runner, whose check mirrors Lambda's payload limit),
// and a gzip body whose decoded size is over Handler.MaxBodyBytes — the
// answer is a §10.1 error, 413, whose message says what happened and what
// to change, and the request line names the client and counts the refusal
// (field overCapField, a metric of internal/metrics).
//
// The code is sync.too_many_operations: the catalog's one code for "this
// push carries more than one request may" (§10.2), whose recommended
// action, splitBatch, is the remedy. A direct blob upload over the cap is
// blob.too_large instead (§5.9.3): its remedy is the upload grant.

// OverCapPrefixBytes is how much of a body it refuses a host keeps in
// Request.Body (Request.BodyOverCap): enough for the envelope header and
// the REQ_HEADER's clientId, also when gzip encoded.
const OverCapPrefixBytes = 4 << 10

// overCapField is the request line's counter of refusals; the header of
// the same name marks a response as one until Serve has logged it.
const (
	overCapField  = "requestsOverCap"
	overCapHeader = "X-Syncular-Over-Cap"
)

// overCapDetails is the §10.1 details object of an over-cap refusal.
type overCapDetails struct {
	// Limit is "request" (the body as sent; what a Lambda invocation can
	// carry) or "decoded" (the body after gzip decoding, SYNC_MAX_BODY_BYTES).
	Limit      string `json:"limit"`
	LimitBytes int64  `json:"limitBytes"`
	// BodyBytes is the body's size as sent, when the host knows it.
	BodyBytes int64 `json:"bodyBytes,omitempty"`
}

func withDetails(e *syncerr.Error, d overCapDetails) *syncerr.Error {
	b, err := json.Marshal(d)
	if err != nil { // a struct of strings and integers cannot fail
		return e
	}
	e.Details = b
	return e
}

// RequestOverCap is the §10 error for a sync, push or pull request whose
// body as sent (sent bytes; ≤ 0 when unknown) exceeds limit, the request
// cap (limits.MaxRequestBodyBytes on every host of these handlers).
func RequestOverCap(sent int64, limit int) *syncerr.Error {
	size := "over " + strconv.Itoa(limit)
	if sent > 0 {
		size = strconv.FormatInt(sent, 10)
	}
	e := syncerr.New(syncerr.TooManyOperations,
		"request body of %s bytes exceeds the request cap of %d bytes (one Lambda invocation carries at most 6 MiB, the body base64 encoded), so it was not read. "+
			"The client must send fewer commits per request, keep large values out of rows (blobs), or gzip the body (Content-Encoding: gzip); see docs/LIMITS.md",
		size, limit).WithStatus(http.StatusRequestEntityTooLarge)
	return withDetails(e, overCapDetails{Limit: "request", LimitBytes: int64(limit), BodyBytes: max(sent, 0)})
}

// decodedOverCap is the §10 error for a gzip body that decodes to more
// than the handler's MaxBodyBytes.
func decodedOverCap(sent int64, limit int) *syncerr.Error {
	e := syncerr.New(syncerr.TooManyOperations,
		"request body decodes to more than %d bytes (SYNC_MAX_BODY_BYTES), so it was not applied. "+
			"The client must send fewer commits per request; an operator may raise SYNC_MAX_BODY_BYTES up to %d",
		limit, limits.MaxDecodedBodyBytes).WithStatus(http.StatusRequestEntityTooLarge)
	return withDetails(e, overCapDetails{Limit: "decoded", LimitBytes: int64(limit), BodyBytes: sent})
}

// blobOverCap is the §10 error for a direct blob upload over the request cap.
func blobOverCap(sent int64, limit int) *syncerr.Error {
	size := "over " + strconv.Itoa(limit)
	if sent > 0 {
		size = strconv.FormatInt(sent, 10)
	}
	e := syncerr.New(syncerr.BlobTooLarge,
		"blob upload body of %s bytes exceeds the request cap of %d bytes of a direct upload; request an upload grant (POST …/blobs/{blobId}/upload-grant) and PUT the bytes to its URL",
		size, limit)
	return withDetails(e, overCapDetails{Limit: "request", LimitBytes: int64(limit), BodyBytes: max(sent, 0)})
}

// overCapResponse is errorResponse marked for Serve's request line.
func overCapResponse(err *syncerr.Error) *Response {
	resp := errorResponse(err)
	resp.Header.Set(overCapHeader, "1")
	return resp
}

// refuseOverCap answers a request whose host refused its body unread
// (Request.BodyOverCap).
func (h *Handler) refuseOverCap(r *Request, blobRoute bool) *Response {
	if blobRoute {
		return overCapResponse(blobOverCap(r.BodyOverCap, limits.MaxRequestBodyBytes))
	}
	return overCapResponse(RequestOverCap(r.BodyOverCap, limits.MaxRequestBodyBytes))
}

// ClientIDOf returns the clientId of an SSP2 request from the first bytes
// of its body as sent (contentEncoding "" / identity or gzip), or "" when
// they do not hold one. For the log line of a refused request only.
func ClientIDOf(prefix []byte, contentEncoding string) string {
	switch strings.ToLower(strings.TrimSpace(contentEncoding)) {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(prefix))
		if err != nil {
			return ""
		}
		// The envelope header, REQ_HEADER's frame header, the clientId's
		// length and the longest clientId: a cut gzip stream yields what
		// it holds, then io.ErrUnexpectedEOF.
		buf := make([]byte, 8+5+4+limits.MaxClientIDBytes)
		n, err := io.ReadFull(zr, buf)
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
			return ""
		}
		prefix = buf[:n]
	default:
		return ""
	}
	id, _ := wire.PeekClientID(prefix, limits.MaxClientIDBytes)
	return id
}
