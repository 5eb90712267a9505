package tools

import (
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
		s.CPUTimeMs != 3000 || s.Threads != 3 || s.startTicks != 12345 || s.RSSBytes != 7*int64(os.Getpagesize()) {
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
