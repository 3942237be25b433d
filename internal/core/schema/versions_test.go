package schema

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

func notesDoc(version int, columns, scopes string) string {
	return `{"version": ` + strconv.Itoa(version) + `, "tables": [
	  {"name": "notes", "primaryKey": "id",
	   "columns": [` + columns + `],
	   "scopes": [` + scopes + `]}]}`
}

const (
	colID    = `{"name": "id", "type": "string", "nullable": false}`
	colOwner = `{"name": "owner", "type": "string", "nullable": false}`
	colTeam  = `{"name": "team", "type": "string", "nullable": false}`
	colBody  = `{"name": "body", "type": "string", "nullable": true}`
	scOwner  = `"user:{owner}"`
	scTeam   = `"team:{team}"`
)

// A set of served versions is rejected when an older version cannot be
// served under the latest version's scope patterns (issue 9 item 1).
func TestMergeRejectsUnsafeScopeVersionSets(t *testing.T) {
	latest := mustParse(t, notesDoc(2, colID+","+colOwner+","+colTeam+","+colBody, scOwner+","+scTeam))
	cases := []struct {
		name, older, field, msg string
	}{
		{"older lacks a scope column", notesDoc(1, colID+","+colOwner+","+colBody, scOwner), "columns", `lacks column "team"`},
		{"scope column type differs", notesDoc(1, colID+","+colOwner+`,{"name": "team", "type": "integer", "nullable": false}`, scOwner), "columns.team.type", "type integer here but string"},
		{"older declares an unknown pattern", notesDoc(1, colID+","+colOwner+","+colTeam, scOwner+`,"org:{team}"`), "scopes[1]", `"org:{team}"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			older := mustParse(t, tc.older)
			_, err := Merge(latest, older)
			var se *Error
			if !errors.As(err, &se) {
				t.Fatalf("want *Error, got %v", err)
			}
			for _, p := range se.Problems {
				if p.Version == 1 && p.Table == "notes" && p.Field == tc.field && strings.Contains(p.Message, tc.msg) {
					return
				}
			}
			t.Fatalf("no v1 notes %s problem containing %q in %v", tc.field, tc.msg, err)
		})
	}
	t.Run("table dropped by the latest version", func(t *testing.T) {
		older := mustParse(t, `{"version": 1, "tables": [
		  {"name": "drafts", "primaryKey": "id", "columns": [`+colID+`,`+colOwner+`], "scopes": [`+scOwner+`]}]}`)
		if _, err := Merge(latest, older); err == nil || !strings.Contains(err.Error(), "absent from the latest version") {
			t.Fatalf("want the dropped table refused, got %v", err)
		}
	})
	// Fewer patterns in the older version are fine: authorization always
	// uses the latest version's patterns, and the older version has every
	// column they read.
	if _, err := Merge(latest, mustParse(t, notesDoc(1, colID+","+colOwner+","+colTeam, scOwner))); err != nil {
		t.Fatalf("older version with a subset of the patterns: %v", err)
	}
}
