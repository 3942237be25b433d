package httpapi

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// BlobURLHost serves presigned blob URLs for a backend that has no object
// host of its own (the in-memory store): the local runner answers them on
// the blob route itself. S3-backed hosts leave it nil.
type BlobURLHost interface {
	ServePut(rawURL string, body []byte) error
	ServeGet(rawURL string) ([]byte, error)
}

// blob serves <mount>/blobs/{blobId} (PUT upload §5.9.3, GET/HEAD
// download §5.9.5) and POST <mount>/blobs/{blobId}/upload-grant (§5.9.3).
func (h *Handler) blob(ctx context.Context, r *Request, rest string) *Response {
	rawID, grant := strings.CutSuffix(rest, "/upload-grant")
	id, err := url.PathUnescape(rawID)
	if err != nil || id == "" || strings.Contains(id, "/") {
		return errorResponse(syncerr.New(syncerr.NotFound, "no route for %s", r.Path).WithStatus(http.StatusNotFound))
	}
	if r.Query.Get("bt") != "" && h.BlobURLs != nil && !grant {
		return h.blobURL(r)
	}
	if r.Auth == nil {
		return errorResponse(syncerr.New(syncerr.AuthRequired, "authentication required"))
	}
	switch {
	case grant && r.Method == http.MethodPost:
		return h.blobGrant(ctx, r, id)
	case grant:
		return errorResponse(syncerr.New(syncerr.InvalidRequest, "use POST").WithStatus(http.StatusMethodNotAllowed))
	case r.Method == http.MethodPut:
		return h.blobUpload(ctx, r, id)
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		return h.blobDownload(ctx, r, id)
	}
	return errorResponse(syncerr.New(syncerr.InvalidRequest, "use PUT, GET or POST …/upload-grant").WithStatus(http.StatusMethodNotAllowed))
}

// blobUpload is the direct upload: the server hashes the decoded bytes
// (§5.9.3); the declared Content-Length is checked before reading.
func (h *Handler) blobUpload(ctx context.Context, r *Request, id string) *Response {
	declared := int64(-1)
	var body io.Reader = bytes.NewReader(r.Body)
	switch ce := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); ce {
	case "", "identity":
		declared = int64(len(r.Body))
		if cl, err := strconv.ParseInt(r.Header.Get("Content-Length"), 10, 64); err == nil && cl > declared {
			declared = cl
		}
	case "gzip":
		// A client gzips for the wire; the content address is over the
		// decoded bytes, which the store counts as it hashes them.
		zr, err := gzip.NewReader(bytes.NewReader(r.Body))
		if err != nil {
			return errorResponse(syncerr.New(syncerr.InvalidRequest, "request body is not valid gzip: %v", err))
		}
		body = zr
	default:
		return errorResponse(syncerr.New(syncerr.InvalidRequest, "unsupported Content-Encoding %q (gzip only)", ce).WithStatus(http.StatusUnsupportedMediaType))
	}
	if err := h.Engine.UploadBlob(ctx, *r.Auth, id, declared, body); err != nil {
		return errorResponse(err)
	}
	hdr := http.Header{}
	hdr.Set("Cache-Control", "no-store")
	return &Response{Status: http.StatusOK, Header: hdr}
}

// blobGrant answers the upload grant: {"url","urlExpiresAtMs"},
// {"present":true}, or {} when the host has no presigned uploads (the
// client then uses the direct PUT, §5.9.3).
func (h *Handler) blobGrant(ctx context.Context, r *Request, id string) *Response {
	var req struct {
		ByteLength *int64  `json:"byteLength"`
		MediaType  *string `json:"mediaType"`
	}
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || dec.More() || req.ByteLength == nil {
		return errorResponse(syncerr.New(syncerr.InvalidRequest, "body must be {\"byteLength\":<int ≥ 0>,\"mediaType\"?:<string>} (§5.9.3)"))
	}
	g, err := h.Engine.GrantBlobUpload(ctx, *r.Auth, id, *req.ByteLength)
	if err != nil {
		return errorResponse(err)
	}
	out := map[string]any{}
	switch {
	case g.Present:
		out["present"] = true
	case g.URL != "":
		out["url"], out["urlExpiresAtMs"] = g.URL, g.ExpiresAtMs
	}
	return jsonResponse(out)
}

func jsonResponse(v any) *Response {
	body, _ := json.Marshal(v)
	hdr := http.Header{}
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Cache-Control", "no-store")
	return &Response{Status: http.StatusOK, Header: hdr, Body: body}
}

// blobDownload authorizes against the referencing rows (§5.9.5) and
// answers a presigned URL (always-issue) or the bytes.
func (h *Handler) blobDownload(ctx context.Context, r *Request, id string) *Response {
	dl, err := h.Engine.AuthorizeBlob(ctx, *r.Auth, id, false)
	if err != nil {
		return errorResponse(err)
	}
	if dl.URL != "" {
		return jsonResponse(map[string]any{"url": dl.URL, "urlExpiresAtMs": dl.ExpiresAtMs})
	}
	hdr, done := immutableHeaders(r, dl.BlobID, "Authorization, Accept-Encoding")
	if done != nil {
		return done
	}
	rc, err := dl.Open(ctx)
	if err != nil {
		return errorResponse(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return errorResponse(syncerr.Wrap(err, syncerr.InternalError, "read blob"))
	}
	return &Response{Status: http.StatusOK, Header: hdr, Body: b}
}

// blobURL plays the object host for a native presigned URL (BlobURLs):
// the token is the whole grant, no host authentication.
func (h *Handler) blobURL(r *Request) *Response {
	raw := "http://blob-host" + r.Path + "?" + r.Query.Encode()
	switch r.Method {
	case http.MethodPut:
		if err := h.BlobURLs.ServePut(raw, r.Body); err != nil {
			return errorResponse(syncerr.New(syncerr.Forbidden, "presigned URL rejected: %v", err))
		}
		return &Response{Status: http.StatusOK, Header: http.Header{}}
	case http.MethodGet:
		b, err := h.BlobURLs.ServeGet(raw)
		if err != nil {
			return errorResponse(syncerr.New(syncerr.Forbidden, "presigned URL rejected: %v", err))
		}
		hdr := http.Header{}
		hdr.Set("Content-Type", "application/octet-stream")
		return &Response{Status: http.StatusOK, Header: hdr, Body: b}
	}
	return errorResponse(errors.New("method not allowed on a presigned URL"))
}
