package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
)

// SupportedIRVersion is the only typegen IR format this loader reads; a newer
// IR may change meaning, so it is rejected rather than half-understood.
const SupportedIRVersion = 1

// rawDoc is the union of both accepted document shapes. Unknown keys are
// ignored: the IR grows additively.
type rawDoc struct {
	// Plain server/driver shape.
	Version *int64 `json:"version"`

	// Typegen IR shape.
	IRVersion      *int64          `json:"irVersion"`
	SchemaVersion  *int64          `json:"schemaVersion"`
	SchemaVersions []rawHistory    `json:"schemaVersions"`
	Subscriptions  json.RawMessage `json:"subscriptions"`
	Extensions     json.RawMessage `json:"extensions"`

	Tables []rawTable `json:"tables"`

	// Backfills is a local extension (backfill.go).
	Backfills []rawBackfill `json:"backfills"`
}

// rawHistory is one typegen schemaVersions entry. Tables is a local
// extension, not emitted by typegen: it lets one file carry an older
// version's tables so the server keeps serving that version.
type rawHistory struct {
	Version    *int64      `json:"version"`
	Migrations []string    `json:"migrations"`
	Tables     *[]rawTable `json:"tables"`
}

type rawTable struct {
	Name        string            `json:"name"`
	PrimaryKey  string            `json:"primaryKey"`
	Columns     []rawColumn       `json:"columns"`
	Scopes      []json.RawMessage `json:"scopes"`
	Indexes     []rawIndex        `json:"indexes"`
	References  []rawReference    `json:"references"`
	Materialize *bool             `json:"materialize"`
	FTSIndexes  json.RawMessage   `json:"ftsIndexes"`
	Extensions  json.RawMessage   `json:"extensions"`
}

type rawColumn struct {
	Name         string  `json:"name"`
	Type         string  `json:"type"`
	Nullable     *bool   `json:"nullable"`
	CRDTType     *string `json:"crdtType"`
	Encrypted    *bool   `json:"encrypted"`
	DeclaredType *string `json:"declaredType"`
}

type rawIndex struct {
	Name    string   `json:"name"`
	Columns []string `json:"columns"`
	Unique  bool     `json:"unique"`
}

// rawScope is the object form of a scope pattern. Variable is what typegen
// emits alongside the pattern; when present it must agree with it.
type rawScope struct {
	Pattern  *string `json:"pattern"`
	Column   *string `json:"column"`
	Variable *string `json:"variable"`
}

// ReadFile parses the schema document at path.
func ReadFile(path string) (*Schema, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	return Parse(data)
}

// Parse decodes, validates and compiles a schema document in either shape
// (see the package comment). Any defect yields an *Error listing all of
// them.
func Parse(data []byte) (*Schema, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return nil, &Error{Problems: []Problem{{Message: "document must be a JSON object"}}}
	}
	var doc rawDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, &Error{Problems: []Problem{decodeProblem(err)}}
	}
	if doc.IRVersion != nil || doc.SchemaVersion != nil || doc.SchemaVersions != nil {
		return compileIR(&doc)
	}
	return compilePlain(&doc)
}

func decodeProblem(err error) Problem {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return Problem{
			Field:   typeErr.Field,
			Message: fmt.Sprintf("expected %s, found JSON %s", typeErr.Type, typeErr.Value),
		}
	}
	return Problem{Message: "invalid JSON: " + err.Error()}
}

// versionNumber validates a schema version number: versions are ≥ 1 and
// travel as int32 in request headers.
func versionNumber(p *problems, field string, n *int64) (int32, bool) {
	switch {
	case n == nil:
		p.add("", field, "missing schema version")
	case *n < 1 || *n > math.MaxInt32:
		p.add("", field, "schema version %d out of range (1..%d)", *n, math.MaxInt32)
	default:
		return int32(*n), true
	}
	return 0, false
}

func compilePlain(doc *rawDoc) (*Schema, error) {
	top := &problems{}
	n, ok := versionNumber(top, "version", doc.Version)
	if !ok {
		return nil, top.err()
	}
	p := &problems{version: n}
	v := compileVersion(p, n, doc.Tables)
	if err := p.err(); err != nil {
		return nil, err
	}
	backfills := compileBackfills(p, v, doc.Backfills)
	if err := p.err(); err != nil {
		return nil, err
	}
	return &Schema{
		Versions:  map[int32]*Version{n: v},
		Latest:    n,
		Floor:     n,
		Backfills: backfills,
	}, nil
}

func compileIR(doc *rawDoc) (*Schema, error) {
	top := &problems{}
	if doc.Version != nil {
		top.add("", "version", `"version" is not an IR key; an IR document states "schemaVersion"`)
	}
	switch {
	case doc.IRVersion == nil:
		top.add("", "irVersion", "missing")
	case *doc.IRVersion != SupportedIRVersion:
		top.add("", "irVersion", "unsupported IR version %d (this server reads %d)", *doc.IRVersion, SupportedIRVersion)
	}
	latest, latestOK := versionNumber(top, "schemaVersion", doc.SchemaVersion)

	type pending struct {
		number int32
		tables []rawTable
	}
	var older []pending
	history := make([]HistoryEntry, 0, len(doc.SchemaVersions))
	var prev int32
	for i, h := range doc.SchemaVersions {
		field := fmt.Sprintf("schemaVersions[%d]", i)
		n, ok := versionNumber(top, field+".version", h.Version)
		if !ok {
			continue
		}
		if n <= prev {
			top.add("", field+".version", "versions must be strictly increasing (%d after %d)", n, prev)
		}
		prev = n
		history = append(history, HistoryEntry{Version: n, Migrations: h.Migrations})
		if h.Tables == nil {
			continue
		}
		switch {
		case latestOK && n == latest:
			top.add("", field+".tables", "the tables of the latest version %d belong in the top-level tables array", n)
		case latestOK && n > latest:
			top.add("", field+".version", "version %d is newer than schemaVersion %d", n, latest)
		default:
			older = append(older, pending{n, *h.Tables})
		}
	}
	if latestOK && len(history) > 0 && history[len(history)-1].Version != latest {
		top.add("", "schemaVersion", "schemaVersion %d is not the last schemaVersions entry (%d)", latest, history[len(history)-1].Version)
	}
	if !latestOK {
		return nil, top.err()
	}

	s := &Schema{
		Versions:      make(map[int32]*Version, 1+len(older)),
		Latest:        latest,
		Floor:         latest,
		IRVersion:     SupportedIRVersion,
		History:       history,
		Subscriptions: doc.Subscriptions,
		Extensions:    doc.Extensions,
	}
	all := top.list
	for _, o := range older {
		p := &problems{version: o.number}
		s.Versions[o.number] = compileVersion(p, o.number, o.tables)
		all = append(all, p.list...)
		s.Floor = min(s.Floor, o.number)
	}
	p := &problems{version: latest}
	s.Versions[latest] = compileVersion(p, latest, doc.Tables)
	all = append(all, p.list...)
	if len(all) == 0 {
		all = checkServedVersions(s)
	}
	if len(all) == 0 {
		bp := &problems{version: latest}
		s.Backfills = compileBackfills(bp, s.Versions[latest], doc.Backfills)
		all = bp.list
	}
	if len(all) > 0 {
		return nil, &Error{Problems: all}
	}
	return s, nil
}

// Merge combines schemas loaded from separate files into one that serves
// every version of every part, e.g. the current syncular.ir.json plus a
// retained copy of the previous release's. Document metadata comes from
// the part holding the latest version. Two parts defining the same version
// are rejected: which one to serve would be a guess.
func Merge(parts ...*Schema) (*Schema, error) {
	if len(parts) == 0 {
		return nil, &Error{Problems: []Problem{{Message: "nothing to merge"}}}
	}
	var out *Schema
	for _, part := range parts {
		if out == nil || part.Latest > out.Latest {
			out = part
		}
	}
	merged := *out
	merged.Versions = make(map[int32]*Version)
	var dups []Problem
	for _, part := range parts {
		for _, n := range part.Served() {
			if _, dup := merged.Versions[n]; dup {
				dups = append(dups, Problem{Version: n, Field: "version", Message: "defined by more than one document"})
				continue
			}
			merged.Versions[n] = part.Versions[n]
			merged.Floor = min(merged.Floor, n)
		}
	}
	if len(dups) > 0 {
		return nil, &Error{Problems: dups}
	}
	if list := checkServedVersions(&merged); len(list) > 0 {
		return nil, &Error{Problems: list}
	}
	return &merged, nil
}
