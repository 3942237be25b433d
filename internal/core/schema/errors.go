package schema

import (
	"fmt"
	"strings"
)

// Problem is one defect in a schema document, located by version, table and
// field so an operator can fix it without re-reading the whole file.
type Problem struct {
	// Version is the schema version the problem belongs to; 0 for
	// document-level problems.
	Version int32
	// Table is the table name, "tables[i]" when the name itself is missing,
	// or "" for document-level problems.
	Table string
	// Field locates the offending field inside the table, for example
	// "name", "primaryKey", "columns.title.type", "scopes[1]" or
	// "indexes.idx_tasks_project"; for document-level problems it is the
	// top-level key ("version", "schemaVersions[2]", ...).
	Field   string
	Message string
}

func (p Problem) String() string {
	var b strings.Builder
	if p.Version != 0 {
		fmt.Fprintf(&b, "v%d ", p.Version)
	}
	if p.Table != "" {
		fmt.Fprintf(&b, "table %q ", p.Table)
	}
	if p.Field != "" {
		fmt.Fprintf(&b, "%s: ", p.Field)
	}
	b.WriteString(p.Message)
	return b.String()
}

// Error reports every problem of a rejected schema at once: a schema is server
// configuration, and fixing it one restart per defect is needlessly slow.
type Error struct {
	Problems []Problem
}

func (e *Error) Error() string {
	if len(e.Problems) == 1 {
		return "schema: " + e.Problems[0].String()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "schema: %d problems:", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  - ")
		b.WriteString(p.String())
	}
	return b.String()
}

// problems accumulates Problems for one version while compiling.
type problems struct {
	version int32
	list    []Problem
}

func (c *problems) add(table, field, format string, args ...any) {
	c.list = append(c.list, Problem{
		Version: c.version,
		Table:   table,
		Field:   field,
		Message: fmt.Sprintf(format, args...),
	})
}

func (c *problems) err() error {
	if len(c.list) == 0 {
		return nil
	}
	return &Error{Problems: c.list}
}
