package tools

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// startSleeper starts a real child process with a unique argument and
// returns it; it is killed and reaped at cleanup.
func startSleeper(t testing.TB, arg string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", arg)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd
}

func TestProcessList(t *testing.T) {
	h := newHarness(t, testOptions())
	child := startSleeper(t, "3001.25")
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}

	r := ok[ProcessListResult](t, h, mcpwire.ToolProcessList, map[string]any{"name": "3001.25"})
	if r.Total != 1 || len(r.Processes) != 1 || r.Truncated {
		t.Fatalf("name filter: %+v", r)
	}
	p := r.Processes[0]
	if p.PID != child.Process.Pid || p.PPID != os.Getpid() || p.Name != "sleep" || p.Command != "sleep 3001.25" ||
		p.User != me.Username || strconv.Itoa(p.UID) != me.Uid || p.RSSBytes <= 0 || p.StartTime == "" || p.Threads != 1 {
		t.Fatalf("process %+v", p)
	}
	if !strings.Contains("SR", p.State) {
		t.Fatalf("state %q", p.State)
	}

	tests := []struct {
		name    string
		args    map[string]any
		check   func(r ProcessListResult) bool
		explain string
	}{
		{"case-insensitive name", map[string]any{"name": "SLEEP 3001.25"}, func(r ProcessListResult) bool { return r.Total == 1 }, "one match"},
		{"user by name", map[string]any{"name": "3001.25", "user": me.Username}, func(r ProcessListResult) bool { return r.Total == 1 }, "one match"},
		{"user by uid", map[string]any{"name": "3001.25", "user": me.Uid}, func(r ProcessListResult) bool { return r.Total == 1 }, "one match"},
		{"other uid", map[string]any{"name": "3001.25", "user": "54321"}, func(r ProcessListResult) bool { return r.Total == 0 && len(r.Processes) == 0 }, "no match"},
		{"limit truncates", map[string]any{"limit": 1}, func(r ProcessListResult) bool { return len(r.Processes) == 1 && r.Total > 1 && r.Truncated }, "one of many"},
		{"sorted by pid", map[string]any{}, func(r ProcessListResult) bool {
			for i := 1; i < len(r.Processes); i++ {
				if r.Processes[i-1].PID >= r.Processes[i].PID {
					return false
				}
			}
			return len(r.Processes) > 1
		}, "ascending pids"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := ok[ProcessListResult](t, h, mcpwire.ToolProcessList, tc.args)
			if !tc.check(r) {
				t.Fatalf("want %s, got total %d, %d processes, truncated %v", tc.explain, r.Total, len(r.Processes), r.Truncated)
			}
		})
	}

	fails(t, h, mcpwire.ToolProcessList, map[string]any{"user": "no-such-user-xyz"}, mcpwire.CodeNotFound)
	e := fails(t, h, mcpwire.ToolProcessList, map[string]any{"limit": 5001}, mcpwire.CodeInvalidArgument)
	if !strings.Contains(e.Message, "limit") {
		t.Fatalf("message %q", e.Message)
	}
}

func TestParseStat(t *testing.T) {
	line := "4242 (we ird) (name)) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 12345 1000 7 18446744073709551615"
	s, ok := parseStat([]byte(line))
	if !ok {
		t.Fatal("not parsed")
	}
	if s.PID != 4242 || s.Name != "we ird) (name)" || s.State != "S" || s.PPID != 1 || s.PGID != 4242 ||
		s.CPUTimeMs != 3000 || s.Threads != 3 || s.startTicks != 12345 || s.flags != 4194560 || s.RSSBytes != 7*int64(os.Getpagesize()) {
		t.Fatalf("parsed %+v", s)
	}
	if _, ok := parseStat([]byte("garbage")); ok {
		t.Fatal("garbage parsed")
	}
}

func TestProcessKill(t *testing.T) {
	h := newHarness(t, testOptions())

	refusals := []struct {
		name string
		pid  int
	}{
		{"init", 1}, {"zero", 0}, {"negative (a group)", -5}, {"the backend", os.Getpid()},
	}
	for _, tc := range refusals {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			e := fails(t, h, mcpwire.ToolProcessKill, map[string]any{"pid": tc.pid, "signal": "KILL"}, mcpwire.CodePermissionDenied)
			if !strings.Contains(e.Message, "pid") {
				t.Fatalf("message %q", e.Message)
			}
		})
	}

	t.Run("no such process", func(t *testing.T) {
		gone := exec.Command("true")
		if err := gone.Run(); err != nil {
			t.Fatal(err)
		}
		fails(t, h, mcpwire.ToolProcessKill, map[string]any{"pid": gone.Process.Pid}, mcpwire.CodeNotFound)
	})

	signals := []struct {
		signal any
		want   syscall.Signal
		name   string
	}{
		{nil, syscall.SIGTERM, "SIGTERM"},
		{"KILL", syscall.SIGKILL, "SIGKILL"},
		{"sigint", syscall.SIGINT, "SIGINT"},
		{"SIGUSR1", syscall.SIGUSR1, "SIGUSR1"},
		{9, syscall.SIGKILL, "SIGKILL"},
		{"15", syscall.SIGTERM, "SIGTERM"},
	}
	for _, tc := range signals {
		t.Run("sends "+tc.name, func(t *testing.T) {
			child := startSleeper(t, "3002")
			args := map[string]any{"pid": child.Process.Pid}
			if tc.signal != nil {
				args["signal"] = tc.signal
			}
			r := ok[ProcessKillResult](t, h, mcpwire.ToolProcessKill, args)
			if r.PID != child.Process.Pid || r.Signal != tc.name || !r.Sent {
				t.Fatalf("result %+v", r)
			}
			child.Wait()
			ws := child.ProcessState.Sys().(syscall.WaitStatus)
			if !ws.Signaled() || ws.Signal() != tc.want {
				t.Fatalf("child ended with %v, want signal %v", child.ProcessState, tc.want)
			}
		})
	}

	bad := []any{"FOO", 65, -1, 9.5, "", true}
	for _, sig := range bad {
		e := fails(t, h, mcpwire.ToolProcessKill, map[string]any{"pid": 999999, "signal": sig}, mcpwire.CodeInvalidArgument)
		if !strings.Contains(e.Message, "signal") {
			t.Fatalf("signal %v: message %q", sig, e.Message)
		}
	}
}

// TestProcessKillPIDRange: pids are checked in the 32-bit type kill(2)
// takes. Wider numbers used to wrap: 2^32+N signalled pid N, 2^32-1 and
// 2^63-1 became kill(-1) (every process). Threads of the backend and its
// ancestors are refused too. Every case sends signal 0, so a regression
// only probes instead of killing the host.
func TestProcessKillPIDRange(t *testing.T) {
	h := newHarness(t, testOptions())
	child := startSleeper(t, "3003")
	self := os.Getpid()
	var thread int
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if tid, _ := strconv.Atoi(e.Name()); tid != 0 && tid != self {
			thread = tid
			break
		}
	}
	if thread == 0 {
		t.Fatal("the test process has no second thread")
	}
	tests := []struct {
		name string
		pid  any
		code mcpwire.Code
	}{
		{"2^32 plus a child", 1<<32 + int64(child.Process.Pid), mcpwire.CodeInvalidArgument},
		{"2^32 plus one (init)", int64(1<<32 + 1), mcpwire.CodeInvalidArgument},
		{"2^32 plus the backend", 1<<32 + int64(self), mcpwire.CodeInvalidArgument},
		{"2^32 minus one (-1)", int64(1<<32 - 1), mcpwire.CodeInvalidArgument},
		{"2^31 (negative int32)", int64(1 << 31), mcpwire.CodeInvalidArgument},
		{"2^63 minus one", json.Number("9223372036854775807"), mcpwire.CodeInvalidArgument},
		{"2^64 plus one", json.Number("18446744073709551617"), mcpwire.CodeInvalidArgument},
		{"minus 2^32 plus a child", -1<<32 + int64(child.Process.Pid), mcpwire.CodePermissionDenied},
		{"a thread of the backend", thread, mcpwire.CodeInvalidArgument},
		{"the backend's parent", os.Getppid(), mcpwire.CodePermissionDenied},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := fails(t, h, mcpwire.ToolProcessKill, map[string]any{"pid": tc.pid, "signal": 0}, tc.code)
			if !strings.Contains(e.Message, "pid") {
				t.Fatalf("message %q does not name pid", e.Message)
			}
		})
	}
	// The largest pid_t is still a pid: it is looked up, not refused.
	fails(t, h, mcpwire.ToolProcessKill, map[string]any{"pid": math.MaxInt32, "signal": 0}, mcpwire.CodeNotFound)
	r := ok[ProcessKillResult](t, h, mcpwire.ToolProcessKill, map[string]any{"pid": child.Process.Pid, "signal": 0})
	if !r.Sent || r.Signal != "0" {
		t.Fatalf("probe of the child: %+v", r)
	}
}

// TestProcessListControlBytesWithinBudget: command lines of control bytes
// encode six times larger. The list used to grow past the response budget
// (the server then had only OUTPUT_LIMIT to answer); now it is cut where
// the budget ends, flagged, and still holds the first processes.
func TestProcessListControlBytesWithinBudget(t *testing.T) {
	opts := testOptions()
	opts.ResponseBytes = 128 << 10
	h := newHarness(t, opts)
	tag := "ctlproc" + strconv.Itoa(os.Getpid())
	const procs = 12
	argv0 := strings.Repeat("\x01\x1b", 2000) + tag // ~24 KB once encoded
	for range procs {
		cmd := exec.Command("sleep", "3004")
		cmd.Args[0] = argv0
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
	}
	res := h.call(t, mcpwire.ToolProcessList, map[string]any{"name": tag})
	if res.IsError {
		t.Fatalf("process.list failed: %v", res.Content)
	}
	b, _ := json.Marshal(res.StructuredContent)
	if len(b) > int(opts.ResponseBytes) {
		t.Fatalf("result encodes to %d bytes, over the %d budget", len(b), opts.ResponseBytes)
	}
	var r ProcessListResult
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.Total != procs || !r.Truncated || len(r.Processes) == 0 || len(r.Processes) >= procs {
		t.Fatalf("total %d, %d processes, truncated %v: want all %d counted, some listed, flagged", r.Total, len(r.Processes), r.Truncated, procs)
	}
	for _, p := range r.Processes {
		if !strings.Contains(p.Command, tag) {
			t.Fatalf("listed %+v", p)
		}
	}
}
