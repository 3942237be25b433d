// Package httpapi is the transport-neutral HTTP surface of the sync
// endpoints (SPEC §1.1, §1.3, §5.5): routing under a mount prefix, content
// type and size checks, gzip request bodies, zstd/gzip responses, the
// §10.1 JSON error shape and one structured log line per request. Hosts
// (the Lambda adapter, the local runner, the conformance host) translate
// their own request type to Request and authenticate before calling Serve.
package httpapi

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/klauspost/compress/zstd"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/limits"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// ContentType is the SSP2 body media type (§1.1).
const ContentType = "application/vnd.syncular.sync.v2"

// Route names one endpoint family.
type Route int

const (
	RouteSync Route = 1 << iota
	RoutePush
	RoutePull
	RouteSegments
	// RouteBlobs serves <mount>/blobs/… (§5.9.3, §5.9.5).
	RouteBlobs
	// RouteAll serves every route (local runner, conformance host).
	RouteAll = RouteSync | RoutePush | RoutePull | RouteSegments | RouteBlobs
)

// Request is one HTTP request as the host received it.
type Request struct {
	Method string
	// Path is the URL path, still percent-encoded as received.
	Path   string
	Query  url.Values
	Header http.Header
	Body   []byte
	// BodyOverCap, when non-zero, says the host refused to read the body
	// because it exceeds the request cap (limits.MaxRequestBodyBytes, what
	// a Lambda invocation can carry): Body holds only its first bytes (at
	// most OverCapPrefixBytes, to name the client in the log) and
	// BodyOverCap is the body's size as sent, or -1 when unknown. Serve
	// answers it with a 413 §10 error (overcap.go).
	BodyOverCap int64
	// Auth is the host's authentication result; nil when the request
	// carried no valid credentials.
	Auth *engine.Auth
	// AuthError explains why Auth is nil (never logged with the token).
	AuthError error
	// BaseURL is the host's configured public scheme://host[/base], used
	// to mint native signed segment URLs; hosts must never derive it from
	// request headers (Host, X-Forwarded-*). Empty: no native URLs.
	BaseURL   string
	RequestID string
	// Event is the host's invocation document as received (the Lambda
	// adapter's API Gateway v2 event), which a Forwarder hands on
	// unchanged; nil when the host has none (no forwarding).
	Event []byte
	// Forwarded: another build forwarded this request here (a marker
	// only a build sets, never taken from the client's request). It is
	// never forwarded again, so forwarding cannot loop.
	Forwarded bool
}

// Response is what the host writes back.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
	// Relayed, when set, is another build's whole response document
	// (Forwarder) the host returns as it is; Status, Header and Body are
	// its decoded content (for the log line and in-process hosts).
	Relayed []byte
}

// Forwarder hands a request the serve gate refused (engine
// Report.GateRefused: the partition's writer fence or a pending
// checkpoint belongs to a newer build) to a newer build of the same
// function and returns that build's answer; ok is false when there is
// none or it could not answer, and the refusal (retryable, §10.2) stands.
// The forwarded request is the client's unchanged one; authorization
// runs again in the build that serves it.
type Forwarder interface {
	Forward(ctx context.Context, r *Request) (resp *Response, ok bool)
}

// Handler serves the routes it is configured for.
type Handler struct {
	Engine *engine.Engine
	// Mount is the route prefix ("" or e.g. "/api"), without a trailing slash.
	Mount  string
	Routes Route
	// MaxBodyBytes caps request bodies after decompression (413 above).
	MaxBodyBytes int
	// MaxResponseBytes caps a response body as sent (after compression);
	// zero means limits.MaxResponseBodyBytes, what a Lambda response can
	// carry once base64 encoded.
	MaxResponseBytes int
	Logger           *slog.Logger
	// Now is the clock for request durations; nil means time.Now.
	Now func() time.Time
	// Meter, when set, wraps each request's context (e.g. to accumulate
	// storage capacity) and returns the attributes its log line adds.
	Meter func(ctx context.Context) (context.Context, func() []slog.Attr)
	// Line, when set, rewrites the request line's attributes just before
	// it is logged (the Lambda functions add their CloudWatch EMF metric
	// directive, internal/metrics).
	Line func(attrs []slog.Attr) []slog.Attr
	// BlobURLs, when set, answers native presigned blob URLs on the blob
	// route (blobs.go).
	BlobURLs BlobURLHost
	// Forward, when set, answers a request the serve gate refused
	// through a newer build instead (rolling schema upgrades).
	Forward Forwarder

	// lastSegBase caches the segment base URL of the last BaseURL seen:
	// a host's BaseURL is its configured public URL, the same on every
	// request, so the URL is built once rather than per request.
	lastSegBase atomic.Pointer[segBase]
}

type segBase struct{ baseURL, url string }

// segmentBase is the URL under which native segment downloads are minted
// for a host at baseURL ("" when the host has none).
func (h *Handler) segmentBase(baseURL string) string {
	if baseURL == "" {
		return ""
	}
	if c := h.lastSegBase.Load(); c != nil && c.baseURL == baseURL {
		return c.url
	}
	u := strings.TrimRight(baseURL, "/") + h.Mount + "/segments"
	h.lastSegBase.Store(&segBase{baseURL: baseURL, url: u})
	return u
}

// DefaultMaxBodyBytes is the decoded request body cap (limits package).
const DefaultMaxBodyBytes = limits.DefaultDecodedBodyBytes

// Serve handles one request. It never returns nil.
func (h *Handler) Serve(ctx context.Context, r *Request) *Response {
	now := h.Now
	if now == nil {
		now = time.Now
	}
	start := now()
	var meterAttrs func() []slog.Attr
	if h.Meter != nil {
		ctx, meterAttrs = h.Meter(ctx)
	}
	resp, rep, partition, actor := h.route(ctx, r)
	resp = h.capResponse(ctx, r, resp)
	forwarded := false
	if rep != nil && rep.GateRefused && h.Forward != nil && !r.Forwarded && r.Event != nil {
		// This build is behind the partition's fence: the answer is the
		// newer build's, as if the client had retried there.
		// The line then describes the relayed answer, not this build's
		// refused attempt (its report is dropped).
		if fr, ok := h.Forward.Forward(ctx, r); ok {
			resp, rep, forwarded = fr, nil, true
		}
	}
	if h.Logger != nil && h.Logger.Enabled(ctx, slog.LevelInfo) {
		// Built only when the level lets it through (the metrics'
		// directive with it): about a quarter of a quiet request's CPU.
		attrs := h.requestLine(ctx, r, resp, rep, partition, actor, now().Sub(start), meterAttrs, forwarded)
		h.Logger.LogAttrs(ctx, slog.LevelInfo, "request", attrs...)
	}
	resp.Header.Del("X-Syncular-Error")
	resp.Header.Del(overCapHeader)
	return resp
}

// requestLine is the attributes of a request's one log line, which is
// also its EMF metrics document (Line).
//
// At info the line is short, since it is billed as log ingestion on
// every request: who (partition and actor, ShortID), the status, the
// time and the counters that are not zero (a missing counter sums as
// zero; internal/metrics), plus, when the request failed, the §10 code
// and what traces it (request id, route, client id). At debug every
// field is written, zeros included, with the DynamoDB usage (Meter)
// and the response size.
func (h *Handler) requestLine(ctx context.Context, r *Request, resp *Response, rep *engine.Report, partition, actor string, elapsed time.Duration, meterAttrs func() []slog.Attr, forwarded bool) []slog.Attr {
	verbose := h.Logger.Enabled(ctx, slog.LevelDebug)
	// Sized for the whole line, the metrics' additions included, so
	// it is allocated once.
	attrs := make([]slog.Attr, 0, 48)
	if !verbose {
		partition, actor = ShortID(partition), ShortID(actor)
	}
	attrs = append(attrs,
		slog.Int("status", resp.Status),
		slog.String("partition", partition),
		slog.String("actor", actor),
		// Microsecond resolution: the time as a metric (p50/p99) and,
		// through its SampleCount, the number of requests.
		slog.Float64(msField, float64(elapsed.Microseconds())/1000),
	)
	outcome := "ok"
	if rep != nil && rep.ErrorCode != "" {
		outcome = rep.ErrorCode
	}
	if resp.Status >= 400 {
		outcome = resp.Header.Get("X-Syncular-Error")
		if outcome == "" {
			outcome = "http." + strconv.Itoa(resp.Status)
		}
	}
	failed := outcome != "ok"
	if failed {
		attrs = append(attrs, slog.String(errorCodeField, outcome))
	}
	if verbose || failed {
		attrs = append(attrs, slog.String("requestId", r.RequestID), slog.String("route", h.routeName(r.Path)))
	}
	if verbose {
		attrs = append(attrs, slog.String("method", r.Method), slog.String("path", r.Path), slog.String("outcome", outcome))
	}
	if resp.Header.Get(overCapHeader) != "" {
		// Refused unread: the clientId from the body's first bytes,
		// and the counter (never the payload).
		attrs = append(attrs,
			slog.String("clientId", ClientIDOf(r.Body, r.Header.Get("Content-Encoding"))),
			slog.Int(overCapField, 1),
			slog.Int64("bodyBytes", bodySize(r)),
		)
	}
	if rep != nil {
		attrs = reportAttrs(attrs, rep, verbose, failed)
	}
	if forwarded {
		// Answered by a newer build (Forward): a counter, so a metric.
		attrs = append(attrs, slog.Int(ForwardedField, 1))
	}
	if meterAttrs != nil {
		// Called at every level: the meter may keep the request's
		// usage for its host (the cost measurement does).
		if m := meterAttrs(); verbose {
			attrs = append(attrs, m...)
		}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// The host's soft deadline (lambdahttp) or a caller's
		// deadline ended the request before it finished.
		attrs = append(attrs, slog.Bool("deadlineExceeded", true))
	}
	if h.Line != nil {
		attrs = h.Line(attrs)
	}
	return attrs
}

// The request line's fields read by internal/metrics (the duration
// metric, the §10 code of a failed request); this package does not
// import it; internal/app's request-line tests check they agree.
const (
	msField        = "ms"
	errorCodeField = "errorCode"
)

// ForwardedField is the request line's counter of a request a newer
// build answered (Forward); internal/metrics declares the metric.
const ForwardedField = "forwarded"

// reportAttrs appends the engine report's part of the request line: the
// counters only when not zero, unless verbose (debug); the client id and
// the number of commits pushed on a failed request's line or at debug
// (when a request succeeds, the commits pushed are the sum of applied,
// cached, rejected and deferred).
func reportAttrs(attrs []slog.Attr, rep *engine.Report, verbose, failed bool) []slog.Attr {
	count := func(attrs []slog.Attr, name string, v int64) []slog.Attr {
		if v != 0 || verbose {
			attrs = append(attrs, slog.Int64(name, v))
		}
		return attrs
	}
	if verbose || failed {
		attrs = append(attrs, slog.String("clientId", rep.ClientID), slog.Int("pushCommits", rep.Commits))
	}
	if verbose {
		attrs = append(attrs,
			slog.Int("wireVersion", int(rep.WireVersion)),
			slog.Int("subscriptions", rep.Subscriptions),
			slog.Int64("bytesOut", rep.BytesOut),
			slog.Int("offered", rep.GroupPublished),
		)
	}
	attrs = count(attrs, "applied", int64(rep.Applied))
	attrs = count(attrs, "cached", int64(rep.Cached))
	attrs = count(attrs, "rejected", int64(rep.Rejected))
	attrs = count(attrs, "deferred", int64(rep.Deferred))
	attrs = count(attrs, "sent", int64(rep.CommitsSent))
	attrs = count(attrs, "segmentsSent", int64(rep.SegmentsSent))
	attrs = count(attrs, "commitRacesLost", int64(rep.CommitRacesLost))
	// Group commit (one of these on a contended push's line, none on an
	// uncontended one); the offers a waiter made are a debug field.
	attrs = count(attrs, "carried", int64(rep.GroupMembers))
	attrs = count(attrs, "leftOut", int64(rep.GroupLeftOut))
	attrs = count(attrs, "grouped", int64(rep.GroupedCommits))
	attrs = count(attrs, "segmentsBuilt", int64(rep.SegmentsBuilt))
	attrs = count(attrs, "segmentsReused", int64(rep.SegmentsReused))
	attrs = count(attrs, "rowsScanned", int64(rep.RowsScanned))
	attrs = count(attrs, "rowsDelivered", int64(rep.RowsDelivered))
	if rep.LeaseServed {
		// §7.3.3: the resolver was unavailable; the client's auth lease
		// authorized the round (a counter, so it is also a metric).
		attrs = count(attrs, "leaseServed", 1)
	}
	return attrs
}

// ShortID is a partition or actor id as the info request line writes
// it: unchanged up to 24 bytes, else its first 8 bytes (whole runes),
// "~" and the first 8 hex digits of the SHA-256 of the whole id (a
// Cognito sub of 36 characters becomes 17). An operator finds a known
// id's lines by prefix, or exactly with
// printf %s "$ID" | sha256sum | cut -c1-8.
func ShortID(id string) string {
	const max, keep = 24, 8
	if len(id) <= max {
		return id
	}
	cut := keep
	for cut > 0 && !utf8.RuneStart(id[cut]) {
		cut--
	}
	sum := sha256.Sum256([]byte(id))
	return id[:cut] + "~" + hex.EncodeToString(sum[:4])
}

// bodySize is the request body's size as sent (-1 when the host refused
// it unread without knowing its length).
func bodySize(r *Request) int64 {
	if r.BodyOverCap != 0 {
		return r.BodyOverCap
	}
	return int64(len(r.Body))
}

// capResponse replaces a response the host could not deliver (Lambda
// fails the invocation and API Gateway answers a bare 502) with a §10.1
// error, before the log line, so the line reports the status sent.
func (h *Handler) capResponse(ctx context.Context, r *Request, resp *Response) *Response {
	max := h.MaxResponseBytes
	if max <= 0 {
		max = limits.MaxResponseBodyBytes
	}
	if len(resp.Body) <= max {
		return resp
	}
	if h.Logger != nil {
		h.Logger.ErrorContext(ctx, "response exceeds the Lambda payload limit", "requestId", r.RequestID, "bytes", len(resp.Body), "limit", max)
	}
	return errorResponse(syncerr.Internal(fmt.Errorf("response of %d bytes exceeds the %d-byte limit", len(resp.Body), max)))
}

// routeName names the endpoint family of path (the "route" field and
// metric dimension): sync, push, pull, segments, or other.
func (h *Handler) routeName(path string) string {
	if h.Mount != "" {
		rest, ok := strings.CutPrefix(path, h.Mount+"/")
		if !ok {
			return "other"
		}
		path = "/" + rest
	}
	switch {
	case path == "/sync":
		return "sync"
	case path == "/push":
		return "push"
	case path == "/pull":
		return "pull"
	case strings.HasPrefix(path, "/segments/"):
		return "segments"
	}
	return "other"
}

func (h *Handler) route(ctx context.Context, r *Request) (*Response, *engine.Report, string, string) {
	partition, actor := "", ""
	if r.Auth != nil {
		partition, actor = r.Auth.Partition, r.Auth.ActorID
	}
	path := r.Path
	if h.Mount != "" {
		if !strings.HasPrefix(path, h.Mount+"/") {
			return errorResponse(syncerr.New(syncerr.NotFound, "no route for %s", path).WithStatus(http.StatusNotFound)), nil, partition, actor
		}
		path = path[len(h.Mount):]
	}
	if r.BodyOverCap != 0 {
		// The host did not read the body (API Gateway would have answered
		// 413 itself): a §10 error, whichever route and credentials.
		return h.refuseOverCap(r, strings.HasPrefix(path, "/blobs/")), nil, partition, actor
	}
	switch {
	case path == "/sync" && h.Routes&RouteSync != 0:
		return h.sync(ctx, r, engine.ModeSync)
	case path == "/push" && h.Routes&RoutePush != 0:
		return h.sync(ctx, r, engine.ModePush)
	case path == "/pull" && h.Routes&RoutePull != 0:
		return h.sync(ctx, r, engine.ModePull)
	case strings.HasPrefix(path, "/segments/") && h.Routes&RouteSegments != 0:
		resp := h.segment(ctx, r, path[len("/segments/"):])
		return resp, nil, partition, actor
	case strings.HasPrefix(path, "/blobs/") && h.Routes&RouteBlobs != 0:
		return h.blob(ctx, r, path[len("/blobs/"):]), nil, partition, actor
	}
	return errorResponse(syncerr.New(syncerr.NotFound, "no route for %s %s", r.Method, r.Path).WithStatus(http.StatusNotFound)), nil, partition, actor
}

func (h *Handler) sync(ctx context.Context, r *Request, mode engine.Mode) (*Response, *engine.Report, string, string) {
	if r.Method != http.MethodPost {
		return errorResponse(syncerr.New(syncerr.InvalidRequest, "use POST").WithStatus(http.StatusMethodNotAllowed)), nil, "", ""
	}
	// §1.1: the content type is checked before authentication, so a
	// request with the wrong media type is a 415 whether or not it carries
	// credentials (the answer discloses nothing about them).
	if mt := mediaType(r.Header.Get("Content-Type")); mt != ContentType {
		partition, actor := "", ""
		if r.Auth != nil {
			partition, actor = r.Auth.Partition, r.Auth.ActorID
		}
		return errorResponse(syncerr.New(syncerr.InvalidRequest, "Content-Type must be %s (§1.1)", ContentType).WithStatus(http.StatusUnsupportedMediaType)), nil, partition, actor
	}
	if r.Auth == nil {
		msg := "authentication required"
		if r.AuthError != nil {
			msg = "authentication failed: " + r.AuthError.Error()
		}
		return errorResponse(syncerr.New(syncerr.AuthRequired, "%s", msg)), nil, "", ""
	}
	body, err := h.requestBody(r)
	if err != nil {
		if se := syncerr.As(err); se != nil && se.HTTPStatus() == http.StatusRequestEntityTooLarge {
			return overCapResponse(se), nil, r.Auth.Partition, r.Auth.ActorID
		}
		return errorResponse(err), nil, r.Auth.Partition, r.Auth.ActorID
	}
	enc := negotiate(r.Header.Get("Accept-Encoding"))
	plain := getBuffer()
	defer putBuffer(plain)
	segBase := h.segmentBase(r.BaseURL)
	rep, err := h.Engine.HandleSync(ctx, *r.Auth, body, engine.SyncOptions{Mode: mode, SegmentBaseURL: segBase}, plain)
	if err != nil && (rep == nil || rep.BytesOut == 0) {
		return errorResponse(err), rep, r.Auth.Partition, r.Auth.ActorID
	}
	if err != nil {
		// Bytes went out and the stream broke: the body is truncated, which
		// clients treat as an abort (§1.4 rule 5). Log it; send what we have.
		if h.Logger != nil {
			h.Logger.ErrorContext(ctx, "response stream failed", "requestId", r.RequestID, "error", err.Error())
		}
	}
	// The constant values are shared, capped one-value slices (an append
	// copies; nothing writes a header value in place): no allocation per
	// header on the most frequent response.
	hdr := make(http.Header, 4)
	hdr["Content-Type"] = syncContentType
	hdr["Cache-Control"] = noStore
	hdr["Vary"] = varyAcceptEncoding
	out, enc := encodeBody(plain.Bytes(), enc)
	if enc != "" {
		hdr.Set("Content-Encoding", enc)
	}
	return &Response{Status: http.StatusOK, Header: hdr, Body: out}, rep, r.Auth.Partition, r.Auth.ActorID
}

var (
	syncContentType    = []string{ContentType}[:1:1]
	noStore            = []string{"no-store"}[:1:1]
	varyAcceptEncoding = []string{"Accept-Encoding"}[:1:1]
)

// MinCompressBytes is the smallest response body that is compressed: a
// quiet pull or a push acknowledgement is a few hundred bytes, which a
// compressor barely shrinks (frame and table overhead) at a CPU cost
// larger than building the response. §1.3 lets the server choose the
// coding per response; Vary: Accept-Encoding is sent either way.
const MinCompressBytes = 1024

// encodeBody returns a fresh copy of plain in the negotiated coding, or
// as is (coding "") when it is below MinCompressBytes or compression
// fails.
func encodeBody(plain []byte, enc string) ([]byte, string) {
	if enc == "" || len(plain) < MinCompressBytes {
		return bytes.Clone(plain), ""
	}
	switch enc {
	case "zstd":
		zw := zstdPool.Get().(*zstd.Encoder)
		out := zw.EncodeAll(plain, make([]byte, 0, len(plain)/2+64))
		zstdPool.Put(zw)
		return out, enc
	case "gzip":
		var out bytes.Buffer
		out.Grow(len(plain)/2 + 64)
		gw := gzipPool.Get().(*gzip.Writer)
		gw.Reset(&out)
		_, werr := gw.Write(plain)
		cerr := gw.Close()
		gw.Reset(io.Discard)
		gzipPool.Put(gw)
		if werr == nil && cerr == nil {
			return out.Bytes(), enc
		}
	}
	return bytes.Clone(plain), ""
}

// bufferPool holds the uncompressed response buffers; buffers grown past
// maxPooledBuffer (a large bootstrap page) are left to the collector so
// the pool never pins megabytes between requests.
var bufferPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledBuffer = 64 << 10

func getBuffer() *bytes.Buffer { return bufferPool.Get().(*bytes.Buffer) }

func putBuffer(b *bytes.Buffer) {
	if b.Cap() > maxPooledBuffer {
		return
	}
	b.Reset()
	bufferPool.Put(b)
}

// requestBody applies Content-Encoding (gzip accepted, §1.3) and the size cap.
func (h *Handler) requestBody(r *Request) ([]byte, error) {
	max := h.MaxBodyBytes
	if max <= 0 {
		max = DefaultMaxBodyBytes
	}
	tooLarge := func() error {
		return decodedOverCap(int64(len(r.Body)), max)
	}
	switch ce := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); ce {
	case "", "identity":
		if len(r.Body) > max {
			return nil, tooLarge()
		}
		return r.Body, nil
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(r.Body))
		if err != nil {
			return nil, syncerr.New(syncerr.InvalidRequest, "request body is not valid gzip: %v", err)
		}
		b, err := io.ReadAll(io.LimitReader(zr, int64(max)+1))
		if err != nil {
			return nil, syncerr.New(syncerr.InvalidRequest, "request body is not valid gzip: %v", err)
		}
		if len(b) > max {
			return nil, tooLarge()
		}
		return b, nil
	default:
		return nil, syncerr.New(syncerr.InvalidRequest, "unsupported Content-Encoding %q (gzip only)", ce).WithStatus(http.StatusUnsupportedMediaType)
	}
}

func mediaType(ct string) string {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.ToLower(strings.TrimSpace(ct))
}

// negotiate picks zstd, then gzip, from Accept-Encoding (§1.3); "" means
// identity. q=0 excludes a coding.
func negotiate(accept string) string {
	zstdOK, gzipOK := false, false
	for part := range strings.SplitSeq(accept, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		name = strings.ToLower(strings.TrimSpace(name))
		if q := strings.TrimSpace(params); strings.HasPrefix(q, "q=") {
			if v := strings.TrimSpace(q[2:]); v == "0" || v == "0.0" || v == "0.00" || v == "0.000" {
				continue
			}
		}
		switch name {
		case "zstd":
			zstdOK = true
		case "gzip", "x-gzip":
			gzipOK = true
		}
	}
	switch {
	case zstdOK:
		return "zstd"
	case gzipOK:
		return "gzip"
	}
	return ""
}

// zstdEncoderOpts favours speed: responses are built per request.
var zstdEncoderOpts = []zstd.EOption{zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1), zstd.WithLowerEncoderMem(true)}

// zstdPool reuses encoders: building one costs ~200 µs and ~370 KB, more
// than encoding a quiet pull response.
var zstdPool = sync.Pool{New: func() any {
	zw, err := zstd.NewWriter(nil, zstdEncoderOpts...)
	if err != nil {
		panic(fmt.Sprintf("httpapi: zstd writer: %v", err)) // options are static
	}
	return zw
}}

var gzipPool = sync.Pool{New: func() any {
	gw, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed) // a valid level never errors
	return gw
}}

// compressor wraps w in the negotiated coding; the returned close flushes
// the stream and returns the encoder to its pool.
func compressor(w io.Writer, enc string) (io.Writer, func() error) {
	switch enc {
	case "zstd":
		zw := zstdPool.Get().(*zstd.Encoder)
		zw.Reset(w)
		return zw, func() error {
			err := zw.Close()
			zw.Reset(nil)
			zstdPool.Put(zw)
			return err
		}
	case "gzip":
		gw := gzipPool.Get().(*gzip.Writer)
		gw.Reset(w)
		return gw, func() error {
			err := gw.Close()
			gw.Reset(io.Discard)
			gzipPool.Put(gw)
			return err
		}
	}
	return w, func() error { return nil }
}

// schemaNotReadyRetryAfter is the Retry-After (seconds) of a
// sync.schema_not_ready answer.
const schemaNotReadyRetryAfter = "1"

// errorResponse renders an error in the §10.1 JSON shape with its status.
func errorResponse(err error) *Response {
	se := syncerr.As(err)
	if se == nil {
		se = syncerr.Internal(err)
	}
	body, _ := json.Marshal(se.Body())
	hdr := http.Header{}
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Syncular-Error", string(se.Code))
	if se.Code == syncerr.SchemaNotReady {
		// A rolling upgrade's refusal (§10.2: retryable, retryLater):
		// the other build answers within a traffic-shift step.
		hdr.Set("Retry-After", schemaNotReadyRetryAfter)
	}
	return &Response{Status: se.HTTPStatus(), Header: hdr, Body: body}
}

// ErrorResponse exposes the §10.1 rendering to hosts (e.g. an adapter
// rejecting a request before routing).
func ErrorResponse(err error) *Response { return errorResponse(err) }
