package engine

import (
	"context"
	"errors"
	"io"

	"github.com/skyfold/syncular-lambda/internal/core/canonjson"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// SegmentRequest is a direct segment download (§5.5) or a native signed
// URL fetch (§5.4).
type SegmentRequest struct {
	SegmentID string
	// Auth and Scopes (the X-Syncular-Scopes header) authorize a direct
	// download; Token (the `st` query parameter) authorizes a URL fetch
	// without host authentication.
	Auth   *Auth
	Scopes string
	Token  string
}

// SegmentDownload is an authorized segment ready to stream.
type SegmentDownload struct {
	SegmentID  string
	ByteLength int64
	// Open streams the stored (uncompressed) bytes.
	Open func(ctx context.Context) (io.ReadCloser, error)
}

// AuthorizeSegment authorizes a segment download. Direct downloads re-run
// scope resolution on every request (§5.5); token fetches verify the MAC
// and bind to a live publication of the token's partition and digest.
// Either way the store reads only the publications of one partition, log
// epoch and scope digest, never the segment's other publications (identical
// bytes are shared across tenants under one content address).
func (e *Engine) AuthorizeSegment(ctx context.Context, r SegmentRequest) (*SegmentDownload, error) {
	now := e.now()
	if r.Token != "" {
		c, partition, err := e.verifyToken(r.Token, r.SegmentID, now)
		if err != nil {
			return nil, err
		}
		// §5.4: sd, pt and ep bind the token to publications of one
		// partition, one set of effective scopes and the log epoch it was
		// minted under; the partition must still be in that epoch (§2.1: a
		// rotation invalidates everything handed out before it).
		f := store.PublicationFilter{Partition: partition, LogEpoch: c.Ep, ScopeDigest: c.SD}
		seg, err := e.segs.Lookup(ctx, r.SegmentID, f)
		if errors.Is(err, store.ErrNotFound) {
			// The token was minted for this segment: its publication is
			// gone, or it never named one (§5.4).
			return nil, syncerr.New(syncerr.Forbidden, "segment token does not match a publication")
		}
		if err != nil {
			return nil, storeErr(err, "look up segment")
		}
		if len(seg.Publications) > 0 {
			head, ok, err := e.store.Head(ctx, partition)
			if err != nil {
				return nil, storeErr(err, "read partition head")
			}
			if !ok || head.LogEpoch != c.Ep {
				return nil, syncerr.New(syncerr.Forbidden, "segment token was issued under an earlier log epoch; pull again (§2.1)")
			}
		}
		return grant(e.segmentDownload(seg), seg.Publications, now, func(p store.Publication) bool { return f.Matches(&p) },
			syncerr.New(syncerr.Forbidden, "segment token does not match a publication"))
	}
	if r.Auth == nil || r.Auth.Partition == "" || r.Auth.ActorID == "" {
		return nil, syncerr.New(syncerr.AuthRequired, "authentication required")
	}
	head, ok, err := e.store.Head(ctx, r.Auth.Partition)
	if err != nil {
		return nil, storeErr(err, "read partition head")
	}
	if !ok {
		// Publications of other partitions are invisible (§2.1).
		return nil, syncerr.New(syncerr.NotFound, "unknown segment")
	}
	// §5.5: the requested scopes, intersected with what the actor holds
	// now, must reproduce the publication's digest; that digest selects
	// the only publications read.
	requested, perr := canonjson.ParseScopeMap([]byte(r.Scopes))
	digest := ""
	if perr == nil {
		// §5.5 re-authorization: a resolver that cannot answer is a
		// retryable error; "no grant" authorizes nothing (see resolve).
		allowed, err := e.resolve(ctx, *r.Auth, "")
		if err != nil {
			return nil, err
		}
		req := make(wire.ScopeMap, 0, len(requested))
		for k, vals := range requested {
			req = append(req, wire.ScopeEntry{Key: k, Values: vals})
		}
		if eff, active := effectiveScopes(req, allowed); active {
			digest = scopeDigest(eff)
		}
	}
	// With no digest the lookup still answers whether the partition has
	// the segment at all: not_found, else forbidden below.
	f := store.PublicationFilter{Partition: r.Auth.Partition, LogEpoch: head.LogEpoch, ScopeDigest: digest}
	seg, err := e.lookupSegment(ctx, r.SegmentID, f)
	if err != nil {
		return nil, err
	}
	if perr != nil {
		return nil, syncerr.New(syncerr.Forbidden, "X-Syncular-Scopes is missing or not a scope map (§5.5)")
	}
	v := e.schema.Versions[e.schema.Latest]
	return grant(e.segmentDownload(seg), seg.Publications, now, func(p store.Publication) bool {
		if digest == "" || !f.Matches(&p) {
			return false
		}
		t, ok := v.Table(p.Table)
		if !ok {
			if pv, okv := e.schema.Versions[p.SchemaVersion]; okv {
				t, ok = pv.Table(p.Table)
			}
		}
		if !ok {
			return false
		}
		// Every requested key must be a variable of the page's table.
		for k := range requested {
			if !t.HasVariable(k) {
				return false
			}
		}
		return true
	}, syncerr.New(syncerr.Forbidden, "the requested scopes do not authorize this segment (§5.5)"))
}

// lookupSegment reads the publications f selects; a segment f's partition
// has no publication of in f's epoch is unknown to it (§2.1).
func (e *Engine) lookupSegment(ctx context.Context, segmentID string, f store.PublicationFilter) (*store.Segment, error) {
	seg, err := e.segs.Lookup(ctx, segmentID, f)
	if errors.Is(err, store.ErrNotFound) {
		return nil, syncerr.New(syncerr.NotFound, "unknown segment")
	}
	if err != nil {
		return nil, storeErr(err, "look up segment")
	}
	return seg, nil
}

// segmentDownload streams seg's bytes once authorized.
func (e *Engine) segmentDownload(seg *store.Segment) *SegmentDownload {
	return &SegmentDownload{SegmentID: seg.SegmentID, ByteLength: seg.ByteLength, Open: func(ctx context.Context) (io.ReadCloser, error) {
		rc, err := e.segs.Open(ctx, seg.SegmentID)
		if errors.Is(err, store.ErrNotFound) {
			return nil, syncerr.New(syncerr.NotFound, "unknown segment")
		}
		if err != nil {
			return nil, storeErr(err, "open segment")
		}
		return rc, nil
	}}
}

// grant returns dl when a live publication among pubs authorizes the
// request; publications that authorize it but have all expired answer
// sync.segment_expired (§5.1), and none at all answers denied.
func grant(dl *SegmentDownload, pubs []store.Publication, now int64, authorizes func(store.Publication) bool, denied error) (*SegmentDownload, error) {
	expired := false
	for _, p := range pubs {
		if !authorizes(p) {
			continue
		}
		if p.ExpiresAtMs > now {
			return dl, nil
		}
		expired = true
	}
	if expired {
		return nil, syncerr.New(syncerr.SegmentExpired, "segment expired; pull again (§5.1)")
	}
	return nil, denied
}
