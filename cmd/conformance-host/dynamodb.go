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
	"time"

	"github.com/skyfold/syncular-lambda/internal/childproc"
	"github.com/skyfold/syncular-lambda/internal/dynamolocal"
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
	dir, err := dynamolocal.Install(ctx, repo)
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	d := &dynamoLocal{endpoint: "http://127.0.0.1:" + strconv.Itoa(port), done: make(chan struct{})}
	if d.cmd, err = dynamolocal.Command(dir, port); err != nil {
		return nil, err
	}
	d.cmd.Stdout, d.cmd.Stderr = &d.out, &d.out
	if err := childproc.Start(d.cmd); err != nil {
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
	childproc.Stop(d.cmd.Process, d.done, 0)
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
