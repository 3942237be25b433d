package main

import (
	"bytes"
	"encoding/json"
	"github.com/skyfold/syncular-lambda/internal/vectors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestRenderAndRoundtripEveryVector(t *testing.T) {
	runEveryVector(t, vectors.Dir(t), []string{"request", "response", "segment"})
}

// TestRenderAndRoundtripEveryVectorV3: the wire-version 3 set, push/
// sparse rows included (described by their manifest through -push).
func TestRenderAndRoundtripEveryVectorV3(t *testing.T) {
	runEveryVector(t, vectors.DirV3(t), []string{"request", "response", "segment", "push"})
}

func runEveryVector(t *testing.T, dir string, kinds []string) {
	passed := 0
	for _, kind := range kinds {
		m := vectors.Load(t, dir, kind)
		var flags []string
		if kind == "push" {
			flags = []string{"-push", filepath.Join(dir, kind, "manifest.json")}
		}
		cmd := func(verb, file string) []string {
			if flags == nil {
				return []string{verb, file}
			}
			return []string{verb, flags[0], flags[1], file}
		}
		for _, c := range m.Cases {
			file := filepath.Join(dir, kind, c.Bin)
			var out, errOut bytes.Buffer
			if code := run(cmd("render", file), &out, &errOut); code != 0 {
				t.Errorf("%s/%s render exit %d: %s", kind, c.Name, code, errOut.String())
				continue
			}
			want, err := os.ReadFile(filepath.Join(dir, kind, c.JSON))
			if err != nil {
				t.Fatal(err)
			}
			var got, exp any
			if err := json.Unmarshal(out.Bytes(), &got); err != nil {
				t.Fatalf("%s/%s: %v", kind, c.Name, err)
			}
			if err := json.Unmarshal(want, &exp); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, exp) {
				t.Errorf("%s/%s: rendering differs from %s", kind, c.Name, c.JSON)
				continue
			}
			out.Reset()
			if code := run(cmd("roundtrip", file), &out, &errOut); code != 0 {
				t.Errorf("%s/%s roundtrip exit %d: %s", kind, c.Name, code, errOut.String())
				continue
			}
			passed++
		}
		for _, c := range m.Invalid {
			var out, errOut bytes.Buffer
			code := run(cmd("render", filepath.Join(dir, kind, c.Bin)), &out, &errOut)
			if code == 0 || strings.TrimSpace(out.String()) != c.Error {
				t.Errorf("%s/invalid/%s: exit %d, printed %q, want code %s", kind, c.Name, code, out.String(), c.Error)
				continue
			}
			passed++
		}
	}
	t.Logf("%d vector files rendered/round-tripped or rejected as expected", passed)
	if passed == 0 {
		t.Fatal("no vectors exercised")
	}
}

func TestUsageAndUnknownMagic(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(nil, &out, &errOut); code != 2 {
		t.Fatalf("usage exit %d", code)
	}
	f := filepath.Join(t.TempDir(), "x.bin")
	if err := os.WriteFile(f, []byte("NOPE...."), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := run([]string{"render", f}, &out, &errOut); code != 1 || strings.TrimSpace(out.String()) != "sync.invalid_request" {
		t.Fatalf("unknown magic: exit %d out %q", code, out.String())
	}
}
