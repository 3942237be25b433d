package schema

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

type obj = map[string]any

func col(name, typ string, nullable bool) obj {
	return obj{"name": name, "type": typ, "nullable": nullable}
}

// tasksTable is a valid table each case breaks in one way.
func tasksTable() obj {
	return obj{
		"name": "tasks",
		"columns": []any{
			col("id", "string", false),
			col("project_id", "string", false),
			col("title", "string", false),
			col("body", "bytes", true),
		},
		"primaryKey": "id",
		"scopes":     []any{"project:{project_id}"},
	}
}

func docJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func plain(tables ...obj) string {
	return docJSON(obj{"version": 1, "tables": tables})
}

// withTasks returns a one-table document after mut edits the tasks table.
func withTasks(mut func(t obj)) string {
	t := tasksTable()
	mut(t)
	return plain(t)
}

func addCol(c obj) func(obj) {
	return func(t obj) { t["columns"] = append(t["columns"].([]any), c) }
}

// setCol sets key on the named column (deleting it when val is nil).
func setCol(name, key string, val any) func(obj) {
	return func(t obj) {
		for _, c := range t["columns"].([]any) {
			if c.(obj)["name"] == name {
				if val == nil {
					delete(c.(obj), key)
				} else {
					c.(obj)[key] = val
				}
			}
		}
	}
}

func set(key string, val any) func(obj) {
	return func(t obj) { t[key] = val }
}

func scopes(s ...any) func(obj) { return set("scopes", s) }

func both(fs ...func(obj)) func(obj) {
	return func(t obj) {
		for _, f := range fs {
			f(t)
		}
	}
}

func renamed(name string) obj {
	t := tasksTable()
	t["name"] = name
	return t
}

func TestValidationRules(t *testing.T) {
	encrypted := obj{"name": "secret", "type": "bytes", "nullable": true, "encrypted": true, "declaredType": "string"}
	index := func(name string, cols ...string) obj { return obj{"name": name, "columns": cols} }

	cases := []struct {
		name    string
		doc     string
		version int32
		table   string
		field   string
		msg     string
	}{
		// Document level.
		{"not an object", `[1]`, 0, "", "", "JSON object"},
		{"invalid JSON", `{"version": 1,`, 0, "", "", "invalid JSON"},
		{"wrong JSON type", withTasks(setCol("title", "nullable", "yes")), 0, "", "tables.columns.nullable", "expected bool"},
		{"missing version", `{"tables": []}`, 0, "", "version", "missing"},
		{"version zero", `{"version": 0, "tables": []}`, 0, "", "version", "out of range"},
		{"version beyond int32", `{"version": 2147483648, "tables": []}`, 0, "", "version", "out of range"},
		{"no tables", `{"version": 1, "tables": []}`, 1, "", "tables", "no tables"},
		{"unsupported irVersion", `{"irVersion": 2, "schemaVersion": 1, "tables": []}`, 0, "", "irVersion", "unsupported IR version 2"},
		{"missing irVersion", `{"schemaVersion": 1, "tables": []}`, 0, "", "irVersion", "missing"},
		{"missing schemaVersion", `{"irVersion": 1, "tables": []}`, 0, "", "schemaVersion", "missing"},
		{"version and schemaVersion", `{"irVersion": 1, "version": 1, "schemaVersion": 1, "tables": []}`, 0, "", "version", "not an IR key"},
		{"history not increasing", `{"irVersion": 1, "schemaVersion": 2, "schemaVersions": [{"version": 2}, {"version": 2}]}`, 0, "", "schemaVersions[1].version", "strictly increasing"},
		{"history version zero", `{"irVersion": 1, "schemaVersion": 2, "schemaVersions": [{"version": 0}, {"version": 2}]}`, 0, "", "schemaVersions[0].version", "out of range"},
		{"schemaVersion not last", `{"irVersion": 1, "schemaVersion": 1, "schemaVersions": [{"version": 1}, {"version": 2}]}`, 0, "", "schemaVersion", "not the last"},
		{"latest tables in history", `{"irVersion": 1, "schemaVersion": 1, "schemaVersions": [{"version": 1, "tables": []}]}`, 0, "", "schemaVersions[0].tables", "top-level tables"},
		{"history tables newer than latest", `{"irVersion": 1, "schemaVersion": 1, "schemaVersions": [{"version": 1}, {"version": 2, "tables": []}]}`, 0, "", "schemaVersions[1].version", "newer than schemaVersion"},
		{"invalid older version", `{"irVersion": 1, "schemaVersion": 2, "schemaVersions": [{"version": 1, "tables": [{"name": "t"}]}, {"version": 2}], "tables": [` + docJSON(tasksTable()) + `]}`, 1, "t", "columns", "no columns"},

		// Table names.
		{"empty table name", plain(renamed("")), 1, "tables[0]", "name", "table name is empty"},
		{"reserved sync_ table", plain(renamed("sync_commits")), 1, "sync_commits", "name", "reserved prefix"},
		{"reserved _sync table", plain(renamed("_syncular_meta")), 1, "_syncular_meta", "name", "reserved prefix"},
		{"reserved prefix any case", plain(renamed("Sync_Tasks")), 1, "Sync_Tasks", "name", "reserved prefix"},
		{"table name too long", plain(renamed(strings.Repeat("t", 64))), 1, strings.Repeat("t", 64), "name", "64 bytes"},
		{"control character in name", plain(renamed("ta\x00sks")), 1, "ta\x00sks", "name", "control characters"},
		{"duplicate table", plain(tasksTable(), tasksTable()), 1, "tasks", "name", "duplicate table name (also tables[0]"},
		{"duplicate table by case", plain(tasksTable(), renamed("Tasks")), 1, "Tasks", "name", "duplicate table name"},

		// Columns.
		{"no columns", withTasks(set("columns", []any{})), 1, "tasks", "columns", "no columns"},
		{"duplicate column", withTasks(addCol(col("title", "string", true))), 1, "tasks", "columns.title", "duplicate column name (also columns[2]"},
		{"duplicate column by case", withTasks(addCol(col("Title", "string", true))), 1, "tasks", "columns.Title", "duplicate column name"},
		{"reserved _sync_ column", withTasks(addCol(col("_sync_version", "integer", true))), 1, "tasks", "columns._sync_version", "reserved prefix"},
		{"reserved sync_ column", withTasks(addCol(col("sync_flag", "boolean", true))), 1, "tasks", "columns.sync_flag", "reserved prefix"},
		{"empty column name", withTasks(addCol(col("", "string", true))), 1, "tasks", "columns[4]", "column name is empty"},
		{"unknown type", withTasks(setCol("title", "type", "text")), 1, "tasks", "columns.title.type", `unknown column type "text"`},
		{"type is case-sensitive", withTasks(setCol("title", "type", "String")), 1, "tasks", "columns.title.type", "unknown column type"},
		{"missing type", withTasks(setCol("title", "type", nil)), 1, "tasks", "columns.title.type", "missing column type"},
		{"missing nullable", withTasks(setCol("title", "nullable", nil)), 1, "tasks", "columns.title.nullable", "missing"},
		{"crdt without crdtType", withTasks(addCol(col("doc", "crdt", true))), 1, "tasks", "columns.doc.crdtType", "must name its merger"},
		{"crdt with empty crdtType", withTasks(addCol(obj{"name": "doc", "type": "crdt", "nullable": true, "crdtType": ""})), 1, "tasks", "columns.doc.crdtType", "must name its merger"},
		{"crdtType on non-crdt", withTasks(setCol("title", "crdtType", "yjs-doc")), 1, "tasks", "columns.title.crdtType", "only allowed on crdt"},
		{"encrypted not bytes", withTasks(addCol(obj{"name": "secret", "type": "string", "nullable": true, "encrypted": true, "declaredType": "string"})), 1, "tasks", "columns.secret.type", "travels as bytes"},
		{"encrypted without declaredType", withTasks(addCol(obj{"name": "secret", "type": "bytes", "nullable": true, "encrypted": true})), 1, "tasks", "columns.secret.declaredType", "must state its app type"},
		{"encrypted unknown declaredType", withTasks(addCol(obj{"name": "secret", "type": "bytes", "nullable": true, "encrypted": true, "declaredType": "text"})), 1, "tasks", "columns.secret.declaredType", `unknown type "text"`},
		{"encrypted crdt", withTasks(addCol(obj{"name": "secret", "type": "bytes", "nullable": true, "encrypted": true, "declaredType": "crdt"})), 1, "tasks", "columns.secret.declaredType", "cannot be encrypted"},
		{"declaredType without encrypted", withTasks(setCol("body", "declaredType", "string")), 1, "tasks", "columns.body.declaredType", "only allowed on encrypted"},

		// Primary key.
		{"missing primary key", withTasks(set("primaryKey", "")), 1, "tasks", "primaryKey", "missing"},
		{"primary key not a column", withTasks(set("primaryKey", "uuid")), 1, "tasks", "primaryKey", `"uuid" is not a column`},
		{"primary key bytes", withTasks(set("primaryKey", "body")), 1, "tasks", "primaryKey", "type bytes"},
		{"primary key float", withTasks(both(setCol("id", "type", "float"))), 1, "tasks", "primaryKey", `primary key column "id" of table "tasks" has type float, which is not eligible`},
		{"primary key blob_ref", withTasks(both(setCol("id", "type", "blob_ref"))), 1, "tasks", "primaryKey", "type blob_ref"},
		{"primary key crdt", withTasks(both(setCol("id", "type", "crdt"), setCol("id", "crdtType", "yjs-doc"))), 1, "tasks", "primaryKey", "type crdt"},
		{"primary key nullable", withTasks(setCol("id", "nullable", true)), 1, "tasks", "primaryKey", "nullable"},
		{"primary key encrypted", withTasks(both(addCol(encrypted), set("primaryKey", "secret"))), 1, "tasks", "primaryKey", "encrypted"},

		// Scopes.
		{"no scopes", withTasks(scopes()), 1, "tasks", "scopes", "at least one scope pattern"},
		{"scopes absent", withTasks(func(t obj) { delete(t, "scopes") }), 1, "tasks", "scopes", "at least one scope pattern"},
		{"pattern without variable", withTasks(scopes("project")), 1, "tasks", "scopes[0]", "has no {variable}"},
		{"pattern with two variables", withTasks(scopes("project:{project_id}:{id}")), 1, "tasks", "scopes[0]", "exactly one {variable}"},
		{"pattern without prefix", withTasks(scopes("{project_id}")), 1, "tasks", "scopes[0]", "non-empty literal prefix"},
		{"pattern with empty prefix", withTasks(scopes(":{project_id}")), 1, "tasks", "scopes[0]", "non-empty literal prefix"},
		{"pattern without colon", withTasks(scopes("project{project_id}")), 1, "tasks", "scopes[0]", "non-empty literal prefix"},
		{"pattern with trailing text", withTasks(scopes("project:{project_id}x")), 1, "tasks", "scopes[0]", "must end with"},
		{"pattern with stray brace", withTasks(scopes("project:{project_id")), 1, "tasks", "scopes[0]", "must end with"},
		{"empty variable", withTasks(scopes("project:{}")), 1, "tasks", "scopes[0]", "empty {variable}"},
		{"colon in variable", withTasks(scopes("project:{a:b}")), 1, "tasks", "scopes[0]", "':' inside"},
		{"whitespace in variable", withTasks(scopes("project:{ project_id }")), 1, "tasks", "scopes[0]", "whitespace"},
		{"default column missing", withTasks(scopes("project:{projectId}")), 1, "tasks", "scopes[0].column", `"projectId" is not a column`},
		{"explicit column missing", withTasks(scopes(obj{"pattern": "project:{pid}", "column": "pid"})), 1, "tasks", "scopes[0].column", `"pid" is not a column`},
		{"explicit column empty", withTasks(scopes(obj{"pattern": "project:{project_id}", "column": ""})), 1, "tasks", "scopes[0].column", "column is empty"},
		{"object without pattern", withTasks(scopes(obj{"column": "project_id"})), 1, "tasks", "scopes[0].pattern", "missing"},
		{"scope neither string nor object", withTasks(scopes(5)), 1, "tasks", "scopes[0]", "pattern string or an object"},
		{"IR variable disagrees", withTasks(scopes(obj{"pattern": "project:{project_id}", "variable": "pid", "column": "project_id"})), 1, "tasks", "scopes[0].variable", "disagrees"},
		{"variable bound to two columns", withTasks(scopes("project:{project_id}", obj{"pattern": "proj:{project_id}", "column": "title"})), 1, "tasks", "scopes[1]", "maps to column \"title\" here and to \"project_id\""},
		{"duplicate pattern", withTasks(scopes("project:{project_id}", obj{"pattern": "project:{project_id}", "column": "project_id"})), 1, "tasks", "scopes[1]", "duplicate scope pattern"},
		{"bytes scope column", withTasks(scopes(obj{"pattern": "b:{b}", "column": "body"})), 1, "tasks", "scopes[0].column", "type bytes"},
		{"crdt scope column", withTasks(both(addCol(obj{"name": "doc", "type": "crdt", "nullable": false, "crdtType": "yjs-doc"}), scopes("d:{doc}"))), 1, "tasks", "scopes[0].column", "type crdt"},
		{"encrypted scope column", withTasks(both(addCol(encrypted), scopes("s:{secret}"))), 1, "tasks", "scopes[0].column", "encrypted"},

		// Indexes.
		{"index without name", withTasks(set("indexes", []any{index("", "title")})), 1, "tasks", "indexes[0]", "index name is empty"},
		{"reserved index name", withTasks(set("indexes", []any{index("sync_idx", "title")})), 1, "tasks", "indexes.sync_idx", "reserved prefix"},
		{"index without columns", withTasks(set("indexes", []any{index("idx_t")})), 1, "tasks", "indexes.idx_t.columns", "at least one column"},
		{"index on unknown column", withTasks(set("indexes", []any{index("idx_t", "title", "nope")})), 1, "tasks", "indexes.idx_t.columns", `"nope" is not a column`},
		{"duplicate index in table", withTasks(set("indexes", []any{index("idx_t", "title"), index("IDX_T", "id")})), 1, "tasks", "indexes.IDX_T", "duplicate index name"},
		{"duplicate index across tables", func() string {
			a, b := tasksTable(), renamed("notes")
			a["indexes"] = []any{index("idx_title", "title")}
			b["indexes"] = []any{index("idx_title", "title")}
			return plain(a, b)
		}(), 1, "notes", "indexes.idx_title", `also declared on table "tasks"`},
		{"index named like a table", withTasks(set("indexes", []any{index("tasks", "title")})), 1, "tasks", "indexes.tasks", "collides with a table"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			var se *Error
			if !errors.As(err, &se) {
				t.Fatalf("want *Error, got %v", err)
			}
			for _, p := range se.Problems {
				if p.Version == tc.version && p.Table == tc.table && p.Field == tc.field && strings.Contains(p.Message, tc.msg) {
					return
				}
			}
			t.Fatalf("no problem v%d table %q field %q containing %q in:\n%v", tc.version, tc.table, tc.field, tc.msg, err)
		})
	}
}

// TestValidationAccepts pins rule edges that must stay legal.
func TestValidationAccepts(t *testing.T) {
	cases := []struct {
		name string
		doc  string
	}{
		{"integer primary key", withTasks(setCol("id", "type", "integer"))},
		// §2.4 (wire version 3 spec): boolean and json keys render the same
		// in every implementation and are eligible.
		{"boolean primary key", withTasks(setCol("id", "type", "boolean"))},
		{"json primary key", withTasks(setCol("id", "type", "json"))},
		{"prefix containing a colon", withTasks(scopes("org:team:{project_id}"))},
		{"one variable, one column, two prefixes", withTasks(scopes("project:{project_id}", "proj:{project_id}"))},
		{"two variables on one column", withTasks(scopes("project:{project_id}", obj{"pattern": "p:{pid}", "column": "project_id"}))},
		{"nullable scope column", withTasks(setCol("project_id", "nullable", true))},
		{"63-byte table name", plain(renamed(strings.Repeat("t", 63)))},
		{"name merely containing sync", plain(renamed("async_jobs"))},
		{"same variable, different column per table", func() string {
			p := obj{
				"name":       "projects",
				"columns":    []any{col("id", "string", false)},
				"primaryKey": "id",
				"scopes":     []any{obj{"pattern": "project:{project_id}", "column": "id"}},
			}
			return plain(p, tasksTable())
		}()},
		{"unknown keys tolerated", withTasks(set("comment", "ignored"))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Parse([]byte(tc.doc)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestValidationCollectsEveryProblem(t *testing.T) {
	bad := tasksTable()
	bad["columns"] = append(bad["columns"].([]any), col("_sync_x", "text", true))
	bad["primaryKey"] = "uuid"
	other := renamed("notes")
	other["scopes"] = []any{}
	_, err := Parse([]byte(plain(bad, other)))
	var se *Error
	if !errors.As(err, &se) {
		t.Fatalf("want *Error, got %v", err)
	}
	want := []Problem{
		{1, "tasks", "columns._sync_x", ""},
		{1, "tasks", "columns._sync_x.type", ""},
		{1, "tasks", "primaryKey", ""},
		{1, "notes", "scopes", ""},
	}
	if len(se.Problems) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%v", len(se.Problems), len(want), err)
	}
	for i, w := range want {
		p := se.Problems[i]
		if p.Version != w.Version || p.Table != w.Table || p.Field != w.Field || p.Message == "" {
			t.Errorf("problem %d = %+v, want %+v", i, p, w)
		}
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "schema: 4 problems:") || !strings.Contains(msg, `v1 table "notes" scopes: `) {
		t.Fatalf("Error() = %q", msg)
	}
}

func TestMaterializeDefault(t *testing.T) {
	secret := obj{"name": "secret", "type": "bytes", "nullable": true, "encrypted": true, "declaredType": "json"}
	allEncrypted := obj{
		"name":       "vault",
		"columns":    []any{col("id", "string", false), col("owner", "string", false), secret},
		"primaryKey": "id",
		"scopes":     []any{"user:{owner}"},
	}
	s := mustParse(t, plain(allEncrypted))
	if mustTable(t, mustVersion(t, s, 1), "vault").Materialize {
		t.Fatal("a fully encrypted table defaults to not materialized")
	}
	allEncrypted["materialize"] = true
	s = mustParse(t, plain(allEncrypted))
	if !mustTable(t, mustVersion(t, s, 1), "vault").Materialize {
		t.Fatal("explicit materialize wins")
	}
}
