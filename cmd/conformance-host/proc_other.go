//go:build unix && !linux

package main

import "syscall"

// childAttr puts DynamoDB Local in its own process group.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
