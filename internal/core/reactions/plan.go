// Package reactions implements SPEC §6.9 durable server reactions: the
// planner seam the engine calls inside a push (plan.go), the validation
// of planned records, and the runner that delivers them at least once to
// host handlers (runner.go). Records ride in the commit's log entry, so
// they are exactly as atomic as the commit; the runner copies them into
// the store's reaction records and leases them to handlers.
package reactions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// Spec limits of a planned record (§6.9).
const (
	MaxPerCommit       = 100
	MaxKeyBytes        = 256
	MaxTypeBytes       = 128
	MaxPayloadBytes    = 65536
	MaxPayloadDepth    = 16
	DefaultMaxAttempts = 10
	MaxMaxAttempts     = 100
	maxDetailsBytes    = 8192
)

// Planned is one record a planner returns.
type Planned struct {
	// Key is unique within the commit, 1–256 UTF-8 bytes.
	Key string
	// Type names the handler: a code-like name of at most 128 bytes.
	Type string
	// Version is positive; a handler treats versions it does not know as
	// a permanent failure.
	Version int32
	// Payload is plain JSON (at most 16 levels, 65,536 bytes normalized).
	Payload json.RawMessage
	// MaxAttempts is 1–100; 0 means the default, 10.
	MaxAttempts int
}

// Change is one row the commit changed, as the candidate state holds it
// after every operation of the commit.
type Change struct {
	Table   string
	RowID   string
	Deleted bool
	// Row is the row after the commit as a JSON object (nil for a delete).
	Row json.RawMessage
}

// Input is what a planner sees: the §6.8 evidence of the accepted commit.
type Input struct {
	Partition      string
	ClientID       string
	ClientCommitID string
	ActorID        string
	Changes        []Change
}

// Planner plans the reactions of an accepted commit. It must not cause
// any side effect (§6.9): it runs inside the push, before the commit is
// written, and may run again for the same commit after a failure. An
// error aborts the push as a server failure.
type Planner interface {
	Plan(ctx context.Context, in *Input) ([]Planned, error)
}

// PlannerFunc adapts a function to Planner.
type PlannerFunc func(ctx context.Context, in *Input) ([]Planned, error)

// Plan calls f.
func (f PlannerFunc) Plan(ctx context.Context, in *Input) ([]Planned, error) { return f(ctx, in) }

// ErrInvalidRecord marks a planned record that breaks a §6.9 limit.
var ErrInvalidRecord = errors.New("reactions: invalid planned record")

// Normalize validates planned records against §6.9 and returns them as
// the commit stores them. Any invalid record fails the whole plan.
func Normalize(ps []Planned) ([]store.PlannedReaction, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	if len(ps) > MaxPerCommit {
		return nil, fmt.Errorf("%w: %d records, at most %d per commit", ErrInvalidRecord, len(ps), MaxPerCommit)
	}
	out := make([]store.PlannedReaction, len(ps))
	seen := make(map[string]struct{}, len(ps))
	for i, p := range ps {
		if err := checkNames(p); err != nil {
			return nil, fmt.Errorf("%w: record %d: %v", ErrInvalidRecord, i, err)
		}
		if _, dup := seen[p.Key]; dup {
			return nil, fmt.Errorf("%w: record %d: key %q repeats within the commit", ErrInvalidRecord, i, p.Key)
		}
		seen[p.Key] = struct{}{}
		if p.Version <= 0 {
			return nil, fmt.Errorf("%w: record %d: version %d is not positive", ErrInvalidRecord, i, p.Version)
		}
		attempts := p.MaxAttempts
		if attempts == 0 {
			attempts = DefaultMaxAttempts
		}
		if attempts < 1 || attempts > MaxMaxAttempts {
			return nil, fmt.Errorf("%w: record %d: maxAttempts %d outside 1–%d", ErrInvalidRecord, i, p.MaxAttempts, MaxMaxAttempts)
		}
		payload, err := normalizePayload(p.Payload)
		if err != nil {
			return nil, fmt.Errorf("%w: record %d: payload: %v", ErrInvalidRecord, i, err)
		}
		out[i] = store.PlannedReaction{Key: p.Key, Type: p.Type, Version: p.Version, Payload: payload, MaxAttempts: int32(attempts)}
	}
	return out, nil
}

func checkNames(p Planned) error {
	if p.Key == "" || len(p.Key) > MaxKeyBytes || !utf8.ValidString(p.Key) {
		return fmt.Errorf("key must be 1–%d bytes of UTF-8", MaxKeyBytes)
	}
	if !codeLike(p.Type) {
		return fmt.Errorf("type %q is not a code-like name of at most %d bytes", p.Type, MaxTypeBytes)
	}
	return nil
}

// codeLike accepts names such as "email.send" or "billing:invoice_v2".
func codeLike(s string) bool {
	if s == "" || len(s) > MaxTypeBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == ':' || c == '/'):
		default:
			return false
		}
	}
	return true
}

// normalizePayload parses a plain JSON document and re-encodes it
// compactly with sorted object keys, checking depth, finiteness and size.
func normalizePayload(raw json.RawMessage) ([]byte, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return []byte("null"), nil
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if d.More() {
		return nil, errors.New("trailing data after the JSON document")
	}
	if err := checkPlain(v, 1); err != nil {
		return nil, err
	}
	out, err := marshalPlain(v)
	if err != nil {
		return nil, fmt.Errorf("re-encoding: %w", err)
	}
	if len(out) > MaxPayloadBytes {
		return nil, fmt.Errorf("%d bytes after normalization, at most %d", len(out), MaxPayloadBytes)
	}
	return out, nil
}

func checkPlain(v any, depth int) error {
	if depth > MaxPayloadDepth {
		return fmt.Errorf("deeper than %d levels", MaxPayloadDepth)
	}
	switch t := v.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return fmt.Errorf("number %s is not finite", t)
		}
	case []any:
		for _, e := range t {
			if err := checkPlain(e, depth+1); err != nil {
				return err
			}
		}
	case map[string]any:
		for _, e := range t {
			if err := checkPlain(e, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// IdempotencyKey is the handler idempotency key of §6.9: the JSON array
// [partition, clientId, clientCommitId, key].
func IdempotencyKey(partition, clientID, clientCommitID, key string) string {
	b, _ := marshalPlain([4]string{partition, clientID, clientCommitID, key})
	return string(b)
}

// marshalPlain encodes like JSON.stringify: no HTML escaping, no newline.
func marshalPlain(v any) ([]byte, error) {
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
