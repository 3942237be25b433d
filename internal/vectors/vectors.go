// Package vectors locates the SSP2 golden vectors (SPEC Appendix A) and
// reads their manifests, for tests only. The folder comes from
// $SSP2_VECTORS; when that is set but unusable the test fails, never skips,
// so CI cannot pass silently without the vectors.
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

// kinds are the binary vector kinds every consumer needs present.
var kinds = []string{"request", "response", "segment"}

// Dir returns the vectors folder: $SSP2_VECTORS when set (fatal if it
// lacks a manifest), else ../shared/ssp2-vectors beside the module when it
// exists, else the test is skipped.
func Dir(tb testing.TB) string {
	tb.Helper()
	if dir := os.Getenv("SSP2_VECTORS"); dir != "" {
		for _, k := range kinds {
			if _, err := os.Stat(filepath.Join(dir, k, "manifest.json")); err != nil {
				tb.Fatalf("SSP2_VECTORS=%s is set but unusable: %v", dir, err)
			}
		}
		return dir
	}
	_, file, _, _ := runtime.Caller(0) // <module>/internal/vectors/vectors.go
	dir := filepath.Join(filepath.Dir(file), "..", "..", "..", "shared", "ssp2-vectors")
	if _, err := os.Stat(filepath.Join(dir, "request", "manifest.json")); err != nil {
		tb.Skipf("golden vectors not found (set SSP2_VECTORS): %v", err)
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
