package engine

import (
	"context"
	"sync"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// clientCache remembers client records this instance has read or written,
// keyed by (partition, logEpoch, clientId). A binding of a clientId to an
// actor never changes within an epoch (§1.5; rotation deletes records and
// changes the epoch, so stale entries can never match), so a warm Lambda
// instance checks the binding of a returning client without a read, and a
// quiet pull costs only the head read.
type clientCache struct {
	mu  sync.Mutex
	max int
	m   map[clientKey]store.Client
}

type clientKey struct{ partition, epoch, clientID string }

func newClientCache(max int) *clientCache {
	return &clientCache{max: max, m: make(map[clientKey]store.Client)}
}

func (c *clientCache) get(k clientKey) (store.Client, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	return v, ok
}

func (c *clientCache) put(k clientKey, v store.Client) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.max {
		// Random eviction (map order) keeps this O(1) and bounded.
		for old := range c.m {
			delete(c.m, old)
			break
		}
	}
	c.m[k] = v
}

// checkClient enforces the §1.5 actor binding before any push or pull
// work and leaves the bound record in rs.client. A clientId seen for the
// first time is bound with the store's atomic create-if-absent
// (BindClient), never by a read followed by a later write: when two
// actors race the first request of one clientId, exactly one binding is
// created and the other actor is refused here, before it could read or
// replay anything recorded under that clientId.
func (e *Engine) checkClient(ctx context.Context, rs *reqState) error {
	k := clientKey{rs.auth.Partition, rs.head.LogEpoch, rs.clientID}
	if c, ok := e.clients.get(k); ok {
		rs.clientBuf = c
		rs.client = &rs.clientBuf
	} else {
		c, err := e.store.GetClient(ctx, rs.auth.Partition, rs.clientID)
		if err != nil {
			return storeErr(err, "read client record")
		}
		if c == nil {
			c, err = e.store.BindClient(ctx, rs.auth.Partition, &store.Client{
				ClientID: rs.clientID, ActorID: rs.auth.ActorID, Cursor: -1, UpdatedAtMs: rs.now, WireVersion: rs.version,
			})
			if err != nil {
				return storeErr(err, "bind client record")
			}
		}
		e.clients.put(k, *c)
		rs.client = c
	}
	if rs.client.ActorID != rs.auth.ActorID {
		return syncerr.New(syncerr.InvalidClientID, "clientId is bound to a different actor in this partition (§1.5)")
	}
	return nil
}

// recordClient writes the client record when it is new, when the cursor
// changed, or when it aged past CursorRecordMaxAge (§4.5 watermark).
// cursor < 0 means "no active subscription": the stored cursor is kept.
func (e *Engine) recordClient(ctx context.Context, rs *reqState, cursor int64, hasCursor bool) error {
	now := rs.now
	prev := rs.client
	next := store.Client{ClientID: rs.clientID, ActorID: rs.auth.ActorID, UpdatedAtMs: now, WireVersion: rs.version, Cursor: -1}
	if prev != nil {
		next.Cursor = prev.Cursor
		next.Registration = prev.Registration
	}
	if hasCursor {
		next.Cursor = cursor
	}
	if rs.hasRegistration {
		// §8.1: the pull's subscription list is persisted with the cursor
		// and the wire version, for the next realtime connect.
		next.Registration = rs.registration
	}
	if prev != nil && prev.Cursor == next.Cursor && prev.WireVersion == next.WireVersion && prev.Registration == next.Registration &&
		now-prev.UpdatedAtMs < e.limits.CursorRecordMaxAge.Milliseconds() {
		return nil
	}
	// The record written lives in rs (no allocation of its own); stores
	// copy or marshal what PutClient is given.
	rs.clientNext = next
	if err := e.store.PutClient(ctx, rs.auth.Partition, &rs.clientNext); err != nil {
		return storeErr(err, "write client record")
	}
	e.clients.put(clientKey{rs.auth.Partition, rs.head.LogEpoch, rs.clientID}, next)
	rs.client = &rs.clientNext
	return nil
}
