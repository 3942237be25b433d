package stack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	"sync/atomic"
	"time"
)

// buildBinaries builds every main package the stack runs, for the host
// (the emulator runs what the host can execute) and the way the Makefile
// builds the Lambda bootstraps (lambda.norpc, static, trimmed), into dir,
// each named after its package's last path element.
func buildBinaries(ctx context.Context, repo, dir string, pkgs []string) error {
	args := append([]string{"build", "-tags", "lambda.norpc", "-trimpath", "-o", dir + "/"}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+runtime.GOARCH, "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("stack: go build %v: %w\n%s", pkgs, err, out)
	}
	return nil
}

// function is one Lambda function under the Runtime Interface Emulator.
// The emulator serves one invoke at a time, like one execution
// environment; a second caller waits its turn (counted in its timeout).
type function struct {
	name    string
	timeout time.Duration // the template's Timeout
	url     string
	sem     chan struct{}
	proc    *child
	hc      *http.Client
	count   atomic.Int64
}

// startFunction runs bin under the emulator on two free loopback ports
// with env as the function's whole environment (plus a base of region,
// dummy credentials and the function's name: never the caller's AWS
// credentials).
func startFunction(rie, bin, name string, env map[string]string, timeout time.Duration, logTo io.Writer) (*function, error) {
	invokePort, err := freePort()
	if err != nil {
		return nil, err
	}
	apiPort, err := freePort()
	for err == nil && apiPort == invokePort {
		apiPort, err = freePort()
	}
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(invokePort)
	cmd := exec.Command(rie, "--runtime-interface-emulator-address", addr,
		"--runtime-api-address", "127.0.0.1:"+strconv.Itoa(apiPort), "--log-level", "warn", bin)
	cmd.Dir = filepath.Dir(bin)
	base := map[string]string{
		"PATH": os.Getenv("PATH"), "HOME": os.TempDir(), "TMPDIR": os.TempDir(),
		"AWS_REGION": region, "AWS_DEFAULT_REGION": region,
		"AWS_ACCESS_KEY_ID": "stack", "AWS_SECRET_ACCESS_KEY": "stack", "AWS_EC2_METADATA_DISABLED": "true",
		"AWS_LAMBDA_FUNCTION_NAME": name, "AWS_LAMBDA_FUNCTION_TIMEOUT": strconv.Itoa(int(timeout / time.Second)),
	}
	for k, v := range env {
		base[k] = v
	}
	cmd.Env = envList(base)
	proc, err := startChild(name, cmd, logTo)
	if err != nil {
		return nil, err
	}
	f := &function{name: name, timeout: timeout, url: "http://" + addr + "/2015-03-31/functions/function/invocations",
		sem: make(chan struct{}, 1), proc: proc,
		hc: &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4}}}
	if err := waitListening(addr, proc, 30*time.Second); err != nil {
		proc.stop(0)
		return nil, fmt.Errorf("stack: %s: %w\n%s", name, err, proc.out.String())
	}
	return f, nil
}

// errInvokeTimeout is an invoke that outlived its deadline.
var errInvokeTimeout = errors.New("stack: invoke timed out")

// invoke sends one event. fnErr reports a function error (the Lambda
// error document {"errorMessage","errorType"}), which the Invoke API
// answers with 200 too; err reports that no answer came.
func (f *function) invoke(ctx context.Context, payload []byte) (resp []byte, fnErr bool, err error) {
	f.count.Add(1)
	select {
	case f.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, false, errInvokeTimeout
	}
	defer func() { <-f.sem }()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.url, bytes.NewReader(payload))
	if err != nil {
		return nil, false, err
	}
	req.Header.Set("Content-Type", "application/json")
	r, err := f.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, false, errInvokeTimeout
		}
		return nil, false, fmt.Errorf("stack: invoke %s: %w", f.name, err)
	}
	defer r.Body.Close()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, false, fmt.Errorf("stack: invoke %s: read: %w", f.name, err)
	}
	if r.StatusCode != http.StatusOK {
		return body, true, nil
	}
	return body, r.Header.Get("X-Amz-Function-Error") != "" || isLambdaError(body), nil
}

// isLambdaError reports whether an invoke result is Lambda's error document.
func isLambdaError(b []byte) bool {
	var e struct {
		Message *string `json:"errorMessage"`
		Type    *string `json:"errorType"`
	}
	return json.Unmarshal(b, &e) == nil && e.Type != nil && e.Message != nil
}

func envList(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// waitListening polls until addr accepts a connection or proc exits.
func waitListening(addr string, proc *child, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if proc != nil && proc.exited() {
			return fmt.Errorf("exited during startup (%v)", proc.cmd.ProcessState)
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not listening on %s after %v: %w", addr, timeout, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func listenLoopback(port int) (net.Listener, error) {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return nil, fmt.Errorf("stack: listen on 127.0.0.1:%d: %w", port, err)
	}
	return l, nil
}

func portOf(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}
