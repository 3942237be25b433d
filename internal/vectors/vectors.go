// Package vectors locates the SSP2 golden vectors (SPEC Appendix A) and
// reads their manifests, for tests only. The wire-version 1–2 set comes
// from $SSP2_VECTORS, the wire-version 3 set from $SSP2_VECTORS_V3, else
// from ../shared/ssp2-vectors and ../shared/ssp2-vectors-v3 beside the
// checkout (for a linked git worktree, beside its main checkout).
//
// The vectors are not part of this repository: they are spec/vectors/ of
// the public syncular/syncular repository (release 0.15.48 for wire
// versions 1–2, a wire-version 3 release for the other set). A test that
// needs them fails, never skips, when they cannot be found or a variable
// names an unusable folder, so neither CI nor a fresh clone passes
// silently without them; the message says where they come from. Setting a
// variable to "skip" skips that set's tests on purpose, and says so.
package vectors

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Manifest is one kind's manifest.json.
type Manifest struct {
	Kind    string    `json:"kind"`
	Cases   []Case    `json:"cases"`
	Invalid []Invalid `json:"invalid"`
	// Columns and PrimaryKey describe the table of the v3 push/ kind,
	// whose payloads carry no column table of their own.
	Columns    []Column `json:"columns"`
	PrimaryKey string   `json:"primaryKey"`
}

// Column is one column of a push/ manifest (§2.4 type names).
type Column struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Nullable bool   `json:"nullable"`
}

// Case must decode, render to JSON and re-encode byte for byte.
type Case struct {
	Name string `json:"name"`
	Bin  string `json:"bin"`
	JSON string `json:"json"`
}

// Invalid must fail to decode with the catalog code Error.
type Invalid struct {
	Name  string `json:"name"`
	Bin   string `json:"bin"`
	Error string `json:"error"`
}

// kinds are the binary vector kinds every consumer needs present; the v3
// set adds push/ (sparse rows).
var (
	kinds   = []string{"request", "response", "segment"}
	kindsV3 = []string{"request", "response", "segment", "push"}
)

// Dir returns the wire-version 1–2 vectors folder (see the package doc).
func Dir(tb testing.TB) string {
	tb.Helper()
	return locate(tb, "SSP2_VECTORS", "ssp2-vectors", kinds)
}

// DirV3 returns the wire-version 3 vectors folder (see the package doc);
// it must hold request, response, segment and push manifests.
func DirV3(tb testing.TB) string {
	tb.Helper()
	return locate(tb, "SSP2_VECTORS_V3", "ssp2-vectors-v3", kindsV3)
}

// Skip is the value of SSP2_VECTORS / SSP2_VECTORS_V3 that skips the
// tests of that set on purpose.
const Skip = "skip"

// origin says where the vectors come from, for failure messages.
const origin = "the SSP2 golden vectors are not in this repository: they are spec/vectors/ of the public " +
	"syncular/syncular repository (release 0.15.48 for SSP2_VECTORS, wire versions 1–2; a wire-version 3 " +
	"release for SSP2_VECTORS_V3). Copy them to ../shared/ssp2-vectors and ../shared/ssp2-vectors-v3 " +
	"beside this checkout, or point SSP2_VECTORS and SSP2_VECTORS_V3 at them, or set both to \"skip\" " +
	"to run without them"

func locate(tb testing.TB, env, folder string, need []string) string {
	tb.Helper()
	_, file, _, _ := runtime.Caller(0) // <module>/internal/vectors/vectors.go
	return locateFrom(tb, env, folder, need, checkoutRoots(filepath.Join(filepath.Dir(file), "..", "..")))
}

// locateFrom is locate with the checkouts whose ../shared is searched.
func locateFrom(tb testing.TB, env, folder string, need, roots []string) string {
	tb.Helper()
	if dir := os.Getenv(env); dir != "" {
		if dir == Skip {
			tb.Skipf("%s=skip: golden vector test skipped on request", env)
		}
		if err := usable(dir, need); err != nil {
			tb.Fatalf("%s=%s is set but unusable: %v", env, dir, err)
		}
		return dir
	}
	var tried []string
	for _, root := range roots {
		dir := filepath.Join(root, "..", "shared", folder)
		if usable(dir, need) == nil {
			return dir
		}
		tried = append(tried, dir)
	}
	tb.Fatalf("golden vectors not found: %s is unset and %v holds no usable set; %s", env, tried, origin)
	return ""
}

// usable checks that dir holds a manifest for every kind in need.
func usable(dir string, need []string) error {
	for _, k := range need {
		if _, err := os.Stat(filepath.Join(dir, k, "manifest.json")); err != nil {
			return err
		}
	}
	return nil
}

// checkoutRoots returns the checkout root and, when it is a linked git
// worktree (its .git is a "gitdir: <main>/.git/worktrees/<name>" file),
// the main checkout's directory: the places ../shared is looked up beside.
func checkoutRoots(root string) []string {
	root = filepath.Clean(root)
	roots := []string{root}
	b, err := os.ReadFile(filepath.Join(root, ".git"))
	if err != nil {
		return roots // a directory (main checkout) or no git at all
	}
	gitdir, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir: ")
	if !ok {
		return roots
	}
	if !filepath.IsAbs(gitdir) {
		gitdir = filepath.Join(root, gitdir)
	}
	// <main>/.git/worktrees/<name> → <main>
	if wt := filepath.Dir(gitdir); filepath.Base(wt) == "worktrees" && filepath.Base(filepath.Dir(wt)) == ".git" {
		roots = append(roots, filepath.Dir(filepath.Dir(wt)))
	}
	return roots
}

// Load reads the manifest of kind under dir; a manifest without cases is
// a failure.
func Load(tb testing.TB, dir, kind string) Manifest {
	tb.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, kind, "manifest.json"))
	if err != nil {
		tb.Fatal(err)
	}
	var m Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		tb.Fatalf("%s manifest: %v", kind, err)
	}
	if len(m.Cases) == 0 {
		tb.Fatalf("%s manifest lists no cases", kind)
	}
	return m
}
