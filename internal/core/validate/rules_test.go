package validate_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/validate"
)

func taskColumns(table string) ([]string, bool) {
	if table != "tasks" {
		return nil, false
	}
	return []string{"id", "project_id", "title", "done", "blob"}, true
}

func rejection(t *testing.T, err error) *validate.Rejection {
	t.Helper()
	r, ok := errors.AsType[*validate.Rejection](err)
	if !ok {
		t.Fatalf("want a *validate.Rejection, got %v", err)
	}
	return r
}

// The declarative rule kinds of the conformance catalog (validators,
// commit-validators) with the details the catalog expects (§6.7, §6.8).
func TestRuleKinds(t *testing.T) {
	h, err := validate.ParseRules([]byte(`{
	  "validators": [
	    {"table": "tasks", "rule": {"kind": "maxLength", "column": "title", "max": 3, "code": "app.title_too_long"}},
	    {"table": "tasks", "rule": {"kind": "immutableWhen", "column": "title", "guardColumn": "done", "guardValue": true, "code": "app.done_task_frozen"}}
	  ],
	  "commitValidators": [
	    {"kind": "requireSiblingWhen", "table": "tasks", "column": "done", "equals": true, "siblingRowIdSuffix": "-audit", "code": "app.audit"}
	  ]}`), taskColumns)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rv := h.Row("tasks")
	check := func(op validate.Operation) error { return rv.ValidateRow(ctx, validate.Caller{}, &op) }

	// maxLength counts UTF-16 code units, as JavaScript does: "é😀" is 3.
	if err := check(validate.Operation{Op: validate.Upsert, Row: validate.Row{"title": "é😀"}}); err != nil {
		t.Fatalf("3 code units rejected: %v", err)
	}
	r := rejection(t, check(validate.Operation{Op: validate.Upsert, Row: validate.Row{"title": "abcd"}}))
	if r.Code != "app.title_too_long" || r.DetailsJSON != `{"fieldPaths":["title"],"reason":"max_length_exceeded","requiredAction":"edit_fields"}` {
		t.Fatalf("maxLength rejection %+v", r)
	}
	if err := check(validate.Operation{Op: validate.Delete, Stored: validate.Row{"title": "abcdef", "done": true}}); err != nil {
		t.Fatalf("a delete was validated as a row: %v", err)
	}
	// immutableWhen reads the stored row: an insert passes, a rename of
	// a done row fails, a rename of an open row passes.
	if err := check(validate.Operation{Op: validate.Upsert, Row: validate.Row{"title": "new", "done": true}}); err != nil {
		t.Fatalf("insert: %v", err)
	}
	r = rejection(t, check(validate.Operation{Op: validate.Upsert, Row: validate.Row{"title": "two", "done": true}, Stored: validate.Row{"title": "one", "done": true}}))
	if r.Code != "app.done_task_frozen" || !strings.Contains(r.DetailsJSON, `"reason":"immutable_state"`) {
		t.Fatalf("immutableWhen rejection %+v", r)
	}
	if err := check(validate.Operation{Op: validate.Upsert, Row: validate.Row{"title": "two", "done": true}, Stored: validate.Row{"title": "one", "done": false}}); err != nil {
		t.Fatalf("open row renamed: %v", err)
	}

	c := &validate.Commit{Operations: []validate.Operation{
		{OpIndex: 0, Op: validate.Upsert, Table: "tasks", RowID: "x", Row: validate.Row{"done": false}},
		{OpIndex: 1, Op: validate.Upsert, Table: "tasks", RowID: "t1", Row: validate.Row{"done": true}},
	}}
	r = rejection(t, h.Commit.ValidateCommit(ctx, c, nil))
	if !r.Attributed || r.OpIndex != 1 || r.Code != "app.audit" || r.DetailsJSON != `{"fieldPaths":["done"],"reason":"missing_sibling_operation","requiredAction":"repair_aggregate"}` {
		t.Fatalf("requireSiblingWhen rejection %+v", r)
	}
	c.Operations = append(c.Operations, validate.Operation{OpIndex: 2, Op: validate.Upsert, Table: "tasks", RowID: "t1-audit", Row: validate.Row{"done": false}})
	if err := h.Commit.ValidateCommit(ctx, c, nil); err != nil {
		t.Fatalf("with its sibling: %v", err)
	}
}

// Rules that cannot work are refused when the file is loaded, never at
// push time.
func TestRulesFailLoudly(t *testing.T) {
	for name, doc := range map[string]string{
		"reserved code":   `{"validators":[{"table":"tasks","rule":{"kind":"maxLength","column":"title","max":3,"code":"sync.mine"}}]}`,
		"blob code":       `{"commitValidators":[{"kind":"requireSiblingWhen","table":"tasks","column":"done","equals":true,"siblingRowIdSuffix":"-a","code":"blob.x"}]}`,
		"empty code":      `{"validators":[{"table":"tasks","rule":{"kind":"maxLength","column":"title","max":3,"code":""}}]}`,
		"unknown kind":    `{"validators":[{"table":"tasks","rule":{"kind":"regex","column":"title","code":"app.x"}}]}`,
		"unknown table":   `{"validators":[{"table":"notes","rule":{"kind":"maxLength","column":"title","max":3,"code":"app.x"}}]}`,
		"unknown column":  `{"validators":[{"table":"tasks","rule":{"kind":"maxLength","column":"name","max":3,"code":"app.x"}}]}`,
		"no max":          `{"validators":[{"table":"tasks","rule":{"kind":"maxLength","column":"title","code":"app.x"}}]}`,
		"no guard":        `{"validators":[{"table":"tasks","rule":{"kind":"immutableWhen","column":"title","code":"app.x"}}]}`,
		"unknown member":  `{"validators":[],"extra":1}`,
		"bad bytes value": `{"validators":[{"table":"tasks","rule":{"kind":"immutableWhen","column":"title","guardColumn":"blob","guardValue":{"$bytes":"zz"},"code":"app.x"}}]}`,
		"no suffix":       `{"commitValidators":[{"kind":"requireSiblingWhen","table":"tasks","column":"done","equals":true,"code":"app.x"}]}`,
	} {
		if _, err := validate.ParseRules([]byte(doc), taskColumns); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// Reject checks codes and details where the rejection is built (§6.7):
// a host bug is an error of its own, never a rejection.
func TestRejectChecksCodeAndDetails(t *testing.T) {
	for _, code := range []string{"sync.x", "blob.x", "operation.x", "presence.x", "client.x", ""} {
		if _, ok := errors.AsType[*validate.Rejection](validate.Reject(code, "m", nil)); ok {
			t.Errorf("code %q made a rejection", code)
		}
	}
	if _, ok := errors.AsType[*validate.Rejection](validate.Reject("app.x", "m", &validate.Details{Reason: "Not A Token"})); ok {
		t.Error("invalid details made a rejection")
	}
	r := rejection(t, validate.RejectOp(2, "app.x", "m", &validate.Details{References: map[string]string{"b": "2", "a": "1"}}))
	if !r.Attributed || r.OpIndex != 2 || r.DetailsJSON != `{"references":{"a":"1","b":"2"}}` {
		t.Fatalf("%+v", r)
	}
}

func TestEqual(t *testing.T) {
	for _, c := range []struct {
		a, b any
		eq   bool
	}{
		{int64(1), 1.0, true}, {int64(1), 2.0, false}, {true, true, true}, {true, false, false},
		{nil, nil, true}, {nil, false, false}, {"a", "a", true}, {[]byte{1}, []byte{1}, true},
		{[]byte{1}, "a", false}, {"1", 1.0, false},
	} {
		if validate.Equal(c.a, c.b) != c.eq {
			t.Errorf("Equal(%v, %v) != %v", c.a, c.b, c.eq)
		}
	}
}
