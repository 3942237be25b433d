package schema

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// refDoc is the §6.11 reference fixture shape: projects is the parent,
// items the child, with one reference per ON DELETE action. childRefs is
// spliced in as the items table's "references" value.
func refDoc(childRefs string, extraItemColumns string) string {
	return fmt.Sprintf(`{
  "version": 1,
  "tables": [
    {"name": "items", "primaryKey": "id", "scopes": ["project:{project_id}"],
     "columns": [
       {"name": "id", "type": "string", "nullable": false},
       {"name": "project_id", "type": "string", "nullable": false},
       {"name": "restrict_parent", "type": "string", "nullable": true},
       {"name": "cascade_parent", "type": "string", "nullable": true},
       {"name": "nullify_parent", "type": "string", "nullable": true},
       {"name": "count", "type": "integer", "nullable": true},
       {"name": "required_parent", "type": "string", "nullable": false}%s
     ],
     "references": %s},
    {"name": "projects", "primaryKey": "project_id", "scopes": ["project:{project_id}"],
     "columns": [
       {"name": "project_id", "type": "string", "nullable": false},
       {"name": "title", "type": "string", "nullable": false}
     ]},
    {"name": "orgs", "primaryKey": "org_id", "scopes": ["org:{org_id}"],
     "columns": [{"name": "org_id", "type": "string", "nullable": false}]}
  ]
}`, extraItemColumns, childRefs)
}

func TestReferencesCompile(t *testing.T) {
	// The parent is declared after the child: references resolve against
	// the whole version.
	s, err := Parse([]byte(refDoc(`[
	  {"column": "restrict_parent", "parentTable": "projects"},
	  {"column": "cascade_parent", "parentTable": "projects", "onDelete": "CASCADE"},
	  {"column": "nullify_parent", "parentTable": "projects", "onDelete": "SET NULL"},
	  {"column": "required_parent", "parentTable": "projects", "onDelete": "RESTRICT"}
	]`, "")))
	if err != nil {
		t.Fatal(err)
	}
	v := s.Versions[1]
	items, _ := v.Table("items")
	want := []struct {
		col string
		od  OnDelete
	}{{"restrict_parent", Restrict}, {"cascade_parent", Cascade}, {"nullify_parent", SetNull}, {"required_parent", Restrict}}
	if len(items.References) != len(want) {
		t.Fatalf("references: %+v", items.References)
	}
	for i, w := range want {
		r := items.References[i]
		if r.Column != w.col || r.ParentTable != "projects" || r.OnDelete != w.od || items.Columns[r.ColumnIndex].Name != w.col {
			t.Errorf("references[%d] = %+v, want %s → projects %s", i, r, w.col, w.od)
		}
	}
	by := v.ReferencedBy("projects")
	if len(by) != 4 || by[1].Table != items || by[1].Ref().Column != "cascade_parent" {
		t.Errorf("ReferencedBy(projects) = %+v", by)
	}
	if !v.HasReferences() || len(v.ReferencedBy("items")) != 0 {
		t.Errorf("HasReferences/ReferencedBy(items) wrong")
	}
	plain, err := Parse([]byte(driverSchema))
	if err != nil {
		t.Fatal(err)
	}
	if plain.Versions[1].HasReferences() {
		t.Errorf("a schema without references reports some")
	}
}

func TestReferencesIRShape(t *testing.T) {
	doc := `{"irVersion": 1, "schemaVersion": 2, "schemaVersions": [{"version": 2, "migrations": []}],
	  "tables": [
	    {"name": "p", "primaryKey": "id", "scopes": ["o:{o}"], "columns": [
	      {"name": "id", "type": "integer", "nullable": false}, {"name": "o", "type": "string", "nullable": false}]},
	    {"name": "c", "primaryKey": "id", "scopes": ["o:{o}"], "columns": [
	      {"name": "id", "type": "string", "nullable": false}, {"name": "o", "type": "string", "nullable": false},
	      {"name": "pid", "type": "integer", "nullable": true}],
	     "references": [{"column": "pid", "parentTable": "p", "onDelete": "CASCADE"}]}]}`
	s, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	c, _ := s.Versions[2].Table("c")
	if len(c.References) != 1 || c.References[0].OnDelete != Cascade {
		t.Errorf("IR references: %+v", c.References)
	}
}

func TestReferencesRejected(t *testing.T) {
	cases := []struct {
		name, refs, extra, field, msg string
	}{
		{"unknown column", `[{"column": "nope", "parentTable": "projects"}]`, "", "references[0].column", "not a column"},
		{"unknown parent", `[{"column": "restrict_parent", "parentTable": "ghosts"}]`, "", "references[0].parentTable", "not a table"},
		{"type mismatch", `[{"column": "count", "parentTable": "projects"}]`, "", "references[0].column", "types must match"},
		{"set null on required", `[{"column": "required_parent", "parentTable": "projects", "onDelete": "SET NULL"}]`, "", "references[0].onDelete", "nullable"},
		{"no action", `[{"column": "restrict_parent", "parentTable": "projects", "onDelete": "NO ACTION"}]`, "", "references[0].onDelete", "not supported"},
		{"set default", `[{"column": "restrict_parent", "parentTable": "projects", "onDelete": "SET DEFAULT"}]`, "", "references[0].onDelete", "not supported"},
		{"lower case", `[{"column": "restrict_parent", "parentTable": "projects", "onDelete": "cascade"}]`, "", "references[0].onDelete", "not supported"},
		{"other scopes", `[{"column": "restrict_parent", "parentTable": "orgs"}]`, "", "references[0].parentTable", "scope patterns"},
		{"twice", `[{"column": "restrict_parent", "parentTable": "projects"}, {"column": "restrict_parent", "parentTable": "projects", "onDelete": "CASCADE"}]`, "", "references[1].column", "more than one"},
		{"encrypted", `[{"column": "secret_parent", "parentTable": "projects"}]`,
			`, {"name": "secret_parent", "type": "bytes", "nullable": true, "encrypted": true, "declaredType": "string"}`, "references[0].column", "encrypted"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(refDoc(tc.refs, tc.extra)))
			var se *Error
			if !errors.As(err, &se) {
				t.Fatalf("Parse: %v, want *Error", err)
			}
			for _, p := range se.Problems {
				if p.Table == "items" && p.Field == tc.field && strings.Contains(p.Message, tc.msg) {
					return
				}
			}
			t.Errorf("problems %v lack items/%s containing %q", se.Problems, tc.field, tc.msg)
		})
	}
}
