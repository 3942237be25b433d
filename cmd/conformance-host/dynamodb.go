package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// dynamoLocal is a DynamoDB Local JVM this command started (in memory,
// -sharedDb so every region and key sees the same tables).
type dynamoLocal struct {
	endpoint string
	cmd      *exec.Cmd
	done     chan struct{}
	out      bytes.Buffer
}

// startDynamoLocal installs DynamoDB Local with the repository's
// scripts/testenv-dynamodb.sh (idempotent, shared with `make test`) and
// starts it on a free loopback port.
func startDynamoLocal(ctx context.Context, repo string) (*dynamoLocal, error) {
	script := filepath.Join(repo, "scripts", "testenv-dynamodb.sh")
	install := exec.CommandContext(ctx, "bash", script)
	install.Dir = repo
	var stdout bytes.Buffer
	install.Stdout, install.Stderr = &stdout, os.Stderr
	if err := install.Run(); err != nil {
		return nil, fmt.Errorf("%s: %w", script, err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	dir := strings.TrimSpace(lines[len(lines)-1])
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, fmt.Errorf("java (DynamoDB Local needs it): %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	d := &dynamoLocal{endpoint: "http://127.0.0.1:" + strconv.Itoa(port), done: make(chan struct{})}
	d.cmd = exec.Command(java,
		"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
		"-Djava.library.path="+filepath.Join(dir, "DynamoDBLocal_lib"),
		"-jar", filepath.Join(dir, "DynamoDBLocal.jar"),
		"-inMemory", "-sharedDb", "-disableTelemetry", "-port", strconv.Itoa(port))
	d.cmd.Dir = os.TempDir()
	d.cmd.Stdout, d.cmd.Stderr = &d.out, &d.out
	d.cmd.SysProcAttr = childAttr()
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start DynamoDB Local: %w", err)
	}
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	if err := d.waitReady(ctx, 90*time.Second); err != nil {
		d.stop()
		return nil, err
	}
	return d, nil
}

// waitReady polls until DynamoDB Local answers an HTTP request.
func (d *dynamoLocal) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil}}
	for time.Now().Before(deadline) {
		select {
		case <-d.done:
			return fmt.Errorf("DynamoDB Local exited during startup:\n%s", d.out.String())
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		// Any HTTP answer (400 for an unsigned GET) means it serves.
		if resp, err := hc.Get(d.endpoint); err == nil {
			resp.Body.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return errors.New("DynamoDB Local did not answer within " + timeout.String())
}

// stop kills the JVM's process group (it holds nothing on disk).
func (d *dynamoLocal) stop() {
	if d == nil || d.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// findRepo walks up from dir to the directory holding
// scripts/testenv-dynamodb.sh.
func findRepo(dir string) (string, error) {
	for {
		if _, err := os.Stat(filepath.Join(dir, "scripts", "testenv-dynamodb.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("scripts/testenv-dynamodb.sh not found above the working directory (give -repo or -dynamodb-endpoint)")
		}
		dir = parent
	}
}
