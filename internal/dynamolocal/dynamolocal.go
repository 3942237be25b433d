// Package dynamolocal installs and launches Amazon DynamoDB Local the one
// way this repository runs it: in memory, with -sharedDb (every region and
// access key sees the same tables; without it another key meets an empty
// database) and no telemetry. The test harness (internal/testenv), the
// local stack and the conformance host all start it through here.
package dynamolocal

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// InstallTimeout bounds scripts/testenv-dynamodb.sh (an npm install and,
// on a fresh machine, Java from Debian).
const InstallTimeout = 10 * time.Minute

// Install runs repo's scripts/testenv-dynamodb.sh (idempotent, under a
// file lock) and returns the directory holding DynamoDBLocal.jar, the last
// line the script prints. The script's progress goes to stderr.
func Install(ctx context.Context, repo string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, InstallTimeout)
	defer cancel()
	script := filepath.Join(repo, "scripts", "testenv-dynamodb.sh")
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Dir = repo
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("dynamolocal: %s: %w", script, err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	dir := strings.TrimSpace(lines[len(lines)-1])
	if _, err := os.Stat(filepath.Join(dir, "DynamoDBLocal.jar")); err != nil {
		return "", fmt.Errorf("dynamolocal: %s reported %q: %w", script, dir, err)
	}
	return dir, nil
}

// Command is the JVM command that serves DynamoDB Local from dir (what
// Install returned) on 127.0.0.1:port. Its working directory is the
// system temp dir, where DynamoDB Local may write logs; the caller sets
// output and starts it (internal/childproc).
func Command(dir string, port int) (*exec.Cmd, error) {
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, fmt.Errorf("dynamolocal: java (DynamoDB Local needs it): %w", err)
	}
	cmd := exec.Command(java,
		"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
		"-Djava.library.path="+filepath.Join(dir, "DynamoDBLocal_lib"),
		"-jar", filepath.Join(dir, "DynamoDBLocal.jar"),
		"-inMemory", "-sharedDb", "-disableTelemetry", "-port", strconv.Itoa(port))
	cmd.Dir = os.TempDir()
	return cmd, nil
}
