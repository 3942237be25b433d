// Package schema loads and validates the schema IR (SPEC §2.4, §3.1) and
// compiles it into the lookup structures the engine consults on every push
// and pull: tables by name, column positions, primary-key and scope-column
// indexes, and the declared scope variables.
//
// Parse accepts both the hand-written server/driver schema
// ({"version", "tables"}) and the typegen file syncular.ir.json
// ({"irVersion", "schemaVersion", "schemaVersions", "tables", ...}).
// Everything is validated up front and all problems are reported together
// as *Error, because a bad schema is a server bug that must never reach
// serving (§3.1).
//
// A compiled Schema is immutable and safe for concurrent use.
package schema

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
)

// Schema is every schema version a server can serve, keyed by version
// number. A client whose schemaVersion is not in Versions gets the schema
// floor response (§1.6, §2.4): there is no degraded encoding.
type Schema struct {
	// Versions maps a schema version to its compiled tables.
	Versions map[int32]*Version
	// Latest is the highest served version; Floor is the lowest.
	Latest, Floor int32

	// IRVersion is the typegen IR format version (0 for the plain
	// {"version","tables"} shape).
	IRVersion int
	// History is the typegen schemaVersions list (version → migrations).
	// It may name versions whose tables the document does not carry; those
	// versions are known but not served.
	History []HistoryEntry
	// Subscriptions and Extensions are the IR's document-level client
	// metadata, kept verbatim; the server core does not interpret them.
	Subscriptions json.RawMessage
	Extensions    json.RawMessage

	// Backfills are the document's declared backfills (backfill.go), on
	// tables of the latest version.
	Backfills []*Backfill
}

// HistoryEntry is one typegen schemaVersions entry.
type HistoryEntry struct {
	Version    int32
	Migrations []string
}

// Version returns the compiled tables of schema version n.
func (s *Schema) Version(n int32) (*Version, bool) {
	v, ok := s.Versions[n]
	return v, ok
}

// Served lists the served versions in ascending order.
func (s *Schema) Served() []int32 {
	out := make([]int32, 0, len(s.Versions))
	for n := range s.Versions {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Version is one schema version's tables.
type Version struct {
	Number int32
	// Tables is in declaration order, which is the bootstrap order (§4.7):
	// parents before children.
	Tables []*Table

	byName    map[string]*Table
	variables map[string]struct{}
	// referrers maps a parent table to the references naming it (§6.11).
	referrers map[string][]Referrer
}

// Table looks a table up by its exact name.
func (v *Version) Table(name string) (*Table, bool) {
	t, ok := v.byName[name]
	return t, ok
}

// HasVariable reports whether any table of the version declares scope
// variable name; a resolver returning any other key is a server bug (§3.2).
func (v *Version) HasVariable(name string) bool {
	_, ok := v.variables[name]
	return ok
}

// Variables lists the union of scope variables of all tables, sorted.
func (v *Version) Variables() []string {
	out := make([]string, 0, len(v.variables))
	for name := range v.variables {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// Table is one compiled synced table.
type Table struct {
	Name string
	// Columns is in IR declaration order, which is the row-codec order.
	Columns []rowcodec.Column
	// Codec encodes and decodes this table's rows (§2.4).
	Codec *rowcodec.Codec
	// Meta carries the per-column IR metadata that never reaches the wire,
	// parallel to Columns.
	Meta []ColumnMeta

	PrimaryKey string
	// PKIndex is PrimaryKey's position in Columns.
	PKIndex int

	// Scopes is in declaration order; each pattern's column is resolved.
	Scopes []ScopePattern
	// Indexes are the user-declared secondary indexes, validated.
	Indexes []Index
	// References are the declared column references (§6.11), validated.
	References []Reference

	// Materialize says whether server storage projects the app columns
	// into queryable SQL columns. Explicit "materialize" wins; otherwise it
	// is true unless every column other than the primary key and the scope
	// columns is encrypted (such a projection would be pure ciphertext).
	Materialize bool

	// BlobRefColumns, CRDTColumns and EncryptedColumns list column indexes
	// by role so the hot paths skip tables without such columns for free.
	BlobRefColumns   []int
	CRDTColumns      []int
	EncryptedColumns []int

	// FTSIndexes and Extensions are client-only IR metadata, kept verbatim.
	FTSIndexes json.RawMessage
	Extensions json.RawMessage

	colIndex    map[string]int
	scopeColumn []bool
	variables   []string
}

// ColumnMeta is per-column IR metadata (§5.10.1, §5.11): used by the server
// to pick a CRDT merger and to recognise ciphertext, never encoded.
type ColumnMeta struct {
	// CRDTType names the merger of a crdt column; empty otherwise.
	CRDTType string
	// Encrypted marks a client-encrypted column; its wire Type is bytes.
	Encrypted bool
	// DeclaredType is the app-side type of an encrypted column; 0 otherwise.
	DeclaredType rowcodec.Type
}

// Index is a user-declared secondary index.
type Index struct {
	Name    string
	Columns []string
	Unique  bool
}

// ScopePattern is one compiled 'prefix:{variable}' pattern (§3.1).
type ScopePattern struct {
	// Pattern is the declared text, e.g. "project:{project_id}".
	Pattern string
	// Prefix is the literal part before ":{"; a scope key is
	// Prefix + ":" + value.
	Prefix   string
	Variable string
	// Column is the row column holding the variable's value and
	// ColumnIndex its position in Table.Columns.
	Column      string
	ColumnIndex int
}

// Key renders the scope key of value under this pattern (§3.1).
func (p *ScopePattern) Key(value string) string {
	return p.Prefix + ":" + value
}

// ColumnIndex returns the position of the named column, or -1.
func (t *Table) ColumnIndex(name string) int {
	if i, ok := t.colIndex[name]; ok {
		return i
	}
	return -1
}

// ScopeVariables lists the table's scope variables without duplicates, in
// declaration order. The slice is shared; callers must not modify it.
func (t *Table) ScopeVariables() []string {
	return t.variables
}

// IsScopeColumn reports whether column i feeds a scope pattern.
func (t *Table) IsScopeColumn(i int) bool {
	return i >= 0 && i < len(t.scopeColumn) && t.scopeColumn[i]
}

// HasVariable reports whether the table declares scope variable v.
func (t *Table) HasVariable(v string) bool {
	// Tables declare one to three variables; a scan beats hashing.
	for _, name := range t.variables {
		if name == v {
			return true
		}
	}
	return false
}

var typeNames = [...]string{
	rowcodec.TypeString:  "string",
	rowcodec.TypeInteger: "integer",
	rowcodec.TypeFloat:   "float",
	rowcodec.TypeBoolean: "boolean",
	rowcodec.TypeJSON:    "json",
	rowcodec.TypeBytes:   "bytes",
	rowcodec.TypeBlobRef: "blob_ref",
	rowcodec.TypeCRDT:    "crdt",
}

// ParseType maps an IR column type name ("string", "blob_ref", ...) to its
// wire tag. Names are case-sensitive, as typegen emits them.
func ParseType(name string) (rowcodec.Type, bool) {
	for t, n := range typeNames {
		if n != "" && n == name {
			return rowcodec.Type(t), true
		}
	}
	return 0, false
}

// TypeName is the IR name of a column type, or "" for an unknown tag.
func TypeName(t rowcodec.Type) string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return ""
}

// CheckCRDTTypes rejects crdt columns whose crdtType has no merger. The
// merger registry is host configuration the schema cannot see, yet an
// unknown crdtType must fail before serving (§5.10.1), so the server calls
// this at startup with its registry.
func (s *Schema) CheckCRDTTypes(registered func(crdtType string) bool) error {
	var list []Problem
	for _, n := range s.Served() {
		for _, t := range s.Versions[n].Tables {
			for _, i := range t.CRDTColumns {
				if name := t.Meta[i].CRDTType; !registered(name) {
					list = append(list, Problem{
						Version: n,
						Table:   t.Name,
						Field:   "columns." + t.Columns[i].Name + ".crdtType",
						Message: fmt.Sprintf("no merger is registered for crdtType %q", name),
					})
				}
			}
		}
	}
	if len(list) > 0 {
		return &Error{Problems: list}
	}
	return nil
}
