package stack

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/skyfold/syncular-lambda/internal/childproc"
)

// child is one process the stack started (internal/childproc: its own
// process group, Pdeathsig, descendants stopped with it), so a killed
// `make stack` or `go test` leaves nothing behind.
type child struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	out  *tail
}

func startChild(name string, cmd *exec.Cmd, logTo io.Writer) (*child, error) {
	c := &child{name: name, cmd: cmd, done: make(chan struct{}), out: &tail{}}
	var w io.Writer = c.out
	if logTo != nil {
		w = io.MultiWriter(c.out, &prefixWriter{prefix: name + " | ", w: logTo})
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := childproc.Start(cmd); err != nil {
		return nil, fmt.Errorf("stack: start %s: %w", name, err)
	}
	go func() { _ = cmd.Wait(); close(c.done) }()
	return c, nil
}

// exited reports whether the child has exited.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, waits up to grace, then SIGKILLs the child and all
// below it.
func (c *child) stop(grace time.Duration) {
	if c == nil || c.cmd.Process == nil {
		return
	}
	if c.exited() {
		grace = 0
	}
	childproc.Stop(c.cmd.Process, c.done, grace)
}

// kill SIGKILLs the child at once, as a crash would end it.
func (c *child) kill() { c.stop(0) }

// tail keeps the last 32 KiB a child wrote, to explain a failed start.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

const tailBytes = 32 << 10

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*tailBytes {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-tailBytes:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.buf) > tailBytes {
		return string(t.buf[len(t.buf)-tailBytes:])
	}
	return string(t.buf)
}

// prefixWriter prefixes each line a child writes with its name.
type prefixWriter struct {
	mu     sync.Mutex
	prefix string
	w      io.Writer
	part   []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.part = append(p.part, b...)
	for {
		i := strings.IndexByte(string(p.part), '\n')
		if i < 0 {
			break
		}
		if _, err := fmt.Fprintf(p.w, "%s%s\n", p.prefix, p.part[:i]); err != nil {
			return len(b), err
		}
		p.part = p.part[i+1:]
	}
	return len(b), nil
}

// runScript runs one of scripts/*.sh under root and returns the last line
// it printed (the installed path).
func runScript(ctx context.Context, root, name string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", root+"/scripts/"+name)
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("stack: scripts/%s: %w", name, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if last == "" {
		return "", fmt.Errorf("stack: scripts/%s printed no path", name)
	}
	return last, nil
}

// freePort returns a TCP port that was free on 127.0.0.1 a moment ago.
func freePort() (int, error) {
	l, err := listenLoopback(0)
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return portOf(l.Addr().String()), nil
}
