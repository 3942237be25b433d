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
func (e *Engine) AuthorizeSegment(ctx context.Context, r SegmentRequest) (*SegmentDownload, error) {
	now := e.now()
	seg, err := e.segs.Lookup(ctx, r.SegmentID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, syncerr.New(syncerr.NotFound, "unknown segment")
	}
	if err != nil {
		return nil, storeErr(err, "look up segment")
	}
	dl := &SegmentDownload{SegmentID: seg.SegmentID, ByteLength: seg.ByteLength, Open: func(ctx context.Context) (io.ReadCloser, error) {
		rc, err := e.segs.Open(ctx, seg.SegmentID)
		if errors.Is(err, store.ErrNotFound) {
			return nil, syncerr.New(syncerr.NotFound, "unknown segment")
		}
		if err != nil {
			return nil, storeErr(err, "open segment")
		}
		return rc, nil
	}}
	if r.Token != "" {
		c, err := e.verifyToken(r.Token, r.SegmentID, now)
		if err != nil {
			return nil, err
		}
		// §5.4: sd, aud and ep bind the token to publications of one
		// partition, one set of effective scopes and the log epoch it was
		// minted under; the partition must still be in that epoch (§2.1: a
		// rotation invalidates everything handed out before it).
		var mine []store.Publication
		for _, p := range seg.Publications {
			if p.ScopeDigest == c.SD && p.LogEpoch == c.Ep && e.audience(p.Partition) == c.Aud {
				mine = append(mine, p)
			}
		}
		if len(mine) > 0 {
			head, ok, err := e.store.Head(ctx, mine[0].Partition)
			if err != nil {
				return nil, storeErr(err, "read partition head")
			}
			if !ok || head.LogEpoch != c.Ep {
				return nil, syncerr.New(syncerr.Forbidden, "segment token was issued under an earlier log epoch; pull again (§2.1)")
			}
		}
		return grant(dl, mine, now, func(store.Publication) bool { return true },
			syncerr.New(syncerr.Forbidden, "segment token does not match a publication"))
	}
	if r.Auth == nil || r.Auth.Partition == "" || r.Auth.ActorID == "" {
		return nil, syncerr.New(syncerr.AuthRequired, "authentication required")
	}
	head, ok, err := e.store.Head(ctx, r.Auth.Partition)
	if err != nil {
		return nil, storeErr(err, "read partition head")
	}
	var mine []store.Publication
	if ok {
		for _, p := range seg.Publications {
			if p.Partition == r.Auth.Partition && p.LogEpoch == head.LogEpoch {
				mine = append(mine, p)
			}
		}
	}
	if len(mine) == 0 {
		// Publications of other partitions are invisible (§2.1).
		return nil, syncerr.New(syncerr.NotFound, "unknown segment")
	}
	requested, err := canonjson.ParseScopeMap([]byte(r.Scopes))
	if err != nil {
		return nil, syncerr.New(syncerr.Forbidden, "X-Syncular-Scopes is missing or not a scope map (§5.5)")
	}
	// §5.5 re-authorization: a resolver that cannot answer is a retryable
	// error; "no grant" authorizes nothing (see resolve).
	allowed, err := e.resolve(ctx, *r.Auth, "")
	if err != nil {
		return nil, err
	}
	v := e.schema.Versions[e.schema.Latest]
	// §5.5: the requested scopes, intersected with what the actor holds
	// now, must reproduce the publication's digest.
	return grant(dl, mine, now, func(p store.Publication) bool {
		t, ok := v.Table(p.Table)
		if !ok {
			if pv, okv := e.schema.Versions[p.SchemaVersion]; okv {
				t, ok = pv.Table(p.Table)
			}
		}
		if !ok {
			return false
		}
		req := make(wire.ScopeMap, 0, len(requested))
		for k, vals := range requested {
			if !t.HasVariable(k) {
				return false
			}
			req = append(req, wire.ScopeEntry{Key: k, Values: vals})
		}
		eff, active := effectiveScopes(req, allowed)
		return active && scopeDigest(eff) == p.ScopeDigest
	}, syncerr.New(syncerr.Forbidden, "the requested scopes do not authorize this segment (§5.5)"))
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
