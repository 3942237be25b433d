package vectors

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// recTB records whether the locator failed or skipped; both stop the
// caller, modelled by a panic the helper recovers.
type recTB struct {
	testing.TB
	outcome string
}

type stop struct{}

func (r *recTB) Helper() {}
func (r *recTB) Fatalf(format string, a ...any) {
	r.outcome = "fatal: " + fmt.Sprintf(format, a...)
	panic(stop{})
}
func (r *recTB) Skipf(format string, a ...any) {
	r.outcome = "skip: " + fmt.Sprintf(format, a...)
	panic(stop{})
}

func locateWith(t *testing.T, f func(testing.TB) string) (dir, outcome string) {
	r := &recTB{TB: t}
	defer func() {
		if v := recover(); v != nil {
			if _, ok := v.(stop); !ok {
				panic(v)
			}
		}
	}()
	defer func() { outcome = r.outcome }()
	return f(r), ""
}

// TestSetButUnusableFails: a variable naming a missing folder, or a folder
// without one of the required kinds, fails the test instead of skipping.
func TestSetButUnusableFails(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	partial := t.TempDir() // request/ only: push/ etc. missing
	if err := os.MkdirAll(filepath.Join(partial, "request"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(partial, "request", "manifest.json"), []byte(`{}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env string
		f   func(testing.TB) string
	}{{"SSP2_VECTORS", Dir}, {"SSP2_VECTORS_V3", DirV3}} {
		for _, dir := range []string{missing, partial} {
			t.Setenv(tc.env, dir)
			_, outcome := locateWith(t, tc.f)
			if len(outcome) < 6 || outcome[:6] != "fatal:" {
				t.Fatalf("%s=%s: outcome %q, want a failure", tc.env, dir, outcome)
			}
		}
	}
	// A usable v3 folder is returned as is.
	good := t.TempDir()
	for _, k := range kindsV3 {
		if err := os.MkdirAll(filepath.Join(good, k), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(good, k, "manifest.json"), []byte(`{}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("SSP2_VECTORS_V3", good)
	if dir, outcome := locateWith(t, DirV3); dir != good || outcome != "" {
		t.Fatalf("usable folder: dir %q outcome %q", dir, outcome)
	}
}
