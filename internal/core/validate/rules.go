package validate

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
)

// Declarative rules, for hosts without Go code: a JSON document (its own
// file, or the "validators" member of the schema file) compiled into
// Hooks. The rule kinds and their JSON shapes are those of the
// conformance driver contract (maxLength, immutableWhen,
// requireSiblingWhen):
//
//	{
//	  "validators": [
//	    {"table": "tasks", "rule": {"kind": "maxLength", "column": "title", "max": 200, "code": "app.title_too_long"}},
//	    {"table": "tasks", "rule": {"kind": "immutableWhen", "column": "title",
//	      "guardColumn": "done", "guardValue": true, "code": "app.done_task_frozen"}}
//	  ],
//	  "commitValidators": [
//	    {"kind": "requireSiblingWhen", "table": "tasks", "column": "done", "equals": true,
//	     "siblingRowIdSuffix": "-audit", "code": "app.completion_audit_required"}
//	  ]
//	}
//
// Values compare like the driver's JSON values: null, booleans, numbers
// (an integer column equals the same number), strings, and bytes as
// {"$bytes": "<hex>"}.
type RuleFile struct {
	Validators       []TableRule  `json:"validators"`
	CommitValidators []CommitRule `json:"commitValidators"`
}

// TableRule attaches one row rule to a table; a table may have several,
// checked in file order.
type TableRule struct {
	Table string  `json:"table"`
	Rule  RowRule `json:"rule"`
}

// RowRule is one declarative §6.7 rule.
//
//   - maxLength: an upsert whose Column is a string longer than Max
//     characters (UTF-16 code units, as JavaScript counts) is rejected.
//   - immutableWhen: an update (a stored row exists) that changes Column
//     while the stored row's GuardColumn equals GuardValue is rejected.
type RowRule struct {
	Kind        string          `json:"kind"`
	Column      string          `json:"column"`
	Max         *int            `json:"max,omitempty"`
	GuardColumn string          `json:"guardColumn,omitempty"`
	GuardValue  json.RawMessage `json:"guardValue,omitempty"`
	Code        string          `json:"code"`
}

// CommitRule is one declarative §6.8 rule.
//
//   - requireSiblingWhen: when an upsert of Table sets Column to Equals,
//     the same commit must also write the row whose id is that row's id
//     followed by SiblingRowIDSuffix; otherwise the commit is rejected,
//     attributed to the triggering operation.
type CommitRule struct {
	Kind               string          `json:"kind"`
	Table              string          `json:"table"`
	Column             string          `json:"column"`
	Equals             json.RawMessage `json:"equals"`
	SiblingRowIDSuffix string          `json:"siblingRowIdSuffix"`
	Code               string          `json:"code"`
}

// Columns answers the columns of a served table (ok false: no such
// table); rules naming anything else fail to compile.
type Columns func(table string) (columns []string, ok bool)

// ParseRules reads a RuleFile (unknown members are errors) and compiles
// it against the schema's tables.
func ParseRules(data []byte, cols Columns) (*Hooks, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f RuleFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("validators: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("validators: trailing data after the document")
	}
	return f.Compile(cols)
}

// Compile turns the rules into Hooks, checking every kind, code, column
// and value first.
func (f *RuleFile) Compile(cols Columns) (*Hooks, error) {
	h := &Hooks{}
	byTable := map[string][]RowValidator{}
	var order []string
	for i, tr := range f.Validators {
		v, err := compileRow(tr, cols)
		if err != nil {
			return nil, fmt.Errorf("validators[%d] (table %q): %w", i, tr.Table, err)
		}
		if _, seen := byTable[tr.Table]; !seen {
			order = append(order, tr.Table)
		}
		byTable[tr.Table] = append(byTable[tr.Table], v)
	}
	if len(order) > 0 {
		h.Rows = make(map[string]RowValidator, len(order))
		for _, t := range order {
			h.Rows[t] = allRows(byTable[t])
		}
	}
	var commits []CommitValidator
	for i, cr := range f.CommitValidators {
		v, err := compileCommit(cr, cols)
		if err != nil {
			return nil, fmt.Errorf("commitValidators[%d]: %w", i, err)
		}
		commits = append(commits, v)
	}
	if len(commits) > 0 {
		h.Commit = allCommits(commits)
	}
	return h, nil
}

// allRows runs every validator in order; the first rejection wins.
func allRows(vs []RowValidator) RowValidator {
	if len(vs) == 1 {
		return vs[0]
	}
	return RowValidatorFunc(func(ctx context.Context, who Caller, op *Operation) error {
		for _, v := range vs {
			if err := v.ValidateRow(ctx, who, op); err != nil {
				return err
			}
		}
		return nil
	})
}

func allCommits(vs []CommitValidator) CommitValidator {
	if len(vs) == 1 {
		return vs[0]
	}
	return CommitValidatorFunc(func(ctx context.Context, c *Commit, r Reader) error {
		for _, v := range vs {
			if err := v.ValidateCommit(ctx, c, r); err != nil {
				return err
			}
		}
		return nil
	})
}

// hasColumns checks that table is served with every named column.
func hasColumns(cols Columns, table string, names ...string) error {
	have, ok := cols(table)
	if !ok {
		return fmt.Errorf("unknown table %q", table)
	}
	for _, n := range names {
		if !slices.Contains(have, n) {
			return fmt.Errorf("table %q has no column %q", table, n)
		}
	}
	return nil
}

// fixedDetails checks the details a rule kind attaches, once.
func fixedDetails(column, reason, action string) (string, error) {
	return normalize(&Details{FieldPaths: []string{column}, Reason: reason, RequiredAction: action})
}

func compileRow(tr TableRule, cols Columns) (RowValidator, error) {
	r := tr.Rule
	if err := CheckCode(r.Code); err != nil {
		return nil, err
	}
	switch r.Kind {
	case "maxLength":
		if r.Max == nil || *r.Max < 0 {
			return nil, fmt.Errorf("maxLength needs a non-negative max")
		}
		if r.GuardColumn != "" || r.GuardValue != nil {
			return nil, fmt.Errorf("maxLength takes no guardColumn or guardValue")
		}
		if err := hasColumns(cols, tr.Table, r.Column); err != nil {
			return nil, err
		}
		det, err := fixedDetails(r.Column, "max_length_exceeded", "edit_fields")
		if err != nil {
			return nil, err
		}
		column, maxLen := r.Column, *r.Max
		msg := fmt.Sprintf("%s exceeds %d chars (§6.7)", column, maxLen)
		return RowValidatorFunc(func(_ context.Context, _ Caller, op *Operation) error {
			if op.Row == nil {
				return nil // a delete carries no row
			}
			if s, ok := op.Row[column].(string); ok && utf16Len(s) > maxLen {
				return &Rejection{Code: r.Code, Message: msg, DetailsJSON: det}
			}
			return nil
		}), nil
	case "immutableWhen":
		if r.Max != nil {
			return nil, fmt.Errorf("immutableWhen takes no max")
		}
		if r.GuardColumn == "" || r.GuardValue == nil {
			return nil, fmt.Errorf("immutableWhen needs guardColumn and guardValue")
		}
		if err := hasColumns(cols, tr.Table, r.Column, r.GuardColumn); err != nil {
			return nil, err
		}
		guard, err := parseValue(r.GuardValue)
		if err != nil {
			return nil, fmt.Errorf("guardValue: %w", err)
		}
		det, err := fixedDetails(r.Column, "immutable_state", "keep_server")
		if err != nil {
			return nil, err
		}
		column, guardCol := r.Column, r.GuardColumn
		msg := fmt.Sprintf("%s is immutable while %s=%s (§6.7)", column, guardCol, string(r.GuardValue))
		return RowValidatorFunc(func(_ context.Context, _ Caller, op *Operation) error {
			if op.Row == nil || op.Stored == nil {
				return nil // an insert or a delete
			}
			if !Equal(op.Stored[guardCol], guard) {
				return nil
			}
			if !Equal(op.Row[column], op.Stored[column]) {
				return &Rejection{Code: r.Code, Message: msg, DetailsJSON: det}
			}
			return nil
		}), nil
	default:
		return nil, fmt.Errorf("unknown rule kind %q (want maxLength or immutableWhen)", r.Kind)
	}
}

func compileCommit(r CommitRule, cols Columns) (CommitValidator, error) {
	if err := CheckCode(r.Code); err != nil {
		return nil, err
	}
	if r.Kind != "requireSiblingWhen" {
		return nil, fmt.Errorf("unknown rule kind %q (want requireSiblingWhen)", r.Kind)
	}
	if r.Equals == nil || r.SiblingRowIDSuffix == "" {
		return nil, fmt.Errorf("requireSiblingWhen needs equals and a non-empty siblingRowIdSuffix")
	}
	if err := hasColumns(cols, r.Table, r.Column); err != nil {
		return nil, err
	}
	want, err := parseValue(r.Equals)
	if err != nil {
		return nil, fmt.Errorf("equals: %w", err)
	}
	det, err := fixedDetails(r.Column, "missing_sibling_operation", "repair_aggregate")
	if err != nil {
		return nil, err
	}
	return CommitValidatorFunc(func(_ context.Context, c *Commit, _ Reader) error {
		ops := c.Operations
		i := slices.IndexFunc(ops, func(op Operation) bool {
			return op.Table == r.Table && op.Row != nil && Equal(op.Row[r.Column], want)
		})
		if i < 0 {
			return nil
		}
		sibling := ops[i].RowID + r.SiblingRowIDSuffix
		if slices.ContainsFunc(ops, func(op Operation) bool { return op.Table == r.Table && op.RowID == sibling }) {
			return nil
		}
		return &Rejection{OpIndex: ops[i].OpIndex, Attributed: true, Code: r.Code,
			Message: "aggregate requires a sibling operation (§6.8)", DetailsJSON: det}
	}), nil
}

// utf16Len is the length of s in UTF-16 code units.
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}

// parseValue reads a rule's JSON value: null, a boolean, a number, a
// string, or {"$bytes": "<hex>"}.
func parseValue(raw json.RawMessage) (any, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case nil, bool, string:
		return x, nil
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			return nil, err
		}
		return f, nil
	case map[string]any:
		h, ok := x["$bytes"].(string)
		if !ok || len(x) != 1 {
			return nil, fmt.Errorf(`an object value must be {"$bytes": "<hex>"}`)
		}
		b, err := hex.DecodeString(h)
		if err != nil {
			return nil, fmt.Errorf("$bytes: %w", err)
		}
		return b, nil
	default:
		return nil, fmt.Errorf("unsupported value %s", string(raw))
	}
}

// Equal compares two row values: numbers by value whatever their Go
// type (int64, float64), bytes by content, the rest by ==.
func Equal(a, b any) bool {
	if fa, ok := number(a); ok {
		fb, ok := number(b)
		return ok && fa == fb && !math.IsNaN(fa)
	}
	if ba, ok := a.([]byte); ok {
		bb, ok := b.([]byte)
		return ok && bytes.Equal(ba, bb)
	}
	if _, ok := b.([]byte); ok {
		return false
	}
	return a == b
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case float64:
		return x, true
	case int:
		return float64(x), true
	}
	return 0, false
}
