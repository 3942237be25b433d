//go:build unix && !linux

package childproc

import "syscall"

// SysProcAttr puts a child in its own process group. Without Pdeathsig,
// only an explicit Stop ends children on these systems.
func SysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// Descendants is not implemented off Linux; process groups must do.
func Descendants(int) []ID { return nil }

// Same is false off Linux (no way to tell a recycled PID).
func (p ID) Same() bool { return false }
