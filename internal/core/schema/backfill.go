package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"unicode"

	"github.com/skyfold/syncular-lambda/internal/core/canonjson"
	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
)

// Declarative backfills (a local extension of the document, ignored by
// clients): the top-level "backfills" array names the rows a deploy of
// the latest version rewrites, as ordinary server commits, once the
// rolling-upgrade step has declared them (package migrate). Each entry
// is one backfill checkpoint on one table of the latest version:
//
//	"backfills": [
//	  {"name": "tasks-status-v2", "table": "tasks", "set": [
//	    {"column": "status", "default": "open"},
//	    {"column": "title_key", "derive": {"lower": {"column": "title"}}}
//	  ]}
//	]
//
// A rule writes one column:
//
//   - "default": a JSON literal written where the column is NULL,
//     including rows stored before the column existed;
//   - "derive": an expression over the row's columns written to every
//     row (a row already holding the value is left unchanged).
//
// Expressions (objects with exactly one key):
//
//	{"column": "c"}        the value of column c (its type)
//	{"const": literal}     a literal (typed like a default for the target;
//	                       a JSON string inside concat, lower and upper)
//	{"concat": [e, ...]}   string concatenation; NULL if any part is NULL
//	{"lower": e}           lower case of a string (NULL stays NULL)
//	{"upper": e}           upper case of a string
//
// lower and upper map each character by Unicode's simple case mapping
// (Go's strings.ToLower/ToUpper): "ß" stays "ß", no locale rules.
//
// Rules run in order on the row as the previous rules left it. Target
// columns are plain data: not the primary key, a scope column (§3.1:
// scope values are immutable), a reference column (§6.11), an encrypted,
// bytes, blob_ref or crdt column; a derivation into a non-nullable
// column must not be able to yield NULL. Everything is checked at load.

// maxBackfillNameBytes bounds a backfill (checkpoint) name: it is part of
// stored keys and of idempotency keys.
const maxBackfillNameBytes = 64

// Backfill is one declared backfill: a checkpoint Name whose rows of
// Table (latest version) get Rules.
type Backfill struct {
	Name  string
	Table string
	Rules []BackfillRule
}

// BackfillRule writes one column of the latest version's table.
type BackfillRule struct {
	Column string
	// Index is Column's position in the latest version's table.
	Index int
	// Default, when set, is written where the column is NULL; otherwise
	// Derive is written to every row.
	Default *rowcodec.Value
	Derive  *Expr
}

// ExprOp is the kind of an expression node.
type ExprOp uint8

// Expression kinds.
const (
	ExprColumn ExprOp = iota + 1
	ExprConst
	ExprConcat
	ExprLower
	ExprUpper
)

// Expr is one compiled derivation expression.
type Expr struct {
	Op ExprOp
	// Column and Index name the column of ExprColumn.
	Column string
	Index  int
	// Value is ExprConst's literal.
	Value rowcodec.Value
	// Args are the operands of concat, lower and upper.
	Args []*Expr
	// Type and Nullable are the static type of the result.
	Type     rowcodec.Type
	Nullable bool
}

// Eval computes e over row (one value per column of the latest table).
func (e *Expr) Eval(row []rowcodec.Value) rowcodec.Value {
	switch e.Op {
	case ExprColumn:
		return row[e.Index]
	case ExprConst:
		return e.Value
	case ExprConcat:
		var b strings.Builder
		for _, a := range e.Args {
			v := a.Eval(row)
			if v.Null {
				return rowcodec.Value{Null: true}
			}
			b.WriteString(v.Str)
		}
		return rowcodec.Value{Str: b.String()}
	case ExprLower, ExprUpper:
		v := e.Args[0].Eval(row)
		if v.Null {
			return v
		}
		if e.Op == ExprLower {
			return rowcodec.Value{Str: strings.ToLower(v.Str)}
		}
		return rowcodec.Value{Str: strings.ToUpper(v.Str)}
	}
	return rowcodec.Value{Null: true}
}

// columns appends the columns e reads.
func (e *Expr) columns(dst []string) []string {
	if e.Op == ExprColumn {
		dst = append(dst, e.Column)
	}
	for _, a := range e.Args {
		dst = a.columns(dst)
	}
	return dst
}

// Apply runs b's rules on row in place and reports which columns got a
// different value (nil: the row is unchanged).
func (b *Backfill) Apply(t *Table, row []rowcodec.Value) []int {
	var changed []int
	for _, r := range b.Rules {
		var v rowcodec.Value
		switch {
		case r.Default != nil:
			if !row[r.Index].Null {
				continue
			}
			v = *r.Default
		default:
			v = r.Derive.Eval(row)
		}
		if SameValue(t.Columns[r.Index].Type, row[r.Index], v) {
			continue
		}
		row[r.Index] = v
		changed = append(changed, r.Index)
	}
	return changed
}

// SameValue reports whether a and b are the same value of a column of
// type typ.
func SameValue(typ rowcodec.Type, a, b rowcodec.Value) bool {
	if a.Null || b.Null {
		return a.Null == b.Null
	}
	switch typ {
	case rowcodec.TypeInteger:
		return a.Int == b.Int
	case rowcodec.TypeFloat:
		return a.Float == b.Float || (math.IsNaN(a.Float) && math.IsNaN(b.Float))
	case rowcodec.TypeBoolean:
		return a.Bool == b.Bool
	case rowcodec.TypeBytes, rowcodec.TypeCRDT:
		return bytes.Equal(a.Bytes, b.Bytes)
	}
	return a.Str == b.Str
}

type rawBackfill struct {
	Name  string           `json:"name"`
	Table string           `json:"table"`
	Set   []rawBackfillSet `json:"set"`
}

type rawBackfillSet struct {
	Column  string          `json:"column"`
	Default json.RawMessage `json:"default"`
	Derive  json.RawMessage `json:"derive"`
}

// compileBackfills checks the document's backfills against the latest
// version v.
func compileBackfills(p *problems, v *Version, raws []rawBackfill) []*Backfill {
	out := make([]*Backfill, 0, len(raws))
	names := map[string]int{}
	targets := map[string]string{} // table␟column → backfill name
	for i, rb := range raws {
		field := fmt.Sprintf("backfills[%d]", i)
		switch {
		case rb.Name == "":
			p.add("", field+".name", "a backfill needs a name (its checkpoint name)")
		case len(rb.Name) > maxBackfillNameBytes || strings.ContainsAny(rb.Name, ",=+/") || strings.IndexFunc(rb.Name, unicode.IsControl) >= 0 || strings.TrimSpace(rb.Name) != rb.Name:
			p.add("", field+".name", "backfill name %q must be at most %d bytes without ',', '=', '+', '/', control characters or surrounding spaces", rb.Name, maxBackfillNameBytes)
		default:
			if first, dup := names[rb.Name]; dup {
				p.add("", field+".name", "duplicate backfill name %q (also backfills[%d])", rb.Name, first)
			}
			names[rb.Name] = i
		}
		t, ok := v.Table(rb.Table)
		if !ok {
			p.add("", field+".table", "table %q is not in the latest version %d", rb.Table, v.Number)
			continue
		}
		if len(rb.Set) == 0 {
			p.add(t.Name, field+".set", "a declared backfill sets at least one column (a Go hook alone is declared by SYNC_CHECKPOINTS)")
		}
		b := &Backfill{Name: rb.Name, Table: t.Name}
		seen := map[string]bool{}
		for j, rs := range rb.Set {
			rf := fmt.Sprintf("%s.set[%d]", field, j)
			r, ok := compileRule(p, t, rf, rs)
			if !ok {
				continue
			}
			if seen[r.Column] {
				p.add(t.Name, rf+".column", "column %q is set twice by one backfill", r.Column)
			}
			seen[r.Column] = true
			key := t.Name + "\x1f" + r.Column
			if other, dup := targets[key]; dup && other != rb.Name {
				p.add(t.Name, rf+".column", "column %q is also set by backfill %q; two backfills of one column would overwrite each other", r.Column, other)
			}
			targets[key] = rb.Name
			b.Rules = append(b.Rules, r)
		}
		// A derivation reads only columns the backfill leaves alone, so
		// applying it twice gives what applying it once gave: a re-run
		// or a catch-up rewrites nothing it already rewrote.
		for j, r := range b.Rules {
			if r.Derive == nil {
				continue
			}
			for _, c := range r.Derive.columns(nil) {
				if seen[c] {
					p.add(t.Name, fmt.Sprintf("%s.set[%d].derive", field, j), "reads column %q, which this backfill sets; a derivation reads only columns the backfill leaves unchanged (so a re-run changes nothing)", c)
				}
			}
		}
		out = append(out, b)
	}
	return out
}

func compileRule(p *problems, t *Table, field string, rs rawBackfillSet) (BackfillRule, bool) {
	i := t.ColumnIndex(rs.Column)
	if i < 0 {
		p.add(t.Name, field+".column", "no column %q", rs.Column)
		return BackfillRule{}, false
	}
	col := t.Columns[i]
	if why := notWritable(t, i); why != "" {
		p.add(t.Name, field+".column", "column %q cannot be backfilled: %s", rs.Column, why)
		return BackfillRule{}, false
	}
	r := BackfillRule{Column: col.Name, Index: i}
	hasDefault, hasDerive := len(rs.Default) > 0, len(rs.Derive) > 0
	switch {
	case hasDefault == hasDerive:
		p.add(t.Name, field, `a rule has exactly one of "default" and "derive"`)
		return r, false
	case hasDefault:
		v, err := literal(col.Type, rs.Default)
		if err != "" {
			p.add(t.Name, field+".default", "%s", err)
			return r, false
		}
		r.Default = &v
	default:
		e, ok := compileExpr(p, t, field+".derive", rs.Derive, col.Type)
		if !ok {
			return r, false
		}
		switch {
		case e.Type != col.Type:
			p.add(t.Name, field+".derive", "the expression is %s but column %q is %s", TypeName(e.Type), col.Name, TypeName(col.Type))
			return r, false
		case e.Nullable && !col.Nullable:
			p.add(t.Name, field+".derive", "the expression can be NULL (it reads a nullable column) but column %q is not nullable; use a default instead", col.Name)
			return r, false
		}
		r.Derive = e
	}
	return r, true
}

// BackfillProtected says why column i may not be written by a backfill
// ("" when it may): a host hook's changes are held to the declarative
// rules' limits.
func (t *Table) BackfillProtected(i int) string { return notWritable(t, i) }

// notWritable says why column i may not be a backfill target ("" if it
// may).
func notWritable(t *Table, i int) string {
	switch {
	case i == t.PKIndex:
		return "it is the primary key"
	case t.IsScopeColumn(i):
		return "it is a scope column (scope values never change, §3.1)"
	case t.Meta[i].Encrypted:
		return "it is encrypted (§5.11): the server cannot compute ciphertext"
	}
	for _, ref := range t.References {
		if ref.ColumnIndex == i {
			return "it is a reference column (§6.11)"
		}
	}
	return readableType(t.Columns[i].Type)
}

// readableType says why a column of type typ is outside the expression
// set ("" when it is in it).
func readableType(typ rowcodec.Type) string {
	switch typ {
	case rowcodec.TypeString, rowcodec.TypeInteger, rowcodec.TypeFloat, rowcodec.TypeBoolean, rowcodec.TypeJSON:
		return ""
	}
	return fmt.Sprintf("%s columns are outside the backfill expression set (string, integer, float, boolean, json)", TypeName(typ))
}

// literal converts a JSON literal to a value of column type typ.
func literal(typ rowcodec.Type, raw json.RawMessage) (rowcodec.Value, string) {
	raw = bytes.TrimSpace(raw)
	if string(raw) == "null" {
		return rowcodec.Value{}, "null is not a value to write; every rule writes a non-NULL literal"
	}
	want := func() (rowcodec.Value, string) {
		return rowcodec.Value{}, fmt.Sprintf("literal %s is not a %s value", raw, TypeName(typ))
	}
	switch typ {
	case rowcodec.TypeString:
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return want()
		}
		return rowcodec.Value{Str: s}, ""
	case rowcodec.TypeBoolean:
		var b bool
		if json.Unmarshal(raw, &b) != nil {
			return want()
		}
		return rowcodec.Value{Bool: b}, ""
	case rowcodec.TypeInteger:
		var n json.Number
		if json.Unmarshal(raw, &n) != nil {
			return want()
		}
		i, err := n.Int64()
		if err != nil || i > 1<<53-1 || i < -(1<<53-1) {
			return rowcodec.Value{}, fmt.Sprintf("literal %s is not an integer within ±(2^53−1) (§2.4)", raw)
		}
		return rowcodec.Value{Int: i}, ""
	case rowcodec.TypeFloat:
		var f float64
		if json.Unmarshal(raw, &f) != nil {
			return want()
		}
		return rowcodec.Value{Float: f}, ""
	case rowcodec.TypeJSON:
		var buf bytes.Buffer
		if json.Compact(&buf, raw) != nil || !canonjson.Valid(buf.String()) {
			return want()
		}
		return rowcodec.Value{Str: buf.String()}, ""
	}
	return want()
}

// compileExpr compiles one expression; target is the type a bare const
// takes (the rule's column type, or string inside a string function).
func compileExpr(p *problems, t *Table, field string, raw json.RawMessage, target rowcodec.Type) (*Expr, bool) {
	var node map[string]json.RawMessage
	if err := json.Unmarshal(raw, &node); err != nil || len(node) != 1 {
		p.add(t.Name, field, `an expression is an object with exactly one of "column", "const", "concat", "lower", "upper"`)
		return nil, false
	}
	for op, arg := range node {
		switch op {
		case "column":
			var name string
			if json.Unmarshal(arg, &name) != nil {
				p.add(t.Name, field+".column", "want a column name")
				return nil, false
			}
			i := t.ColumnIndex(name)
			if i < 0 {
				p.add(t.Name, field+".column", "no column %q", name)
				return nil, false
			}
			c := t.Columns[i]
			why := readableType(c.Type)
			if t.Meta[i].Encrypted {
				why = "it is encrypted (§5.11): the server sees only ciphertext"
			}
			if why != "" {
				p.add(t.Name, field+".column", "column %q cannot be read by a backfill: %s", name, why)
				return nil, false
			}
			return &Expr{Op: ExprColumn, Column: name, Index: i, Type: c.Type, Nullable: c.Nullable}, true
		case "const":
			v, err := literal(target, arg)
			if err != "" {
				p.add(t.Name, field+".const", "%s", err)
				return nil, false
			}
			return &Expr{Op: ExprConst, Value: v, Type: target}, true
		case "concat":
			var args []json.RawMessage
			if json.Unmarshal(arg, &args) != nil || len(args) == 0 {
				p.add(t.Name, field+".concat", "want a non-empty array of expressions")
				return nil, false
			}
			return stringFunc(p, t, field+".concat", ExprConcat, args)
		case "lower", "upper":
			kind := ExprLower
			if op == "upper" {
				kind = ExprUpper
			}
			return stringFunc(p, t, field+"."+op, kind, []json.RawMessage{arg})
		default:
			p.add(t.Name, field, "unknown expression %q (want column, const, concat, lower or upper)", op)
		}
	}
	return nil, false
}

// stringFunc compiles a function of string operands.
func stringFunc(p *problems, t *Table, field string, op ExprOp, raws []json.RawMessage) (*Expr, bool) {
	e := &Expr{Op: op, Type: rowcodec.TypeString}
	ok := true
	for k, raw := range raws {
		af := field
		if op == ExprConcat {
			af = fmt.Sprintf("%s[%d]", field, k)
		}
		a, aok := compileExpr(p, t, af, raw, rowcodec.TypeString)
		switch {
		case !aok:
			ok = false
			continue
		case a.Type != rowcodec.TypeString:
			p.add(t.Name, af, "operand is %s; string functions take strings", TypeName(a.Type))
			ok = false
			continue
		}
		e.Nullable = e.Nullable || a.Nullable
		e.Args = append(e.Args, a)
	}
	return e, ok
}
