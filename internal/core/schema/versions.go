package schema

import "fmt"

// checkServedVersions rejects a set of served versions that cannot be
// served safely side by side. Rows are stored, scoped and authorized by the
// latest (storage) version's tables whatever version a client speaks
// (§3.1, §3.4), so every older served table must:
//   - exist in the latest version (its rows need a storage layout);
//   - carry every column a latest scope pattern reads, with the same type,
//     so the stored scopes of a row an older client writes are derived
//     from values that client sent and render the same way;
//   - declare only scope patterns the latest table declares identically, so
//     an older client's subscriptions and purges name the same stored
//     scopes the server keeps.
func checkServedVersions(s *Schema) []Problem {
	latest, ok := s.Versions[s.Latest]
	if !ok {
		return nil
	}
	var out []Problem
	for _, n := range s.Served() {
		if n == s.Latest {
			continue
		}
		add := func(table, field, format string, args ...any) {
			out = append(out, Problem{Version: n, Table: table, Field: field, Message: fmt.Sprintf(format, args...)})
		}
		for _, t := range s.Versions[n].Tables {
			lt, ok := latest.Table(t.Name)
			if !ok {
				add(t.Name, "name", "table is served to version %d but absent from the latest version %d, which stores the rows", n, s.Latest)
				continue
			}
			for _, p := range lt.Scopes {
				j := t.ColumnIndex(p.Column)
				switch {
				case j < 0:
					add(t.Name, "columns", "lacks column %q, which the latest version's scope pattern %q reads; a version %d client could not be scoped or authorized safely (§3.4)", p.Column, p.Pattern, n)
				case t.Columns[j].Type != lt.Columns[lt.ColumnIndex(p.Column)].Type:
					add(t.Name, "columns."+p.Column+".type", "scope column %q has type %s here but %s in the latest version; its scope values would render differently (§3.1)", p.Column, TypeName(t.Columns[j].Type), TypeName(lt.Columns[lt.ColumnIndex(p.Column)].Type))
				}
			}
			for k, p := range t.Scopes {
				if !declares(lt, p) {
					add(t.Name, fmt.Sprintf("scopes[%d]", k), "scope pattern %q (column %q) is not declared by the latest version %d; stored scopes follow the latest version's patterns (§3.1)", p.Pattern, p.Column, s.Latest)
				}
			}
		}
	}
	return out
}

func declares(t *Table, p ScopePattern) bool {
	for _, q := range t.Scopes {
		if q.Pattern == p.Pattern && q.Column == p.Column {
			return true
		}
	}
	return false
}
