//go:build unix && !linux

package testenv

import "syscall"

// childSysProcAttr puts a child in its own process group so stopping it
// also stops whatever it spawned. Without Pdeathsig, only Main and
// t.Cleanup stop children on these systems.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// descendants is not implemented off Linux; process groups must do.
func descendants(int) []procID { return nil }

func (p procID) same() bool { return false }
