package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/proctest"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// slotProcess is one `mcp-backend serve` on a port of its own, with the
// runtime directory systemd gives a production slot (none: "").
type slotProcess struct {
	cmd  *exec.Cmd
	base string
	log  *syncBuffer
}

func startSlotProcess(t testing.TB, runtimeDir string) *slotProcess {
	t.Helper()
	port := proctest.FreePort(t)
	cfg := writeConfig(t, fmt.Sprintf(`{"listen":"127.0.0.1:%d","concurrency":{"maxShell":8,"maxQueue":64}}`, port))
	cmd := exec.Command(binary, "serve", "--config", cfg)
	cmd.Env = os.Environ()
	if runtimeDir != "" {
		cmd.Env = append(cmd.Env, "RUNTIME_DIRECTORY="+runtimeDir)
	}
	p := &slotProcess{cmd: cmd, base: fmt.Sprintf("http://127.0.0.1:%d", port), log: &syncBuffer{}}
	cmd.Stderr = p.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	proctest.Eventually(t, "healthz", func() bool {
		r, err := http.Get(p.base + "/healthz")
		if err == nil {
			r.Body.Close()
		}
		return err == nil && r.StatusCode == 200
	})
	return p
}

// shell starts a shell.exec of command in a conversation of its own (as
// real traffic: one conversation alone would leave the fair-share reserve
// free) and returns its answer's outcome when it ends: "ok", a tool error
// code, or "transport: ...".
func (p *slotProcess) shell(conv, command string) <-chan string {
	out := make(chan string, 1)
	go func() {
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": map[string]any{
			"name": "shell.exec", "arguments": map[string]any{"command": command, "timeoutMs": 600000},
			"_meta": map[string]any{"openai/session": conv}}})
		req, _ := http.NewRequest(http.MethodPost, p.base+"/mcp", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- "transport: " + err.Error()
			return
		}
		defer r.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(r.Body)
		if strings.Contains(b.String(), `"isError":true`) {
			out <- "error: " + b.String()
			return
		}
		out <- "ok"
	}()
	return out
}

func (p *slotProcess) metrics(t testing.TB) mcpwire.Metrics {
	t.Helper()
	r, err := http.Get(p.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var m mcpwire.Metrics
	if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// commandsAlive counts the processes whose command line is exactly argv:
// what runs on the host, whoever started it.
func commandsAlive(argv ...string) int { return len(pidsOf(argv...)) }

func pidsOf(argv ...string) []int {
	want := strings.Join(argv, "\x00") + "\x00"
	files, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var pids []int
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && string(b) == want {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestTwoSlotProcessesHoldOneShellBudget runs two real backends as the two
// production slots do during a cutover (each its own process, one runtime
// directory) and fills the shell budget from both: together they run
// concurrency.maxShell commands, not twice as many. Without the runtime
// directory (the per-process limits the slots had before) they run 16:
// that case is the old behaviour, kept as the control.
func TestTwoSlotProcessesHoldOneShellBudget(t *testing.T) {
	tests := []struct {
		name      string
		shared    bool
		wantAlive int
	}{
		{"slots sharing a runtime directory: 8 for both", true, 8},
		{"per-process limits (no runtime directory): 16", false, 16},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := ""
			if tc.shared {
				dir = t.TempDir()
			}
			a, b := startSlotProcess(t, dir), startSlotProcess(t, dir)
			if tc.shared {
				proctest.Eventually(t, "both count the other", func() bool {
					ma, mb := a.metrics(t), b.metrics(t)
					return ma.Service != nil && ma.Service.Shared && mb.Service != nil && mb.Service.Shared
				})
			}
			argv := []string{"sleep", fmt.Sprintf("%d.%d", 300+i, os.Getpid()%1000)}
			cmd := "exec " + strings.Join(argv, " ")
			var answers []<-chan string
			for n := range 12 {
				answers = append(answers, a.shell(fmt.Sprintf("a-%d", n), cmd), b.shell(fmt.Sprintf("b-%d", n), cmd))
			}
			// Every call is in: running or queued, 24 in all.
			proctest.Eventually(t, "24 calls admitted or queued", func() bool {
				ma, mb := a.metrics(t), b.metrics(t)
				return ma.Active.Shell+ma.Queued.Total+mb.Active.Shell+mb.Queued.Total == 24
			})
			proctest.Eventually(t, fmt.Sprintf("%d commands alive", tc.wantAlive), func() bool { return commandsAlive(argv...) >= tc.wantAlive })
			// Sampled for a while: never more.
			peak := 0
			for range 20 {
				peak = max(peak, commandsAlive(argv...))
				time.Sleep(50 * time.Millisecond)
			}
			ma, mb := a.metrics(t), b.metrics(t)
			t.Logf("commands alive at the peak: %d; a runs %d (queued %d), b runs %d (queued %d)", peak, ma.Active.Shell, ma.Queued.Total, mb.Active.Shell, mb.Queued.Total)
			if peak != tc.wantAlive {
				t.Fatalf("peak of commands alive %d, want %d", peak, tc.wantAlive)
			}
			if tc.shared && (ma.Service.Active.Shell != 8 || mb.Service.Active.Shell != 8 || ma.Service.Queued.Total != 16) {
				t.Fatalf("service figures: a %+v, b %+v", ma.Service, mb.Service)
			}
			for _, p := range []*slotProcess{a, b} {
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
			}
			for _, ch := range answers {
				if got := <-ch; strings.HasPrefix(got, "transport") {
					t.Fatalf("a call failed in transport: %s", got)
				}
			}
		})
	}
}

// TestSlotKilledHoldingShellsLeavesTheBudget kills (SIGKILL) one of two
// slot processes while it holds every shell and the other has shells
// queued: the survivor reclaims the dead one's share and runs the whole
// budget itself, within a bound (logged).
func TestSlotKilledHoldingShellsLeavesTheBudget(t *testing.T) {
	dir := t.TempDir()
	a, b := startSlotProcess(t, dir), startSlotProcess(t, dir)
	proctest.Eventually(t, "both count the other", func() bool {
		ma, mb := a.metrics(t), b.metrics(t)
		return ma.Service != nil && ma.Service.Shared && mb.Service != nil && mb.Service.Shared
	})
	tag := os.Getpid() % 1000
	argvA := []string{"sleep", fmt.Sprintf("310.%d", tag)}
	argvB := []string{"sleep", fmt.Sprintf("311.%d", tag)}
	for n := range 8 {
		a.shell(fmt.Sprintf("a-%d", n), "exec "+strings.Join(argvA, " "))
	}
	proctest.Eventually(t, "a runs 8", func() bool { return commandsAlive(argvA...) == 8 })
	var answers []<-chan string
	for n := range 8 {
		answers = append(answers, b.shell(fmt.Sprintf("b-%d", n), "exec "+strings.Join(argvB, " ")))
	}
	proctest.Eventually(t, "b's 8 queued", func() bool { return b.metrics(t).Queued.Total == 8 })
	if n := commandsAlive(argvB...); n != 0 {
		t.Fatalf("b runs %d commands while a holds the budget", n)
	}
	killed := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Its commands outlive it here (under systemd the unit's stop kills
	// them); they are a's no longer, and end with the test.
	proctest.Eventually(t, "b runs all 8", func() bool { return commandsAlive(argvB...) == 8 })
	t.Logf("survivor ran the whole shell budget %v after the SIGKILL", time.Since(killed).Round(time.Millisecond))
	m := b.metrics(t)
	if m.Service == nil || m.Service.Shared || m.Service.Processes != 1 || m.Service.Reclaimed != 1 || m.Active.Shell != 8 {
		t.Fatalf("survivor's metrics: active %+v service %+v", m.Active, m.Service)
	}
	if !strings.Contains(b.log.String(), "reclaimed the share of a process that died") {
		t.Fatalf("no reclaim logged:\n%s", b.log.String())
	}
	for _, pid := range pidsOf(argvA...) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	for _, ch := range answers {
		if got := <-ch; strings.HasPrefix(got, "transport") {
			t.Fatalf("a call failed in transport: %s", got)
		}
	}
}
