package wire

import (
	"bytes"
	"path/filepath"
	"testing"
)

func benchInput(b *testing.B) []byte {
	b.Helper()
	return readFile(b, filepath.Join(vectorsDir(b), "response", "commits-incremental.bin"))
}

// benchMessage is benchInput decoded, for the benchmarks that start from
// a Message.
func benchMessage(b *testing.B) (in []byte, m *Message) {
	b.Helper()
	in = benchInput(b)
	m, err := Decode(in)
	if err != nil {
		b.Fatal(err)
	}
	return in, m
}

func BenchmarkDecodeCommitsIncremental(b *testing.B) {
	in := benchInput(b)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeCommitsIncremental(b *testing.B) {
	in, m := benchMessage(b)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(m); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncoderCommitsIncremental is the streaming path the engine
// uses: one reused Encoder writing frame by frame into a reused sink.
func BenchmarkEncoderCommitsIncremental(b *testing.B) {
	in, m := benchMessage(b)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	var buf bytes.Buffer
	e := NewEncoder(&buf, m.WireVersion, m.Kind)
	for b.Loop() {
		buf.Reset()
		e.Reset(&buf, m.WireVersion, m.Kind)
		for _, f := range m.Frames {
			if err := e.WriteFrame(f); err != nil {
				b.Fatal(err)
			}
		}
		if err := e.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReaderCommitsIncremental(b *testing.B) {
	in := benchInput(b)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := readAll(in, 1<<20); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRenderCommitsIncremental(b *testing.B) {
	in, m := benchMessage(b)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Render(m); err != nil {
			b.Fatal(err)
		}
	}
}
