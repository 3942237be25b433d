package childproc

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// SysProcAttr puts a child in its own process group and asks the kernel to
// SIGKILL it if its parent dies without stopping it (killed, timed out,
// panicked).
func SysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// stat returns a process's parent PID and start time (in clock ticks since
// boot) from /proc/<pid>/stat.
func stat(pid int) (ppid int, start string, ok bool) {
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

// Descendants lists every process below pid.
func Descendants(pid int) []ID {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]ID{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, start, ok := stat(p); ok {
			children[ppid] = append(children[ppid], ID{PID: p, Start: start})
		}
	}
	var out []ID
	for queue := []int{pid}; len(queue) > 0; queue = queue[1:] {
		for _, c := range children[queue[0]] {
			out = append(out, c)
			queue = append(queue, c.PID)
		}
	}
	return out
}

// Same reports whether the process is still the one that was recorded, so
// a recycled PID is never signalled.
func (p ID) Same() bool {
	_, start, ok := stat(p.PID)
	return ok && start == p.Start
}
