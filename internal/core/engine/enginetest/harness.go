// Package enginetest drives an engine the way a Syncular client does:
// it builds SSP2 request bytes with the wire codec, calls HandleSync and
// decodes the response, so tests assert protocol behaviour on real bytes.
package enginetest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/blobs"
	"github.com/skyfold/syncular-lambda/internal/core/crdt"
	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/reactions"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/segment"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// TodoSchema is a small projects/tasks schema used across engine tests.
const TodoSchema = `{
  "version": 1,
  "tables": [
    {"name": "projects", "primaryKey": "id",
     "columns": [
       {"name": "id", "type": "string", "nullable": false},
       {"name": "name", "type": "string", "nullable": false}
     ],
     "scopes": [{"pattern": "project:{project_id}", "column": "id"}]},
    {"name": "tasks", "primaryKey": "id",
     "columns": [
       {"name": "id", "type": "string", "nullable": false},
       {"name": "project_id", "type": "string", "nullable": false},
       {"name": "title", "type": "string", "nullable": false},
       {"name": "done", "type": "boolean", "nullable": false},
       {"name": "priority", "type": "integer", "nullable": true}
     ],
     "scopes": ["project:{project_id}"]}
  ]
}`

// Clock is a settable virtual clock in epoch ms.
type Clock struct {
	mu sync.Mutex
	ms int64
}

// Now returns the current virtual time.
func (c *Clock) Now() int64 { c.mu.Lock(); defer c.mu.Unlock(); return c.ms }

// Advance moves the clock forward.
func (c *Clock) Advance(ms int64) { c.mu.Lock(); c.ms += ms; c.mu.Unlock() }

// Grants is a mutable scope resolver: actor → allowed scopes, or a
// failing state.
type Grants struct {
	mu      sync.Mutex
	byActor map[string]engine.ScopeMap
	failing error
	calls   int
}

// Set replaces an actor's allowed scopes.
func (g *Grants) Set(actor string, m engine.ScopeMap) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.byActor == nil {
		g.byActor = map[string]engine.ScopeMap{}
	}
	g.byActor[actor] = m
}

// Fail makes every resolution fail with an outage error (or stop failing).
func (g *Grants) Fail(on bool) {
	var err error
	if on {
		err = fmt.Errorf("grant store: %w", engine.ErrResolverUnavailable)
	}
	g.FailWith(err)
}

// FailWith makes every resolution return err; nil stops failing.
func (g *Grants) FailWith(err error) { g.mu.Lock(); g.failing = err; g.mu.Unlock() }

// Calls reports how many resolutions ran.
func (g *Grants) Calls() int { g.mu.Lock(); defer g.mu.Unlock(); return g.calls }

// ResolveScopes implements engine.ScopeResolver.
func (g *Grants) ResolveScopes(_ context.Context, _, actor, _ string) (engine.ScopeMap, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls++
	if g.failing != nil {
		return nil, g.failing
	}
	return g.byActor[actor], nil
}

// Harness is an engine over given stores with a virtual clock.
type Harness struct {
	T        testing.TB
	Engine   *engine.Engine
	Schema   *schema.Schema
	Store    store.Store
	Segments store.SegmentStore
	Clock    *Clock
	Grants   *Grants
}

// Options tweak a harness.
type Options struct {
	Schema string
	// OlderSchemas are further schema documents (other versions) served
	// beside Schema (schema.Merge).
	OlderSchemas []string
	Limits       engine.Limits
	SignedURLs   engine.SignedURLMode
	Presigner    store.Presigner
	// Checkpoints are the backfill checkpoints the engine declares.
	Checkpoints []string
	// Blobs and BlobPresigner configure §5.9 blob storage.
	Blobs         blobs.Store
	BlobPresigner blobs.Presigner
	// OnCommit is passed to the engine (realtime fanout input).
	OnCommit func(partition string, c *store.Commit)
	// Reactions is the §6.9 planner passed to the engine.
	Reactions reactions.Planner
	// LeaseTTL > 0 turns auth leases on (§7.3), kept by the store, which
	// must then implement store.LeaseStore.
	LeaseTTL time.Duration
	// CRDTMergers is passed to the engine (§5.10.2); nil has none.
	CRDTMergers crdt.Registry
}

// New builds a harness over st and segs.
func New(t testing.TB, st store.Store, segs store.SegmentStore, o Options) *Harness {
	t.Helper()
	if o.Schema == "" {
		o.Schema = TodoSchema
	}
	sc, err := schema.Parse([]byte(o.Schema))
	if err != nil {
		t.Fatalf("schema: %v", err)
	}
	for _, doc := range o.OlderSchemas {
		older, err := schema.Parse([]byte(doc))
		if err != nil {
			t.Fatalf("older schema: %v", err)
		}
		if sc, err = schema.Merge(sc, older); err != nil {
			t.Fatalf("merge schemas: %v", err)
		}
	}
	h := &Harness{T: t, Schema: sc, Store: st, Segments: segs, Clock: &Clock{ms: 1_780_000_000_000}, Grants: &Grants{}}
	var leases store.LeaseStore
	if o.LeaseTTL > 0 {
		var ok bool
		if leases, ok = st.(store.LeaseStore); !ok {
			t.Fatalf("auth leases: %T is not a store.LeaseStore", st)
		}
	}
	h.Engine, err = engine.New(engine.Config{
		Leases: leases, LeaseTTL: o.LeaseTTL,
		Schema: sc, Store: st, Segments: segs, Resolver: h.Grants, Presigner: o.Presigner,
		SignedURLs: o.SignedURLs, SigningKey: SigningKey, Limits: o.Limits, Clock: h.Clock.Now,
		Checkpoints: o.Checkpoints,
		Blobs:       o.Blobs, BlobPresigner: o.BlobPresigner,
		OnCommit: o.OnCommit, Reactions: o.Reactions, CRDTMergers: o.CRDTMergers,
	})
	if err != nil {
		t.Fatalf("engine: %v", err)
	}
	return h
}

// Client is one simulated durable client replica.
type Client struct {
	H         *Harness
	Partition string
	Actor     string
	ID        string
	Version   uint16
	Epoch     string
	Schema    int32
	Accept    uint8
	BaseURL   string
	// Ctx, when set, is the context of every request (e.g. one that
	// meters storage cost).
	Ctx context.Context
	// Stream hands the engine a plain io.Writer instead of the
	// *bytes.Buffer it writes into directly (the engine buffers such a
	// host's response itself).
	Stream bool
}

// plainWriter hides the buffer's type from the engine.
type plainWriter struct{ w io.Writer }

func (p plainWriter) Write(b []byte) (int, error) { return p.w.Write(b) }

// Client returns a wire-v2 client that has acquired the epoch.
func (h *Harness) Client(partition, actor, clientID string) *Client {
	h.T.Helper()
	return h.ClientV(wire.Version2, partition, actor, clientID)
}

// ClientV returns a client speaking wire version v; from version 2 it has
// acquired the epoch. A version-3 client sends sparse push payloads
// (Task presents every column).
func (h *Harness) ClientV(v uint16, partition, actor, clientID string) *Client {
	c := &Client{H: h, Partition: partition, Actor: actor, ID: clientID, Version: v, Schema: 1, Accept: wire.AcceptInlineRows | wire.AcceptExternalRows}
	h.T.Helper()
	if v < wire.Version2 {
		return c
	}
	resp, err := c.Send(c.Request(nil, nil, nil))
	if err != nil {
		h.T.Fatalf("epoch acquisition: %v", err)
	}
	hdr := resp.Frames[0].(*wire.RespHeader)
	if !hdr.ResetRequired || hdr.LogEpoch == "" {
		h.T.Fatalf("epoch acquisition: want resetRequired and an epoch, got %+v", hdr)
	}
	c.Epoch = hdr.LogEpoch
	return c
}

// Request builds a request message. pull nil means push-only.
func (c *Client) Request(commits []wire.PushCommit, pull *wire.PullHeader, subs []wire.Subscription) *wire.Message {
	m := &wire.Message{WireVersion: c.Version, Kind: wire.KindRequest}
	hdr := &wire.ReqHeader{ClientID: c.ID, SchemaVersion: c.Schema}
	if c.Version >= wire.Version2 && c.Epoch != "" {
		hdr.LogEpoch = wire.Some(c.Epoch)
	}
	m.Frames = append(m.Frames, hdr)
	for i := range commits {
		m.Frames = append(m.Frames, &commits[i])
	}
	if pull == nil && len(commits) == 0 {
		pull = &wire.PullHeader{Accept: c.Accept}
	}
	if pull != nil {
		m.Frames = append(m.Frames, pull)
		for i := range subs {
			m.Frames = append(m.Frames, &subs[i])
		}
	}
	return m
}

// Send encodes m, runs it through the engine and decodes the response.
// A request-level error comes back as *syncerr.Error.
func (c *Client) Send(m *wire.Message) (*wire.Message, error) {
	return c.SendMode(m, engine.ModeSync)
}

// SendMode is Send on a given route mode.
func (c *Client) SendMode(m *wire.Message, mode engine.Mode) (*wire.Message, error) {
	body, err := wire.Encode(m)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	var out bytes.Buffer
	ctx := c.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	var w io.Writer = &out
	if c.Stream {
		w = plainWriter{&out}
	}
	_, err = c.H.Engine.HandleSync(ctx, engine.Auth{Partition: c.Partition, ActorID: c.Actor}, body, engine.SyncOptions{Mode: mode, SegmentBaseURL: c.BaseURL}, w)
	if err != nil {
		if out.Len() != 0 {
			// Not wrapped: a test expecting the error code must fail.
			return nil, fmt.Errorf("engine wrote %d bytes and returned %v", out.Len(), err)
		}
		return nil, err
	}
	resp, err := wire.Decode(out.Bytes())
	if err != nil {
		return nil, fmt.Errorf("response does not decode: %w", err)
	}
	// A response is always in its request's wire version.
	if resp.WireVersion != m.WireVersion {
		return nil, fmt.Errorf("response in wire version %d to a version %d request", resp.WireVersion, m.WireVersion)
	}
	return resp, nil
}

// Codec returns the row codec of a table in the client's schema version.
func (c *Client) Codec(table string) *schema.Table {
	v, ok := c.H.Schema.Versions[c.Schema]
	if !ok {
		c.H.T.Fatalf("schema version %d not served", c.Schema)
	}
	t, ok := v.Table(table)
	if !ok {
		c.H.T.Fatalf("no table %s", table)
	}
	return t
}

// Task encodes a tasks row: a full row, or from wire version 3 a sparse
// row presenting every column (§2.4).
func (c *Client) Task(id, project, title string, done bool) []byte {
	return c.Row("tasks", Cols{"id": S(id), "project_id": S(project), "title": S(title), "done": B(done)})
}

// Upsert builds an upsert operation; base < 0 means no baseVersion.
func Upsert(table, rowID string, payload []byte, base int64) wire.Operation {
	op := wire.Operation{Table: table, RowID: rowID, Op: wire.OpUpsert, Payload: wire.Some(payload)}
	if base >= 0 {
		op.BaseVersion = wire.Some(base)
	}
	return op
}

// Delete builds a delete operation.
func Delete(table, rowID string) wire.Operation {
	return wire.Operation{Table: table, RowID: rowID, Op: wire.OpDelete}
}

// Push sends one commit and returns its result.
func (c *Client) Push(commitID string, ops ...wire.Operation) *wire.PushResult {
	c.H.T.Helper()
	resp, err := c.Send(c.Request([]wire.PushCommit{{ClientCommitID: commitID, Operations: ops}}, nil, nil))
	if err != nil {
		c.H.T.Fatalf("push %s: %v", commitID, err)
	}
	for _, f := range resp.Frames {
		if r, ok := f.(*wire.PushResult); ok {
			return r
		}
	}
	c.H.T.Fatalf("push %s: no PUSH_RESULT in response", commitID)
	return nil
}

// Section is one decoded subscription section of a pull response.
type Section struct {
	Start    *wire.SubStart
	Commits  []*wire.Commit
	Inline   []*wire.SegmentInline
	Refs     []*wire.SegmentRef
	End      *wire.SubEnd
	Segments []*segment.Segment // inline payloads and downloaded refs, decoded
}

// Sections groups a response's frames per subscription; an in-band
// ERROR frame or an undecodable inline segment fails the test.
func Sections(t testing.TB, resp *wire.Message) []*Section {
	t.Helper()
	out, err := ParseSections(resp)
	if err != nil {
		t.Fatalf("sections: %v", err)
	}
	return out
}

// ErrCode returns the catalog code of err ("" for nil or non-catalog).
func ErrCode(err error) syncerr.Code {
	if se := syncerr.As(err); se != nil {
		return se.Code
	}
	return ""
}
