package testenv

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	rieInstallTimeout = 10 * time.Minute
	rieReadyTimeout   = 30 * time.Second
	rieStopGrace      = 3 * time.Second
	rieLogLimit       = 256 << 10
)

// RIE is one running AWS Lambda Runtime Interface Emulator hosting one
// function binary (the Lambda "bootstrap" of a provided.al2023 runtime).
type RIE struct {
	// Endpoint is the emulator's base URL, e.g. http://127.0.0.1:40123.
	Endpoint string
	// InvokeURL is where Invoke posts events.
	InvokeURL string

	sem  chan struct{} // one invoke at a time
	cmd  *exec.Cmd
	done chan struct{}
	out  *tailBuffer
	hc   *http.Client
}

var rieInstall struct {
	once sync.Once
	path string
	dur  time.Duration
	err  error
}

// rieBinary installs aws-lambda-rie (scripts/testenv-rie.sh) once per test
// process; the script itself makes that once per machine.
func rieBinary() (string, time.Duration, error) {
	rieInstall.once.Do(func() {
		start := time.Now()
		rieInstall.path, rieInstall.err = runInstallScript("testenv-rie.sh", rieInstallTimeout)
		rieInstall.dur = time.Since(start)
	})
	return rieInstall.path, rieInstall.dur, rieInstall.err
}

// LambdaRIE starts the emulator on 127.0.0.1 with bootstrap as the function
// and stops it (and the function) at t.Cleanup. The function sees only env
// plus a minimal base (PATH, HOME, region, dummy credentials, function
// name), never the test process's environment, so a developer's AWS
// credentials cannot reach it. Both the invoke port and the emulator's
// Runtime API port are free ports, so parallel test processes do not clash
// on the emulator's fixed default of 9001.
func LambdaRIE(t testing.TB, bootstrap string, env map[string]string) *RIE {
	t.Helper()
	bin, _, err := rieBinary()
	if err != nil {
		t.Fatalf("testenv: the Lambda emulator could not be installed:\n%v", err)
	}
	bootstrap, err = filepath.Abs(bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(bootstrap); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("testenv: bootstrap %s is not an executable file (%v)", bootstrap, err)
	}
	invokePort, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	apiPort, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	for apiPort == invokePort {
		if apiPort, err = FreePort(); err != nil {
			t.Fatal(err)
		}
	}
	addr := "127.0.0.1:" + strconv.Itoa(invokePort)
	cmd := exec.Command(bin,
		"--runtime-interface-emulator-address", addr,
		"--runtime-api-address", "127.0.0.1:"+strconv.Itoa(apiPort),
		"--log-level", "warn", // the emulator's own chatter; not LOG_LEVEL, which the function would see
		bootstrap)
	cmd.Dir = filepath.Dir(bootstrap)
	cmd.Env = rieEnv(env)
	out := &tailBuffer{limit: rieLogLimit}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = childSysProcAttr()
	if err := startChild(cmd); err != nil {
		t.Fatalf("testenv: starting aws-lambda-rie: %v", err)
	}
	r := &RIE{
		Endpoint:  "http://" + addr,
		InvokeURL: "http://" + addr + "/2015-03-31/functions/function/invocations",
		sem:       make(chan struct{}, 1),
		cmd:       cmd,
		done:      make(chan struct{}),
		out:       out,
		hc:        newHTTPClient(t),
	}
	go func() { _ = cmd.Wait(); close(r.done) }()
	t.Cleanup(func() {
		stopProcess(cmd.Process, r.done, rieStopGrace)
		if t.Failed() {
			t.Logf("aws-lambda-rie output (tail):\n%s", out.String())
		}
	})
	if err := r.waitReady(rieReadyTimeout); err != nil {
		t.Fatalf("%v\naws-lambda-rie output:\n%s", err, out.String())
	}
	return r
}

// rieEnv builds the emulator's environment, which it forwards to the
// function as that function's whole environment.
func rieEnv(env map[string]string) []string {
	base := map[string]string{
		"PATH":                      os.Getenv("PATH"),
		"HOME":                      os.TempDir(),
		"TMPDIR":                    os.TempDir(),
		"AWS_REGION":                Region,
		"AWS_DEFAULT_REGION":        Region,
		"AWS_ACCESS_KEY_ID":         "testenv",
		"AWS_SECRET_ACCESS_KEY":     "testenv",
		"AWS_EC2_METADATA_DISABLED": "true",
		"AWS_LAMBDA_FUNCTION_NAME":  "function",
	}
	for k, v := range env {
		base[k] = v
	}
	out := make([]string, 0, len(base))
	for k, v := range base {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// waitReady polls the invoke port. The emulator starts the function lazily
// on the first invoke, so an open port is all "ready" can mean.
func (r *RIE) waitReady(timeout time.Duration) error {
	addr := r.Endpoint[len("http://"):]
	deadline := time.Now().Add(timeout)
	var lastErr error
	for time.Now().Before(deadline) {
		select {
		case <-r.done:
			return fmt.Errorf("testenv: aws-lambda-rie exited during startup (%v)", r.cmd.ProcessState)
		default:
		}
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return nil
		}
		lastErr = err
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("testenv: aws-lambda-rie not listening on %s after %v: %v", addr, timeout, lastErr)
}

// Invoke sends one event and returns the function's response body. Calls
// are serialized because the emulator fails concurrent invokes. A function
// that returns an error still yields a response (the Lambda error JSON,
// {"errorMessage":...,"errorType":...}) and a nil error, as the Lambda
// Invoke API does; err reports only emulator or transport failures.
func (r *RIE) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	select {
	case r.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-r.sem }()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.InvokeURL, bytes.NewReader(payload))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("testenv: invoking function: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("testenv: reading invoke response: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return body, fmt.Errorf("testenv: invoke returned HTTP %d: %s", resp.StatusCode, body)
	}
	return body, nil
}

// Logs returns the tail of what the emulator and the function printed.
func (r *RIE) Logs() string { return r.out.String() }

// WaitLogs returns Logs once they contain substr, or whatever they hold
// after timeout. The emulator answers an invoke before the runtime's last
// output has crossed the pipe, so a line of the request just answered may
// not be there yet.
func (r *RIE) WaitLogs(substr string, timeout time.Duration) string {
	for deadline := time.Now().Add(timeout); ; time.Sleep(20 * time.Millisecond) {
		logs := r.Logs()
		if strings.Contains(logs, substr) || time.Now().After(deadline) {
			return logs
		}
	}
}

// FunctionPIDs lists the processes running below the emulator (the
// function's bootstrap once the first invoke started it), so a caller can
// read their /proc entries (Linux only; nil elsewhere).
func (r *RIE) FunctionPIDs() []int {
	var out []int
	for _, p := range descendants(r.cmd.Process.Pid) {
		out = append(out, p.pid)
	}
	return out
}

// BuildFunction builds the Go main package at pkgPath (an import path, or a
// path relative to the module root such as ./functions/push) the way the
// Lambda deploy does (-tags lambda.norpc, static, Linux) and returns the
// path of the "bootstrap" binary in t.TempDir(). It builds for the host's
// architecture rather than the deploy target's so the emulator can run it.
func BuildFunction(t testing.TB, pkgPath string) string {
	t.Helper()
	return BuildFunctionIn(t, pkgPath, t.TempDir())
}

// BuildFunctionIn is BuildFunction writing the binary into dir (for a
// build that outlives the test that made it: SharedDir).
func BuildFunctionIn(t testing.TB, pkgPath, dir string) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "bootstrap")
	cmd := exec.Command("go", "build", "-tags", "lambda.norpc", "-trimpath", "-o", out, pkgPath)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+runtime.GOARCH, "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testenv: building %s: %v\n%s", pkgPath, err, b)
	}
	return out
}
