package segment

import (
	"bytes"
	"io"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
)

const benchRows = 100_000

// BenchmarkSegmentEncode100k measures the bootstrap path: 100k pre-encoded
// rows of a tasks-like table copied into a segment, SHA-256 included,
// written to io.Discard.
func BenchmarkSegmentEncode100k(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts EncoderOptions
	}{
		{"validated", EncoderOptions{}},
		{"trusted", EncoderOptions{TrustRows: true}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rows, seg, _ := encodeTasks(b, benchRows, EncoderOptions{})
			b.SetBytes(int64(len(seg)))
			b.ReportAllocs()
			for b.Loop() {
				e, err := NewEncoder(io.Discard, "tasks", 3, taskCols, tc.opts)
				if err != nil {
					b.Fatal(err)
				}
				for i, r := range rows {
					if err := e.AppendRow(int64(i+1), r); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := e.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(benchRows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// BenchmarkSegmentDecode100k measures streaming decode of a 100k-row
// segment: every structural and row-codec check, rows exposed as raw
// bytes (the apply path), and optionally decoded into Values.
func BenchmarkSegmentDecode100k(b *testing.B) {
	_, seg, _ := encodeTasks(b, benchRows, EncoderOptions{})
	b.Run("validate", func(b *testing.B) {
		b.SetBytes(int64(len(seg)))
		b.ReportAllocs()
		for b.Loop() {
			d := NewDecoder(bytes.NewReader(seg), DecoderOptions{})
			n := 0
			for d.Next() {
				n++
			}
			if d.Err() != nil || n != benchRows {
				b.Fatal(d.Err(), n)
			}
		}
		b.ReportMetric(float64(benchRows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("values", func(b *testing.B) {
		b.SetBytes(int64(len(seg)))
		b.ReportAllocs()
		for b.Loop() {
			d := NewDecoder(bytes.NewReader(seg), DecoderOptions{})
			vals := make([]rowcodec.Value, 0, len(taskCols))
			var err error
			for d.Next() {
				if vals, err = d.Values(vals); err != nil {
					b.Fatal(err)
				}
			}
			if d.Err() != nil {
				b.Fatal(d.Err())
			}
		}
		b.ReportMetric(float64(benchRows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("inline", func(b *testing.B) {
		b.SetBytes(int64(len(seg)))
		b.ReportAllocs()
		for b.Loop() {
			if err := ValidateStructure(seg); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(benchRows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	})
}
