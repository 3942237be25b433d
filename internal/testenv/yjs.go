package testenv

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

const yjsInstallTimeout = 5 * time.Minute

var yjsInstall struct {
	once sync.Once
	dir  string
	err  error
}

// Yjs returns a directory whose node_modules holds the yjs npm package,
// installing it (via scripts/testenv-yjs.sh) on first use, for tests that
// compare Go code against the reference Yjs under node. It fails the test
// when node or the package cannot be had: a differential test that silently
// skipped would prove nothing.
func Yjs(t testing.TB) string {
	t.Helper()
	yjsInstall.once.Do(func() {
		yjsInstall.dir, yjsInstall.err = runInstallScript("testenv-yjs.sh", yjsInstallTimeout)
	})
	if yjsInstall.err != nil {
		t.Fatalf("testenv: installing yjs: %v", yjsInstall.err)
	}
	if _, err := os.Stat(filepath.Join(yjsInstall.dir, "node_modules", "yjs", "package.json")); err != nil {
		t.Fatalf("testenv: install script reported %s but: %v", yjsInstall.dir, err)
	}
	return yjsInstall.dir
}
