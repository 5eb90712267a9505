package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/user"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"golang.org/x/sys/unix"

	"github.com/overdeck/mcp-backend/backend/jsonsize"
	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/internal/procfs"
	"github.com/overdeck/mcp-backend/internal/signals"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// ProcessListInput is the input of process.list.
type ProcessListInput struct {
	Name  string `json:"name,omitempty" jsonschema:"case-insensitive substring of the process name or command line"`
	User  string `json:"user,omitempty" jsonschema:"user name or numeric uid (effective uid)"`
	Limit int    `json:"limit,omitempty" jsonschema:"maximum processes returned (default 200, at most 5000)"`
}

func (*ProcessListInput) tweakSchema(s *jsonschema.Schema) {
	s.Properties["limit"].Minimum = new(0.0)
	s.Properties["limit"].Maximum = new(float64(maxProcessLimit))
}

// ProcessInfo is one process of process.list.
type ProcessInfo struct {
	PID       int    `json:"pid"`
	PPID      int    `json:"ppid"`
	PGID      int    `json:"pgid"`
	User      string `json:"user"`
	UID       int    `json:"uid"`
	State     string `json:"state" jsonschema:"one-letter state from /proc/PID/stat (R, S, D, Z, T, ...)"`
	Name      string `json:"name"`
	Command   string `json:"command" jsonschema:"command line; [name] for kernel threads"`
	RSSBytes  int64  `json:"rssBytes"`
	CPUTimeMs int64  `json:"cpuTimeMs" jsonschema:"user+system CPU time"`
	Threads   int    `json:"threads"`
	StartTime string `json:"startTime,omitempty" jsonschema:"RFC3339"`
}

// ProcessListResult is the result of process.list, sorted by pid.
type ProcessListResult struct {
	Processes []ProcessInfo `json:"processes"`
	Total     int           `json:"total" jsonschema:"processes matching the filters"`
	Truncated bool          `json:"truncated" jsonschema:"true when the limit or the response budget cut the list"`
}

// processOverhead bounds the encoded bytes of one ProcessInfo beside its
// strings: keys, punctuation and seven numbers of up to 20 digits.
const processOverhead = 320

// encodedProcessMax bounds the encoded JSON size of p from above.
func encodedProcessMax(p ProcessInfo) int {
	return processOverhead + jsonsize.Max(p.User) + jsonsize.Max(p.State) + jsonsize.Max(p.Name) +
		jsonsize.Max(p.Command) + jsonsize.Max(p.StartTime)
}

// ProcessKillInput is the input of process.kill.
type ProcessKillInput struct {
	PID    int `json:"pid" jsonschema:"process id (> 1, not the backend itself)"`
	Signal any `json:"signal,omitempty" jsonschema:"signal name (TERM, SIGTERM) or number; default TERM"`
}

func (*ProcessKillInput) tweakSchema(s *jsonschema.Schema) {
	s.Properties["signal"].Types = []string{"string", "integer"}
	// kill(2) takes a 32-bit pid_t: a wider number must never reach it.
	s.Properties["pid"].Maximum = new(float64(maxPID))
}

// ProcessKillResult is the result of process.kill.
type ProcessKillResult struct {
	PID    int    `json:"pid"`
	Signal string `json:"signal"`
	Sent   bool   `json:"sent"`
}

func (t *Tools) processList(ctx context.Context, in ProcessListInput) (ProcessListResult, error) {
	var res ProcessListResult
	limit, err := checkLimit(in.Limit, defaultProcessLimit, maxProcessLimit)
	if err != nil {
		return res, err
	}
	wantUID := -1
	if in.User != "" {
		uid, err := resolveUser(in.User)
		if err != nil {
			return res, err
		}
		wantUID = uid
	}
	name := strings.ToLower(in.Name)
	// Reading a command line takes the process's memory map lock, which a
	// process stuck in the kernel can hold: the scan runs where the call
	// can leave it.
	return runKernelOp(ctx, t, &t.strandedScans, mcpwire.ToolProcessList, func(ctx context.Context) (ProcessListResult, error) {
		return t.scanProcesses(ctx, name, wantUID, limit)
	})
}

// scanProcesses lists the processes of /proc matching name and wantUID
// (-1: any), at most limit, within the encoded response budget.
func (t *Tools) scanProcesses(ctx context.Context, name string, wantUID, limit int) (ProcessListResult, error) {
	var res ProcessListResult
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return res, toolerr.New(mcpwire.CodeUnavailable, "read /proc: %v", err)
	}
	pids := make([]int, 0, len(entries))
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	sort.Ints(pids)
	boot := bootTime()
	users := map[int]string{}
	res.Processes = []ProcessInfo{}
	// Command lines of control bytes encode six times larger: the list is
	// cut (and flagged) where its encoding would leave the response
	// budget, so the caller gets the first processes rather than no data.
	budget, used, full := t.encodedBudget(), 0, false
	for _, pid := range pids {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		p, ok := readProcess(pid, boot)
		if !ok {
			continue // exited while listing
		}
		if wantUID >= 0 && p.UID != wantUID {
			continue
		}
		if name != "" && !strings.Contains(strings.ToLower(p.Name), name) && !strings.Contains(strings.ToLower(p.Command), name) {
			continue
		}
		res.Total++
		if full || len(res.Processes) >= limit {
			res.Truncated = true
			continue
		}
		u, ok := users[p.UID]
		if !ok {
			u = userName(p.UID)
			users[p.UID] = u
		}
		p.User = u
		size := encodedProcessMax(p)
		if used+size > budget {
			res.Truncated, full = true, true
			continue
		}
		used += size
		res.Processes = append(res.Processes, p)
	}
	return res, nil
}

// readProcess reads one process from /proc; false when it is gone.
func readProcess(pid int, boot time.Time) (ProcessInfo, bool) {
	dir := "/proc/" + strconv.Itoa(pid)
	p, ok := readStat(pid)
	if !ok {
		return ProcessInfo{}, false
	}
	if !boot.IsZero() && p.startTicks > 0 {
		p.StartTime = boot.Add(time.Duration(p.startTicks) * time.Second / procfs.ClockTicks).UTC().Format(time.RFC3339)
	}
	p.UID = -1
	if status, err := os.ReadFile(dir + "/status"); err == nil {
		p.UID = effectiveUID(status)
	}
	if cmdline, err := os.ReadFile(dir + "/cmdline"); err == nil && len(cmdline) > 0 {
		cmdline = bytes.TrimRight(cmdline, "\x00")
		if len(cmdline) > maxCmdlineBytes {
			cmdline = cmdline[:maxCmdlineBytes]
		}
		p.Command = strings.ToValidUTF8(string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})), "\uFFFD")
	}
	if p.Command == "" {
		p.Command = "[" + p.Name + "]"
	}
	return p.ProcessInfo, true
}

type statInfo struct {
	ProcessInfo
	startTicks int64  // clock ticks after boot
	flags      uint64 // PF_* flags of the task
}

// readStat reads and parses /proc/PID/stat; false when it is gone.
func readStat(pid int) (statInfo, bool) {
	st, ok := procfs.Read(pid)
	if !ok {
		return statInfo{}, false
	}
	return fromStat(st), true
}

// parseStat parses the text of /proc/PID/stat.
func parseStat(b []byte) (statInfo, bool) {
	st, ok := procfs.Parse(b)
	if !ok {
		return statInfo{}, false
	}
	return fromStat(st), true
}

func fromStat(st procfs.Stat) statInfo {
	var s statInfo
	s.PID = st.PID
	s.Name = strings.ToValidUTF8(st.Comm, "\uFFFD")
	s.State = st.State
	s.PPID = st.PPID
	s.PGID = st.PGID
	s.CPUTimeMs = (st.UTime + st.STime) * 1000 / procfs.ClockTicks
	s.Threads = st.Threads
	s.startTicks = st.StartTicks
	s.flags = st.Flags
	s.RSSBytes = st.RSSPages * int64(os.Getpagesize())
	return s
}

// effectiveUID reads the effective uid from /proc/PID/status ("Uid: r e s f").
func effectiveUID(status []byte) int {
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 2 {
				if uid, err := strconv.Atoi(f[1]); err == nil {
					return uid
				}
			}
		}
	}
	return -1
}

// bootTime reads btime from /proc/stat; zero when unknown.
func bootTime() time.Time {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "btime "); ok {
			if s, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 64); err == nil {
				return time.Unix(s, 0)
			}
		}
	}
	return time.Time{}
}

func userName(uid int) string {
	if uid < 0 {
		return ""
	}
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return strconv.Itoa(uid)
}

// resolveUser maps a user name or numeric uid to a uid.
func resolveUser(s string) (int, error) {
	if uid, err := strconv.Atoi(s); err == nil && uid >= 0 {
		return uid, nil
	}
	u, err := user.Lookup(s)
	if err != nil {
		return 0, toolerr.New(mcpwire.CodeNotFound, "argument \"user\": no user %q", s)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return 0, toolerr.New(mcpwire.CodeInternal, "argument \"user\": uid %q of %s is not numeric", u.Uid, s)
	}
	return uid, nil
}

// maxPID is the largest value of pid_t. The kernel's pid_max is lower, but
// this is the bound of the type the syscall takes: anything above it would
// wrap (2^32+N is pid N, 2^32-1 is -1: every process).
const maxPID = math.MaxInt32

// checkPID range-checks a pid argument in the type kill(2) takes, before
// any syscall sees it. Refusals of pids that are valid numbers but must not
// be signalled are PERMISSION_DENIED; numbers that are no pid at all are
// INVALID_ARGUMENT.
func checkPID(pid int) error {
	switch {
	case pid > maxPID:
		return toolerr.New(mcpwire.CodeInvalidArgument, "argument \"pid\": %d is not a process id (at most %d)", pid, maxPID)
	case pid <= 1:
		return toolerr.New(mcpwire.CodePermissionDenied, "argument \"pid\": refusing to signal pid %d (pid must be > 1)", pid)
	case pid == selfPID:
		return toolerr.New(mcpwire.CodePermissionDenied, "argument \"pid\": refusing to signal the backend itself (pid %d)", pid)
	}
	return nil
}

func (t *Tools) processKill(_ context.Context, in ProcessKillInput) (ProcessKillResult, error) {
	var res ProcessKillResult
	sig, err := parseSignal(in.Signal)
	if err != nil {
		return res, err
	}
	if err := checkPID(in.PID); err != nil {
		return res, err
	}
	name := signals.Name(sig)
	// A pidfd pins the process: the checks below and the signal are about
	// the same process even if the pid is reused meanwhile. pidfd_open also
	// refuses thread ids, which kill(2) would turn into their whole process
	// (a backend thread id would signal the backend).
	fd, err := unix.PidfdOpen(in.PID, 0)
	if err != nil {
		return res, killError(in.PID, name, err)
	}
	defer unix.Close(fd)
	if isAncestor(in.PID) {
		return res, toolerr.New(mcpwire.CodePermissionDenied, "argument \"pid\": refusing to signal pid %d, an ancestor of the backend", in.PID)
	}
	if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil {
		return res, killError(in.PID, name, err)
	}
	t.log.Info("tools: signal sent", "pid", in.PID, "signal", name)
	return ProcessKillResult{PID: in.PID, Signal: name, Sent: true}, nil
}

func killError(pid int, name string, err error) error {
	switch {
	case isThread(pid):
		// pidfd_open refuses a thread that leads no thread group (EINVAL,
		// ENOENT on newer kernels).
		return toolerr.New(mcpwire.CodeInvalidArgument, "argument \"pid\": %d is a thread id, not a process id", pid)
	case errors.Is(err, syscall.ESRCH), errors.Is(err, syscall.ENOENT):
		return toolerr.New(mcpwire.CodeNotFound, "argument \"pid\": no process %d", pid)
	case errors.Is(err, syscall.EPERM):
		return toolerr.New(mcpwire.CodePermissionDenied, "argument \"pid\": not permitted to signal pid %d", pid)
	}
	return fmt.Errorf("kill %d %s: %w", pid, name, err)
}

// isThread reports whether id is a thread that is not its process's main
// thread (its Tgid differs).
func isThread(id int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(id) + "/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Tgid:"); ok {
			tgid, err := strconv.Atoi(strings.TrimSpace(rest))
			return err == nil && tgid != id
		}
	}
	return false
}

// isAncestor reports whether pid is the backend's parent, grandparent and
// so on: signalling the supervisor (a shell, systemd's child, the test
// runner) takes the backend with it. Read fresh each time, since the
// backend can be reparented.
func isAncestor(pid int) bool {
	cur := selfPID
	for range 4096 { // bounded: a corrupt chain must not loop
		s, ok := readStat(cur)
		if !ok || s.PPID <= 0 {
			return false
		}
		if s.PPID == pid {
			return true
		}
		cur = s.PPID
	}
	return false
}

// parseSignal reads process.kill's signal with the one parser the
// policy's signals rules also use.
func parseSignal(v any) (syscall.Signal, error) {
	sig, err := signals.Parse(v)
	if err != nil {
		return 0, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"signal\": %v", err)
	}
	return sig, nil
}
