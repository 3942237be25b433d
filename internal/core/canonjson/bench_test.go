package canonjson

import "testing"

// Inputs shaped like protocol data: scope keys and values, row strings,
// json column documents.
var benchKeys = []string{
	"a", "b", "p1", "p10", "p2", "project", "project_id", "tenant", "tenant_id",
	"user-000123", "user-000124", "é", "ü", "中文", "中", "\ue000", "\uffff", "😀", "𝄞",
}

var benchStrings = []string{
	"task-00012345",
	"Write the quarterly report",
	"remember the appendix — ünïcode",
	"line \"quoted\" \\ path\n\tnext",
	"Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris.",
	"日本語のテキストと emoji 😀 mixed with ASCII",
}

var benchDocs = []string{
	`{"a":[1,2.5e3,"x"],"b":{"c":null,"d":true,"e":false}}`,
	`{"tags": ["a", "b"],  "unicode": "𝔘", "nested": {"deep": [[1], [2, 3], {"k": "v\n\"q\""}]}}`,
	`"just a string with \u00e9 escapes and plain text"`,
	`-12345.678e-9`,
	`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
	`{"id":"task-00012345","title":"Write the quarterly report","done":true,"priority":3,"project_id":"project-042","updated_at":1700000012345,"notes":"remember the appendix — ünïcode","labels":["work","q3","finance"],"estimate":{"hours":4.5,"confidence":0.8}}`,
}

var sink int

func BenchmarkCompareUTF16(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		for _, x := range benchKeys {
			for _, y := range benchKeys {
				sink += CompareUTF16(x, y)
			}
		}
	}
}

func BenchmarkAppendString(b *testing.B) {
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		for _, s := range benchStrings {
			buf = AppendString(buf[:0], s)
		}
	}
}

func BenchmarkValidSyntax(b *testing.B) {
	b.Run("string", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, s := range benchDocs {
				if !ValidSyntax(s) {
					b.Fatal(s)
				}
			}
		}
	})
	b.Run("bytes", func(b *testing.B) {
		docs := make([][]byte, len(benchDocs))
		for i, s := range benchDocs {
			docs[i] = []byte(s)
		}
		b.ReportAllocs()
		for b.Loop() {
			for _, s := range docs {
				if !ValidSyntax(s) {
					b.Fatal(s)
				}
			}
		}
	})
}
