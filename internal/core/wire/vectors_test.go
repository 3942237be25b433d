package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/vectors"
)

type vectorManifest = vectors.Manifest

func vectorsDir(tb testing.TB) string { tb.Helper(); return vectors.Dir(tb) }

func loadManifest(tb testing.TB, dir, kind string) vectorManifest {
	tb.Helper()
	return vectors.Load(tb, dir, kind)
}

func readFile(tb testing.TB, path string) []byte {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// parseJSONValue decodes a JSON document with json.Number so integers
// compare exactly.
func parseJSONValue(tb testing.TB, b []byte) any {
	tb.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		tb.Fatalf("parse JSON: %v\n%s", err, b)
	}
	if _, err := d.Token(); err != io.EOF {
		tb.Fatalf("trailing data after JSON document:\n%s", b)
	}
	return v
}

// readAll drives the streaming Reader over b and collects its frames.
func readAll(b []byte, max int) (*Message, error) {
	r := NewReader(bytes.NewReader(b), max)
	v, k, err := r.Header()
	if err != nil {
		return nil, err
	}
	m := &Message{WireVersion: v, Kind: k}
	for {
		f, err := r.Next()
		if err == io.EOF {
			return m, nil
		}
		if err != nil {
			return nil, err
		}
		m.Frames = append(m.Frames, f)
	}
}

func TestGoldenVectors(t *testing.T) { runGoldenVectors(t, vectorsDir(t), 0) }

// TestGoldenVectorsV3: the wire-version 3 set (sparse push payloads,
// conflictColumns) passes the same checks, and every valid case really is
// version 3.
func TestGoldenVectorsV3(t *testing.T) { runGoldenVectors(t, vectors.DirV3(t), Version3) }

// runGoldenVectors checks every request and response vector under dir;
// wantVersion, when non-zero, is the wire version each valid case carries.
func runGoldenVectors(t *testing.T, dir string, wantVersion uint16) {
	passed, invalid := 0, 0
	for _, kind := range []string{"request", "response"} {
		man := loadManifest(t, dir, kind)
		for _, c := range man.Cases {
			t.Run(kind+"/"+c.Name, func(t *testing.T) {
				bin := readFile(t, filepath.Join(dir, kind, c.Bin))
				want := readFile(t, filepath.Join(dir, kind, c.JSON))
				m, err := Decode(bin)
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				if got := m.Kind.String(); got != kind {
					t.Fatalf("msgKind %s, want %s", got, kind)
				}
				if wantVersion != 0 && m.WireVersion != wantVersion {
					t.Fatalf("wire version %d, want %d", m.WireVersion, wantVersion)
				}
				rendered, err := Render(m)
				if err != nil {
					t.Fatalf("Render: %v", err)
				}
				if g, w := parseJSONValue(t, rendered), parseJSONValue(t, want); !reflect.DeepEqual(g, w) {
					t.Fatalf("rendering differs\n got: %s\nwant: %s", rendered, want)
				}
				enc, err := Encode(m)
				if err != nil {
					t.Fatalf("Encode: %v", err)
				}
				if !bytes.Equal(enc, bin) {
					t.Fatalf("re-encoding differs\n got: %x\nwant: %x", enc, bin)
				}
				var buf bytes.Buffer
				e := NewEncoder(&buf, m.WireVersion, m.Kind)
				for _, f := range m.Frames {
					if err := e.WriteFrame(f); err != nil {
						t.Fatalf("Encoder.WriteFrame: %v", err)
					}
				}
				if err := e.Close(); err != nil {
					t.Fatalf("Encoder.Close: %v", err)
				}
				if !bytes.Equal(buf.Bytes(), bin) {
					t.Fatalf("streaming encoding differs\n got: %x\nwant: %x", buf.Bytes(), bin)
				}
				sm, err := readAll(bin, 1<<20)
				if err != nil {
					t.Fatalf("Reader: %v", err)
				}
				if !reflect.DeepEqual(sm, m) {
					t.Fatalf("Reader and Decode disagree")
				}
				if kind == "request" {
					if _, err := m.Request(); err != nil {
						t.Fatalf("Request view: %v", err)
					}
				}
				passed++
			})
		}
		for _, c := range man.Invalid {
			t.Run(kind+"/invalid/"+c.Name, func(t *testing.T) {
				bin := readFile(t, filepath.Join(dir, kind, c.Bin))
				_, err := Decode(bin)
				assertCode(t, err, syncerr.Code(c.Error))
				_, err = readAll(bin, 1<<20)
				assertCode(t, err, syncerr.Code(c.Error))
				invalid++
			})
		}
	}
	t.Logf("golden vectors: %d valid cases passed (decode, render, byte-exact re-encode, reader), %d invalid cases rejected with the manifest code", passed, invalid)
}

func assertCode(t *testing.T, err error, want syncerr.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %s", want)
	}
	var se *syncerr.Error
	if !errors.As(err, &se) {
		t.Fatalf("error %v (%T) is not a *syncerr.Error", err, err)
	}
	if se.Code != want {
		t.Fatalf("code %s, want %s (%v)", se.Code, want, err)
	}
}
