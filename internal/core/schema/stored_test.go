package schema

import (
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
)

// A row stored by a build of schema 1 still decodes after schema 2 added
// a column: with or without column versions, into schema 2's columns
// with the new column NULL; a payload of no served layout is an error.
func TestDecodeStoredOlderLayout(t *testing.T) {
	v1 := tasksTable()
	v2 := tasksTable()
	addCol(col("status", "string", true))(v2)
	older, err := Parse([]byte(plain(v1)))
	if err != nil {
		t.Fatal(err)
	}
	doc2 := docJSON(obj{"version": 2, "tables": []any{v2}})
	newer, err := Parse([]byte(doc2))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Merge(newer, older)
	if err != nil {
		t.Fatal(err)
	}
	t1, _ := s.Versions[1].Table("tasks")
	t2, _ := s.Versions[2].Table("tasks")
	old, err := t1.Codec.Append(nil, []rowcodec.Value{{Str: "r"}, {Str: "p"}, {Str: "title"}, {Bytes: []byte{1}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, cv := range [][]int64{nil, {1, 1, 1, 1}} {
		vals, layout, err := s.DecodeStored(t2, old, cv)
		if err != nil || layout != t1 || len(vals) != 5 || vals[2].Str != "title" || !vals[4].Null {
			t.Fatalf("cv %v: %+v layout %v err %v", cv, vals, layout == t1, err)
		}
	}
	cur, err := t2.Codec.Append(nil, []rowcodec.Value{{Str: "r"}, {Str: "p"}, {Str: "t"}, {Null: true}, {Str: "open"}})
	if err != nil {
		t.Fatal(err)
	}
	if vals, layout, err := s.DecodeStored(t2, cur, []int64{1, 1, 1, 1, 1}); err != nil || layout != t2 || vals[4].Str != "open" {
		t.Fatalf("current layout: %+v %v", vals, err)
	}
	if _, _, err := s.DecodeStored(t2, []byte{0xff}, nil); err == nil {
		t.Fatal("garbage decoded")
	}
	// Without the older version's tables this old row (one column short)
	// does not decode: an error, not a misread.
	if _, _, err := newer.DecodeStored(t2, old, nil); err == nil {
		t.Fatal("an old-layout row decoded without its layout")
	}
}
