package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/skyfold/syncular-lambda/internal/core/limits"
	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
)

// maxIdentBytes is the Postgres identifier limit; longer names are silently
// truncated there, so two distinct IR names could collide in storage. The
// limits package bounds table names on the wire with the same number.
const maxIdentBytes = limits.MaxTableNameBytes

// fold is the comparison key for identifiers: SQLite resolves table, column
// and index names case-insensitively, so "Title" and "title" collide in a
// client mirror even though they differ in the IR.
func fold(name string) string { return strings.ToLower(name) }

// checkIdent applies the portable identifier rules to a table, column or
// index name and reports whether it passed.
func checkIdent(p *problems, table, field, kind, name string) bool {
	lower := fold(name)
	switch {
	case name == "":
		p.add(table, field, "%s name is empty", kind)
	case !utf8.ValidString(name) || strings.IndexFunc(name, unicode.IsControl) >= 0:
		p.add(table, field, "%s name %q must be valid UTF-8 without control characters", kind, name)
	case strings.HasPrefix(lower, "sync_") || strings.HasPrefix(lower, "_sync"):
		p.add(table, field, "%s name %q uses a reserved prefix (sync_ and _sync belong to the server's storage namespace)", kind, name)
	case len(name) > maxIdentBytes:
		p.add(table, field, "%s name %q is %d bytes; the limit is %d (Postgres truncates longer identifiers)", kind, name, len(name), maxIdentBytes)
	default:
		return true
	}
	return false
}

func compileVersion(p *problems, number int32, raws []rawTable) *Version {
	v := &Version{
		Number:    number,
		Tables:    make([]*Table, 0, len(raws)),
		byName:    make(map[string]*Table, len(raws)),
		variables: make(map[string]struct{}),
	}
	if len(raws) == 0 {
		p.add("", "tables", "the schema declares no tables")
		return v
	}
	tableAt := make(map[string]int, len(raws))
	for i := range raws {
		t := compileTable(p, &raws[i], i)
		if t.Name != "" {
			if first, dup := tableAt[fold(t.Name)]; dup {
				p.add(t.Name, "name", "duplicate table name (also tables[%d] %q; names compare case-insensitively)", first, raws[first].Name)
			} else {
				tableAt[fold(t.Name)] = i
				v.byName[t.Name] = t
			}
		}
		v.Tables = append(v.Tables, t)
		for _, name := range t.variables {
			v.variables[name] = struct{}{}
		}
	}
	compileReferences(p, v, raws)
	// SQLite and Postgres keep index names in one namespace per database
	// (SQLite shares it with tables), so uniqueness is per version.
	indexOwner := make(map[string]string)
	for _, t := range v.Tables {
		for _, ix := range t.Indexes {
			key := fold(ix.Name)
			if key == "" {
				continue
			}
			if owner, dup := indexOwner[key]; dup {
				p.add(t.Name, "indexes."+ix.Name, "duplicate index name (also declared on table %q; index names are database-wide)", owner)
				continue
			}
			indexOwner[key] = t.Name
			if _, clash := tableAt[key]; clash {
				p.add(t.Name, "indexes."+ix.Name, "index name collides with a table name")
			}
		}
	}
	return v
}

func compileTable(p *problems, rt *rawTable, position int) *Table {
	label := rt.Name
	if label == "" {
		label = fmt.Sprintf("tables[%d]", position)
	}
	checkIdent(p, label, "name", "table", rt.Name)

	t := &Table{
		Name:        rt.Name,
		PrimaryKey:  rt.PrimaryKey,
		PKIndex:     -1,
		Columns:     make([]rowcodec.Column, len(rt.Columns)),
		Meta:        make([]ColumnMeta, len(rt.Columns)),
		FTSIndexes:  rt.FTSIndexes,
		Extensions:  rt.Extensions,
		colIndex:    make(map[string]int, len(rt.Columns)),
		scopeColumn: make([]bool, len(rt.Columns)),
	}
	// typed[i] is false when column i's type was rejected, so later rules
	// do not pile follow-on errors onto the same column.
	typed := make([]bool, len(rt.Columns))
	compileColumns(p, label, rt.Columns, t, typed)
	compilePrimaryKey(p, label, t, typed)
	compileScopes(p, label, rt.Scopes, t, typed)
	compileIndexes(p, label, rt.Indexes, t)

	for i, c := range t.Columns {
		switch {
		case t.Meta[i].Encrypted:
			t.EncryptedColumns = append(t.EncryptedColumns, i)
		case c.Type == rowcodec.TypeBlobRef:
			t.BlobRefColumns = append(t.BlobRefColumns, i)
		case c.Type == rowcodec.TypeCRDT:
			t.CRDTColumns = append(t.CRDTColumns, i)
		}
	}
	// The compiled row codec (§2.4); nil only when a column type was
	// rejected, in which case Parse reports the problem and fails.
	if c, err := rowcodec.New(t.Columns); err == nil {
		t.Codec = c
	}
	if rt.Materialize != nil {
		t.Materialize = *rt.Materialize
	} else {
		t.Materialize = !fullyEncrypted(t)
	}
	return t
}

func fullyEncrypted(t *Table) bool {
	projectable := 0
	for i := range t.Columns {
		if i == t.PKIndex || t.scopeColumn[i] {
			continue
		}
		if !t.Meta[i].Encrypted {
			return false
		}
		projectable++
	}
	return projectable > 0
}

func columnField(name string, i int) string {
	if name == "" {
		return fmt.Sprintf("columns[%d]", i)
	}
	return "columns." + name
}

func compileColumns(p *problems, table string, raws []rawColumn, t *Table, typed []bool) {
	if len(raws) == 0 {
		p.add(table, "columns", "the table declares no columns")
		return
	}
	folded := make(map[string]int, len(raws))
	for i, rc := range raws {
		field := columnField(rc.Name, i)
		checkIdent(p, table, field, "column", rc.Name)
		// Badly named columns are still indexed so that rules naming them
		// (primary key, scopes) do not report follow-on errors.
		if rc.Name != "" {
			if first, dup := folded[fold(rc.Name)]; dup {
				p.add(table, field, "duplicate column name (also columns[%d] %q; names compare case-insensitively)", first, raws[first].Name)
			} else {
				folded[fold(rc.Name)] = i
				t.colIndex[rc.Name] = i
			}
		}
		col := rowcodec.Column{Name: rc.Name}
		if typ, ok := ParseType(rc.Type); ok {
			col.Type = typ
			typed[i] = true
		} else if rc.Type == "" {
			p.add(table, field+".type", "missing column type")
		} else {
			p.add(table, field+".type", "unknown column type %q (want string, integer, float, boolean, json, bytes, blob_ref or crdt)", rc.Type)
		}
		if rc.Nullable == nil {
			p.add(table, field+".nullable", "missing; state true or false explicitly")
		} else {
			col.Nullable = *rc.Nullable
		}
		t.Columns[i] = col
		t.Meta[i] = compileColumnMeta(p, table, field, rc, col.Type, typed[i])
	}
}

func compileColumnMeta(p *problems, table, field string, rc rawColumn, typ rowcodec.Type, typed bool) ColumnMeta {
	var meta ColumnMeta
	if rc.CRDTType != nil {
		meta.CRDTType = *rc.CRDTType
	}
	switch {
	case !typed:
	case typ == rowcodec.TypeCRDT && meta.CRDTType == "":
		p.add(table, field+".crdtType", "a crdt column must name its merger in crdtType (§5.10.1)")
	case typ != rowcodec.TypeCRDT && rc.CRDTType != nil:
		p.add(table, field+".crdtType", "crdtType is only allowed on crdt columns, not %s", TypeName(typ))
	}

	meta.Encrypted = rc.Encrypted != nil && *rc.Encrypted
	if !meta.Encrypted {
		if rc.DeclaredType != nil {
			p.add(table, field+".declaredType", "declaredType is only allowed on encrypted columns")
		}
		return meta
	}
	if typed && typ != rowcodec.TypeBytes {
		p.add(table, field+".type", "an encrypted column travels as bytes; set type to bytes and the app type in declaredType (§5.11)")
	}
	switch {
	case rc.DeclaredType == nil || *rc.DeclaredType == "":
		p.add(table, field+".declaredType", "an encrypted column must state its app type in declaredType (§5.11)")
	default:
		declared, ok := ParseType(*rc.DeclaredType)
		switch {
		case !ok:
			p.add(table, field+".declaredType", "unknown type %q", *rc.DeclaredType)
		case declared == rowcodec.TypeCRDT:
			p.add(table, field+".declaredType", "a crdt column cannot be encrypted: the server merges it in plaintext (§5.11)")
		default:
			meta.DeclaredType = declared
		}
	}
	return meta
}

func compilePrimaryKey(p *problems, table string, t *Table, typed []bool) {
	if t.PrimaryKey == "" {
		p.add(table, "primaryKey", "missing primary key column name")
		return
	}
	i, ok := t.colIndex[t.PrimaryKey]
	if !ok {
		p.add(table, "primaryKey", "primary key %q is not a column of the table", t.PrimaryKey)
		return
	}
	t.PKIndex = i
	col := t.Columns[i]
	switch {
	case !typed[i]:
	case t.Meta[i].Encrypted:
		p.add(table, "primaryKey", "primary key %q is encrypted; the rowId must stay plaintext (§5.11)", t.PrimaryKey)
	case !pkEligible(col.Type):
		// §2.4 primary-key eligibility: a rowId is the key's string form,
		// which must render identically everywhere. float renders
		// differently across cores; bytes, crdt and blob_ref have no
		// rowId rendering at all.
		p.add(table, "primaryKey", "primary key column %q of table %q has type %s, which is not eligible as a primary key (§2.4: string, integer, boolean or json)", t.PrimaryKey, table, TypeName(col.Type))
	}
	if col.Nullable {
		p.add(table, "primaryKey", "primary key %q is nullable; every row needs a rowId", t.PrimaryKey)
	}
}

// pkEligible is the §2.4 primary-key eligibility rule (wire version 3
// spec): the types whose string rendering is total, injective and
// byte-stable across implementations.
func pkEligible(t rowcodec.Type) bool {
	switch t {
	case rowcodec.TypeString, rowcodec.TypeInteger, rowcodec.TypeBoolean, rowcodec.TypeJSON:
		return true
	}
	return false
}

func compileScopes(p *problems, table string, raws []json.RawMessage, t *Table, typed []bool) {
	if len(raws) == 0 {
		p.add(table, "scopes", "at least one scope pattern is required; model global data with a shared scope column (§3.1)")
		return
	}
	boundAt := make(map[string]int) // variable -> index into t.Scopes
	for k, raw := range raws {
		field := fmt.Sprintf("scopes[%d]", k)
		pattern, column, variable, ok := decodeScope(p, table, field, raw)
		if !ok {
			continue
		}
		prefix, parsed, msg := parsePattern(pattern)
		if msg != "" {
			p.add(table, field, "scope pattern %q %s", pattern, msg)
			continue
		}
		if variable != nil && *variable != parsed {
			p.add(table, field+".variable", "variable %q disagrees with pattern %q", *variable, pattern)
			continue
		}
		if column == "" {
			column = parsed
		}
		idx, ok := t.colIndex[column]
		if !ok {
			p.add(table, field+".column", "scope column %q is not a column of the table", column)
			continue
		}
		switch {
		case !typed[idx]:
		case t.Meta[idx].Encrypted:
			p.add(table, field+".column", "scope column %q is encrypted; the server extracts scope values in plaintext (§5.11)", column)
		case t.Columns[idx].Type == rowcodec.TypeBytes || t.Columns[idx].Type == rowcodec.TypeCRDT:
			p.add(table, field+".column", "scope column %q has type %s, which has no scope-value rendering", column, TypeName(t.Columns[idx].Type))
		}
		sp := ScopePattern{Pattern: pattern, Prefix: prefix, Variable: parsed, Column: column, ColumnIndex: idx}
		if j, seen := boundAt[parsed]; seen {
			prev := t.Scopes[j]
			if prev.Column != column {
				p.add(table, field, "variable %q maps to column %q here and to %q in pattern %q; a variable maps to one column (§3.1)", parsed, column, prev.Column, prev.Pattern)
				continue
			}
			if dupPattern(t.Scopes, sp) {
				p.add(table, field, "duplicate scope pattern %q", pattern)
				continue
			}
		} else {
			boundAt[parsed] = len(t.Scopes)
			t.variables = append(t.variables, parsed)
		}
		t.scopeColumn[idx] = true
		t.Scopes = append(t.Scopes, sp)
	}
}

func dupPattern(list []ScopePattern, sp ScopePattern) bool {
	for _, other := range list {
		if other.Pattern == sp.Pattern && other.Column == sp.Column {
			return true
		}
	}
	return false
}

// decodeScope reads either scope form: a bare pattern string (column =
// variable) or {"pattern", "column"?, "variable"?}.
func decodeScope(p *problems, table, field string, raw json.RawMessage) (pattern, column string, variable *string, ok bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		if err := json.Unmarshal(raw, &pattern); err != nil {
			p.add(table, field, "invalid scope pattern string: %v", err)
			return "", "", nil, false
		}
		return pattern, "", nil, true
	}
	if len(raw) == 0 || raw[0] != '{' {
		p.add(table, field, "a scope is a pattern string or an object {pattern, column}")
		return "", "", nil, false
	}
	var rs rawScope
	if err := json.Unmarshal(raw, &rs); err != nil {
		p.add(table, field, "invalid scope object: %v", err)
		return "", "", nil, false
	}
	if rs.Pattern == nil {
		p.add(table, field+".pattern", "missing scope pattern")
		return "", "", nil, false
	}
	if rs.Column != nil {
		if *rs.Column == "" {
			p.add(table, field+".column", "column is empty; omit it to use the variable name")
			return "", "", nil, false
		}
		column = *rs.Column
	}
	return *rs.Pattern, column, rs.Variable, true
}

// parsePattern splits 'prefix:{variable}'. The prefix is any non-empty
// literal without braces (it may contain ':'); the variable is non-empty and
// free of braces, ':' and whitespace. A non-empty msg explains a rejection.
func parsePattern(s string) (prefix, variable, msg string) {
	opens, closes := strings.Count(s, "{"), strings.Count(s, "}")
	switch {
	case opens == 0 && closes == 0:
		return "", "", "has no {variable}"
	case opens > 1 || closes > 1:
		return "", "", "must contain exactly one {variable}"
	case opens != 1 || closes != 1 || !strings.HasSuffix(s, "}"):
		return "", "", "must end with a single {variable}"
	}
	open := strings.IndexByte(s, '{')
	if open < 2 || s[open-1] != ':' {
		return "", "", "must be 'prefix:{variable}' with a non-empty literal prefix"
	}
	prefix, variable = s[:open-1], s[open+1:len(s)-1]
	switch {
	case variable == "":
		return "", "", "has an empty {variable}"
	case strings.ContainsRune(variable, ':'):
		return "", "", "has ':' inside the {variable}"
	case strings.IndexFunc(variable, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return "", "", "has whitespace inside the {variable}"
	}
	return prefix, variable, ""
}

func compileIndexes(p *problems, table string, raws []rawIndex, t *Table) {
	for k, ri := range raws {
		field := fmt.Sprintf("indexes[%d]", k)
		if ri.Name != "" {
			field = "indexes." + ri.Name
		}
		valid := checkIdent(p, table, field, "index", ri.Name)
		if len(ri.Columns) == 0 {
			p.add(table, field+".columns", "an index names at least one column")
			valid = false
		}
		for _, c := range ri.Columns {
			if _, ok := t.colIndex[c]; !ok {
				p.add(table, field+".columns", "index column %q is not a column of the table", c)
				valid = false
			}
		}
		if valid {
			t.Indexes = append(t.Indexes, Index(ri))
		}
	}
}
