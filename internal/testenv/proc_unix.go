//go:build unix

package testenv

import (
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/skyfold/syncular-lambda/internal/childproc"
)

// The children of the tests are started and stopped by internal/childproc
// (own process group, Pdeathsig on Linux, descendants stopped too), which
// the local stack (internal/stack) shares.

// procID names a process by PID and start time, which together never
// repeat.
type procID struct {
	pid   int
	start string
}

func childSysProcAttr() *syscall.SysProcAttr { return childproc.SysProcAttr() }

func startChild(cmd *exec.Cmd) error { return childproc.Start(cmd) }

func killGroup(pid int) { childproc.KillGroup(pid) }

func stopProcess(p *os.Process, done <-chan struct{}, grace time.Duration) {
	childproc.Stop(p, done, grace)
}

// descendants lists every process below pid (Linux only; nil elsewhere).
func descendants(pid int) []procID {
	var out []procID
	for _, d := range childproc.Descendants(pid) {
		out = append(out, procID{pid: d.PID, start: d.Start})
	}
	return out
}

// same reports whether the process is still the one that was recorded.
func (p procID) same() bool { return childproc.ID{PID: p.pid, Start: p.start}.Same() }
