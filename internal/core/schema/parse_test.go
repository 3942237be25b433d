package schema

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
)

// driverSchema mirrors the conformance fixture's two-table shape: bare and
// object scope patterns, two variables on one table.
const driverSchema = `{
  "version": 1,
  "tables": [
    {
      "name": "tasks",
      "columns": [
        {"name": "id", "type": "string", "nullable": false},
        {"name": "project_id", "type": "string", "nullable": false},
        {"name": "title", "type": "string", "nullable": false},
        {"name": "done", "type": "boolean", "nullable": false},
        {"name": "priority", "type": "integer", "nullable": true},
        {"name": "meta", "type": "json", "nullable": true}
      ],
      "primaryKey": "id",
      "scopes": [{"pattern": "project:{project_id}"}]
    },
    {
      "name": "docs",
      "columns": [
        {"name": "id", "type": "string", "nullable": false},
        {"name": "org_id", "type": "string", "nullable": false},
        {"name": "project_id", "type": "string", "nullable": false},
        {"name": "body", "type": "string", "nullable": false}
      ],
      "primaryKey": "id",
      "scopes": ["org:{org_id}", {"pattern": "project:{projectId}", "column": "project_id"}]
    }
  ]
}`

func mustParse(t *testing.T, doc string) *Schema {
	t.Helper()
	s, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return s
}

func mustVersion(t *testing.T, s *Schema, n int32) *Version {
	t.Helper()
	v, ok := s.Version(n)
	if !ok {
		t.Fatalf("version %d not served; served %v", n, s.Served())
	}
	return v
}

func mustTable(t *testing.T, v *Version, name string) *Table {
	t.Helper()
	tb, ok := v.Table(name)
	if !ok {
		t.Fatalf("table %q missing", name)
	}
	return tb
}

func TestParseDriverShape(t *testing.T) {
	s := mustParse(t, driverSchema)
	if s.Latest != 1 || s.Floor != 1 || s.IRVersion != 0 {
		t.Fatalf("Latest/Floor/IRVersion = %d/%d/%d, want 1/1/0", s.Latest, s.Floor, s.IRVersion)
	}
	v := mustVersion(t, s, 1)
	if got := []string{v.Tables[0].Name, v.Tables[1].Name}; !slices.Equal(got, []string{"tasks", "docs"}) {
		t.Fatalf("table order %v, want declaration order", got)
	}
	if got := v.Variables(); !slices.Equal(got, []string{"org_id", "projectId", "project_id"}) {
		t.Fatalf("Variables() = %v", got)
	}
	if !v.HasVariable("projectId") || v.HasVariable("project") {
		t.Fatal("HasVariable wrong")
	}
	if _, ok := v.Table("Tasks"); ok {
		t.Fatal("Table lookup must be exact")
	}

	tasks := mustTable(t, v, "tasks")
	wantCols := []rowcodec.Column{
		{Name: "id", Type: rowcodec.TypeString},
		{Name: "project_id", Type: rowcodec.TypeString},
		{Name: "title", Type: rowcodec.TypeString},
		{Name: "done", Type: rowcodec.TypeBoolean},
		{Name: "priority", Type: rowcodec.TypeInteger, Nullable: true},
		{Name: "meta", Type: rowcodec.TypeJSON, Nullable: true},
	}
	if !slices.Equal(tasks.Columns, wantCols) {
		t.Fatalf("columns = %+v", tasks.Columns)
	}
	if tasks.PKIndex != 0 || tasks.PrimaryKey != "id" {
		t.Fatalf("pk = %q@%d", tasks.PrimaryKey, tasks.PKIndex)
	}
	if tasks.ColumnIndex("meta") != 5 || tasks.ColumnIndex("nope") != -1 {
		t.Fatal("ColumnIndex wrong")
	}
	if !tasks.IsScopeColumn(1) || tasks.IsScopeColumn(0) || tasks.IsScopeColumn(99) || tasks.IsScopeColumn(-1) {
		t.Fatal("IsScopeColumn wrong")
	}
	if !tasks.Materialize {
		t.Fatal("Materialize should default to true")
	}

	docs := mustTable(t, v, "docs")
	want := []ScopePattern{
		{Pattern: "org:{org_id}", Prefix: "org", Variable: "org_id", Column: "org_id", ColumnIndex: 1},
		{Pattern: "project:{projectId}", Prefix: "project", Variable: "projectId", Column: "project_id", ColumnIndex: 2},
	}
	if !slices.Equal(docs.Scopes, want) {
		t.Fatalf("scopes = %+v", docs.Scopes)
	}
	if got := docs.ScopeVariables(); !slices.Equal(got, []string{"org_id", "projectId"}) {
		t.Fatalf("ScopeVariables = %v", got)
	}
	if !docs.HasVariable("projectId") || docs.HasVariable("project_id") {
		t.Fatal("table HasVariable wrong")
	}
	if key := docs.Scopes[1].Key("p1"); key != "project:p1" {
		t.Fatalf("Key = %q", key)
	}
}

func TestParseTypegenIR(t *testing.T) {
	s, err := ReadFile(filepath.Join("testdata", "syncular.ir.json"))
	if err != nil {
		t.Fatal(err)
	}
	if s.IRVersion != 1 || s.Latest != 3 || s.Floor != 3 {
		t.Fatalf("IRVersion/Latest/Floor = %d/%d/%d", s.IRVersion, s.Latest, s.Floor)
	}
	if got := s.Served(); !slices.Equal(got, []int32{3}) {
		t.Fatalf("Served = %v: the IR carries only the latest version's tables", got)
	}
	if len(s.History) != 3 || s.History[1].Version != 2 ||
		!slices.Equal(s.History[1].Migrations, []string{"0002_cards_due_at", "0003_cards_cover"}) {
		t.Fatalf("History = %+v", s.History)
	}
	if !strings.Contains(string(s.Subscriptions), "boardCards") || string(s.Extensions) != "{}" {
		t.Fatalf("metadata not kept: %s / %s", s.Subscriptions, s.Extensions)
	}

	v := mustVersion(t, s, 3)
	boards := mustTable(t, v, "boards")
	note := boards.ColumnIndex("secret_note")
	if boards.Columns[note].Type != rowcodec.TypeBytes ||
		boards.Meta[note] != (ColumnMeta{Encrypted: true, DeclaredType: rowcodec.TypeString}) {
		t.Fatalf("encrypted column = %+v %+v", boards.Columns[note], boards.Meta[note])
	}
	if !slices.Equal(boards.EncryptedColumns, []int{note}) {
		t.Fatalf("EncryptedColumns = %v", boards.EncryptedColumns)
	}
	if !boards.Materialize {
		t.Fatal("boards has a plaintext title, so it materializes")
	}

	cards := mustTable(t, v, "cards")
	if cards.Meta[cards.ColumnIndex("notes_doc")].CRDTType != "yjs-doc" {
		t.Fatal("crdtType lost")
	}
	if !slices.Equal(cards.CRDTColumns, []int{7}) || !slices.Equal(cards.BlobRefColumns, []int{6}) {
		t.Fatalf("CRDTColumns/BlobRefColumns = %v/%v", cards.CRDTColumns, cards.BlobRefColumns)
	}
	if len(cards.Indexes) != 1 || cards.Indexes[0].Name != "idx_cards_board_rank" ||
		!slices.Equal(cards.Indexes[0].Columns, []string{"board_id", "rank"}) {
		t.Fatalf("Indexes = %+v", cards.Indexes)
	}
	if !strings.Contains(string(cards.FTSIndexes), "cards_fts") {
		t.Fatal("ftsIndexes not kept")
	}
	if got := v.Variables(); !slices.Equal(got, []string{"boardId", "team_id"}) {
		t.Fatalf("Variables = %v", got)
	}
}

func TestParseMultiVersionIR(t *testing.T) {
	// schemaVersions[].tables is this loader's extension: older versions the
	// server still serves. Version 2 is history only and so not served.
	const doc = `{
	  "irVersion": 1,
	  "schemaVersion": 3,
	  "schemaVersions": [
	    {"version": 1, "migrations": ["0001_init"], "tables": [
	      {"name": "notes", "primaryKey": "id",
	       "columns": [{"name": "id", "type": "string", "nullable": false},
	                   {"name": "owner", "type": "string", "nullable": false}],
	       "scopes": [{"pattern": "user:{owner}", "variable": "owner", "column": "owner"}]}
	    ]},
	    {"version": 2, "migrations": ["0002_body"]},
	    {"version": 3, "migrations": ["0003_pinned"]}
	  ],
	  "tables": [
	    {"name": "notes", "primaryKey": "id",
	     "columns": [{"name": "id", "type": "string", "nullable": false},
	                 {"name": "owner", "type": "string", "nullable": false},
	                 {"name": "body", "type": "string", "nullable": true},
	                 {"name": "pinned", "type": "boolean", "nullable": true}],
	     "scopes": [{"pattern": "user:{owner}", "variable": "owner", "column": "owner"}],
	     "extensions": {}}
	  ],
	  "subscriptions": [],
	  "extensions": {}
	}`
	s := mustParse(t, doc)
	if s.Latest != 3 || s.Floor != 1 || !slices.Equal(s.Served(), []int32{1, 3}) {
		t.Fatalf("Latest/Floor/Served = %d/%d/%v", s.Latest, s.Floor, s.Served())
	}
	if _, ok := s.Version(2); ok {
		t.Fatal("version 2 has no tables and must not be served")
	}
	if n := len(mustTable(t, mustVersion(t, s, 1), "notes").Columns); n != 2 {
		t.Fatalf("v1 notes has %d columns, want 2", n)
	}
	if n := len(mustTable(t, mustVersion(t, s, 3), "notes").Columns); n != 4 {
		t.Fatalf("v3 notes has %d columns, want 4", n)
	}
}

func TestExampleTodoSchema(t *testing.T) {
	s, err := ReadFile(filepath.Join("..", "..", "..", "examples", "todo", "schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	v := mustVersion(t, s, 1)
	if v.Tables[0].Name != "projects" || v.Tables[1].Name != "tasks" {
		t.Fatal("parents must bootstrap before children")
	}
	projects, tasks := v.Tables[0], v.Tables[1]
	// The same variable binds a different column per table: the project's
	// own id, and the task's foreign key.
	if projects.Scopes[0].Variable != "project_id" || projects.Scopes[0].Column != "id" {
		t.Fatalf("projects scope = %+v", projects.Scopes[0])
	}
	if tasks.Scopes[0].Variable != "project_id" || tasks.Scopes[0].Column != "project_id" {
		t.Fatalf("tasks scope = %+v", tasks.Scopes[0])
	}
	if got := v.Variables(); !slices.Equal(got, []string{"project_id"}) {
		t.Fatalf("Variables = %v", got)
	}
}

func TestMerge(t *testing.T) {
	v1 := mustParse(t, driverSchema)
	v2 := mustParse(t, strings.Replace(driverSchema, `"version": 1`, `"version": 2`, 1))
	m, err := Merge(v1, v2)
	if err != nil {
		t.Fatal(err)
	}
	if m.Latest != 2 || m.Floor != 1 || !slices.Equal(m.Served(), []int32{1, 2}) {
		t.Fatalf("merged Latest/Floor/Served = %d/%d/%v", m.Latest, m.Floor, m.Served())
	}
	if len(v2.Versions) != 1 {
		t.Fatal("Merge must not mutate its inputs")
	}
	_, err = Merge(v1, v1)
	var se *Error
	if !errors.As(err, &se) || se.Problems[0].Version != 1 {
		t.Fatalf("duplicate version: err = %v", err)
	}
}

func TestCheckCRDTTypes(t *testing.T) {
	s, err := ReadFile(filepath.Join("testdata", "syncular.ir.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CheckCRDTTypes(func(name string) bool { return name == "yjs-doc" }); err != nil {
		t.Fatal(err)
	}
	err = s.CheckCRDTTypes(func(string) bool { return false })
	var se *Error
	if !errors.As(err, &se) || len(se.Problems) != 1 ||
		se.Problems[0].Table != "cards" || se.Problems[0].Field != "columns.notes_doc.crdtType" {
		t.Fatalf("err = %v", err)
	}
}
