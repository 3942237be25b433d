package testenv

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// childSysProcAttr puts a child in its own process group, so stopping it
// also stops whatever it spawned, and asks the kernel to SIGKILL it if the
// test process dies without running its cleanups (killed, timed out,
// panicked). Go threads that start children are never retired unless locked,
// so the parent-thread semantics of Pdeathsig do not fire early here.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// procStat returns a process's parent PID and start time (in clock ticks
// since boot) from /proc/<pid>/stat.
func procStat(pid int) (ppid int, start string, ok bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", false
	}
	// The command name may contain spaces and parentheses; the fields after
	// the last ')' start at field 3 (state), so ppid is f[1], starttime f[19].
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
	if err != nil {
		return 0, "", false
	}
	return ppid, f[19], true
}

// descendants lists every process below pid. The Lambda emulator starts the
// function in a process group of its own, so killing the emulator's group
// alone would leave the function running.
func descendants(pid int) []procID {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]procID{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, start, ok := procStat(p)
		if !ok {
			continue
		}
		children[ppid] = append(children[ppid], procID{pid: p, start: start})
	}
	var out []procID
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
	}
	return out
}

// same reports whether the process is still the one that was recorded, so
// a recycled PID is never signalled.
func (p procID) same() bool {
	_, start, ok := procStat(p.pid)
	return ok && start == p.start
}
