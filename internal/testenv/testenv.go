// Package testenv starts the real (or faithfully emulated) services that the
// adapter tests run against: DynamoDB Local, an in-process S3 (gofakes3) and
// the AWS Lambda Runtime Interface Emulator. It is imported only from tests.
//
// Packages that use DynamoDB must route their tests through Main so the one
// DynamoDB Local JVM per test process is stopped when the tests end:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// Every server listens on 127.0.0.1 or on a free high port, and every child
// process is stopped by PID when the tests end; on Linux the kernel also
// kills it if the test process dies first (Pdeathsig), so a killed or
// timed-out `go test` leaves nothing behind.
package testenv

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const modulePath = "github.com/skyfold/syncular-lambda"

// mainCalled records that the package's TestMain went through Main, without
// which a shared DynamoDB Local would have no owner to stop it.
var mainCalled atomic.Bool

// Main runs the package's tests and then stops the services shared by the
// whole test process (DynamoDB Local). Call it from TestMain instead of
// m.Run; it does not return.
func Main(m *testing.M) {
	mainCalled.Store(true)
	code := m.Run()
	stopShared()
	os.Exit(code)
}

// stopShared stops every process-wide service that was started and
// removes SharedDir.
func stopShared() {
	stopDynamo()
	if d := sharedDir.dir; d != "" {
		os.RemoveAll(d)
	}
}

var sharedDir struct {
	once sync.Once
	dir  string
	err  error
}

// SharedDir is a directory that lives until Main returns: for what tests
// of one process share and a test's own TempDir would delete when that
// test ends (function builds cached across tests).
func SharedDir(t testing.TB) string {
	t.Helper()
	sharedDir.once.Do(func() { sharedDir.dir, sharedDir.err = os.MkdirTemp("", "testenv-shared-") })
	if sharedDir.err != nil {
		t.Fatalf("testenv: shared directory: %v", sharedDir.err)
	}
	return sharedDir.dir
}

// FreePort returns a TCP port that was free on 127.0.0.1 a moment ago. The
// kernel hands out ephemeral ports in a high range, so servers that cannot
// bind to loopback only (DynamoDB Local) still end up on a high port.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("testenv: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

var nameSeq atomic.Uint64

// UniqueName returns a name for a table, bucket or key prefix that no other
// test in this process (or, thanks to a random suffix, any other process)
// uses, so tests can share one server and still be isolated. The result is
// lower-case [a-z0-9-], starts with a letter and is at most 63 characters,
// which is valid both as a DynamoDB table name and as an S3 bucket name.
func UniqueName(t testing.TB, prefix string) string {
	t.Helper()
	var rnd [3]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatalf("testenv: random name suffix: %v", err)
	}
	suffix := fmt.Sprintf("%d-%s", nameSeq.Add(1), hex.EncodeToString(rnd[:]))
	name := truncate(sanitizeName(prefix), 24)
	if name == "" || name[0] < 'a' || name[0] > 'z' {
		name = "t" + name
	}
	// The end of the test name is the most specific part (subtests).
	room := 63 - len(name) - 1 - len(suffix) - 1
	if testPart := sanitizeName(t.Name()); room > 0 && testPart != "" {
		if len(testPart) > room {
			testPart = strings.Trim(testPart[len(testPart)-room:], "-")
		}
		if testPart != "" {
			name += "-" + testPart
		}
	}
	return name + "-" + suffix
}

func sanitizeName(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.Trim(b.String(), "-")
}

func truncate(s string, n int) string {
	if len(s) > n {
		return strings.TrimRight(s[:n], "-")
	}
	return s
}

var (
	rootOnce sync.Once
	rootDir  string
	rootErr  error
)

// repoRoot finds the module root by walking up from the working directory,
// which `go test` sets to the package's directory inside the module. The
// install scripts and the .tools cache live there.
func repoRoot() (string, error) {
	rootOnce.Do(func() {
		dir, err := os.Getwd()
		if err != nil {
			rootErr = err
			return
		}
		for {
			data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
			if err == nil && isModule(data) {
				rootDir = dir
				return
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				rootErr = errors.New("testenv: go.mod of " + modulePath + " not found above the working directory")
				return
			}
			dir = parent
		}
	})
	return rootDir, rootErr
}

func isModule(gomod []byte) bool {
	for _, line := range strings.Split(string(gomod), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "module" && f[1] == modulePath {
			return true
		}
	}
	return false
}

// runInstallScript runs one of scripts/testenv-*.sh and returns the last
// line it printed (the installed path). The scripts are idempotent and take
// a file lock, so calling them from parallel test processes is safe.
func runInstallScript(name string, timeout time.Duration) (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	script := filepath.Join(root, "scripts", name)
	cmd := exec.Command("bash", script)
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	cmd.SysProcAttr = childSysProcAttr()
	if err := startChild(cmd); err != nil {
		return "", fmt.Errorf("testenv: running %s: %w", script, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(timeout):
		killGroup(cmd.Process.Pid)
		<-done
		err = fmt.Errorf("timed out after %v", timeout)
	}
	if err != nil {
		return "", fmt.Errorf("testenv: %s failed: %v\n%s%s", script, err, stdout.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if last == "" {
		return "", fmt.Errorf("testenv: %s printed no path\n%s", script, stderr.String())
	}
	return last, nil
}

// tailBuffer keeps the last bytes a child process wrote, to explain a
// failed start without flooding the test log.
type tailBuffer struct {
	mu    sync.Mutex
	buf   []byte
	limit int // bytes kept; 0 means tailLimit
}

const tailLimit = 16 << 10

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	limit := b.limit
	if limit == 0 {
		limit = tailLimit
	}
	b.buf = append(b.buf, p...)
	if len(b.buf) > 2*limit {
		b.buf = append(b.buf[:0:0], b.buf[len(b.buf)-limit:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	limit := b.limit
	if limit == 0 {
		limit = tailLimit
	}
	if len(b.buf) > limit {
		return string(b.buf[len(b.buf)-limit:])
	}
	return string(b.buf)
}

// inCI reports whether we run under CI, where a missing service must fail
// the tests rather than skip them.
func inCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v != "" && v != "0" && v != "false"
}
