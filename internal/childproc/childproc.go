//go:build unix

// Package childproc starts and stops the helper processes that tests and
// the local stack run (DynamoDB Local, the Lambda emulator, the realtime
// tier): each child leads its own process group, so stopping it stops what
// it spawned; on Linux the kernel also SIGKILLs it when its parent dies
// (Pdeathsig), and Stop finds descendants that moved to groups of their
// own (the Lambda emulator starts the function that way).
package childproc

import (
	"os"
	"os/exec"
	"syscall"
	"time"
)

// ID names a process by PID and start time, which together never repeat.
type ID struct {
	PID   int
	Start string
}

// Start starts cmd as a child (SysProcAttr set here) from a fresh
// goroutine. Pdeathsig fires when the forking OS thread exits, and Go
// retires a thread only when a goroutine locked to it ends; a fresh
// goroutine is never on a locked thread, so a caller's locked thread
// cannot take the child down.
func Start(cmd *exec.Cmd) error {
	cmd.SysProcAttr = SysProcAttr()
	errc := make(chan error, 1)
	go func() { errc <- cmd.Start() }()
	return <-errc
}

// KillGroup SIGKILLs the process group led by pid and, as a fallback, the
// process itself.
func KillGroup(pid int) {
	if pid <= 0 {
		return
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// Stop asks a child to shut down with SIGTERM, waits up to grace for it to
// exit (done is closed when Wait returned; grace 0 skips the SIGTERM),
// then SIGKILLs its group and every descendant that escaped into a group
// of its own, and waits up to 10 s for done.
func Stop(p *os.Process, done <-chan struct{}, grace time.Duration) {
	below := Descendants(p.Pid)
	if grace > 0 {
		_ = syscall.Kill(p.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(grace):
		}
	}
	KillGroup(p.Pid)
	for _, c := range below {
		if c.Same() {
			KillGroup(c.PID)
		}
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}
