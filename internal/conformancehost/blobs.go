package conformancehost

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/skyfold/syncular-lambda/internal/core/blobs"
	"github.com/skyfold/syncular-lambda/internal/core/httpapi"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// The blobs and blob-presign driver methods (§5.9). Uploads, grants and
// downloads go through httpapi like a client's requests; the presigned
// URL methods play the object host (memblobs verifies its own tokens).

// okResult is {ok: true} or {ok: false, error}.
type okResult struct {
	OK    bool         `json:"ok"`
	Error *driverError `json:"error,omitempty"`
}

func (in *instance) blobPath(blobID string) string {
	return "/i/" + in.id + "/blobs/" + url.PathEscape(blobID)
}

// errorOf renders a non-2xx httpapi response as a driver error.
func errorOf(resp *httpapi.Response) *driverError {
	var body syncerr.Body
	if err := json.Unmarshal(resp.Body, &body); err != nil || body.Code == "" {
		return &driverError{Code: string(syncerr.OperationExecutionFailed), Message: "HTTP " + http.StatusText(resp.Status)}
	}
	return &driverError{Code: string(body.Code), Message: body.Message, Category: body.Category, Retryable: body.Retryable, RecommendedAction: body.RecommendedAction}
}

func (in *instance) uploadBlob(ctx context.Context, a *args) (any, *controlError) {
	var actor, blobID, mediaType string
	var body u8
	if e := firstErr(a.arity(3, 4), a.decode(0, "actorId", &actor), a.decode(1, "blobId", &blobID), a.decode(2, "bytes", &body)); e != nil {
		return nil, e
	}
	if a.present(3) {
		if e := a.decode(3, "mediaType", &mediaType); e != nil {
			return nil, e
		}
	}
	hdr := http.Header{}
	hdr.Set("Content-Type", "application/octet-stream")
	resp := in.api.Serve(ctx, &httpapi.Request{Method: http.MethodPut, Path: in.blobPath(blobID), Query: url.Values{}, Header: hdr, Body: body, Auth: in.auth(actor)})
	if resp.Status != http.StatusOK {
		return okResult{Error: errorOf(resp)}, nil
	}
	return okResult{OK: true}, nil
}

func (in *instance) downloadBlob(ctx context.Context, a *args) (any, *controlError) {
	var actor, blobID string
	if e := firstErr(a.arity(2, 2), a.decode(0, "actorId", &actor), a.decode(1, "blobId", &blobID)); e != nil {
		return nil, e
	}
	resp := in.api.Serve(ctx, &httpapi.Request{Method: http.MethodGet, Path: in.blobPath(blobID), Query: url.Values{}, Header: http.Header{}, Auth: in.auth(actor)})
	if resp.Status != http.StatusOK {
		return bytesResult{Error: errorOf(resp)}, nil
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		var g struct {
			URL            string `json:"url"`
			URLExpiresAtMs int64  `json:"urlExpiresAtMs"`
		}
		if err := json.Unmarshal(resp.Body, &g); err != nil || g.URL == "" {
			return bytesResult{Error: &driverError{Code: string(syncerr.OperationExecutionFailed), Message: "download answered JSON without a url"}}, nil
		}
		return map[string]any{"ok": true, "url": g.URL, "urlExpiresAtMs": g.URLExpiresAtMs}, nil
	}
	return okBytes(resp.Body), nil
}

func (in *instance) uploadBlobGrant(ctx context.Context, a *args) (any, *controlError) {
	var actor, blobID, mediaType string
	var n int64
	if e := firstErr(a.arity(3, 4), a.decode(0, "actorId", &actor), a.decode(1, "blobId", &blobID), a.decode(2, "byteLength", &n)); e != nil {
		return nil, e
	}
	req := map[string]any{"byteLength": n}
	if a.present(3) {
		if e := a.decode(3, "mediaType", &mediaType); e != nil {
			return nil, e
		}
		req["mediaType"] = mediaType
	}
	body, _ := json.Marshal(req)
	hdr := http.Header{}
	hdr.Set("Content-Type", "application/json")
	resp := in.api.Serve(ctx, &httpapi.Request{Method: http.MethodPost, Path: in.blobPath(blobID) + "/upload-grant", Query: url.Values{}, Header: hdr, Body: body, Auth: in.auth(actor)})
	if resp.Status != http.StatusOK {
		return map[string]any{"ok": false, "error": errorOf(resp)}, nil
	}
	var g struct {
		URL            string `json:"url"`
		URLExpiresAtMs int64  `json:"urlExpiresAtMs"`
		Present        bool   `json:"present"`
	}
	if err := json.Unmarshal(resp.Body, &g); err != nil {
		return nil, failed(err)
	}
	switch {
	case g.Present:
		return map[string]any{"ok": true, "grant": map[string]any{"kind": "present"}}, nil
	case g.URL != "":
		return map[string]any{"ok": true, "grant": map[string]any{"kind": "url", "url": g.URL, "urlExpiresAtMs": g.URLExpiresAtMs}}, nil
	}
	return map[string]any{"ok": true, "grant": map[string]any{"kind": "none"}}, nil
}

func (in *instance) fetchBlobURL(ctx context.Context, a *args) (any, *controlError) {
	var raw string
	if e := firstErr(a.arity(1, 1), a.decode(0, "url", &raw)); e != nil {
		return nil, e
	}
	b, err := in.st.FetchBlobURL(ctx, raw)
	if err != nil {
		return failBytes(syncerr.New(syncerr.Forbidden, "presigned URL rejected: %v", err)), nil
	}
	return okBytes(b), nil
}

func (in *instance) putBlobURL(ctx context.Context, a *args) (any, *controlError) {
	var raw string
	var body u8
	if e := firstErr(a.arity(2, 3), a.decode(0, "url", &raw), a.decode(1, "bytes", &body)); e != nil {
		return nil, e
	}
	if err := in.st.PutBlobURL(ctx, raw, body); err != nil {
		de := toDriverError(syncerr.New(syncerr.Forbidden, "presigned URL rejected: %v", err))
		return okResult{Error: &de}, nil
	}
	return okResult{OK: true}, nil
}

func (in *instance) setBlobPresign(_ context.Context, a *args) (any, *controlError) {
	var on bool
	if e := firstErr(a.arity(1, 1), a.decode(0, "enabled", &on)); e != nil {
		return nil, e
	}
	var p blobs.Presigner
	if on {
		p = in.st.BlobPresigner()
	}
	for _, e := range in.engines() {
		e.SetBlobPresigner(p)
	}
	return nil, nil
}
