package engine

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/canonjson"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// Pull limits of §4.2: requested values are clamped silently.
type pullLimits struct {
	commits, snapshotRows, snapshotPages int
	accept                               uint8
}

func clamp(v int32, def, lo, hi int) int {
	if v == 0 {
		return def
	}
	n := int(v)
	if n < lo {
		return lo
	}
	if n > hi {
		return hi
	}
	return n
}

func clampLimits(h *wire.PullHeader) pullLimits {
	return pullLimits{
		commits:       clamp(h.LimitCommits, 1000, 1, 1000),
		snapshotRows:  clamp(h.LimitSnapshotRows, 1000, 1, 50000),
		snapshotPages: clamp(h.MaxSnapshotPages, 4, 1, 50),
		accept:        h.Accept,
	}
}

// subPlan is one subscription after request validation and scope
// resolution (§3.2).
type subPlan struct {
	sub       *wire.Subscription
	table     *schema.Table
	active    bool
	effective ScopeMap
	// wireEffective is effective in SUB_START form (set when active).
	wireEffective wire.ScopeMap
}

// planPull performs every request-level pull validation before the first
// response byte (§1.7 request-level surface) and computes effective scopes.
func (e *Engine) planPull(ctx context.Context, rs *reqState, req *wire.Request) ([]subPlan, error) {
	if req.Pull.Accept&(wire.AcceptInlineRows|wire.AcceptExternalRows) == 0 {
		return nil, syncerr.New(syncerr.InvalidRequest, "accept must include rows segments (bit 0 or bit 1, §4.2)")
	}
	var plans []subPlan
	if len(req.Subscriptions) <= len(rs.planBuf) {
		plans = rs.planBuf[:len(req.Subscriptions)] // the usual one subscription
	} else {
		plans = make([]subPlan, len(req.Subscriptions))
	}
	ids := make(map[string]bool, len(req.Subscriptions))
	for i := range req.Subscriptions {
		s := &req.Subscriptions[i]
		if ids[s.ID] {
			return nil, syncerr.New(syncerr.InvalidSubscription, "duplicate subscription id %q (§4.1)", s.ID)
		}
		ids[s.ID] = true
		t, ok := rs.schemaV.Table(s.Table)
		if !ok {
			return nil, syncerr.New(syncerr.UnknownTable, "subscription %q names unknown table %q (§4.3)", s.ID, s.Table)
		}
		for _, sc := range s.Scopes {
			if !t.HasVariable(sc.Key) {
				return nil, syncerr.New(syncerr.InvalidSubscription, "subscription %q requests scope %q, which table %q does not declare (§3.2)", s.ID, sc.Key, s.Table)
			}
			if slices.Contains(sc.Values, "*") {
				return nil, syncerr.New(syncerr.InvalidSubscription, "subscription %q requests '*' for %q; wildcards are for allowed scopes only (§3.2)", s.ID, sc.Key)
			}
		}
		plans[i] = subPlan{sub: s, table: t}
	}
	if len(plans) == 0 {
		return plans, nil
	}
	allowed, err := e.allowedScopes(ctx, rs)
	if err != nil {
		// The grant could not be read: a retryable request error, never a
		// revocation (see resolve). A decided "no grant" is an empty map
		// and revokes below (§3.2 rule 5).
		return nil, err
	}
	for i := range plans {
		p := &plans[i]
		p.effective, p.active = effectiveScopes(p.sub.Scopes, allowed)
		if p.active {
			p.wireEffective = wireEffective(p.sub.Scopes, p.effective)
		}
	}
	return plans, nil
}

// servePull writes every subscription section in request order (§1.6)
// and returns the minimum nextCursor of the active subscriptions (§4.5).
func (e *Engine) servePull(ctx context.Context, rs *reqState, req *wire.Request, plans []subPlan, enc *wire.Encoder, cw *countingWriter) (int64, bool, error) {
	lim := clampLimits(req.Pull)
	head := rs.head
	if rs.acceptedMax > head.MaxCommitSeq {
		// Read-after-write: a push of this request was answered with a
		// commit the head read at the start does not cover (a replay of a
		// commit applied concurrently). Read the head again; if storage
		// still cannot show it, say so rather than serve a pull that
		// misses the client's own write.
		h, ok, err := e.store.Head(ctx, rs.auth.Partition)
		if err != nil {
			return 0, false, storeErr(err, "read partition head")
		}
		if !ok || h.MaxCommitSeq < rs.acceptedMax {
			return 0, false, syncerr.New(syncerr.StorageStaleRead, "storage cannot yet show commit %d accepted in this request", rs.acceptedMax)
		}
		head.MaxCommitSeq = h.MaxCommitSeq
		head.HorizonSeq = max(head.HorizonSeq, h.HorizonSeq)
	}
	// Push results already written count as progress: then the pull half
	// may stop short of its first commit rather than pass the budget.
	// The pull state lives in the request's allocation (rs.pull).
	ps := &rs.pull
	*ps = pullState{e: e, rs: rs, lim: lim, enc: enc, cw: cw, maxSeq: head.MaxCommitSeq, horizon: head.HorizonSeq, sentData: len(req.Commits) > 0}
	ps.logw = logWindow{e: e, partition: rs.auth.Partition, through: ps.maxSeq, lo: -2}
	ps.log = &ps.logw
	minCursor, has := int64(0), false
	for i := range plans {
		next, active, err := ps.section(ctx, &plans[i])
		if err != nil {
			return 0, false, err
		}
		if active && (!has || next < minCursor) {
			minCursor, has = next, true
		}
	}
	return minCursor, has, nil
}

type pullState struct {
	e       *Engine
	rs      *reqState
	lim     pullLimits
	enc     *wire.Encoder
	cw      *countingWriter
	maxSeq  int64
	horizon int64
	log     *logWindow
	logw    logWindow // what log points to (one allocation with ps)
	// start and end are SUB_START and SUB_END of an incremental section:
	// WriteFrame encodes a frame before it returns, so one of each serves
	// every section of the request.
	start wire.SubStart
	end   wire.SubEnd
	// sentData is set once any COMMIT or segment frame went out: from then
	// on the byte budget may stop the response short (progress is made).
	sentData bool
	// pending is a bootstrap SUB_START held back until the section's first
	// segment frame is written (see pullState.bootstrap).
	pending *wire.SubStart
}

func (ps *pullState) write(f wire.Frame) error {
	if ps.pending != nil {
		s := ps.pending
		ps.pending = nil
		if err := ps.enc.WriteFrame(s); err != nil {
			return fmt.Errorf("write %T: %w", s, err)
		}
	}
	if err := ps.enc.WriteFrame(f); err != nil {
		return fmt.Errorf("write %T: %w", f, err)
	}
	return nil
}

// overBudget reports whether adding n more bytes would pass the response
// byte budget. The first data frame of a response is always allowed, so
// every pull makes progress even when one commit or page is large.
func (ps *pullState) overBudget(n int) bool {
	return ps.sentData && ps.cw.n+int64(n) > int64(ps.e.limits.ResponseBudgetBytes)
}

// outOfTime reports whether the request's deadline is closer than the
// reserve (issue 11 work budget). Like overBudget it never stops a
// response before its first data frame, so every pull makes progress.
func (ps *pullState) outOfTime(ctx context.Context, sentData bool) bool {
	if !sentData {
		return false
	}
	d, ok := ctx.Deadline()
	return ok && time.Until(d) < ps.e.limits.DeadlineReserve
}

// section produces SUB_START … SUB_END for one subscription.
func (ps *pullState) section(ctx context.Context, p *subPlan) (int64, bool, error) {
	sub := p.sub
	if !p.active {
		// §3.3: no data, empty effective scopes, cursor echoed.
		if err := ps.write(&wire.SubStart{ID: sub.ID, Status: wire.SubRevoked, ReasonCode: string(syncerr.ScopeRevoked), EffectiveScopes: wire.ScopeMap{}}); err != nil {
			return 0, false, err
		}
		return sub.Cursor, false, ps.write(&wire.SubEnd{NextCursor: sub.Cursor})
	}
	tok, tokOK := parseBootstrapToken(sub.BootstrapState, sub.Table)
	// §4.7: a present token — usable or not — marks the subscription as
	// still bootstrapping (its cursor is only the pin, its rows are partial).
	// An unusable token silently restarts the bootstrap with a fresh pin:
	// it must neither fall through to incremental (rows past the token's
	// row cursor would never be delivered) nor answer reset.
	if sub.BootstrapState.Present {
		return ps.bootstrap(ctx, p, tok, tokOK)
	}
	if sub.Cursor >= 0 && sub.Cursor < ps.horizon {
		// §4.6: behind the horizon, no deltas can be computed.
		if err := ps.write(&wire.SubStart{ID: sub.ID, Status: wire.SubReset, ReasonCode: string(syncerr.CursorExpired), EffectiveScopes: wire.ScopeMap{}}); err != nil {
			return 0, false, err
		}
		return sub.Cursor, false, ps.write(&wire.SubEnd{NextCursor: sub.Cursor})
	}
	if sub.Cursor < 0 || sub.Cursor > ps.maxSeq {
		return ps.bootstrap(ctx, p, tok, tokOK)
	}
	return ps.incremental(ctx, p)
}

// incremental serves the §4.5 window cursor < commitSeq ≤ maxSeq.
//
// The window is read before SUB_START goes out so the horizon can be
// re-checked after the read (§4.6 of the 0.21+ spec): pruning that
// crossed the cursor while the log was read answers reset, never an
// active section with commits missing. Commit sequences are contiguous
// per partition, so a read that returns every sequence from cursor+1 on
// is complete whatever pruning did meanwhile; a gap is what triggers the
// re-check, and the common path costs no extra storage read.
func (ps *pullState) incremental(ctx context.Context, p *subPlan) (int64, bool, error) {
	sub := p.sub
	start := &ps.start
	*start = wire.SubStart{ID: sub.ID, Status: wire.SubActive, EffectiveScopes: p.wireEffective}
	next := sub.Cursor
	if sub.Cursor >= ps.maxSeq {
		// Quiet subscription: no log read at all.
		if err := ps.write(start); err != nil {
			return 0, false, err
		}
		return next, true, ps.writeEnd(next)
	}
	// The walk's state is one value: the log callback below escapes, and
	// each variable it writes would otherwise be a heap allocation.
	var w struct {
		next                     int64
		delivered, pendingBytes  int
		exhausted, gap, sentData bool
		expect                   int64
		frames                   []*wire.Commit
		frameBuf                 [1]*wire.Commit
		werr                     error
	}
	w.frames = w.frameBuf[:0]
	w.next, w.exhausted, w.expect, w.sentData = next, true, sub.Cursor+1, ps.sentData
	// The held-back SUB_START counts against the byte budget too (its
	// encoding is only measured, in the encoder's scratch).
	startBytes, err := ps.enc.FrameSize(start)
	if err != nil {
		return 0, false, err
	}
	w.pendingBytes = startBytes
	each, scoped := ps.windowReader(ctx, p, &w.gap)
	err = each(func(c *store.Commit) bool {
		if scoped {
			if c.Seq <= sub.Cursor || c.Seq > ps.maxSeq || c.Seq < w.expect {
				return true
			}
			w.expect = c.Seq
		}
		if c.Seq != w.expect {
			w.gap = true
			return false
		}
		w.expect++
		stopAt := func() {
			if scoped {
				w.next = c.Seq - 1
			}
		}
		frame := commitFrame(c, sub.Table, p.effective)
		if frame == nil {
			w.next = c.Seq // nothing for this subscription: the cursor still advances
			return true
		}
		if ps.outOfTime(ctx, w.sentData) {
			w.exhausted = false
			stopAt()
			return false
		}
		if w.werr = ps.forClientVersion(frame, p.table); w.werr != nil {
			return false
		}
		n := len(frame.Changes)
		if w.delivered > 0 && w.delivered+n > ps.lim.commits {
			w.exhausted = false
			stopAt()
			return false
		}
		size := frameSize(frame)
		if w.sentData && ps.cw.n+int64(w.pendingBytes+size) > int64(ps.e.limits.ResponseBudgetBytes) {
			w.exhausted = false
			stopAt()
			return false
		}
		w.frames = append(w.frames, frame)
		w.pendingBytes += size
		w.sentData = true
		w.delivered += n
		w.next = c.Seq
		return true
	})
	if err == nil {
		err = w.werr
	}
	if err != nil {
		return 0, false, err
	}
	if !scoped && w.exhausted && !w.gap && w.next < ps.maxSeq && w.expect <= ps.maxSeq {
		w.gap = true // the read ended before maxSeq
	}
	if w.gap {
		h, ok, err := ps.e.store.Head(ctx, ps.rs.auth.Partition)
		if err != nil {
			return 0, false, storeErr(err, "read partition head")
		}
		if ok && h.HorizonSeq > sub.Cursor {
			// §4.6: pruning crossed the cursor during the read.
			ps.horizon = max(ps.horizon, h.HorizonSeq)
			if err := ps.write(&wire.SubStart{ID: sub.ID, Status: wire.SubReset, ReasonCode: string(syncerr.CursorExpired), EffectiveScopes: wire.ScopeMap{}}); err != nil {
				return 0, false, err
			}
			return sub.Cursor, false, ps.write(&wire.SubEnd{NextCursor: sub.Cursor})
		}
		if !scoped {
			return 0, false, syncerr.New(syncerr.StorageStaleRead, "the commit log read missed commit %d of the window (%d, %d]", w.expect, sub.Cursor, ps.maxSeq)
		}
		// Scoped: the read's horizon was past the cursor but the head's
		// no longer is (a restore?): nothing missing can be proven, so
		// the read stands.
	}
	if err := ps.write(start); err != nil {
		return 0, false, err
	}
	for _, f := range w.frames {
		if err := ps.write(f); err != nil {
			return 0, false, err
		}
		ps.sentData = true
		ps.rs.report.CommitsSent++
	}
	if w.exhausted && w.next < ps.maxSeq {
		w.next = ps.maxSeq
	}
	// The window served, skipped commits included (gateNeedsRecheck).
	ps.rs.report.pulledThrough = max(ps.rs.report.pulledThrough, w.next)
	return w.next, true, ps.writeEnd(w.next)
}

// windowReader picks how incremental walks the window (sub.Cursor,
// maxSeq]; scoped reports that commits come with gaps (through the scope
// index), and *gap is set when pruning reached the window there.
//
// A long window — any window when the store's scope index costs no more
// than the log it lists (store.CheapScopedLog) — is read through the
// log's scope index (§3.1): only the commits touching the subscription's
// values of its key variable, not the window. Commits come then with
// gaps, so the read's horizon (read after the index) replaces the
// contiguity check, and a stop before commit c leaves the cursor at c−1
// (nothing in between concerns this subscription). A window of this
// request's own commits (ownWindow) is served as the log would hand them
// on, without reading it: contiguous, so it needs no scope index (the
// walk's filter is the same).
func (ps *pullState) windowReader(ctx context.Context, p *subPlan, gap *bool) (each func(func(*store.Commit) bool) error, scoped bool) {
	sub := p.sub
	if own := ps.ownWindow(sub.Cursor); own != nil {
		return func(fn func(*store.Commit) bool) error {
			for _, c := range own {
				if !fn(c) {
					break
				}
			}
			return nil
		}, false
	}
	if len(p.effective) == 0 || !ps.e.cheapScopedLog && ps.maxSeq-sub.Cursor <= scopedLogMinWindow {
		return func(fn func(*store.Commit) bool) error { return ps.log.each(ctx, sub.Cursor, fn) }, false
	}
	return func(fn func(*store.Commit) bool) error {
		variable := keyVariable(p.effective)
		hz, err := ps.e.store.ReadLogScoped(ctx, ps.rs.auth.Partition, p.table.Name, variable, p.effective[variable], sub.Cursor, ps.maxSeq, fn)
		if err != nil {
			return storeErr(err, "read the log by scope")
		}
		if hz > sub.Cursor {
			*gap = true // pruning reached the window: decided by the caller (§4.6)
		}
		return nil
	}, true
}

// ownWindow returns the commits (cursor, maxSeq] when this request landed
// every one of them itself (reqState.own), else nil. A push round's pull
// (§1.1: push half first) whose cursor is the head the push built on
// reads back exactly the commits it just wrote; the engine holds them as
// committed, the content their log items hold (the stores write
// Commit.Changes as given and read them back unchanged), so the log is
// not read. A pull is a snapshot at maxSeq: commits of others landing
// after it are the next pull's.
func (ps *pullState) ownWindow(cursor int64) []*store.Commit {
	own := ps.rs.own
	if len(own) == 0 || own[len(own)-1].Seq != ps.maxSeq {
		return nil
	}
	first := own[0].Seq
	if cursor < first-1 || cursor >= ps.maxSeq {
		return nil
	}
	return own[cursor-first+1:]
}

// noteOwn records a commit this request landed (rs.own keeps the run of
// consecutive seqs ending at the latest one).
func (rs *reqState) noteOwn(c *store.Commit) {
	if n := len(rs.own); n == 0 || rs.own[n-1].Seq != c.Seq-1 {
		rs.own = rs.ownBuf[:0]
	}
	rs.own = append(rs.own, c)
}

// writeEnd writes the section's SUB_END (ps.end).
func (ps *pullState) writeEnd(next int64) error {
	ps.end = wire.SubEnd{NextCursor: next}
	return ps.write(&ps.end)
}

// scopedLogMinWindow is the window length from which an incremental
// section reads the log through its scope index (two round trips: the
// index, then the commits it lists) rather than the whole window (one
// Query of 100 log items per round trip). A store implementing
// store.CheapScopedLog is read through its index at any length.
const scopedLogMinWindow = 64

// forClientVersion re-encodes a frame's rows (stored for the latest
// schema version) for the request's version (§2.4: rows always travel in
// the client's own codec). Same-version frames are untouched.
func (ps *pullState) forClientVersion(f *wire.Commit, t *schema.Table) error {
	st, _ := ps.e.schema.Versions[ps.e.schema.Latest].Table(t.Name)
	if st == t {
		return nil
	}
	for i := range f.Changes {
		ch := &f.Changes[i]
		if !ch.Row.Present {
			continue
		}
		row, err := ps.e.transcode(st, t, ch.Row.Value)
		if err != nil {
			return err
		}
		ch.Row.Value = row
	}
	return nil
}

// commitFrame filters a commit to one subscription's table and effective
// scopes; nil when nothing matches.
func commitFrame(c *store.Commit, table string, eff ScopeMap) *wire.Commit {
	var f *wire.Commit
	for i := range c.Changes {
		ch := &c.Changes[i]
		if ch.Table != table || !matchesScopes(ch.Scopes, eff) {
			continue
		}
		if f == nil {
			// The frame, its one table and its first change in one
			// allocation (a commit usually has one change per table).
			a := &struct {
				c       wire.Commit
				tables  [1]string
				changes [1]wire.Change
			}{}
			a.tables[0] = table
			f = &a.c
			*f = wire.Commit{CommitSeq: c.Seq, CreatedAtMs: c.CreatedAtMs, ActorID: c.ActorID, Tables: a.tables[:], Changes: a.changes[:0]}
		}
		wc := wire.Change{TableIndex: 0, RowID: ch.RowID, Op: ch.Op, Scopes: ch.Scopes}
		if ch.Op == wire.OpUpsert {
			wc.RowVersion = wire.Some(ch.RowVersion)
			wc.Row = wire.Some(ch.Row)
		}
		f.Changes = append(f.Changes, wc)
	}
	return f
}

// frameSize estimates a COMMIT frame's encoded size from its variable
// parts (exact enough for a budget that has headroom under the hard cap).
func frameSize(f *wire.Commit) int {
	n := commitFixedSize(f.ActorID)
	for _, t := range f.Tables {
		n += 4 + len(t)
	}
	for i := range f.Changes {
		ch := &f.Changes[i]
		n += changeSize(ch.RowID, ch.Scopes, len(ch.Row.Value))
	}
	return n
}

// commitFixedSize is frameSize's part of a COMMIT frame outside its
// tables and changes.
func commitFixedSize(actorID string) int { return 5 + 8 + 8 + 4 + len(actorID) + 4 + 4 }

// changeSize is frameSize's part of one change with a row of rowLen bytes.
func changeSize(rowID string, scopes wire.StoredScopes, rowLen int) int {
	n := 2 + 4 + len(rowID) + 1 + 9 + 4 + 1 + 4 + rowLen
	for _, s := range scopes {
		n += 8 + len(s.Key) + len(s.Value)
	}
	return n
}

// scopeDigest is §3.5 over an effective map.
func scopeDigest(eff ScopeMap) string {
	return canonjson.ScopeDigest(map[string][]string(eff))
}

// logWindow reads the commit log once per request for all incremental
// subscriptions: a client's subscriptions usually share one cursor, so
// the window is fetched in chunks and replayed from memory instead of one
// log query per subscription. Past maxCached commits it reads directly.
type logWindow struct {
	e         *Engine
	partition string
	through   int64
	lo, hi    int64 // cached commits cover (lo, hi]; lo = -2 means empty
	commits   []*store.Commit
}

const (
	logChunk  = 256
	maxCached = 4096
)

func (l *logWindow) each(ctx context.Context, after int64, fn func(*store.Commit) bool) error {
	if l.lo == -2 {
		l.lo, l.hi = after, after
	}
	if after < l.lo {
		return l.direct(ctx, after, fn)
	}
	// Replay the cached part.
	i, _ := slices.BinarySearchFunc(l.commits, after+1, func(c *store.Commit, seq int64) int {
		switch {
		case c.Seq < seq:
			return -1
		case c.Seq > seq:
			return 1
		}
		return 0
	})
	for ; i < len(l.commits); i++ {
		if !fn(l.commits[i]) {
			return nil
		}
	}
	pos := max(after, l.hi)
	for pos < l.through {
		if len(l.commits) >= maxCached {
			return l.direct(ctx, pos, fn)
		}
		var chunk []*store.Commit
		err := l.e.store.ReadLog(ctx, l.partition, pos, l.through, func(c *store.Commit) bool {
			chunk = append(chunk, c)
			return len(chunk) < logChunk
		})
		if err != nil {
			return storeErr(err, "read commit log")
		}
		if len(chunk) == 0 {
			l.hi = l.through
			return nil
		}
		if pos == l.hi {
			l.commits = append(l.commits, chunk...)
			l.hi = chunk[len(chunk)-1].Seq
		}
		for _, c := range chunk {
			if !fn(c) {
				return nil
			}
		}
		pos = chunk[len(chunk)-1].Seq
	}
	return nil
}

func (l *logWindow) direct(ctx context.Context, after int64, fn func(*store.Commit) bool) error {
	if err := l.e.store.ReadLog(ctx, l.partition, after, l.through, fn); err != nil {
		return storeErr(err, "read commit log")
	}
	return nil
}
