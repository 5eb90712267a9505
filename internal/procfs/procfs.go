// Package procfs parses /proc/PID/stat, the one file the process tools, the
// audit trail's process targets and the stress samplers all read: one parser,
// so that a command name holding spaces or parentheses is read the same way
// everywhere.
package procfs

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// ClockTicks is USER_HZ, the unit of CPU and start times in /proc/PID/stat.
// It is 100 on every Linux architecture Go supports.
const ClockTicks = 100

// Stat is the part of /proc/PID/stat the programs use.
type Stat struct {
	PID  int
	Comm string // as the kernel has it; may be invalid UTF-8
	// State is the one-letter state (R, S, D, Z, X, ...).
	State string
	PPID  int
	PGID  int
	// Flags are the task's PF_* flags.
	Flags uint64
	// UTime and STime are CPU times in clock ticks.
	UTime, STime int64
	Threads      int
	// StartTicks is the start time in clock ticks after boot; with the pid
	// it names a process the kernel cannot have reused.
	StartTicks int64
	RSSPages   int64
}

// Read reads and parses /proc/PID/stat; false when the process is gone.
func Read(pid int) (Stat, bool) {
	if pid <= 0 {
		return Stat{}, false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, false
	}
	return Parse(b)
}

// Parse parses the text of /proc/PID/stat. The command name is in
// parentheses and may itself hold spaces and parentheses, so the fields
// start after the last ')'.
func Parse(b []byte) (Stat, bool) {
	var s Stat
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return s, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:open])))
	if err != nil {
		return s, false
	}
	f := strings.Fields(string(b[end+1:]))
	// f[0] is field 3 (state) of proc(5); field N is f[N-3].
	if len(f) < 22 {
		return s, false
	}
	num := func(n int) int64 { v, _ := strconv.ParseInt(f[n-3], 10, 64); return v }
	s.PID = pid
	s.Comm = string(b[open+1 : end])
	s.State = f[0]
	s.PPID = int(num(4))
	s.PGID = int(num(5))
	s.Flags, _ = strconv.ParseUint(f[9-3], 10, 64)
	s.UTime, s.STime = num(14), num(15)
	s.Threads = int(num(20))
	s.StartTicks = num(22)
	s.RSSPages = num(24)
	return s, true
}
