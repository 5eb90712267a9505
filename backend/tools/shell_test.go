package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/overdeck/mcp-backend/internal/proctest"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/mcpwire"
)

func TestShellExecResults(t *testing.T) {
	h := newHarness(t, testOptions())
	dir := t.TempDir()
	tests := []struct {
		name       string
		args       map[string]any
		wantExit   *int
		wantSignal string
		wantStdout string
		wantStderr string
	}{
		{name: "exit zero", args: map[string]any{"command": "true"}, wantExit: new(0)},
		{name: "exit code", args: map[string]any{"command": "exit 3"}, wantExit: new(3)},
		{name: "stdout and stderr", args: map[string]any{"command": "echo out; echo err >&2"}, wantExit: new(0), wantStdout: "out\n", wantStderr: "err\n"},
		{name: "killed by signal", args: map[string]any{"command": "kill -KILL $$"}, wantSignal: "SIGKILL"},
		{name: "terminated by signal", args: map[string]any{"command": "kill -TERM $$"}, wantSignal: "SIGTERM"},
		{name: "cwd", args: map[string]any{"command": "pwd", "cwd": dir}, wantExit: new(0), wantStdout: dir + "\n"},
		{name: "env added", args: map[string]any{"command": `printf %s "$MCP_TEST_VAR"`, "env": map[string]string{"MCP_TEST_VAR": "a b=c"}}, wantExit: new(0), wantStdout: "a b=c"},
		{name: "env inherited", args: map[string]any{"command": `printf %s "$MCP_INHERITED"`}, wantExit: new(0), wantStdout: "from-parent"},
		{name: "env overrides inherited", args: map[string]any{"command": `printf %s "$MCP_INHERITED"`, "env": map[string]string{"MCP_INHERITED": "override"}}, wantExit: new(0), wantStdout: "override"},
		{name: "stdin is empty", args: map[string]any{"command": "cat; echo done"}, wantExit: new(0), wantStdout: "done\n"},
		{name: "explicit timeout not hit", args: map[string]any{"command": "echo fast", "timeoutMs": 10000}, wantExit: new(0), wantStdout: "fast\n"},
	}
	t.Setenv("MCP_INHERITED", "from-parent")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := ok[mcpwire.ShellResult](t, h, mcpwire.ToolShellExec, tc.args)
			switch {
			case tc.wantExit != nil:
				if r.ExitCode == nil || *r.ExitCode != *tc.wantExit || r.Signal != nil {
					t.Fatalf("exit: got code %v signal %v, want code %d", deref(r.ExitCode), deref(r.Signal), *tc.wantExit)
				}
			default:
				if r.Signal == nil || *r.Signal != tc.wantSignal || r.ExitCode != nil {
					t.Fatalf("signal: got %v (exit %v), want %s", deref(r.Signal), deref(r.ExitCode), tc.wantSignal)
				}
			}
			if r.Stdout != tc.wantStdout || r.Stderr != tc.wantStderr {
				t.Fatalf("output: got %q/%q, want %q/%q", r.Stdout, r.Stderr, tc.wantStdout, tc.wantStderr)
			}
			if r.TimedOut || r.OutputLimited {
				t.Fatalf("flags set: %+v", r)
			}
			if r.DurationMs < 0 {
				t.Fatalf("negative duration")
			}
		})
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestShellExecArgumentErrors(t *testing.T) {
	h := newHarness(t, testOptions())
	file := tempFile(t, "plain")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args map[string]any
		code mcpwire.Code
		want string // substring of the message
	}{
		{"missing command", map[string]any{}, mcpwire.CodeInvalidArgument, "command"},
		{"empty command", map[string]any{"command": ""}, mcpwire.CodeInvalidArgument, "command"},
		{"blank command", map[string]any{"command": "   "}, mcpwire.CodeInvalidArgument, "command"},
		{"command wrong type", map[string]any{"command": 5}, mcpwire.CodeInvalidArgument, "command"},
		{"unknown argument", map[string]any{"command": "true", "bogus": 1}, mcpwire.CodeInvalidArgument, "bogus"},
		{"timeout zero", map[string]any{"command": "true", "timeoutMs": 0}, mcpwire.CodeInvalidArgument, "timeoutMs"},
		{"timeout negative", map[string]any{"command": "true", "timeoutMs": -5}, mcpwire.CodeInvalidArgument, "timeoutMs"},
		{"timeout not integer", map[string]any{"command": "true", "timeoutMs": 1.5}, mcpwire.CodeInvalidArgument, "timeoutMs"},
		{"timeout string", map[string]any{"command": "true", "timeoutMs": "10"}, mcpwire.CodeInvalidArgument, "timeoutMs"},
		{"env value not string", map[string]any{"command": "true", "env": map[string]any{"A": 1}}, mcpwire.CodeInvalidArgument, "env"},
		{"env bad name", map[string]any{"command": "true", "env": map[string]any{"A=B": "x"}}, mcpwire.CodeInvalidArgument, "env"},
		{"relative cwd", map[string]any{"command": "true", "cwd": "tmp"}, mcpwire.CodeInvalidArgument, "cwd"},
		{"missing cwd", map[string]any{"command": "true", "cwd": "/nonexistent/dir"}, mcpwire.CodeNotFound, "cwd"},
		{"cwd is a file", map[string]any{"command": "true", "cwd": file}, mcpwire.CodeInvalidArgument, "cwd"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := fails(t, h, mcpwire.ToolShellExec, tc.args, tc.code)
			t.Logf("%s: %s", e.Code, e.Message)
			if !strings.Contains(e.Message, tc.want) {
				t.Fatalf("message %q does not name %q", e.Message, tc.want)
			}
		})
	}
}

func TestShellExecMissingShell(t *testing.T) {
	opts := testOptions()
	opts.ShellPath = "/nonexistent/shell"
	h := newHarness(t, opts)
	fails(t, h, mcpwire.ToolShellExec, map[string]any{"command": "true"}, mcpwire.CodeUnavailable)
}

func TestShellExecTimeoutIsCapped(t *testing.T) {
	opts := testOptions()
	opts.MaxTimeout = 300 * time.Millisecond
	h := newHarness(t, opts)
	// Without the cap the sleep would finish normally with exit 0.
	r := ok[mcpwire.ShellResult](t, h, mcpwire.ToolShellExec, map[string]any{"command": "sleep 30", "timeoutMs": 100000})
	if !r.TimedOut || r.Signal == nil || *r.Signal != "SIGTERM" || r.ExitCode != nil {
		t.Fatalf("want timed out by SIGTERM, got %+v", r)
	}
}

func TestShellExecDefaultTimeout(t *testing.T) {
	opts := testOptions()
	opts.DefaultTimeout = 200 * time.Millisecond
	h := newHarness(t, opts)
	r := ok[mcpwire.ShellResult](t, h, mcpwire.ToolShellExec, map[string]any{"command": "echo before; sleep 30"})
	if !r.TimedOut || r.Stdout != "before\n" {
		t.Fatalf("want timeout keeping the output, got %+v", r)
	}
}

// A command that ignores SIGTERM is SIGKILLed after the grace.
func TestShellExecIgnoresTerm(t *testing.T) {
	h := newHarness(t, testOptions())
	pidFile := tempFile(t, "pids")
	r := ok[mcpwire.ShellResult](t, h, mcpwire.ToolShellExec, map[string]any{
		"command":   "trap '' TERM; echo $$ >> " + pidFile + "; while :; do sleep 0.05; done",
		"timeoutMs": 300,
	})
	if !r.TimedOut || r.Signal == nil || *r.Signal != "SIGKILL" {
		t.Fatalf("want SIGKILL after grace, got %+v", r)
	}
	proctest.WaitDead(t, proctest.ReadPids(t, pidFile, 1)...)
}

func TestShellExecDescendantsDie(t *testing.T) {
	tests := []struct {
		name    string
		opts    func(*Options)
		command string // appended to the grandchildren snippet
		args    map[string]any
		cancel  bool
		check   func(t *testing.T, r mcpwire.ShellResult)
	}{
		{
			name:    "timeout",
			command: "wait",
			args:    map[string]any{"timeoutMs": 500},
			check: func(t *testing.T, r mcpwire.ShellResult) {
				if !r.TimedOut || r.OutputLimited {
					t.Fatalf("want timedOut only, got %+v", r)
				}
			},
		},
		{
			name:    "output limit",
			opts:    func(o *Options) { o.OutputBytes = 64 << 10 },
			command: "yes",
			check: func(t *testing.T, r mcpwire.ShellResult) {
				if !r.OutputLimited || r.TimedOut {
					t.Fatalf("want outputLimited only, got %+v", flags(r))
				}
				if n := len(r.Stdout) + len(r.Stderr); n > 64<<10 {
					t.Fatalf("output %d bytes over the limit", n)
				}
			},
		},
		{
			name:    "normal exit leaves background jobs",
			command: "echo done",
			check: func(t *testing.T, r mcpwire.ShellResult) {
				if r.ExitCode == nil || *r.ExitCode != 0 || r.Stdout != "done\n" {
					t.Fatalf("want exit 0 and output, got %+v", r)
				}
			},
		},
		{name: "cancellation", command: "wait", cancel: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := testOptions()
			if tc.opts != nil {
				tc.opts(&opts)
			}
			h := newHarness(t, opts)
			pidFile := tempFile(t, "pids")
			args := map[string]any{"command": grandchildren(pidFile) + tc.command}
			for k, v := range tc.args {
				args[k] = v
			}
			if tc.cancel {
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() {
					_, err := h.client.CallTool(ctx, &mcp.CallToolParams{Name: mcpwire.ToolShellExec, Arguments: args})
					done <- err
				}()
				pids := proctest.ReadPids(t, pidFile, 2)
				cancel()
				if err := <-done; err == nil {
					t.Fatalf("cancelled call returned no error")
				}
				proctest.WaitDead(t, pids...)
				waitUntracked(t, h.tools)
				return
			}
			r := ok[mcpwire.ShellResult](t, h, mcpwire.ToolShellExec, args)
			tc.check(t, r)
			// The call has returned: the group must already be gone, so no
			// polling beyond what a SIGKILL needs to be delivered.
			proctest.WaitDead(t, proctest.ReadPids(t, pidFile, 2)...)
			waitUntracked(t, h.tools)
		})
	}
}

func flags(r mcpwire.ShellResult) map[string]any {
	return map[string]any{"exit": deref(r.ExitCode), "signal": deref(r.Signal), "timedOut": r.TimedOut, "outputLimited": r.OutputLimited}
}

// waitUntracked waits (bounded) until no command group is tracked. A
// cancelled client returns as soon as it sends the cancellation, before the
// server has killed and untracked the group: wait on the condition itself.
func waitUntracked(t testing.TB, tl *Tools) {
	t.Helper()
	proctest.Eventually(t, "no command group tracked", func() bool {
		tl.mu.Lock()
		defer tl.mu.Unlock()
		return len(tl.groups) == 0
	})
}

// The handler itself answers CANCELLED when its context is cancelled.
func TestShellExecCancelledResult(t *testing.T) {
	tl := New(testOptions())
	defer tl.Close()
	pidFile := tempFile(t, "pids")
	args, _ := json.Marshal(map[string]any{"command": grandchildren(pidFile) + "wait"})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		proctest.ReadPids(t, pidFile, 2)
		cancel()
	}()
	res, err := handlerOf(t, tl, mcpwire.ToolShellExec)(ctx, &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: mcpwire.ToolShellExec, Arguments: args}})
	if err != nil {
		t.Fatal(err)
	}
	wantToolError(t, res, mcpwire.CodeCancelled)
	proctest.WaitDead(t, proctest.ReadPids(t, pidFile, 2)...)
}

func handlerOf(t testing.TB, tl *Tools, name string) mcp.ToolHandler {
	t.Helper()
	for _, d := range tl.defs {
		if d.tool.Name == name {
			return d.handler
		}
	}
	t.Fatalf("no tool %s", name)
	return nil
}

// An orphan in the group holding stdout open does not hang the call and is
// killed; one that escaped the group (setsid) is cut off by WaitDelay.
func TestShellExecOrphanHoldingPipe(t *testing.T) {
	h := newHarness(t, testOptions())
	t.Run("in group", func(t *testing.T) {
		r := ok[mcpwire.ShellResult](t, h, mcpwire.ToolShellExec, map[string]any{"command": "sleep 300 & echo $!; exit 0"})
		if r.ExitCode == nil || *r.ExitCode != 0 {
			t.Fatalf("want exit 0, got %+v", r)
		}
		proctest.WaitDead(t, atoi(t, strings.TrimSpace(r.Stdout)))
	})
	t.Run("escaped group", func(t *testing.T) {
		pidFile := tempFile(t, "pids")
		// The setsid'd sleep keeps stdout open and survives the group kill.
		r := ok[mcpwire.ShellResult](t, h, mcpwire.ToolShellExec, map[string]any{
			"command":   "setsid sh -c 'echo $$ >> " + pidFile + "; exec sleep 300' & sleep 0.2; echo parent; exit 0",
			"timeoutMs": 30000,
		})
		pid := proctest.ReadPids(t, pidFile, 1)[0]
		t.Cleanup(func() { _ = killPid(pid) })
		if r.ExitCode == nil || *r.ExitCode != 0 || r.TimedOut || r.Stdout != "parent\n" {
			t.Fatalf("want exit 0 without timeout, got %+v", r)
		}
		if r.DurationMs >= 30000 {
			t.Fatalf("call hung until the timeout")
		}
	})
}

func TestShellExecOutputLimit(t *testing.T) {
	const limit = 64 << 10
	opts := testOptions()
	opts.OutputBytes = limit
	h := newHarness(t, opts)
	tests := []struct {
		name        string
		command     string
		wantLimited bool
		wantTotal   int // -1: any up to the limit
	}{
		{"exactly the limit", "head -c 65536 /dev/zero | tr '\\0' a", false, limit},
		{"one byte over", "head -c 65537 /dev/zero | tr '\\0' a", true, limit},
		{"split over stdout and stderr", "head -c 40000 /dev/zero | tr '\\0' a; head -c 40000 /dev/zero | tr '\\0' b >&2", true, limit},
		{"both streams flooding", "yes out & yes err >&2; wait", true, -1},
		{"invalid utf-8 flood", "while :; do printf 'a\\377'; done", true, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := ok[mcpwire.ShellResult](t, h, mcpwire.ToolShellExec, map[string]any{"command": tc.command})
			total := len(r.Stdout) + len(r.Stderr)
			if total > limit {
				t.Fatalf("stdout+stderr = %d bytes, over the %d limit", total, limit)
			}
			if r.OutputLimited != tc.wantLimited {
				t.Fatalf("outputLimited = %v, want %v", r.OutputLimited, tc.wantLimited)
			}
			if tc.wantTotal >= 0 && total != tc.wantTotal {
				t.Fatalf("total = %d, want %d", total, tc.wantTotal)
			}
			if !utf8.ValidString(r.Stdout) || !utf8.ValidString(r.Stderr) {
				t.Fatalf("output is not valid UTF-8")
			}
		})
	}
}

func TestShellExecInvalidUTF8(t *testing.T) {
	h := newHarness(t, testOptions())
	r := ok[mcpwire.ShellResult](t, h, mcpwire.ToolShellExec, map[string]any{"command": `printf 'ok\377\376end'`})
	if r.Stdout != "ok\uFFFDend" {
		t.Fatalf("got %q", r.Stdout)
	}
}

// Sanitizing can grow text (1 invalid byte -> 3-byte U+FFFD); the result
// still stays within the limit and says it was cut.
func TestCaptureSanitizedWithinLimit(t *testing.T) {
	c := newCapture(100, 0)
	w := c.stream(&c.stdout)
	for range 50 {
		w.Write([]byte{'a', 0xff})
	}
	out, errOut, limited := c.result()
	if len(out)+len(errOut) > 100 || !limited || !utf8.ValidString(out) {
		t.Fatalf("len %d limited %v valid %v", len(out)+len(errOut), limited, utf8.ValidString(out))
	}
}

// TestCaptureEncodedBudget: control bytes pass the raw output limit but
// encode to six bytes each; both streams together still fit the encoded
// budget, and a small stderr is kept whole.
func TestCaptureEncodedBudget(t *testing.T) {
	tests := []struct {
		name           string
		stdout, stderr string
	}{
		{"NUL flood on stdout", strings.Repeat("\x00", 4000), "error: boom\n"},
		{"escape flood on both", strings.Repeat("\x1b", 3000), strings.Repeat("\x01", 3000)},
		{"plain text fits", "hello\n", "world\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const budget = 6000
			c := newCapture(1<<20, budget)
			c.stream(&c.stdout).Write([]byte(tc.stdout))
			c.stream(&c.stderr).Write([]byte(tc.stderr))
			out, errOut, limited := c.result()
			b1, _ := json.Marshal(out)
			b2, _ := json.Marshal(errOut)
			if len(b1)+len(b2) > budget {
				t.Fatalf("encoded %d bytes, budget %d", len(b1)+len(b2), budget)
			}
			wantCut := len(tc.stdout)+len(tc.stderr) > 100
			if limited != wantCut {
				t.Fatalf("limited = %v, want %v", limited, wantCut)
			}
			if len(tc.stderr) < 100 && errOut != tc.stderr {
				t.Fatalf("small stderr cut: %q", errOut)
			}
		})
	}
}

func TestCloseKillsRunningGroups(t *testing.T) {
	h := newHarness(t, testOptions())
	const calls = 3
	var wg sync.WaitGroup
	files := make([]string, calls)
	results := make([]*mcp.CallToolResult, calls)
	for i := range calls {
		files[i] = tempFile(t, "pids")
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], _ = h.client.CallTool(context.Background(), &mcp.CallToolParams{
				Name: mcpwire.ToolShellExec, Arguments: map[string]any{"command": grandchildren(files[i]) + "wait"},
			})
		}()
	}
	var pids []int
	for _, f := range files {
		pids = append(pids, proctest.ReadPids(t, f, 2)...)
	}
	h.tools.Close()
	proctest.WaitDead(t, pids...)
	wg.Wait()
	for i, r := range results {
		if r == nil {
			t.Fatalf("call %d: no result", i)
		}
		wantToolError(t, r, mcpwire.CodeUnavailable)
	}
	fails(t, h, mcpwire.ToolShellExec, map[string]any{"command": "true"}, mcpwire.CodeUnavailable)
	h.tools.Close() // twice is fine
}

func atoi(t testing.TB, s string) int {
	t.Helper()
	var n int
	if err := json.Unmarshal([]byte(s), &n); err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}

func killPid(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}

// TestEscapedDescendantsDie: processes that leave the command's process
// group (setsid, bash job control) are killed with the command too, on
// timeout and on a normal exit.
func TestEscapedDescendantsDie(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("setsid not installed")
	}
	tests := []struct {
		name, cmd string
		timeoutMs int
	}{
		{"set -m job, timeout", "set -m; sleep 300 & echo $! >> %[1]s; sleep 300", 500},
		{"setsid, normal exit", "setsid sleep 300 & echo $! >> %[1]s; sleep 0.2", 20000},
		{"setsid double fork, normal exit", "setsid sh -c 'sleep 300 & echo $! >> %[1]s' ; sleep 0.2", 20000},
	}
	h := newHarness(t, testOptions())
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := tempFile(t, "pids")
			ok[mcpwire.ShellResult](t, h, mcpwire.ToolShellExec, map[string]any{"command": fmt.Sprintf(tc.cmd, f), "timeoutMs": tc.timeoutMs})
			pids := proctest.ReadPids(t, f, 1)
			proctest.WaitDead(t, pids...)
		})
	}
}

// TestSystemdVariablesNotPassedOn: commands do not inherit the backend's
// NOTIFY_SOCKET and watchdog variables.
func TestSystemdVariablesNotPassedOn(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "/run/nope")
	t.Setenv("WATCHDOG_USEC", "1000")
	h := newHarness(t, testOptions())
	r := ok[mcpwire.ShellResult](t, h, mcpwire.ToolShellExec, map[string]any{"command": `echo "[$NOTIFY_SOCKET][$WATCHDOG_USEC][$MCP_BACKEND_EXEC]"`})
	if !strings.HasPrefix(r.Stdout, "[][][") || strings.HasPrefix(r.Stdout, "[][][]") {
		t.Fatalf("stdout %q: want systemd variables empty and the exec marker set", r.Stdout)
	}
}

// TestForkingSpawnerLeavesNoSurvivors: a spawner that left the group
// (setsid) and keeps forking setsid'd children while the call ends. A single
// pass over /proc missed the children forked after it listed /proc; every
// run must leave no process of the command behind.
func TestForkingSpawnerLeavesNoSurvivors(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Fatal("setsid not installed")
	}
	h := newHarness(t, testOptions())
	for run := range 8 {
		t.Run(fmt.Sprint("run ", run), func(t *testing.T) {
			// A unique sleep length names every process of this run.
			tag := fmt.Sprintf("1000.%d%d", os.Getpid(), run)
			t.Cleanup(func() {
				for _, p := range taggedProcesses(tag) {
					_ = killPid(p)
				}
			})
			started := tempFile(t, "started")
			cmd := fmt.Sprintf("setsid sh -c 'while :; do setsid sleep %[1]s & echo $! >> %[2]s; done' & "+
				"until [ -s %[2]s ]; do sleep 0.01; done; exit 0", tag, started)
			r := ok[mcpwire.ShellResult](t, h, mcpwire.ToolShellExec, map[string]any{"command": cmd, "timeoutMs": 30000})
			if r.ExitCode == nil || *r.ExitCode != 0 {
				t.Fatalf("want exit 0, got %+v", flags(r))
			}
			forked := len(strings.Fields(readFile(t, started)))
			proctest.Eventually(t, "no process of the command left", func() bool {
				left := taggedProcesses(tag)
				if len(left) > 0 {
					t.Logf("%d of %d+ forked processes still alive: %v", len(left), forked, left)
				}
				return len(left) == 0
			})
		})
	}
}

// taggedProcesses returns the live (not zombie) processes whose command
// line contains tag.
func taggedProcesses(tag string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), tag) && proctest.Alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func readFile(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
