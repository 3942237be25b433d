package enginetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/skyfold/syncular-lambda/internal/core/canonjson"
	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/segment"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// SigningKey is the native signed-URL key every harness engine uses, so
// tests can forge and tamper with tokens.
var SigningKey = bytes.Repeat([]byte{7}, 32)

// CountingSegments wraps a SegmentStore and counts builds (Put calls), so
// segment-reuse tests need no timing.
type CountingSegments struct {
	store.SegmentStore
	puts atomic.Int64
}

// Put counts and delegates.
func (c *CountingSegments) Put(ctx context.Context, id string, body []byte, pub store.Publication, nowMs int64) error {
	c.puts.Add(1)
	return c.SegmentStore.Put(ctx, id, body, pub, nowMs)
}

// FindLatest forwards to the wrapped store's store.LatestFinder (none:
// nothing found), so reuse at an earlier pin is exercised through the
// wrapper.
func (c *CountingSegments) FindLatest(ctx context.Context, key store.SegmentKey, minAsOf, maxAsOf, nowMs int64) (string, store.Publication, int64, bool, error) {
	lf, ok := c.SegmentStore.(store.LatestFinder)
	if !ok {
		return "", store.Publication{}, 0, false, nil
	}
	return lf.FindLatest(ctx, key, minAsOf, maxAsOf, nowMs)
}

// Puts reports how many segments were built.
func (c *CountingSegments) Puts() int64 { return c.puts.Load() }

// Commit builds a PUSH_COMMIT.
func Commit(id string, ops ...wire.Operation) wire.PushCommit {
	return wire.PushCommit{ClientCommitID: id, Operations: ops}
}

// PushCommits sends one push-only request; safe in goroutines (no
// t.Fatal). An in-band ERROR frame is returned as an error.
func (c *Client) PushCommits(commits ...wire.PushCommit) ([]*wire.PushResult, error) {
	resp, err := c.Send(c.Request(commits, nil, nil))
	if err != nil {
		return nil, err
	}
	var out []*wire.PushResult
	for _, f := range resp.Frames {
		switch f := f.(type) {
		case *wire.PushResult:
			out = append(out, f)
		case *wire.ErrorFrame:
			return out, fmt.Errorf("in-band error %s: %s", f.Code, f.Message)
		}
	}
	if len(out) != len(commits) {
		return out, fmt.Errorf("%d PUSH_RESULT frames for %d commits", len(out), len(commits))
	}
	return out, nil
}

// Pull sends a pull-only request and returns its sections. An in-band
// ERROR frame is returned as an error.
func (c *Client) Pull(hdr wire.PullHeader, subs ...wire.Subscription) ([]*Section, error) {
	resp, err := c.Send(c.Request(nil, &hdr, subs))
	if err != nil {
		return nil, err
	}
	return ParseSections(resp)
}

// ParseSections is Sections without testing.TB: it fails on an in-band
// ERROR frame and on a segment that does not decode.
func ParseSections(resp *wire.Message) ([]*Section, error) {
	var out []*Section
	var cur *Section
	for _, f := range resp.Frames {
		switch f := f.(type) {
		case *wire.SubStart:
			cur = &Section{Start: f}
			out = append(out, cur)
		case *wire.Commit:
			if cur == nil {
				return nil, errors.New("COMMIT outside a subscription section")
			}
			cur.Commits = append(cur.Commits, f)
		case *wire.SegmentInline:
			if cur == nil {
				return nil, errors.New("SEGMENT_INLINE outside a subscription section")
			}
			cur.Inline = append(cur.Inline, f)
			seg, err := segment.Decode(f.Payload)
			if err != nil {
				return nil, fmt.Errorf("inline segment: %w", err)
			}
			cur.Segments = append(cur.Segments, seg)
		case *wire.SegmentRef:
			if cur == nil {
				return nil, errors.New("SEGMENT_REF outside a subscription section")
			}
			cur.Refs = append(cur.Refs, f)
		case *wire.SubEnd:
			if cur == nil {
				return nil, errors.New("SUB_END outside a subscription section")
			}
			cur.End = f
		case *wire.ErrorFrame:
			return out, fmt.Errorf("in-band error %s: %s", f.Code, f.Message)
		}
	}
	return out, nil
}

// Download fetches a segment over the direct endpoint (§5.5) as the
// client's actor, with X-Syncular-Scopes = canonical JSON of scopes, and
// verifies the content address (§5.1).
func (c *Client) Download(segmentID string, scopes map[string][]string) ([]byte, error) {
	auth := engine.Auth{Partition: c.Partition, ActorID: c.Actor}
	return c.H.Fetch(engine.SegmentRequest{SegmentID: segmentID, Auth: &auth, Scopes: string(canonjson.ScopeMap(scopes))})
}

// FetchURL fetches a segment through a native signed URL (§5.4): no host
// authentication, only the path's segment id and the `st` token.
func (h *Harness) FetchURL(raw string) ([]byte, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	id, err := url.PathUnescape(u.EscapedPath()[strings.LastIndexByte(u.EscapedPath(), '/')+1:])
	if err != nil {
		return nil, err
	}
	return h.Fetch(engine.SegmentRequest{SegmentID: id, Token: u.Query().Get("st")})
}

// Fetch authorizes a segment request and reads the whole body, checking
// the content address.
func (h *Harness) Fetch(r engine.SegmentRequest) ([]byte, error) {
	dl, err := h.Engine.AuthorizeSegment(context.Background(), r)
	if err != nil {
		return nil, err
	}
	rc, err := dl.Open(context.Background())
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, err
	}
	if int64(len(b)) != dl.ByteLength {
		return nil, fmt.Errorf("segment %s: %d bytes, descriptor says %d", r.SegmentID, len(b), dl.ByteLength)
	}
	sum := sha256.Sum256(b)
	if "sha256:"+hex.EncodeToString(sum[:]) != r.SegmentID {
		return nil, fmt.Errorf("segment %s: content address mismatch", r.SegmentID)
	}
	return b, nil
}

// RowState is one replica row: server_version and row-codec payload.
type RowState struct {
	Version int64
	Payload []byte
}

// ServerRows returns the stored rows of a table (Store.ScanRows).
func (h *Harness) ServerRows(partition, table string) map[string]RowState {
	out := map[string]RowState{}
	err := h.Store.ScanRows(context.Background(), partition, table, "", false, func(r *store.Row) bool {
		out[r.RowID] = RowState{Version: r.Version, Payload: bytes.Clone(r.Payload)}
		return true
	})
	if err != nil {
		h.T.Fatalf("scan rows: %v", err)
	}
	return out
}

// DiffRows describes how two row maps differ ("" when equal).
func DiffRows(want, got map[string]RowState) string {
	var b strings.Builder
	n := 0
	note := func(format string, args ...any) {
		if n < 10 {
			fmt.Fprintf(&b, format+"\n", args...)
		}
		n++
	}
	for id, w := range want {
		g, ok := got[id]
		switch {
		case !ok:
			note("missing %s (v%d)", id, w.Version)
		case g.Version != w.Version:
			note("%s: version %d, want %d", id, g.Version, w.Version)
		case !bytes.Equal(g.Payload, w.Payload):
			note("%s: payload differs at v%d", id, w.Version)
		}
	}
	for id, g := range got {
		if _, ok := want[id]; !ok {
			note("unexpected %s (v%d)", id, g.Version)
		}
	}
	if n > 10 {
		fmt.Fprintf(&b, "... %d differences in all\n", n)
	}
	return b.String()
}

// Replica is a tiny durable client replica for one subscription: rows
// keyed by rowId with their server_version, fed by bootstrap segments
// (§5.6) and COMMIT frames (§4.5), plus the persisted cursor and
// bootstrap state (§4.4: persisted only at SUB_END).
type Replica struct {
	C    *Client
	Sub  wire.Subscription
	Rows map[string]RowState
	// Status and Reason of the last SUB_START.
	Status wire.SubStatus
	Reason string
	// Effective is the last effective-scope echo of an active SUB_START.
	Effective wire.ScopeMap
	// UseURLs fetches segments through descriptor URLs when present.
	UseURLs bool
	// Counters.
	Pulls, CommitsApplied, SegmentRows, RefsFetched int
	// LastSection is the section of the most recent pull.
	LastSection *Section
}

// NewReplica starts a never-synced replica (cursor -1).
func (c *Client) NewReplica(id, table string, scopes wire.ScopeMap) *Replica {
	return &Replica{C: c, Sub: wire.Subscription{ID: id, Table: table, Scopes: scopes, Cursor: -1}, Rows: map[string]RowState{}}
}

// Pull runs one pull for the replica's subscription and applies the
// section. It returns the section.
func (r *Replica) Pull(hdr wire.PullHeader) (*Section, error) {
	sub := r.Sub
	secs, err := r.C.Pull(hdr, sub)
	if err != nil {
		return nil, err
	}
	if len(secs) != 1 || secs[0].End == nil || secs[0].Start.ID != sub.ID {
		return nil, fmt.Errorf("want one complete section for %q, got %d", sub.ID, len(secs))
	}
	r.Pulls++
	sec := secs[0]
	r.LastSection = sec
	return sec, r.Apply(sub, sec)
}

// Apply applies one section that answered the request subscription req.
func (r *Replica) Apply(req wire.Subscription, sec *Section) error {
	st := sec.Start
	r.Status, r.Reason = st.Status, st.ReasonCode
	switch st.Status {
	case wire.SubRevoked:
		// §3.3: purge rows of the last effective scopes (this replica holds
		// only this subscription's rows) and stop.
		if len(sec.Commits)+len(sec.Refs)+len(sec.Inline) != 0 {
			return errors.New("revoked section carries data")
		}
		r.Rows = map[string]RowState{}
		return nil
	case wire.SubReset:
		// §4.6: discard cursor and bootstrap state; keep rows.
		if len(sec.Commits)+len(sec.Refs)+len(sec.Inline) != 0 {
			return errors.New("reset section carries data")
		}
		r.Sub.Cursor, r.Sub.BootstrapState = -1, wire.Opt[wire.JSON]{}
		return nil
	}
	r.Effective = st.EffectiveScopes
	t := r.C.Codec(req.Table)
	if st.Bootstrap {
		if len(sec.Commits) != 0 {
			return errors.New("bootstrap section carries COMMIT frames")
		}
		fresh := req.Cursor < 0 && !req.BootstrapState.Present
		inline := 0
		for i := range sec.Inline {
			if fresh && i == 0 {
				r.Rows = map[string]RowState{} // §5.6 first-page clear
			}
			if err := r.applySegment(t, sec.Segments[i]); err != nil {
				return err
			}
			inline++
		}
		for _, ref := range sec.Refs {
			if ref.MediaType != wire.MediaRows {
				return fmt.Errorf("SEGMENT_REF media type %d was not advertised", ref.MediaType)
			}
			if ref.URL.Present != ref.URLExpiresAtMs.Present {
				return errors.New("url/urlExpiresAtMs presence tie broken")
			}
			var body []byte
			var err error
			if r.UseURLs && ref.URL.Present {
				body, err = r.C.H.FetchURL(ref.URL.Value)
			} else {
				body, err = r.C.Download(ref.SegmentID, plain(req.Scopes))
			}
			if err != nil {
				return fmt.Errorf("fetch %s: %w", ref.SegmentID, err)
			}
			r.RefsFetched++
			seg, err := segment.Decode(body)
			if err != nil {
				return fmt.Errorf("segment %s: %w", ref.SegmentID, err)
			}
			if int64(seg.Rows()) != ref.RowCount {
				return fmt.Errorf("segment %s: %d rows, descriptor says %d", ref.SegmentID, seg.Rows(), ref.RowCount)
			}
			if fresh && !ref.RowCursor.Present {
				r.Rows = map[string]RowState{}
			}
			if err := r.applySegment(t, seg); err != nil {
				return err
			}
		}
	} else {
		if len(sec.Refs)+len(sec.Inline) != 0 {
			return errors.New("incremental section carries segments")
		}
		for _, c := range sec.Commits {
			for _, ch := range c.Changes {
				if c.Tables[ch.TableIndex] != req.Table {
					return fmt.Errorf("commit %d carries table %q", c.CommitSeq, c.Tables[ch.TableIndex])
				}
				switch ch.Op {
				case wire.OpUpsert:
					r.Rows[ch.RowID] = RowState{Version: ch.RowVersion.Value, Payload: bytes.Clone(ch.Row.Value)}
				case wire.OpDelete:
					delete(r.Rows, ch.RowID)
				}
			}
			r.CommitsApplied++
		}
	}
	r.Sub.Cursor = sec.End.NextCursor
	r.Sub.BootstrapState = sec.End.BootstrapState
	if r.Sub.BootstrapState.Present {
		r.Sub.BootstrapState.Value = wire.JSON(strings.Clone(string(r.Sub.BootstrapState.Value)))
	}
	return nil
}

func (r *Replica) applySegment(t *schema.Table, seg *segment.Segment) error {
	if seg.Table != t.Name {
		return fmt.Errorf("segment for table %q", seg.Table)
	}
	if err := segment.CheckColumns(seg.Columns, t.Columns); err != nil {
		return err
	}
	for _, b := range seg.Blocks {
		for _, row := range b {
			id := pkText(t, row.Values[t.PKIndex])
			r.Rows[id] = RowState{Version: row.ServerVersion, Payload: bytes.Clone(row.Raw)}
			r.SegmentRows++
		}
	}
	return nil
}

// Sync pulls until the replica is caught up: the last pull delivered no
// data and left no bootstrap state (or the subscription is not active).
func (r *Replica) Sync(hdr wire.PullHeader, maxPulls int) error {
	for i := 0; i < maxPulls; i++ {
		sec, err := r.Pull(hdr)
		if err != nil {
			return err
		}
		if r.Status != wire.SubActive {
			if r.Status == wire.SubReset {
				continue // re-bootstrap from -1
			}
			return nil
		}
		if !sec.Start.Bootstrap && len(sec.Commits) == 0 {
			return nil
		}
	}
	return fmt.Errorf("replica %s not caught up after %d pulls", r.Sub.ID, maxPulls)
}

func pkText(t *schema.Table, v rowcodec.Value) string {
	switch t.Columns[t.PKIndex].Type {
	case rowcodec.TypeInteger:
		return fmt.Sprint(v.Int)
	default:
		return v.Str
	}
}

func plain(m wire.ScopeMap) map[string][]string {
	out := make(map[string][]string, len(m))
	for _, e := range m {
		out[e.Key] = e.Values
	}
	return out
}

// Scopes builds a one-key requested scope map.
func Scopes(key string, values ...string) wire.ScopeMap {
	return wire.ScopeMap{{Key: key, Values: values}}
}

// Exchange sends one combined request (commits, then a pull for every
// replica's subscription in the given order), applies each section to its
// replica and returns the push results.
func Exchange(c *Client, hdr wire.PullHeader, commits []wire.PushCommit, reps ...*Replica) ([]*wire.PushResult, error) {
	subs := make([]wire.Subscription, len(reps))
	for i, r := range reps {
		subs[i] = r.Sub
	}
	resp, err := c.Send(c.Request(commits, &hdr, subs))
	if err != nil {
		return nil, err
	}
	var results []*wire.PushResult
	for _, f := range resp.Frames {
		if pr, ok := f.(*wire.PushResult); ok {
			results = append(results, pr)
		}
	}
	secs, err := ParseSections(resp)
	if err != nil {
		return results, err
	}
	if len(secs) != len(reps) {
		return results, fmt.Errorf("%d sections for %d subscriptions", len(secs), len(reps))
	}
	for i, sec := range secs {
		if sec.Start.ID != subs[i].ID || sec.End == nil {
			return results, fmt.Errorf("section %d: id %q, want %q (request order, §1.6)", i, sec.Start.ID, subs[i].ID)
		}
		reps[i].Pulls++
		reps[i].LastSection = sec
		if err := reps[i].Apply(subs[i], sec); err != nil {
			return results, err
		}
	}
	return results, nil
}
