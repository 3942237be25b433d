package validate_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/skyfold/syncular-lambda/internal/core/validate"
)

// A row rule in Go: invoices keep a non-negative amount, and a closed
// invoice never reopens (the stored row tells an update from an insert).
func ExampleRowValidatorFunc() {
	invoices := validate.RowValidatorFunc(func(_ context.Context, _ validate.Caller, op *validate.Operation) error {
		if op.Row == nil {
			return nil // a delete
		}
		if amount, _ := op.Row["amount"].(int64); amount < 0 {
			return validate.Reject("app.negative_amount", "amount must not be negative",
				&validate.Details{FieldPaths: []string{"amount"}, Reason: "negative_amount", RequiredAction: "edit_fields"})
		}
		if op.Stored != nil && op.Stored["status"] == "closed" && op.Row["status"] != "closed" {
			return validate.Reject("app.invoice_closed", "a closed invoice cannot reopen", nil)
		}
		return nil
	})
	hooks := &validate.Hooks{Rows: map[string]validate.RowValidator{"invoices": invoices}}

	err := hooks.Row("invoices").ValidateRow(context.Background(), validate.Caller{}, &validate.Operation{
		Op: validate.Upsert, Table: "invoices", RowID: "i1",
		Row:    validate.Row{"id": "i1", "amount": int64(10), "status": "open"},
		Stored: validate.Row{"id": "i1", "amount": int64(10), "status": "closed"},
	})
	if r, ok := errors.AsType[*validate.Rejection](err); ok {
		fmt.Println(r.Code, "-", r.Message)
	}
	// Output: app.invoice_closed - a closed invoice cannot reopen
}

// Declarative rules, as SYNC_VALIDATORS_PATH holds them.
func ExampleParseRules() {
	columns := func(table string) ([]string, bool) {
		return []string{"id", "project_id", "title", "done"}, table == "tasks"
	}
	hooks, err := validate.ParseRules([]byte(`{"validators": [
	  {"table": "tasks", "rule": {"kind": "maxLength", "column": "title", "max": 10, "code": "app.title_too_long"}}]}`), columns)
	if err != nil {
		fmt.Println(err)
		return
	}
	err = hooks.Row("tasks").ValidateRow(context.Background(), validate.Caller{}, &validate.Operation{
		Op: validate.Upsert, Table: "tasks", RowID: "t1", Row: validate.Row{"title": "far too long a title"}})
	r, _ := errors.AsType[*validate.Rejection](err)
	fmt.Println(r.Code, r.DetailsJSON)

	_, err = validate.ParseRules([]byte(`{"validators": [
	  {"table": "tasks", "rule": {"kind": "maxLength", "column": "title", "max": 10, "code": "sync.mine"}}]}`), columns)
	fmt.Println(err != nil)
	// Output:
	// app.title_too_long {"fieldPaths":["title"],"reason":"max_length_exceeded","requiredAction":"edit_fields"}
	// true
}
