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

// recordClient keeps the client record: the §4.5 cursor with its
// timestamp (the §4.6 watermark input) and the §8.1 registration with the
// wire version (what a realtime connect reads). cursor < 0 with hasCursor
// false means "no active subscription": the stored cursor is kept.
//
// The record is not rewritten on every round (recordDue): a stored cursor
// may lag the one the client just reported by up to CursorRecordInterval.
// That is harmless because of who reads it:
//
//   - Prune (prune.go) takes the least stored cursor of the clients
//     active within ActiveWindow as the highest horizon allowed (§4.6).
//     The stored cursor is never above the last one the client reported
//     (a lower cursor is written at once, a higher one may wait), and a
//     client's cursor only moves up between resets, so a lagging record
//     holds the horizon at or below the client's real cursor: it retains
//     more, never less. Its timestamp lags by at most
//     max(CursorRecordInterval, CursorRecordMaxAge), far inside the
//     14-day ActiveWindow floor, as it already did for unchanged cursors.
//   - Realtime connect (realtime.go, Attach, and the hub's hello) reads
//     the registration and the wire version, written at once whenever
//     they change (§8.1), and the cursor: a lagging one only makes hello
//     report the older cursor and ask for a round first (requiresSync,
//     §8.1/§8.2), the side that delivers more, never less; a socket's
//     acks (AckCursor) raise the stored cursor themselves.
//   - The epoch binding (checkClient, §1.5) reads the actor, which never
//     changes within an epoch.
//
// So a 1-op push round from a client whose record is recent writes no
// client record at all (issue 23: 1 WCU a round).
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
	if prev != nil && !e.recordDue(prev, &next, now) {
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

// recordDue reports whether next must replace the stored record prev
// (recordClient has the argument): at once when the registration or the
// wire version changed, when the first cursor arrives and when the cursor
// went down (so the stored cursor never exceeds the last one reported);
// a cursor that moved up once the record is CursorRecordInterval old; an
// unchanged one once it is CursorRecordMaxAge old.
func (e *Engine) recordDue(prev, next *store.Client, now int64) bool {
	age := now - prev.UpdatedAtMs
	switch {
	case prev.WireVersion != next.WireVersion || prev.Registration != next.Registration:
		return true
	case prev.Cursor < 0 && next.Cursor >= 0, next.Cursor < prev.Cursor:
		return true
	case next.Cursor != prev.Cursor:
		return age >= e.limits.CursorRecordInterval.Milliseconds()
	default:
		return age >= e.limits.CursorRecordMaxAge.Milliseconds()
	}
}
