package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// This file is the engine's side of realtime (§8): the registration a pull
// persists (§8.1), its re-resolution at connect and at every decision
// point, acks (§8.2) and the encoding of one commit as a standalone delta
// message. Transport and session state live in package realtime.

// Registration is one subscription of a realtime connection (§8.1): the
// requested scopes as the client's last pull sent them, and the effective
// scopes the resolver allowed at the last decision point. Only active
// subscriptions register.
type Registration struct {
	ID        string
	Table     string
	Requested wire.ScopeMap
	Effective ScopeMap
}

// registrationDoc is the persisted form of a pull's subscription list.
type registrationDoc struct {
	SchemaVersion int32           `json:"sv"`
	Subs          []registeredSub `json:"subs"`
}

type registeredSub struct {
	ID     string              `json:"id"`
	Table  string              `json:"table"`
	Scopes map[string][]string `json:"scopes"`
}

// registrationOf is the §8.1 persisted subscription list of a pull: the
// JSON encoding/json gives registrationDoc (sorted scope keys, a repeated
// key's last values, HTML-safe escaping), byte for byte, since
// recordClient compares it with the stored one prev; written by hand
// because every pull makes one (reflection was a twentieth of a quiet
// request). When it equals prev (a returning client's usual pull), prev
// itself is returned and no string is built.
func registrationOf(prev string, schemaVersion int32, subs []wire.Subscription) string {
	var scratch [512]byte
	b := appendRegistration(scratch[:0], schemaVersion, subs)
	if string(b) == prev {
		return prev
	}
	return string(b)
}

// appendRegistration appends registrationOf's encoding to b.
func appendRegistration(b []byte, schemaVersion int32, subs []wire.Subscription) []byte {
	b = append(b, `{"sv":`...)
	b = strconv.AppendInt(b, int64(schemaVersion), 10)
	b = append(b, `,"subs":[`...)
	var scopes wire.ScopeMap
	for i := range subs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = appendJSONString(b, subs[i].ID)
		b = append(b, `,"table":`...)
		b = appendJSONString(b, subs[i].Table)
		b = append(b, `,"scopes":{`...)
		scopes = subs[i].Scopes
		if !slices.IsSortedFunc(scopes, func(x, y wire.ScopeEntry) int { return strings.Compare(x.Key, y.Key) }) {
			// A sorted copy; decoded maps are usually in order already
			// (only read then).
			scopes = slices.Clone(scopes)
			slices.SortStableFunc(scopes, func(x, y wire.ScopeEntry) int { return strings.Compare(x.Key, y.Key) })
		}
		first := true
		for j, sc := range scopes {
			if j+1 < len(scopes) && scopes[j+1].Key == sc.Key {
				continue // a map keeps the last
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = appendJSONString(b, sc.Key)
			b = append(b, ':')
			if sc.Values == nil {
				b = append(b, "null"...)
				continue
			}
			b = append(b, '[')
			for k, v := range sc.Values {
				if k > 0 {
					b = append(b, ',')
				}
				b = appendJSONString(b, v)
			}
			b = append(b, ']')
		}
		b = append(b, "}}"...)
	}
	return append(b, "]}"...)
}

// appendJSONString appends s as encoding/json writes a string with HTML
// escaping on.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

func decodeRegistration(s string) (*registrationDoc, error) {
	var d registrationDoc
	if err := json.Unmarshal([]byte(s), &d); err != nil {
		return nil, fmt.Errorf("engine: stored registration is unreadable: %w", err)
	}
	return &d, nil
}

func toRequested(m map[string][]string) wire.ScopeMap {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make(wire.ScopeMap, 0, len(keys))
	for _, k := range keys {
		out = append(out, wire.ScopeEntry{Key: k, Values: m[k]})
	}
	return out
}

// Attachment is what a realtime connect needs from storage (§8.1).
type Attachment struct {
	Head store.Head
	// Client is the stored record, nil for a client that never synced.
	Client *store.Client
	// Registrations are the active subscriptions of the client's last
	// pull, effective scopes resolved now.
	Registrations []Registration
	WireVersion   uint16
	SchemaVersion int32
}

// Attach authenticates a realtime connect for clientID (§8.1): the
// partition head, the §1.5 actor binding, and the registrations of the
// client's most recent pull with effective scopes resolved now. A
// resolver that cannot answer fails the connect (fail closed).
func (e *Engine) Attach(ctx context.Context, auth Auth, clientID string) (*Attachment, error) {
	if auth.Partition == "" || auth.ActorID == "" {
		return nil, syncerr.New(syncerr.AuthRequired, "authentication required")
	}
	if err := CheckClientID(clientID); err != nil {
		return nil, err
	}
	head, err := e.store.TouchPartition(ctx, auth.Partition, e.now(), e.epoch())
	if err != nil {
		return nil, storeErr(err, "read partition head")
	}
	c, err := e.store.GetClient(ctx, auth.Partition, clientID)
	if err != nil {
		return nil, storeErr(err, "read client record")
	}
	a := &Attachment{Head: head, Client: c, WireVersion: wire.Version3, SchemaVersion: e.schema.Latest}
	if c == nil {
		return a, nil
	}
	if c.ActorID != auth.ActorID {
		return nil, syncerr.New(syncerr.InvalidClientID, "clientId is bound to a different actor in this partition (§1.5)")
	}
	if c.WireVersion != 0 {
		a.WireVersion = c.WireVersion
	}
	if c.Registration == "" {
		return a, nil
	}
	d, err := decodeRegistration(c.Registration)
	if err != nil {
		e.log.WarnContext(ctx, "realtime: ignoring an unreadable registration", "partition", auth.Partition, "error", err.Error())
		return a, nil
	}
	a.SchemaVersion = d.SchemaVersion
	regs := make([]Registration, 0, len(d.Subs))
	for _, s := range d.Subs {
		regs = append(regs, Registration{ID: s.ID, Table: s.Table, Requested: toRequested(s.Scopes)})
	}
	if a.Registrations, err = e.Reresolve(ctx, auth, clientID, d.SchemaVersion, regs); err != nil {
		return nil, err
	}
	return a, nil
}

// Reresolve recomputes effective scopes of regs at a decision point
// (connect, socket round end, refreshScopes): the resolver is asked once;
// subscriptions it no longer allows (§3.3) and tables the schema version
// no longer has are dropped. A resolver that cannot answer is an error:
// callers fail closed and register nothing.
func (e *Engine) Reresolve(ctx context.Context, auth Auth, clientID string, schemaVersion int32, regs []Registration) ([]Registration, error) {
	if len(regs) == 0 {
		return nil, nil
	}
	if _, ok := e.schema.Versions[schemaVersion]; !ok {
		return nil, nil
	}
	allowed, err := e.resolve(ctx, auth, clientID)
	if err != nil {
		return nil, err
	}
	return e.Restrict(schemaVersion, regs, allowed), nil
}

// ResolveScopes asks the scope resolver once for what auth may read
// (§3.2), with the engine's fail-closed handling: an error means nothing
// is allowed. The realtime hub shares one answer between the sessions of
// an actor (periodic re-checks, §3.3).
func (e *Engine) ResolveScopes(ctx context.Context, auth Auth, clientID string) (ScopeMap, error) {
	return e.resolve(ctx, auth, clientID)
}

// Restrict is Reresolve with the resolver's answer given: the
// registrations whose table schemaVersion still has, effective scopes
// recomputed against allowed; inactive ones are dropped (§3.3).
func (e *Engine) Restrict(schemaVersion int32, regs []Registration, allowed ScopeMap) []Registration {
	v, ok := e.schema.Versions[schemaVersion]
	if !ok || len(regs) == 0 {
		return nil
	}
	out := make([]Registration, 0, len(regs))
	for _, r := range regs {
		if _, ok := v.Table(r.Table); !ok {
			continue
		}
		eff, active := effectiveScopes(r.Requested, allowed)
		if !active {
			continue
		}
		r.Effective = eff
		out = append(out, r)
	}
	return out
}

// PartitionHead reads partition's head without touching it (the realtime
// hub's reconciliation, §8.2, and epoch check, §2.1); ok is false for a
// partition that does not exist (removed).
func (e *Engine) PartitionHead(ctx context.Context, partition string) (store.Head, bool, error) {
	h, ok, err := e.store.Head(ctx, partition)
	if err != nil {
		return h, false, storeErr(err, "read partition head")
	}
	return h, ok, nil
}

// ReadLog calls fn for partition's commits with afterSeq < Seq ≤
// throughSeq, oldest first, until fn returns false: the realtime hub's
// read of the log after a hint (§8.2; commits at or below the horizon
// may be missing).
func (e *Engine) ReadLog(ctx context.Context, partition string, afterSeq, throughSeq int64, fn func(*store.Commit) bool) error {
	if err := e.store.ReadLog(ctx, partition, afterSeq, throughSeq, fn); err != nil {
		return storeErr(err, "read commit log")
	}
	return nil
}

// Ack persists a realtime ack (§8.2; newer spec: cursor and timestamp
// only, monotonic, guarded by actor and log epoch, never creating a
// record). ok is false when the guard refused it.
func (e *Engine) Ack(ctx context.Context, auth Auth, clientID, logEpoch string, cursor int64) (bool, error) {
	ok, err := e.store.AckCursor(ctx, auth.Partition, clientID, auth.ActorID, logEpoch, cursor, e.now())
	if err != nil {
		return false, storeErr(err, "record realtime ack")
	}
	return ok, nil
}

// Now is the engine clock (epoch ms).
func (e *Engine) Now() int64 { return e.now() }

// ScopeKeys returns the `prefix:value` scope keys of regs (§3.1, §8.6.3):
// the fanout index entries and the connection's presence grant.
func (e *Engine) ScopeKeys(schemaVersion int32, regs []Registration) []string {
	v, ok := e.schema.Versions[schemaVersion]
	if !ok {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, r := range regs {
		t, ok := v.Table(r.Table)
		if !ok {
			continue
		}
		for _, p := range t.Scopes {
			for _, val := range r.Effective[p.Variable] {
				if k := p.Key(val); !seen[k] {
					seen[k] = true
					out = append(out, k)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// CommitScopeKeys returns the scope keys a stored commit touches (§3.1:
// the commit→scope-key index of the fanout).
func (e *Engine) CommitScopeKeys(c *store.Commit) []string {
	latest := e.schema.Versions[e.schema.Latest]
	seen := map[string]bool{}
	var out []string
	for i := range c.Changes {
		ch := &c.Changes[i]
		t, ok := latest.Table(ch.Table)
		if !ok {
			continue
		}
		for _, p := range t.Scopes {
			if val, ok := storedValue(ch.Scopes, p.Variable); ok {
				if k := p.Key(val); !seen[k] {
					seen[k] = true
					out = append(out, k)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// EncodeDelta encodes commit c as one standalone SSP2 response for a
// connection (§8.2): RESP_HEADER, then per registration the commit touches
// SUB_START(active) / COMMIT / SUB_END(nextCursor = c.Seq), then END, in
// the connection's wire version with rows in its schema version's codec
// (§2.4). It returns nil when no registration matches.
func (e *Engine) EncodeDelta(version uint16, schemaVersion int32, logEpoch string, regs []Registration, c *store.Commit) ([]byte, error) {
	v, ok := e.schema.Versions[schemaVersion]
	if !ok {
		return nil, nil
	}
	latest := e.schema.Versions[e.schema.Latest]
	var buf bytes.Buffer
	var enc *wire.Encoder
	for _, r := range regs {
		t, ok := v.Table(r.Table)
		if !ok {
			continue
		}
		f := commitFrame(c, r.Table, r.Effective)
		if f == nil {
			continue
		}
		// Also for the same version: a commit from before a schema bump
		// carries rows in the previous layout (transcode).
		st, _ := latest.Table(r.Table)
		if err := e.transcodeFrame(f, st, t); err != nil {
			return nil, err
		}
		if enc == nil {
			enc = wire.NewEncoder(&buf, version, wire.KindResponse)
			h := &wire.RespHeader{LatestSchemaVersion: wire.Some(e.schema.Latest)}
			if version >= wire.Version2 {
				h.LogEpoch = logEpoch
			}
			if err := enc.WriteFrame(h); err != nil {
				return nil, err
			}
		}
		for _, fr := range []wire.Frame{
			&wire.SubStart{ID: r.ID, Status: wire.SubActive, EffectiveScopes: toWireScopes(r.Effective)},
			f,
			&wire.SubEnd{NextCursor: c.Seq},
		} {
			if err := enc.WriteFrame(fr); err != nil {
				return nil, err
			}
		}
	}
	if enc == nil {
		return nil, nil
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (e *Engine) transcodeFrame(f *wire.Commit, st, t *schema.Table) error {
	if st == nil {
		return fmt.Errorf("engine: table %q missing from the latest schema version", t.Name)
	}
	for i := range f.Changes {
		ch := &f.Changes[i]
		if !ch.Row.Present {
			continue
		}
		row, err := e.transcode(st, t, ch.Row.Value)
		if err != nil {
			return err
		}
		ch.Row.Value = row
	}
	return nil
}

// ErrorResponse is the minimal response stream of a request-level failure
// on the socket binding (§8.7 Failures): RESP_HEADER, ERROR, END in wire
// version v, the code adapted to that version's catalog.
func (e *Engine) ErrorResponse(v uint16, logEpoch string, err error) []byte {
	se := syncerr.As(errorForWire(err, v))
	en := se.Entry()
	var buf bytes.Buffer
	enc := wire.NewEncoder(&buf, v, wire.KindResponse)
	h := &wire.RespHeader{LatestSchemaVersion: wire.Some(e.schema.Latest)}
	if v >= wire.Version2 {
		h.LogEpoch = logEpoch
	}
	ef := &wire.ErrorFrame{Code: string(se.Code), Message: se.Message, Category: en.Category, Retryable: en.Retryable, RecommendedAction: en.RecommendedAction}
	if len(se.Details) > 0 {
		ef.Details = wire.Some(wire.JSON(se.Details))
	}
	if werr := enc.WriteFrame(h); werr == nil {
		if werr = enc.WriteFrame(ef); werr == nil {
			_ = enc.Close()
		}
	}
	return buf.Bytes()
}
