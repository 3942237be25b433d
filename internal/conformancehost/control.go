package conformancehost

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/httpapi"
	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// method is one ServerInstance control method.
type method func(in *instance, ctx context.Context, a *args) (any, *controlError)

// methods are the ServerInstance methods this host implements.
var methods = map[string]method{
	"handleSyncRequest":         (*instance).handleSyncRequest,
	"downloadSegment":           (*instance).downloadSegment,
	"fetchSegmentUrl":           (*instance).fetchSegmentURL,
	"setSignedUrlTtlSeconds":    (*instance).setSignedURLTTL,
	"setAllowedScopes":          (*instance).setAllowedScopes,
	"setResolverFailing":        (*instance).setResolverFailing,
	"setResolverOutage":         (*instance).setResolverOutage,
	"revokeLease":               (*instance).revokeLease,
	"advanceClock":              (*instance).advanceClock,
	"nowMs":                     (*instance).nowMs,
	"captureBackup":             (*instance).captureBackup,
	"restoreBackup":             (*instance).restoreBackup,
	"prune":                     (*instance).prune,
	"getMaxCommitSeq":           (*instance).getMaxCommitSeq,
	"getHorizonSeq":             (*instance).getHorizonSeq,
	"readRows":                  (*instance).readRows,
	"failNextIdempotencyLookup": (*instance).failNextIdempotencyLookup,
	"declareBackfillCheckpoint": (*instance).declareBackfillCheckpoint,
	"close":                     (*instance).close,
	"uploadBlob":                (*instance).uploadBlob,
	"downloadBlob":              (*instance).downloadBlob,
	"fetchBlobUrl":              (*instance).fetchBlobURL,
	"uploadBlobGrant":           (*instance).uploadBlobGrant,
	"putBlobUrl":                (*instance).putBlobURL,
	"setBlobPresign":            (*instance).setBlobPresign,
	"installValidators":         (*instance).installValidators,
	"installCommitValidator":    (*instance).installCommitValidator,
}

// unsupportedMethods are ServerInstance methods the engine cannot back.
// (connectRealtime is not a control method: the driver opens a WebSocket
// on the instance's /realtime route itself.)
var unsupportedMethods = map[string]string{}

// supportedMethods lists the implemented control methods, sorted.
func supportedMethods() []string {
	return slices.Sorted(maps.Keys(methods))
}

// call runs one control method with the instance lock held.
func (in *instance) call(ctx context.Context, name string, raw []json.RawMessage) (any, *controlError) {
	m, ok := methods[name]
	if !ok {
		if what, known := unsupportedMethods[name]; known {
			return nil, unsupported(what)
		}
		return nil, &controlError{http.StatusNotFound, codeUnknownMethod, fmt.Sprintf("unknown control method %q", name)}
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return m(in, ctx, &args{method: name, raw: raw})
}

// args decodes positional JSON arguments strictly.
type args struct {
	method string
	raw    []json.RawMessage
}

// arity checks the argument count is within [min, max].
func (a *args) arity(lo, hi int) *controlError {
	if n := len(a.raw); n < lo || n > hi {
		if lo == hi {
			return badArgs("%s takes %d argument(s), got %d", a.method, lo, n)
		}
		return badArgs("%s takes %d to %d arguments, got %d", a.method, lo, hi, n)
	}
	return nil
}

// present reports whether argument i was given and is not null/undefined.
func (a *args) present(i int) bool {
	return i < len(a.raw) && !bytes.Equal(bytes.TrimSpace(a.raw[i]), []byte("null"))
}

// decode unmarshals argument i into v, rejecting unknown object fields
// and trailing data.
func (a *args) decode(i int, what string, v any) *controlError {
	if !a.present(i) {
		return badArgs("%s: argument %d (%s) is required", a.method, i+1, what)
	}
	dec := json.NewDecoder(bytes.NewReader(a.raw[i]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badArgs("%s: argument %d (%s): %v", a.method, i+1, what, err)
	}
	if dec.More() {
		return badArgs("%s: argument %d (%s): trailing data", a.method, i+1, what)
	}
	return nil
}

func (in *instance) handleSyncRequest(ctx context.Context, a *args) (any, *controlError) {
	var actor string
	var body u8
	if e := firstErr(a.arity(2, 2), a.decode(0, "actorId", &actor), a.decode(1, "request", &body)); e != nil {
		return nil, e
	}
	hdr := http.Header{}
	hdr.Set("Content-Type", httpapi.ContentType)
	return in.bytesVia(ctx, &httpapi.Request{Method: http.MethodPost, Path: "/i/" + in.id + "/sync", Header: hdr, Body: body, Auth: in.auth(actor)}), nil
}

func (in *instance) downloadSegment(ctx context.Context, a *args) (any, *controlError) {
	var actor, segmentID, scopes string
	if e := firstErr(a.arity(3, 3), a.decode(0, "actorId", &actor), a.decode(1, "segmentId", &segmentID), a.decode(2, "scopesHeaderJson", &scopes)); e != nil {
		return nil, e
	}
	hdr := http.Header{}
	hdr.Set("X-Syncular-Scopes", scopes)
	return in.bytesVia(ctx, &httpapi.Request{Method: http.MethodGet, Path: "/i/" + in.id + "/segments/" + url.PathEscape(segmentID), Header: hdr, Auth: in.auth(actor)}), nil
}

// fetchSegmentURL plays the §5.4 URL host: it serves a signed URL this
// instance minted, authorized by its st token alone (no actor).
func (in *instance) fetchSegmentURL(ctx context.Context, a *args) (any, *controlError) {
	var raw string
	if e := firstErr(a.arity(1, 1), a.decode(0, "url", &raw)); e != nil {
		return nil, e
	}
	if !in.signed {
		return failBytes(syncerr.New(syncerr.NotFound, "signed URLs are not configured on this instance")), nil
	}
	u, err := url.Parse(raw)
	prefix := "/i/" + in.id + "/segments/"
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || !strings.HasPrefix(u.EscapedPath(), prefix) {
		return failBytes(syncerr.New(syncerr.NotFound, "unknown URL host")), nil
	}
	q := u.Query()
	if q.Get("st") == "" {
		return failBytes(syncerr.New(syncerr.Forbidden, "missing st token")), nil
	}
	return in.bytesVia(ctx, &httpapi.Request{Method: http.MethodGet, Path: u.EscapedPath(), Query: q, Header: http.Header{}}), nil
}

// bytesVia serves req through httpapi (lock held) as a BytesResult.
func (in *instance) bytesVia(ctx context.Context, req *httpapi.Request) bytesResult {
	if req.Query == nil {
		req.Query = url.Values{}
	}
	resp := in.api.Serve(ctx, req)
	if resp.Status == http.StatusOK {
		return okBytes(resp.Body)
	}
	var body syncerr.Body
	if err := json.Unmarshal(resp.Body, &body); err != nil || body.Code == "" {
		return bytesResult{Error: &driverError{Code: string(syncerr.OperationExecutionFailed), Message: fmt.Sprintf("HTTP %d", resp.Status)}}
	}
	return bytesResult{Error: &driverError{Code: string(body.Code), Message: body.Message, Category: body.Category, Retryable: body.Retryable, RecommendedAction: body.RecommendedAction}}
}

func (in *instance) auth(actor string) *engine.Auth {
	if actor == "" {
		return nil
	}
	return &engine.Auth{Partition: in.partition, ActorID: actor}
}

func (in *instance) setSignedURLTTL(_ context.Context, a *args) (any, *controlError) {
	var secs int64
	if e := firstErr(a.arity(1, 1), a.decode(0, "ttlSeconds", &secs)); e != nil {
		return nil, e
	}
	if secs < 0 {
		return nil, badArgs("ttlSeconds must be ≥ 0")
	}
	in.ttlSecs = secs
	for _, e := range in.engines() {
		e.SetSignedURLTTL(time.Duration(secs) * time.Second)
	}
	return nil, nil
}

func (in *instance) setAllowedScopes(_ context.Context, a *args) (any, *controlError) {
	var actor string
	var allowed map[string][]string
	if e := firstErr(a.arity(2, 2), a.decode(0, "actorId", &actor), a.decode(1, "allowed", &allowed)); e != nil {
		return nil, e
	}
	if actor == "" {
		return nil, badArgs("actorId must be non-empty")
	}
	m := make(engine.ScopeMap, len(allowed))
	for k, v := range allowed {
		if v == nil {
			return nil, badArgs("allowed[%q] must be a list of strings", k)
		}
		m[k] = slices.Clone(v)
	}
	in.grants.mu.Lock()
	in.grants.byActor[actor] = m
	in.grants.mu.Unlock()
	// Open sockets see the change as in production: through the hub's
	// own periodic authorization re-check, never a push from here.
	return nil, nil
}

func (in *instance) setResolverFailing(_ context.Context, a *args) (any, *controlError) {
	var on bool
	if e := firstErr(a.arity(1, 1), a.decode(0, "failing", &on)); e != nil {
		return nil, e
	}
	in.grants.mu.Lock()
	in.grants.failing = on
	in.grants.mu.Unlock()
	return nil, nil
}

// setResolverOutage puts the resolver into a live-authorization outage
// (§7.3.3): it answers engine.ErrResolverUnavailable, the signal that
// lets a valid auth lease authorize the round.
func (in *instance) setResolverOutage(_ context.Context, a *args) (any, *controlError) {
	var on bool
	if e := firstErr(a.arity(1, 1), a.decode(0, "outage", &on)); e != nil {
		return nil, e
	}
	in.grants.mu.Lock()
	in.grants.outage = on
	in.grants.mu.Unlock()
	return nil, nil
}

// revokeLease revokes an auth lease of the instance's partition through
// the engine's revocation hook (§7.3.4). An id the partition does not
// hold revokes nothing and is not an error, as in the reference.
func (in *instance) revokeLease(ctx context.Context, a *args) (any, *controlError) {
	var id string
	if e := firstErr(a.arity(1, 1), a.decode(0, "leaseId", &id)); e != nil {
		return nil, e
	}
	if !in.eng.LeasesEnabled() {
		return nil, badArgs("revokeLease: this instance was created without leases")
	}
	if _, err := in.eng.RevokeLease(ctx, in.partition, id); err != nil {
		return nil, failed(err)
	}
	return nil, nil
}

func (in *instance) advanceClock(_ context.Context, a *args) (any, *controlError) {
	var ms int64
	if e := firstErr(a.arity(1, 1), a.decode(0, "ms", &ms)); e != nil {
		return nil, e
	}
	if ms < 0 {
		return nil, badArgs("advanceClock: ms must be ≥ 0 (the virtual clock never goes back)")
	}
	in.clock.Add(ms)
	return nil, nil
}

func (in *instance) nowMs(_ context.Context, a *args) (any, *controlError) {
	if e := a.arity(0, 0); e != nil {
		return nil, e
	}
	return in.clock.Load(), nil
}

func (in *instance) captureBackup(ctx context.Context, a *args) (any, *controlError) {
	if e := a.arity(0, 0); e != nil {
		return nil, e
	}
	if err := in.st.Capture(ctx); err != nil {
		return nil, failed(err)
	}
	return nil, nil
}

// restoreBackup rebuilds storage as captured and rotates the partition's
// log epoch (§2.1 restore rule).
func (in *instance) restoreBackup(ctx context.Context, a *args) (any, *controlError) {
	if e := a.arity(0, 0); e != nil {
		return nil, e
	}
	now := in.clock.Load()
	rotate := func(ctx context.Context, s store.Store) error {
		if _, ok, err := s.Head(ctx, in.partition); err != nil || !ok {
			return err // nothing to rotate: a fresh partition gets a fresh epoch
		}
		return s.RotateEpoch(ctx, in.partition, fmt.Sprintf("restored-%d-%s", now, engine.RandomEpoch()), now)
	}
	if err := in.st.Restore(ctx, rotate); err != nil {
		if errors.Is(err, errNoBackup) {
			return nil, &controlError{http.StatusConflict, codeFailed, err.Error()}
		}
		return nil, failed(err)
	}
	return nil, nil
}

// retentionOptions is RetentionOptions.
type retentionOptions struct {
	ActiveWindowMs     *int64 `json:"activeWindowMs"`
	AgeForceMs         *int64 `json:"ageForceMs"`
	MinRetainedCommits *int64 `json:"minRetainedCommits"`
}

func (in *instance) prune(ctx context.Context, a *args) (any, *controlError) {
	if e := a.arity(0, 1); e != nil {
		return nil, e
	}
	var o *engine.RetentionOverride
	if a.present(0) {
		var r retentionOptions
		if e := a.decode(0, "retention", &r); e != nil {
			return nil, e
		}
		for _, v := range []*int64{r.ActiveWindowMs, r.AgeForceMs, r.MinRetainedCommits} {
			if v != nil && *v < 0 {
				return nil, badArgs("prune: retention values must be ≥ 0")
			}
		}
		o = &engine.RetentionOverride{ActiveWindowMs: r.ActiveWindowMs, AgeForceMs: r.AgeForceMs, MinRetainedCommits: r.MinRetainedCommits}
	}
	rep, err := in.eng.Prune(ctx, in.partition, o)
	if err != nil {
		return nil, engineError(err)
	}
	return rep.NewHorizon, nil
}

func (in *instance) head(ctx context.Context, a *args) (store.Head, *controlError) {
	if e := a.arity(0, 0); e != nil {
		return store.Head{}, e
	}
	h, _, err := in.st.Store().Head(ctx, in.partition)
	if err != nil {
		return h, failed(err)
	}
	return h, nil
}

func (in *instance) getMaxCommitSeq(ctx context.Context, a *args) (any, *controlError) {
	h, e := in.head(ctx, a)
	if e != nil {
		return nil, e
	}
	return h.MaxCommitSeq, nil
}

func (in *instance) getHorizonSeq(ctx context.Context, a *args) (any, *controlError) {
	h, e := in.head(ctx, a)
	if e != nil {
		return nil, e
	}
	return h.HorizonSeq, nil
}

// rowState is ServerRowState.
type rowState struct {
	RowID   string            `json:"rowId"`
	Version int64             `json:"version"`
	Values  map[string]any    `json:"values"`
	Scopes  map[string]string `json:"scopes"`
}

// readRows returns every stored row of a table in rowId byte order,
// decoded with the storage (latest) schema version.
func (in *instance) readRows(ctx context.Context, a *args) (any, *controlError) {
	var table string
	if e := firstErr(a.arity(1, 1), a.decode(0, "table", &table)); e != nil {
		return nil, e
	}
	t, ok := in.schema.Versions[in.schema.Latest].Table(table)
	if !ok {
		return nil, badArgs("readRows: unknown table %q", table)
	}
	out := []rowState{}
	var vals []rowcodec.Value
	var decodeErr error
	err := in.st.Store().ScanRows(ctx, in.partition, table, "", false, func(r *store.Row) bool {
		vals, decodeErr = t.Codec.Decode(r.Payload, vals)
		if decodeErr != nil {
			decodeErr = fmt.Errorf("row %q of %s does not decode: %w", r.RowID, table, decodeErr)
			return false
		}
		rs := rowState{RowID: r.RowID, Version: r.Version, Values: make(map[string]any, len(t.Columns)), Scopes: make(map[string]string, len(r.Scopes))}
		for i, c := range t.Columns {
			rs.Values[c.Name] = driverValue(c.Type, vals[i])
		}
		for _, s := range r.Scopes {
			rs.Scopes[s.Key] = s.Value
		}
		out = append(out, rs)
		return true
	})
	if err == nil {
		err = decodeErr
	}
	if err != nil {
		return nil, failed(err)
	}
	return out, nil
}

func (in *instance) failNextIdempotencyLookup(_ context.Context, a *args) (any, *controlError) {
	if e := a.arity(0, 0); e != nil {
		return nil, e
	}
	in.st.FailNextOutcomeRead()
	return nil, nil
}

// close is the driver's close(); the host drops the instance afterwards.
func (in *instance) close(_ context.Context, a *args) (any, *controlError) {
	if e := a.arity(0, 0); e != nil {
		return nil, e
	}
	return nil, nil
}

// engineError maps an engine failure to a control error with its
// catalog code and status.
func engineError(err error) *controlError {
	se := syncerr.Internal(err)
	return &controlError{se.HTTPStatus(), string(se.Code), se.Message}
}

func firstErr(errs ...*controlError) *controlError {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
