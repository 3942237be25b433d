package httpapi

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// segment serves GET <mount>/segments/{segmentId} (§5.5), or a native
// signed URL fetch when the query carries st (§5.4).
func (h *Handler) segment(ctx context.Context, r *Request, rawID string) *Response {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return errorResponse(syncerr.New(syncerr.InvalidRequest, "use GET").WithStatus(http.StatusMethodNotAllowed))
	}
	id, err := url.PathUnescape(rawID)
	if err != nil || id == "" || strings.Contains(id, "/") {
		return errorResponse(syncerr.New(syncerr.NotFound, "unknown segment"))
	}
	req := engine.SegmentRequest{SegmentID: id, Token: r.Query.Get("st")}
	if req.Token == "" {
		if r.Auth == nil {
			return errorResponse(syncerr.New(syncerr.AuthRequired, "authentication required"))
		}
		req.Auth = r.Auth
		req.Scopes = r.Header.Get("X-Syncular-Scopes")
	}
	dl, err := h.Engine.AuthorizeSegment(ctx, req)
	if err != nil {
		return errorResponse(err)
	}
	hdr, done := immutableHeaders(r, dl.SegmentID, "Authorization, X-Syncular-Scopes, Accept-Encoding")
	if done != nil {
		return done
	}
	rc, err := dl.Open(ctx)
	if err != nil {
		return errorResponse(err)
	}
	defer rc.Close()
	enc := negotiate(r.Header.Get("Accept-Encoding"))
	var buf bytes.Buffer
	w, closeW := compressor(&buf, enc)
	if _, err := io.Copy(w, rc); err != nil {
		return errorResponse(syncerr.Wrap(err, syncerr.OperationExecutionFailed, "read segment"))
	}
	if err := closeW(); err != nil {
		return errorResponse(syncerr.Wrap(err, syncerr.OperationExecutionFailed, "compress segment"))
	}
	if enc != "" {
		hdr.Set("Content-Encoding", enc)
	}
	return &Response{Status: http.StatusOK, Header: hdr, Body: buf.Bytes()}
}

// immutableHeaders starts the answer to a GET or HEAD of a
// content-addressed object (a blob or a segment, named by id, so id is its
// strong ETag): the validator and caching headers, with vary the request
// headers the answer depends on. done is the whole answer when no body is
// needed: 304 for a matching If-None-Match, 200 with headers for HEAD.
func immutableHeaders(r *Request, id, vary string) (hdr http.Header, done *Response) {
	etag := `"` + id + `"`
	hdr = http.Header{}
	hdr.Set("ETag", etag)
	hdr.Set("Cache-Control", "private, max-age=0")
	hdr.Set("Vary", vary)
	if inm := r.Header.Get("If-None-Match"); inm != "" && etagMatches(inm, etag) {
		return hdr, &Response{Status: http.StatusNotModified, Header: hdr}
	}
	hdr.Set("Content-Type", "application/octet-stream")
	if r.Method == http.MethodHead {
		return hdr, &Response{Status: http.StatusOK, Header: hdr}
	}
	return hdr, nil
}

func etagMatches(header, etag string) bool {
	for _, part := range strings.Split(header, ",") {
		p := strings.TrimSpace(part)
		p = strings.TrimPrefix(p, "W/")
		if p == "*" || p == etag {
			return true
		}
	}
	return false
}
