package schema

import (
	"fmt"
	"slices"
)

// OnDelete is a declared reference's ON DELETE action (§6.11).
type OnDelete uint8

const (
	// Restrict (the default) refuses to delete a parent that keeps
	// children.
	Restrict OnDelete = iota
	// Cascade deletes the children with the parent.
	Cascade
	// SetNull sets the children's reference column to NULL.
	SetNull
)

// String is the IR spelling.
func (o OnDelete) String() string {
	switch o {
	case Cascade:
		return "CASCADE"
	case SetNull:
		return "SET NULL"
	default:
		return "RESTRICT"
	}
}

// Reference is one declared column reference (§6.11): Column of this
// table holds the primary key of a ParentTable row.
type Reference struct {
	Column      string
	ColumnIndex int
	ParentTable string
	OnDelete    OnDelete
}

// Referrer is a reference seen from the parent: Table's References[Index]
// points at the parent.
type Referrer struct {
	Table *Table
	Index int
}

// Ref returns the reference itself.
func (r Referrer) Ref() *Reference { return &r.Table.References[r.Index] }

// ReferencedBy lists the references naming table as their parent, in
// table declaration order then reference order.
func (v *Version) ReferencedBy(table string) []Referrer {
	return v.referrers[table]
}

// HasReferences reports whether any table of the version declares a
// reference, so push can skip the §6.11 pass entirely when none does.
func (v *Version) HasReferences() bool { return len(v.referrers) > 0 }

type rawReference struct {
	Column      string  `json:"column"`
	ParentTable string  `json:"parentTable"`
	OnDelete    *string `json:"onDelete"`
}

// compileReferences checks every table's declared references against the
// whole version (the parent may be declared later) with the subset rules
// of §6.11, and builds the parent → referrers map.
func compileReferences(p *problems, v *Version, raws []rawTable) {
	for i, t := range v.Tables {
		label := t.Name
		if label == "" {
			label = fmt.Sprintf("tables[%d]", i)
		}
		seen := map[string]bool{}
		for k, rr := range raws[i].References {
			field := fmt.Sprintf("references[%d]", k)
			ref, ok := compileReference(p, v, t, label, field, rr)
			if !ok {
				continue
			}
			if seen[ref.Column] {
				p.add(label, field+".column", "column %q declares more than one reference", ref.Column)
				continue
			}
			seen[ref.Column] = true
			t.References = append(t.References, ref)
		}
	}
	for _, t := range v.Tables {
		for k := range t.References {
			if v.referrers == nil {
				v.referrers = make(map[string][]Referrer)
			}
			parent := t.References[k].ParentTable
			v.referrers[parent] = append(v.referrers[parent], Referrer{Table: t, Index: k})
		}
	}
}

func compileReference(p *problems, v *Version, t *Table, label, field string, rr rawReference) (Reference, bool) {
	ref := Reference{Column: rr.Column, ColumnIndex: t.ColumnIndex(rr.Column), ParentTable: rr.ParentTable}
	ok := true
	if rr.OnDelete != nil {
		switch *rr.OnDelete {
		case "RESTRICT":
			ref.OnDelete = Restrict
		case "CASCADE":
			ref.OnDelete = Cascade
		case "SET NULL":
			ref.OnDelete = SetNull
		default:
			p.add(label, field+".onDelete", "onDelete %q is not supported; use RESTRICT (the default), CASCADE or SET NULL (§6.11)", *rr.OnDelete)
			ok = false
		}
	}
	if ref.ColumnIndex < 0 {
		p.add(label, field+".column", "reference column %q is not a column of the table", rr.Column)
		return ref, false
	}
	col := t.Columns[ref.ColumnIndex]
	if t.Meta[ref.ColumnIndex].Encrypted {
		p.add(label, field+".column", "reference column %q is encrypted; the server cannot read the parent id in it", rr.Column)
		ok = false
	}
	parent, found := v.Table(rr.ParentTable)
	if !found {
		p.add(label, field+".parentTable", "parent table %q is not a table of this schema version", rr.ParentTable)
		return ref, false
	}
	if parent.PKIndex >= 0 {
		if pk := parent.Columns[parent.PKIndex]; pk.Type != col.Type {
			p.add(label, field+".column", "reference column %q is %s but the primary key %q of %q is %s; the types must match",
				rr.Column, TypeName(col.Type), pk.Name, parent.Name, TypeName(pk.Type))
			ok = false
		}
	}
	if ref.OnDelete == SetNull && !col.Nullable {
		p.add(label, field+".onDelete", "ON DELETE SET NULL needs a nullable column; %q is not nullable", rr.Column)
		ok = false
	}
	// A cascade runs without a second authorization (§6.11), which is
	// sound only when parent and child live in the same scopes: the same
	// patterns here, and at push the same values (a parent in other
	// values is a missing parent, and a row in other values is no child
	// of it; engine sameScope).
	if !slices.Equal(scopePatterns(t), scopePatterns(parent)) {
		p.add(label, field+".parentTable", "table %q and its parent %q declare different scope patterns (%q vs %q); a reference must stay inside one authorization boundary",
			t.Name, parent.Name, scopePatterns(t), scopePatterns(parent))
		ok = false
	}
	return ref, ok
}

// scopePatterns is the sorted set of a table's declared pattern texts.
func scopePatterns(t *Table) []string {
	out := make([]string, 0, len(t.Scopes))
	for _, s := range t.Scopes {
		out = append(out, s.Pattern)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
