package schema

import (
	"errors"
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
)

// backfillDoc is a one-table document (tasks with plain, scope, bytes,
// encrypted and reference-free columns) declaring backfills.
func backfillDoc(backfills ...obj) string {
	t := tasksTable()
	t["columns"] = append(t["columns"].([]any),
		col("status", "string", true),
		col("title_key", "string", true),
		col("label", "string", false),
		col("rank", "integer", true),
		col("score", "float", true),
		col("done", "boolean", true),
		col("meta", "json", true),
		obj{"name": "secret", "type": "bytes", "nullable": true, "encrypted": true, "declaredType": "string"},
		col("nick", "string", true),
	)
	list := make([]any, len(backfills))
	for i, b := range backfills {
		list[i] = b
	}
	return docJSON(obj{"version": 1, "tables": []any{t}, "backfills": list})
}

func bf(name string, set ...obj) obj {
	rules := make([]any, len(set))
	for i, s := range set {
		rules[i] = s
	}
	return obj{"name": name, "table": "tasks", "set": rules}
}

func def(column string, v any) obj    { return obj{"column": column, "default": v} }
func derive(column string, e any) obj { return obj{"column": column, "derive": e} }
func column(name string) obj          { return obj{"column": name} }
func lower(e any) obj                 { return obj{"lower": e} }
func concat(es ...any) obj            { return obj{"concat": es} }

func TestBackfillsCompileAndApply(t *testing.T) {
	s, err := Parse([]byte(backfillDoc(bf("v2",
		def("status", "open"),
		def("rank", 3),
		def("score", 0.5),
		def("done", false),
		def("meta", obj{"a": []any{1, 2}}),
		derive("title_key", lower(column("title"))),
		derive("label", concat(column("project_id"), obj{"const": "/"}, column("title"))),
		derive("nick", obj{"upper": column("title")}),
	))))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Backfills) != 1 || s.Backfills[0].Name != "v2" || len(s.Backfills[0].Rules) != 8 {
		t.Fatalf("backfills: %+v", s.Backfills)
	}
	tb, _ := s.Versions[1].Table("tasks")
	row := make([]rowcodec.Value, len(tb.Columns))
	for i := range row {
		row[i] = rowcodec.Value{Null: true}
	}
	set := func(name string, v rowcodec.Value) { row[tb.ColumnIndex(name)] = v }
	get := func(name string) rowcodec.Value { return row[tb.ColumnIndex(name)] }
	set("id", rowcodec.Value{Str: "t1"})
	set("project_id", rowcodec.Value{Str: "p1"})
	set("title", rowcodec.Value{Str: "Straße Ünd CO"})
	set("rank", rowcodec.Value{Int: 9}) // has a value: the default leaves it
	changed := s.Backfills[0].Apply(tb, row)
	if len(changed) != 7 {
		t.Fatalf("changed columns %v, want every rule but rank's", changed)
	}
	want := map[string]rowcodec.Value{
		"status": {Str: "open"}, "rank": {Int: 9}, "score": {Float: 0.5}, "done": {Bool: false},
		"meta": {Str: `{"a":[1,2]}`}, "title_key": {Str: "straße ünd co"}, "label": {Str: "p1/Straße Ünd CO"}, "nick": {Str: "STRAßE ÜND CO"},
	}
	for name, v := range want {
		if g := get(name); !SameValue(tb.Columns[tb.ColumnIndex(name)].Type, g, v) {
			t.Errorf("%s = %+v, want %+v", name, g, v)
		}
	}
	if _, err := tb.Codec.Append(nil, row); err != nil {
		t.Fatalf("backfilled row does not encode: %v", err)
	}
	// Applied again: nothing changes (a re-run writes nothing).
	if again := s.Backfills[0].Apply(tb, row); again != nil {
		t.Fatalf("second application changed %v", again)
	}
}

// Bad backfills are refused at load with a problem naming the rule.
func TestBackfillsValidated(t *testing.T) {
	for _, tc := range []struct {
		name string
		doc  string
		want string
	}{
		{"no name", backfillDoc(bf("", def("status", "x"))), "backfills[0].name"},
		{"bad name", backfillDoc(bf("a,b", def("status", "x"))), "must be at most"},
		{"slash in name", backfillDoc(bf("a/b", def("status", "x"))), "must be at most"},
		{"duplicate name", backfillDoc(bf("a", def("status", "x")), bf("a", def("rank", 1))), "duplicate backfill name"},
		{"unknown table", docJSON(obj{"version": 1, "tables": []any{tasksTable()}, "backfills": []any{obj{"name": "a", "table": "nope", "set": []any{def("title", "x")}}}}), `table "nope" is not in the latest version`},
		{"no rules", backfillDoc(bf("a")), "sets at least one column"},
		{"unknown column", backfillDoc(bf("a", def("nope", "x"))), `no column "nope"`},
		{"primary key", backfillDoc(bf("a", def("id", "x"))), "primary key"},
		{"scope column", backfillDoc(bf("a", def("project_id", "x"))), "scope column"},
		{"encrypted target", backfillDoc(bf("a", def("secret", "x"))), "encrypted"},
		{"bytes target", backfillDoc(bf("a", def("body", "x"))), "bytes columns are outside"},
		{"both kinds", backfillDoc(bf("a", obj{"column": "status", "default": "x", "derive": column("title")})), `exactly one of "default" and "derive"`},
		{"neither kind", backfillDoc(bf("a", obj{"column": "status"})), `exactly one of "default" and "derive"`},
		{"null default", backfillDoc(bf("a", def("status", nil))), "null is not a value"},
		{"mistyped default", backfillDoc(bf("a", def("rank", "three"))), "is not a integer value"},
		{"fractional integer", backfillDoc(bf("a", def("rank", 1.5))), "not an integer"},
		{"unsafe integer", backfillDoc(bf("a", def("rank", 1<<60))), "±(2^53−1)"},
		{"set twice", backfillDoc(bf("a", def("status", "x"), def("status", "y"))), "set twice"},
		{"two backfills one column", backfillDoc(bf("a", def("status", "x")), bf("b", def("status", "y"))), "also set by backfill"},
		{"type mismatch", backfillDoc(bf("a", derive("rank", column("title")))), "the expression is string but column \"rank\" is integer"},
		{"nullable into not null", backfillDoc(bf("a", derive("label", column("status")))), "can be NULL"},
		{"reads encrypted", backfillDoc(bf("a", derive("status", column("secret")))), "encrypted"},
		{"reads bytes", backfillDoc(bf("a", derive("status", column("body")))), "bytes columns are outside"},
		{"reads own target", backfillDoc(bf("a", def("status", "x"), derive("title_key", lower(column("status"))))), "which this backfill sets"},
		{"unknown function", backfillDoc(bf("a", derive("status", obj{"trim": column("title")}))), `unknown expression "trim"`},
		{"two keys", backfillDoc(bf("a", derive("status", obj{"lower": column("title"), "upper": column("title")}))), "exactly one of"},
		{"non-string operand", backfillDoc(bf("a", derive("status", lower(column("rank"))))), "string functions take strings"},
		{"non-string const in concat", backfillDoc(bf("a", derive("status", concat(column("title"), obj{"const": 1})))), "is not a string value"},
		{"empty concat", backfillDoc(bf("a", derive("status", concat()))), "non-empty array"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			var se *Error
			if !errors.As(err, &se) {
				t.Fatalf("got %v, want a schema error containing %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

// The typegen IR shape carries backfills too, next to the previous
// version's tables (schemaVersions[].tables) whose layout old rows are
// read in; they are checked against the latest version only.
func TestBackfillsInIRDocument(t *testing.T) {
	v1 := tasksTable()
	v2 := tasksTable()
	addCol(col("status", "string", true))(v2)
	doc := docJSON(obj{
		"irVersion": 1, "schemaVersion": 2,
		"schemaVersions": []any{obj{"version": 1, "migrations": []any{}, "tables": []any{v1}}, obj{"version": 2, "migrations": []any{}}},
		"tables":         []any{v2},
		"backfills":      []any{bf("status-v2", def("status", "open"))},
	})
	s, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Backfills) != 1 || s.Backfills[0].Rules[0].Column != "status" || len(s.Versions) != 2 {
		t.Fatalf("%+v", s)
	}
	// A rule naming a column the latest version lacks is refused.
	bad := strings.Replace(doc, `"column":"status"`, `"column":"nope"`, 1)
	if _, err := Parse([]byte(bad)); err == nil || !strings.Contains(err.Error(), `no column "nope"`) {
		t.Fatalf("got %v", err)
	}
}
