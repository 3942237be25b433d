package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/skyfold/syncular-lambda/internal/core/canonjson"

	"github.com/skyfold/syncular-lambda/internal/core/segment"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// bootstrapToken is the §4.7 resume token. One subscription bootstraps
// one table, so tables is always [table] and tableIndex 0.
type bootstrapToken struct {
	AsOfCommitSeq int64    `json:"asOfCommitSeq"`
	Tables        []string `json:"tables"`
	TableIndex    int      `json:"tableIndex"`
	RowCursor     *string  `json:"rowCursor"`
}

// parseBootstrapToken reads a resume token; ok is false for an absent or
// unusable token, which restarts the bootstrap silently (§4.7).
func parseBootstrapToken(raw wire.Opt[wire.JSON], table string) (bootstrapToken, bool) {
	if !raw.Present {
		return bootstrapToken{}, false // before t, which escapes (Unmarshal)
	}
	var t bootstrapToken
	var probe map[string]json.RawMessage
	if json.Unmarshal([]byte(raw.Value), &probe) != nil {
		return t, false
	}
	for _, k := range []string{"asOfCommitSeq", "tables", "tableIndex", "rowCursor"} {
		if _, ok := probe[k]; !ok {
			return t, false
		}
	}
	if json.Unmarshal([]byte(raw.Value), &t) != nil {
		return t, false
	}
	if t.AsOfCommitSeq < 0 || len(t.Tables) != 1 || t.Tables[0] != table || t.TableIndex != 0 {
		return t, false
	}
	return t, true
}

func (t bootstrapToken) encode() wire.JSON {
	b, _ := json.Marshal(t) // plain struct of strings and ints: cannot fail
	return wire.JSON(b)
}

// bootstrap serves a pinned, paged bootstrap section (§4.7, §5).
func (ps *pullState) bootstrap(ctx context.Context, p *subPlan, tok bootstrapToken, resume bool) (int64, bool, error) {
	sub := p.sub
	asOf := ps.maxSeq
	var cursor wire.Opt[string]
	resumed := false
	if resume && tok.AsOfCommitSeq >= ps.horizon && tok.AsOfCommitSeq <= ps.maxSeq {
		asOf = tok.AsOfCommitSeq
		resumed = true
		if tok.RowCursor != nil {
			// A cursor this server did not write (or one of the row-order
			// cursors of before scope-keyed reads) restarts this
			// bootstrap's pages at the pin: the pages are upserts, so
			// re-sending rows is safe, skipping them would not be.
			if _, ok := parseRowCursor(*tok.RowCursor); ok {
				cursor = wire.Some(*tok.RowCursor)
			}
		}
	}
	// SUB_START goes out with the first segment frame (pullState.write):
	// §4.4 sets bootstrap iff this response delivers segments, and §5.6
	// has the client clear stale rows only on the first page of the
	// response to its fresh request — so a fresh bootstrap must never
	// start in a response that the byte budget ends before its first page.
	start := &wire.SubStart{ID: sub.ID, Status: wire.SubActive, EffectiveScopes: p.wireEffective, Bootstrap: true}
	ps.pending = start
	digest := scopeDigest(p.effective)
	var pre *reuse
	if !resumed {
		// Issue 11 item 5: a fresh bootstrap may start at the pin of a live
		// first page built earlier for the same context instead of at the
		// head, but only while that snapshot is still the scope's state at
		// the head (issue 24): §4.7 pins asOfCommitSeq = maxCommitSeq, and
		// a client that stops after one response must hold current rows.
		// Every page of this bootstrap is then labelled with the earlier
		// pin, like a resumed one; no commit after it concerns the scope.
		r, err := ps.findLatest(ctx, p, digest)
		if err != nil {
			return 0, false, err
		}
		if r != nil {
			pre, asOf = r, r.pub.AsOfCommitSeq
		}
	}
	complete := false
	for page := 0; page < ps.lim.snapshotPages; page++ {
		if ps.outOfTime(ctx, ps.sentData) {
			break // the token resumes at cursor
		}
		next, done, stop, err := ps.page(ctx, p, asOf, digest, cursor, pre)
		pre = nil
		if err != nil {
			return 0, false, err
		}
		if stop {
			break
		}
		if done {
			complete = true
			break
		}
		cursor = next
	}
	if ps.pending != nil {
		// The budget ended the response before the first page: nothing of
		// this bootstrap is delivered. A resume keeps its token; a fresh
		// start (or restart) is deferred whole: the request's cursor and
		// token (if any) are echoed unchanged, so the next pull decides
		// afresh exactly as this one did — dropping an unusable token here
		// would turn a partial replica into an incremental one.
		ps.pending = nil
		start.Bootstrap = false
		if err := ps.write(start); err != nil {
			return 0, false, err
		}
		if !resumed {
			return sub.Cursor, false, ps.write(&wire.SubEnd{NextCursor: sub.Cursor, BootstrapState: sub.BootstrapState})
		}
	}
	end := &wire.SubEnd{NextCursor: asOf}
	if !complete {
		t := bootstrapToken{AsOfCommitSeq: asOf, Tables: []string{sub.Table}, TableIndex: 0}
		if cursor.Present {
			c := cursor.Value
			t.RowCursor = &c
		}
		end.BootstrapState = wire.Some(t.encode())
	}
	return asOf, true, ps.write(end)
}

// reuse is a live publication found for a page before it is served.
type reuse struct {
	id   string
	pub  store.Publication
	size int64 // -1: unknown
}

// segKey is the publication context of a page (§5.1).
func (ps *pullState) segKey(p *subPlan, asOf int64, digest string, cursor wire.Opt[string]) store.SegmentKey {
	rs := ps.rs
	return store.SegmentKey{
		Partition: rs.auth.Partition, LogEpoch: rs.head.LogEpoch, Table: p.table.Name,
		SchemaVersion: rs.schemaV.Number, MediaType: wire.MediaRows, ScopeDigest: digest,
		AsOfCommitSeq: asOf, RowCursor: cursor,
	}
}

// reusable reports whether a found publication may serve this request's
// page. §4.2: pages hold up to limitSnapshotRows rows, and §5.1 shares a
// build per page window: reuse only a publication this request's page
// size could have cut (a full page, or a last page that fits), never a
// larger page built for a client with a bigger limit; and an empty page
// goes inline when the client takes inline rows.
func (ps *pullState) reusable(pub *store.Publication) bool {
	fits := pub.RowCount == int64(ps.lim.snapshotRows) ||
		(!pub.NextRowCursor.Present && pub.RowCount <= int64(ps.lim.snapshotRows))
	return fits && (ps.lim.accept&wire.AcceptInlineRows == 0 || pub.RowCount > 0)
}

// findLatest looks for a live first page of this bootstrap's context at
// any pin in [horizon, head] (store.LatestFinder), or returns nil.
func (ps *pullState) findLatest(ctx context.Context, p *subPlan, digest string) (*reuse, error) {
	lf, ok := ps.e.segs.(store.LatestFinder)
	if !ok || ps.lim.accept&wire.AcceptExternalRows == 0 || ps.horizon > ps.maxSeq {
		return nil, nil
	}
	key := ps.segKey(p, ps.maxSeq, digest, wire.Opt[string]{})
	id, pub, n, found, err := lf.FindLatest(ctx, key, max(ps.horizon, 0), ps.maxSeq, ps.rs.now)
	if err != nil {
		return nil, storeErr(err, "find segment")
	}
	if !found || !ps.reusable(&pub) {
		return nil, nil
	}
	if quiet, err := ps.scopeQuiet(ctx, p, pub.AsOfCommitSeq); err != nil || !quiet {
		return nil, err
	}
	if n <= 0 {
		n = -1
	}
	return &reuse{id: id, pub: pub, size: n}, nil
}

// scopeQuiet reports whether no commit in (pin, maxSeq] changed a row of
// the subscription's table in its effective scopes, so a snapshot pinned
// at pin is the scope's state at the head (§4.7). It reads the log's
// scope index (§3.1, Store.ReadLogScoped) for the window and stops at the
// first commit that concerns the subscription; a window the horizon
// reached cannot be proven quiet. A subscription without effective keys
// has no index to read and is never proven quiet.
func (ps *pullState) scopeQuiet(ctx context.Context, p *subPlan, pin int64) (bool, error) {
	if pin >= ps.maxSeq {
		return pin == ps.maxSeq, nil
	}
	if len(p.effective) == 0 {
		return false, nil
	}
	variable := keyVariable(p.effective)
	changed := false
	hz, err := ps.e.store.ReadLogScoped(ctx, ps.rs.auth.Partition, p.table.Name, variable, p.effective[variable], pin, ps.maxSeq, func(c *store.Commit) bool {
		changed = c.Seq > pin && c.Seq <= ps.maxSeq && touchesScopes(c, p.table.Name, p.effective)
		return !changed
	})
	if err != nil {
		return false, storeErr(err, "read the log by scope")
	}
	return !changed && hz <= pin, nil
}

// touchesScopes reports whether a commit has a change of table within the
// effective scopes (the changes commitFrame would deliver).
func touchesScopes(c *store.Commit, table string, eff ScopeMap) bool {
	for i := range c.Changes {
		if ch := &c.Changes[i]; ch.Table == table && matchesScopes(ch.Scopes, eff) {
			return true
		}
	}
	return false
}

// page emits one rows page starting after cursor. done means the table is
// exhausted; stop means the response budget ended the section here (the
// page was not sent and cursor stays). pre, when set, is a publication
// already found for this page's key.
func (ps *pullState) page(ctx context.Context, p *subPlan, asOf int64, digest string, cursor wire.Opt[string], pre *reuse) (next wire.Opt[string], done, stop bool, err error) {
	e := ps.e
	rs := ps.rs
	canInline := ps.lim.accept&wire.AcceptInlineRows != 0
	canExternal := ps.lim.accept&wire.AcceptExternalRows != 0
	key := ps.segKey(p, asOf, digest, cursor)
	if pre != nil && canExternal && pre.pub.SegmentKey == key {
		if err := ps.sendRef(ctx, pre.id, pre.pub, digest, pre.size); err != nil {
			return next, false, false, err
		}
		rs.report.SegmentsReused++
		rs.report.RowsDelivered += int(pre.pub.RowCount)
		return pre.pub.NextRowCursor, !pre.pub.NextRowCursor.Present, false, nil
	}
	if canExternal {
		// §5.1 build once, reuse while unexpired. A store that knows the
		// segment's size with the publication saves the Lookup, whose
		// cost grows with the segment's publications in every partition.
		var id string
		var pub store.Publication
		var ok bool
		var err error
		size := int64(-1)
		if sf, isSized := e.segs.(store.SizedFinder); isSized {
			var n int64
			id, pub, n, ok, err = sf.FindSized(ctx, key, rs.now)
			if n > 0 {
				size = n
			}
		} else {
			id, pub, ok, err = e.segs.Find(ctx, key, rs.now)
		}
		if err != nil {
			return next, false, false, storeErr(err, "find segment")
		}
		if ok && ps.reusable(&pub) {
			if err := ps.sendRef(ctx, id, pub, digest, size); err != nil {
				return next, false, false, err
			}
			rs.report.SegmentsReused++
			rs.report.RowsDelivered += int(pub.RowCount)
			return pub.NextRowCursor, !pub.NextRowCursor.Present, false, nil
		}
	}
	body, rows, last, more, err := ps.buildPage(ctx, p, cursor)
	if err != nil {
		return next, false, false, err
	}
	rs.report.SegmentsBuilt++
	if more {
		next = wire.Some(last)
	}
	inline := canInline && (len(body) <= e.limits.InlineSegmentMaxBytes || !canExternal)
	if inline {
		if ps.overBudget(len(body) + 5) {
			return cursor, false, true, nil
		}
		if err := ps.write(&wire.SegmentInline{Payload: body}); err != nil {
			return next, false, false, err
		}
		ps.sentData = true
		rs.report.SegmentsSent++
		rs.report.RowsDelivered += rows
		return next, !more, false, nil
	}
	id := segment.SegmentID(body)
	pub := store.Publication{SegmentKey: key, NextRowCursor: next, RowCount: int64(rows), CreatedAtMs: rs.now, ExpiresAtMs: rs.now + e.limits.SegmentTTL.Milliseconds()}
	if err := e.segs.Put(ctx, id, body, pub, rs.now); err != nil {
		return next, false, false, storeErr(err, "store segment")
	}
	if err := ps.sendRef(ctx, id, pub, digest, int64(len(body))); err != nil {
		return next, false, false, err
	}
	rs.report.RowsDelivered += rows
	return next, !more, false, nil
}

// sendRef writes a SEGMENT_REF for a publication, with a signed URL when
// the client advertised bit 3 and the host mints them (§5.4).
// byteLength < 0 means unknown (a reused publication): it is looked up.
func (ps *pullState) sendRef(ctx context.Context, id string, pub store.Publication, digest string, byteLength int64) error {
	if byteLength < 0 {
		seg, err := ps.e.segs.Lookup(ctx, id, store.FilterOf(pub.SegmentKey))
		if err != nil {
			return storeErr(err, "look up segment")
		}
		byteLength = seg.ByteLength
	}
	ref := &wire.SegmentRef{
		SegmentID: id, MediaType: wire.MediaRows, Table: pub.Table, ByteLength: byteLength,
		RowCount: pub.RowCount, AsOfCommitSeq: pub.AsOfCommitSeq, ScopeDigest: digest,
		RowCursor: pub.RowCursor, NextRowCursor: pub.NextRowCursor,
	}
	if ps.lim.accept&wire.AcceptSignedURL != 0 {
		url, exp, ok, err := ps.e.signedURL(ctx, ps.rs, id, digest)
		if err != nil {
			return err
		}
		if ok {
			ref.URL, ref.URLExpiresAtMs = wire.Some(url), wire.Some(exp)
		}
	}
	if err := ps.write(ref); err != nil {
		return err
	}
	ps.sentData = true
	ps.rs.report.SegmentsSent++
	return nil
}

// rowCursor is the position of a bootstrap page (§4.7 rowCursor, opaque
// to clients): the (scope value, rowId) of the last row sent, in the
// order of Store.ScanScopedRows over the key variable (keyVariable).
// Text form: "s" + decimal byte length of the value + ":" + value +
// rowId, which is unambiguous whatever either contains.
func formatRowCursor(c store.ScopeCursor) string {
	return "s" + strconv.Itoa(len(c.Value)) + ":" + c.Value + c.RowID
}

func parseRowCursor(s string) (*store.ScopeCursor, bool) {
	rest, ok := strings.CutPrefix(s, "s")
	if !ok {
		return nil, false
	}
	n, rest, ok := strings.Cut(rest, ":")
	if !ok {
		return nil, false
	}
	l, err := strconv.Atoi(n)
	if err != nil || l < 0 || l > len(rest) || strconv.Itoa(l) != n {
		return nil, false
	}
	return &store.ScopeCursor{Value: rest[:l], RowID: rest[l:]}, true
}

// keyVariable is the scope variable a bootstrap reads by: the first
// effective key in canonical (UTF-16) order. Effective keys are the
// subscription's requested keys (§3.2 rule 5), so every page of one
// bootstrap uses the same variable. The other keys filter in memory.
func keyVariable(eff ScopeMap) string {
	var best string
	first := true
	for k := range eff {
		if first || canonjson.CompareUTF16(k, best) < 0 {
			best, first = k, false
		}
	}
	return best
}

// buildPage encodes the next page of rows matching the effective scopes:
// at most snapshotRows rows and about SegmentMaxBytes bytes. Rows are
// stored row-codec encoded, so for a same-version client the segment is
// a byte copy of stored payloads. Rows are read by the values of one
// effective variable (Store.ScanScopedRows: only the rows of those
// values, not the table), and the other effective keys filter them.
func (ps *pullState) buildPage(ctx context.Context, p *subPlan, cursor wire.Opt[string]) (body []byte, rows int, last string, more bool, err error) {
	e := ps.e
	rs := ps.rs
	st, _ := e.schema.Versions[e.schema.Latest].Table(p.table.Name)
	var buf bytes.Buffer
	enc, err := segment.NewEncoder(&buf, p.table.Name, rs.schemaV.Number, p.table.Columns, segment.EncoderOptions{})
	if err != nil {
		return nil, 0, "", false, fmt.Errorf("start segment: %w", err)
	}
	budget := e.limits.SegmentMaxBytes - 64
	var scanErr error
	var after *store.ScopeCursor
	if cursor.Present {
		after, _ = parseRowCursor(cursor.Value) // validated when the token was read
	}
	variable := keyVariable(p.effective)
	scanned := 0
	// The page takes snapshotRows rows and looks at one more to know
	// whether another page follows.
	err = e.store.ScanScopedRows(ctx, rs.auth.Partition, p.table.Name, variable, p.effective[variable], after, ps.lim.snapshotRows+1, func(value string, r *store.Row) bool {
		if scanned >= e.limits.MaxRowsScannedPerPage {
			// Work budget: the page ends at the last row read, which
			// the next page resumes after (a short page, perhaps empty).
			more = true
			return false
		}
		scanned++
		rs.report.RowsScanned++
		if !matchesScopes(r.Scopes, p.effective) {
			last = formatRowCursor(store.ScopeCursor{Value: value, RowID: r.RowID})
			return true
		}
		if rows >= ps.lim.snapshotRows || (rows > 0 && buf.Len()+len(r.Payload)+16 > budget) {
			more = true
			return false
		}
		payload, terr := e.transcode(st, p.table, r.Payload)
		if terr != nil {
			scanErr = terr
			return false
		}
		if scanErr = enc.AppendRow(r.Version, payload); scanErr != nil {
			return false
		}
		rows++
		last = formatRowCursor(store.ScopeCursor{Value: value, RowID: r.RowID})
		return true
	})
	if err != nil {
		return nil, 0, "", false, storeErr(err, "scan rows")
	}
	if scanErr != nil {
		return nil, 0, "", false, scanErr
	}
	if _, err := enc.Close(); err != nil {
		return nil, 0, "", false, fmt.Errorf("finish segment: %w", err)
	}
	return buf.Bytes(), rows, last, more, nil
}
