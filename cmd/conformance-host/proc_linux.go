package main

import "syscall"

// childAttr puts DynamoDB Local in its own process group and has the
// kernel kill it if this command dies without stopping it.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
