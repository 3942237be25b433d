package vectors

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// TestMissingFailsLoudly: with the variable unset and no ../shared set
// beside the checkout, a vector test fails and says where the vectors
// come from; "skip" skips on purpose; a set beside the main checkout of a
// linked worktree is found.
func TestMissingFailsLoudly(t *testing.T) {
	t.Setenv("SSP2_VECTORS", "")
	base := t.TempDir()
	clone := filepath.Join(base, "clone")
	if err := os.MkdirAll(clone, 0o755); err != nil {
		t.Fatal(err)
	}
	_, outcome := locateWith(t, func(tb testing.TB) string {
		return locateFrom(tb, "SSP2_VECTORS", "ssp2-vectors", kinds, checkoutRoots(clone))
	})
	for _, want := range []string{"fatal:", "SSP2_VECTORS", "syncular/syncular", "spec/vectors", "skip"} {
		if !strings.Contains(outcome, want) {
			t.Errorf("outcome %q does not say %q", outcome, want)
		}
	}

	t.Setenv("SSP2_VECTORS", Skip)
	if _, outcome := locateWith(t, Dir); !strings.HasPrefix(outcome, "skip:") {
		t.Errorf("SSP2_VECTORS=skip: outcome %q, want a skip", outcome)
	}
	t.Setenv("SSP2_VECTORS", "")

	// A linked worktree elsewhere: .git is a file naming the main
	// checkout's .git/worktrees/<name>; the set beside main is used.
	main := filepath.Join(base, "repo", "main")
	shared := filepath.Join(base, "repo", "shared", "ssp2-vectors")
	for _, k := range kinds {
		if err := os.MkdirAll(filepath.Join(shared, k), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(shared, k, "manifest.json"), []byte(`{}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wt := filepath.Join(base, "wt", "feature")
	if err := os.MkdirAll(filepath.Join(main, ".git", "worktrees", "feature"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(wt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wt, ".git"), []byte("gitdir: "+filepath.Join(main, ".git", "worktrees", "feature")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir, outcome := locateWith(t, func(tb testing.TB) string {
		return locateFrom(tb, "SSP2_VECTORS", "ssp2-vectors", kinds, checkoutRoots(wt))
	})
	if outcome != "" || filepath.Clean(dir) != shared {
		t.Errorf("worktree: dir %q outcome %q, want %s", dir, outcome, shared)
	}
}
