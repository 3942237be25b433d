package stack

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// child is one process the stack started. It runs in a process group of
// its own (stopping it stops what it spawned) and the kernel SIGKILLs it
// if the stack's process dies first (Pdeathsig), so a killed `make stack`
// or `go test` leaves nothing behind.
type child struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	out  *tail
}

// startChild starts cmd as a child. The fork happens on a fresh goroutine:
// Pdeathsig fires when the forking OS thread exits, and Go retires only
// threads that a goroutine left locked, which a fresh goroutine never is.
func startChild(name string, cmd *exec.Cmd, logTo io.Writer) (*child, error) {
	c := &child{name: name, cmd: cmd, done: make(chan struct{}), out: &tail{}}
	var w io.Writer = c.out
	if logTo != nil {
		w = io.MultiWriter(c.out, &prefixWriter{prefix: name + " | ", w: logTo})
	}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	errc := make(chan error, 1)
	go func() { errc <- cmd.Start() }()
	if err := <-errc; err != nil {
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

// stop sends SIGTERM, waits up to grace, then SIGKILLs the child's group
// and every process below it that moved to a group of its own (the Lambda
// emulator starts the function that way).
func (c *child) stop(grace time.Duration) {
	if c == nil || c.cmd.Process == nil {
		return
	}
	pid := c.cmd.Process.Pid
	below := descendants(pid)
	if grace > 0 && !c.exited() {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(grace):
		}
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for _, p := range below {
		if p.same() {
			_ = syscall.Kill(-p.pid, syscall.SIGKILL)
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
	}
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
	}
}

// kill SIGKILLs the child at once, as a crash would end it.
func (c *child) kill() { c.stop(0) }

// procID names a process by PID and start time, which together never repeat.
type procID struct {
	pid   int
	start string
}

func procStat(pid int) (ppid int, start string, ok bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, "", false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, "", false
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, f[19], err == nil
}

// descendants lists every process below pid (Linux; nil elsewhere).
func descendants(pid int) []procID {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	kids := map[int][]procID{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, start, ok := procStat(p); ok {
			kids[ppid] = append(kids[ppid], procID{p, start})
		}
	}
	var out []procID
	for queue := []int{pid}; len(queue) > 0; queue = queue[1:] {
		for _, k := range kids[queue[0]] {
			out = append(out, k)
			queue = append(queue, k.pid)
		}
	}
	return out
}

func (p procID) same() bool {
	_, start, ok := procStat(p.pid)
	return ok && start == p.start
}

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
