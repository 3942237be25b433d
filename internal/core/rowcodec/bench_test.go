package rowcodec

import "testing"

var benchCols = []Column{
	{"id", TypeString, false},
	{"title", TypeString, false},
	{"done", TypeBoolean, false},
	{"priority", TypeInteger, false},
	{"project_id", TypeString, false},
	{"updated_at", TypeInteger, false},
	{"notes", TypeString, true},
}

var benchRow = []Value{
	{Str: "task-00012345"},
	{Str: "Write the quarterly report"},
	{Bool: true},
	{Int: 3},
	{Str: "project-042"},
	{Int: 1_700_000_012_345},
	{Str: "remember the appendix — ünïcode"},
}

func BenchmarkRowEncode(b *testing.B) {
	c := mustCodec(b, benchCols)
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = c.Append(buf[:0], benchRow); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

func BenchmarkRowDecode(b *testing.B) {
	c := mustCodec(b, benchCols)
	row, err := c.Append(nil, benchRow)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("values", func(b *testing.B) {
		dst := make([]Value, 0, len(benchCols))
		b.SetBytes(int64(len(row)))
		b.ReportAllocs()
		for b.Loop() {
			if dst, err = c.Decode(row, dst); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("validate", func(b *testing.B) {
		b.SetBytes(int64(len(row)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Validate(row); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	})
}

// BenchmarkSparseDecode: a typical v3 patch (PK plus two columns) and a
// full sparse row of the bench table.
func BenchmarkSparseDecode(b *testing.B) {
	c := mustCodec(b, benchCols)
	for _, tc := range []struct {
		name    string
		present []bool
	}{
		{"patch3", []bool{true, true, true, false, false, false, false}},
		{"full", []bool{true, true, true, true, true, true, true}},
	} {
		row, err := c.AppendSparse(nil, benchRow, tc.present)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name, func(b *testing.B) {
			dst := make([]Value, len(benchCols))
			pres := make([]bool, len(benchCols))
			b.SetBytes(int64(len(row)))
			b.ReportAllocs()
			for b.Loop() {
				if dst, pres, err = c.DecodeSparse(row, 0, dst, pres); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
