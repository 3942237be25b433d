//go:build unix

package testenv

import (
	"os"
	"os/exec"
	"syscall"
	"time"
)

// procID names a process by PID and start time, which together never
// repeat.
type procID struct {
	pid   int
	start string
}

// startChild starts cmd from a fresh goroutine. Pdeathsig fires when the
// forking OS thread exits, and Go retires a thread only when a goroutine
// locked to it (runtime.LockOSThread) ends; a fresh goroutine is never on a
// locked thread, so a caller's locked thread cannot take the child down.
func startChild(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	go func() { errc <- cmd.Start() }()
	return <-errc
}

// killGroup SIGKILLs the process group led by pid (our children are group
// leaders via Setpgid) and, as a fallback, the process itself.
func killGroup(pid int) {
	if pid <= 0 {
		return
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// stopProcess asks a child to shut down with SIGTERM, waits up to grace
// for it to exit (done is closed when Wait returned), then SIGKILLs its
// group and any descendants that escaped into groups of their own.
func stopProcess(p *os.Process, done <-chan struct{}, grace time.Duration) {
	below := descendants(p.Pid)
	if grace > 0 {
		_ = syscall.Kill(p.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(grace):
		}
	}
	killGroup(p.Pid)
	for _, c := range below {
		if c.same() {
			killGroup(c.pid)
		}
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}
