// Package vectors locates the SSP2 golden vectors (SPEC Appendix A) and
// reads their manifests, for tests only. The wire-version 1–2 set comes
// from $SSP2_VECTORS, the wire-version 3 set from $SSP2_VECTORS_V3; when
// either variable is set but its folder is unusable the test fails, never
// skips, so CI cannot pass silently without the vectors.
package vectors

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
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

// Dir returns the vectors folder: $SSP2_VECTORS when set (fatal if it
// lacks a manifest), else ../shared/ssp2-vectors beside the module when it
// exists, else the test is skipped.
func Dir(tb testing.TB) string {
	tb.Helper()
	return locate(tb, "SSP2_VECTORS", "ssp2-vectors", kinds)
}

// DirV3 returns the wire-version 3 vectors folder: $SSP2_VECTORS_V3 when
// set (fatal if any of request, response, segment, push lacks a
// manifest), else ../shared/ssp2-vectors-v3 beside the module when it
// exists, else the test is skipped.
func DirV3(tb testing.TB) string {
	tb.Helper()
	return locate(tb, "SSP2_VECTORS_V3", "ssp2-vectors-v3", kindsV3)
}

func locate(tb testing.TB, env, folder string, need []string) string {
	tb.Helper()
	if dir := os.Getenv(env); dir != "" {
		for _, k := range need {
			if _, err := os.Stat(filepath.Join(dir, k, "manifest.json")); err != nil {
				tb.Fatalf("%s=%s is set but unusable: %v", env, dir, err)
			}
		}
		return dir
	}
	_, file, _, _ := runtime.Caller(0) // <module>/internal/vectors/vectors.go
	dir := filepath.Join(filepath.Dir(file), "..", "..", "..", "shared", folder)
	if _, err := os.Stat(filepath.Join(dir, "request", "manifest.json")); err != nil {
		tb.Skipf("golden vectors not found (set %s): %v", env, err)
	}
	return dir
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
