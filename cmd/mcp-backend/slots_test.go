package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// TestSlotParksFinishingCallsPastTheDrain: a call the old slot accepted
// still runs when its handoff drain (server.HandoffDrainTimeout) ends: the
// slot says it is parked but finishing calls, answers the call, and only
// then says it is parked (mcpctl stops a parked slot only then). A slot
// parked finishing takes over again at once (a rollback), and then stays
// accepting when its call ends. It waits out two real drains (10 s each).
func TestSlotParksFinishingCallsPastTheDrain(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out two handoff drains")
	}
	ln, sock := passedSocket(t)
	addr := ln.Addr().String()
	base := "http://" + addr
	cfg := writeConfig(t, fmt.Sprintf(`{"listen":%q}`, addr))
	oldStatus, oldSeen := slotStatuses(t)
	old, oldErr := activated(t, sock, "serve", "--config", cfg)
	standby := proctest.FreeAddr(t)
	t.Setenv(StandbyEnv, standby)
	nextStatus, nextSeen := slotStatuses(t)
	next, nextErr := activated(t, sock, "serve", "--config", cfg)
	proctest.Eventually(t, "old serves on the shared socket", func() bool { return readyAt(base) })
	proctest.Eventually(t, "the standby serves its own listener", func() bool { return readyAt("http://" + standby) })
	hc := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
	tag := os.Getpid() % 1000
	// long runs argv through the shared socket (the one slot accepting
	// runs it) and returns its outcome once answered.
	long := func(conv string, argv []string) <-chan string {
		out := make(chan string, 1)
		go func() {
			r := callIn(hc, base, conv, mcpwire.ToolShellExec, map[string]any{"command": "exec " + strings.Join(argv, " "), "timeoutMs": 120000})
			if !r.OK() {
				out <- fmt.Sprintf("%s %s %s", r.Kind, r.Code, r.Detail)
				return
			}
			out <- "ok"
		}()
		return out
	}
	answered := func(ch <-chan string, what string) {
		t.Helper()
		select {
		case got := <-ch:
			if got != "ok" {
				t.Fatalf("%s: %s\nold:\n%s\nnew:\n%s", what, got, oldErr, nextErr)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s: no answer", what)
		}
	}
	is := func(status func() string, want string) func() bool {
		return func() bool { return status() == want }
	}

	// A call of 13 s on the old slot, then the handoff: its 10 s drain
	// ends with the call running.
	argvA := []string{"sleep", fmt.Sprintf("13.%d", tag)}
	a := long("conversation-a", argvA)
	proctest.Eventually(t, "the old slot runs the call", func() bool { return commandsAlive(argvA...) == 1 })
	next.cmd.Process.Signal(syscall.SIGUSR1)
	proctest.Eventually(t, "the new slot accepts", is(nextStatus, mcpwire.SlotAccepting))
	handedOff := time.Now()
	old.cmd.Process.Signal(syscall.SIGUSR2)
	proctest.Eventually(t, "the old slot parks finishing its call", is(oldStatus, mcpwire.SlotParkedFinishing))
	if d := time.Since(handedOff); d < 9*time.Second {
		t.Fatalf("parked finishing %s after the handoff, before its drain ended", d)
	}
	if commandsAlive(argvA...) != 1 {
		t.Fatal("the call ended before the slot said it was finishing it")
	}
	answered(a, "the call running past the drain")
	proctest.Eventually(t, "the old slot parks once the call is answered", is(oldStatus, mcpwire.SlotParked))
	want := []string{mcpwire.SlotAccepting, mcpwire.SlotHandingOff, mcpwire.SlotParkedFinishing, mcpwire.SlotParked}
	if got := oldSeen(); !slices.Equal(got, want) {
		t.Fatalf("the old slot said %q, want %q", got, want)
	}

	// The way back: the new slot hands off with a call running past its
	// drain, and takes over again while finishing it (a rollback of the
	// rollback): it accepts at once and still answers the call.
	argvB := []string{"sleep", fmt.Sprintf("12.%d", tag)}
	b := long("conversation-b", argvB)
	proctest.Eventually(t, "the new slot runs the call", func() bool { return commandsAlive(argvB...) == 1 })
	old.cmd.Process.Signal(syscall.SIGUSR1)
	proctest.Eventually(t, "the old slot accepts again", is(oldStatus, mcpwire.SlotAccepting))
	next.cmd.Process.Signal(syscall.SIGUSR2)
	proctest.Eventually(t, "the new slot parks finishing its call", is(nextStatus, mcpwire.SlotParkedFinishing))
	if commandsAlive(argvB...) != 1 {
		t.Fatal("the call ended before the slot said it was finishing it")
	}
	next.cmd.Process.Signal(syscall.SIGUSR1)
	proctest.Eventually(t, "the finishing slot takes over at once", is(nextStatus, mcpwire.SlotAccepting))
	answered(b, "the call running across the takeover")
	time.Sleep(200 * time.Millisecond)
	want = []string{mcpwire.SlotStandby, mcpwire.SlotAccepting, mcpwire.SlotHandingOff, mcpwire.SlotParkedFinishing, mcpwire.SlotAccepting}
	if got := nextSeen(); !slices.Equal(got, want) {
		t.Fatalf("the new slot said %q, want %q", got, want)
	}
	stop(t, next, nextErr)
	stop(t, old, oldErr)
}
