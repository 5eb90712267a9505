package deploy_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/ops/status"
	"github.com/overdeck/mcp-backend/units"
)

// crashLoop SIGKILLs production's serving slot each time systemd has
// started it again, until systemd gives up on it (the start limit): what
// repeated OOM kills do. It returns the slot and the kills it took.
func (s *site) crashLoop(ctx context.Context) (string, int) {
	s.T.Helper()
	unit, _, _ := s.Prod()
	return unit, s.crashLoopUnit(ctx, unit)
}

// crashLoopUnit is crashLoop of unit; it returns the kills it took.
func (s *site) crashLoopUnit(ctx context.Context, unit string) int {
	s.T.Helper()
	st0, err := s.M.Client.Unit(ctx, unit)
	if err != nil {
		s.T.Fatal(err)
	}
	pid := st0.MainPID
	for kills := 1; kills <= 12; kills++ {
		if err := s.M.Client.Kill(ctx, unit, syscall.SIGKILL); err != nil {
			s.T.Fatalf("kill %d of %s: %v", kills, unit, err)
		}
		// The next start (RestartSec=1), or systemd's giving up.
		for end := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			st, err := s.M.Client.Unit(ctx, unit)
			if err != nil {
				s.T.Fatal(err)
			}
			if st.ActiveState == "failed" {
				return kills
			}
			if st.ActiveState == "active" && st.MainPID != 0 && st.MainPID != pid {
				pid = st.MainPID
				break
			}
			if time.Now().After(end) {
				s.T.Fatalf("%s after kill %d: %s/%s pid %d", unit, kills, st.ActiveState, st.SubState, st.MainPID)
			}
		}
	}
	s.T.Fatalf("%s never hit its start limit", unit)
	return 0
}

// answersThroughTunnels reports whether the backend answers /readyz
// directly and through both tunnels.
func (s *site) answersThroughTunnels() bool {
	for _, url := range []string{s.Backend, s.Cfg.Tunnels[0].URL, s.Cfg.Tunnels[1].URL} {
		resp, err := http.Get(url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false
		}
	}
	return true
}

type crashLoopStatus struct {
	CrashLoop *struct {
		Down     bool `json:"down"`
		Starts   int  `json:"starts"`
		Attempts int  `json:"attempts"`
		Failed   []struct {
			Unit, Result string
		} `json:"failed"`
	} `json:"crashLoop"`
}

// TestCrashLoopRecovery: SIGKILLs of the serving slot until systemd gives
// up (the slot and mcp-backend.socket fail, the port closes). With the
// watchdog timer running as installed and nobody acting, production
// answers through both tunnels again within a bound. Then, with the timer
// stopped: commands that would do nothing say production is down and exit
// 1; `mcpctl status` shows the crash loop; `mcpctl recover` brings it back.
func TestCrashLoopRecovery(t *testing.T) {
	s := newSite(t, 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	socket := units.Socket(s.Cfg.Backend.Unit)

	t.Run("nobody acts: the watchdog as installed brings production back", func(t *testing.T) {
		s.T = t
		if err := s.M.Client.Start(ctx, units.WatchdogTimer); err != nil {
			t.Fatal(err)
		}
		unit, kills := s.crashLoop(ctx)
		failedAt := time.Now()
		for ; !s.answersThroughTunnels(); time.Sleep(250 * time.Millisecond) {
			// The timer fires every 30 s (its first run up to a minute after
			// boot): a bound with room for a slow machine.
			if time.Since(failedAt) > 4*time.Minute {
				j, _ := s.M.Exec(context.Background(), "journalctl", "-u", units.WatchdogService, "--no-pager", "-n", "60")
				t.Fatalf("production not back through both tunnels %s after %s failed:\n%s", time.Since(failedAt).Round(time.Second), unit, j)
			}
		}
		t.Logf("figures: after %d kills %s failed; production answered through both tunnels again %s later, nobody acting",
			kills, unit, time.Since(failedAt).Round(100*time.Millisecond))
		code, out := s.Run("--json", "status")
		var view crashLoopStatus
		if err := json.Unmarshal([]byte(out), &view); code != 0 || err != nil || view.CrashLoop == nil || view.CrashLoop.Down || view.CrashLoop.Attempts < 1 {
			t.Fatalf("status --json: exit %d, %v, want the crash loop recovered after an attempt:\n%s", code, err, out)
		}
		code, out = s.Run("--no-color", "status")
		if code != 0 || !strings.Contains(out, "crash loop: ") || !strings.Contains(out, "recovered") {
			t.Fatalf("status: exit %d, want the recovered crash loop shown:\n%s", code, out)
		}
		t.Logf("status:\n%s", out)
		events, err := state.Dir(s.Cfg.StateDir).Tail(50)
		if err != nil {
			t.Fatal(err)
		}
		var audited bool
		for _, e := range events {
			audited = audited || (e.Action == state.ActionRecover && e.Outcome == state.OutcomeOK && e.Details["by"] == "watchdog")
		}
		if !audited {
			t.Fatalf("no recover record by the watchdog in the audit: %+v", events)
		}
	})

	t.Run("down: no-op commands fail, status shows it, recover restores", func(t *testing.T) {
		s.T = t
		// The round that runs now finishes, and no other starts: neither
		// the timer's nor the one the slot's OnFailure= would start.
		if err := s.M.Client.Stop(ctx, units.WatchdogTimer); err != nil {
			t.Fatal(err)
		}
		for a, _ := s.Unit(units.WatchdogService); a == "activating"; a, _ = s.Unit(units.WatchdogService) {
			time.Sleep(100 * time.Millisecond)
		}
		if _, err := s.M.Exec(ctx, "systemctl", "mask", "--runtime", units.WatchdogService); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_, _ = s.M.Exec(context.Background(), "systemctl", "unmask", "--runtime", units.WatchdogService)
		}()
		unit, kills := s.crashLoop(ctx)
		st, err := s.M.Client.Unit(ctx, unit)
		if err != nil {
			t.Fatal(err)
		}
		sock, err := s.M.Client.Unit(ctx, socket)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("figures: %s failed after %d kills (result %s, NRestarts %d); %s %s (result %s)", unit, kills, st.Result, st.NRestarts, socket, sock.ActiveState, sock.Result)
		if sock.ActiveState != "failed" {
			t.Fatalf("%s is %s after the crash loop, want failed (systemd's rule for socket-activated services)", socket, sock.ActiveState)
		}
		for _, c := range []struct {
			name string
			args []string
		}{
			{"rollback --last with nothing to restore", []string{"rollback", "--last"}},
			{"unit install with the units up to date", []string{"unit", "install"}},
		} {
			code, out := s.Run(c.args...)
			if code != deploy.CodeFailed || !strings.Contains(out, "production is down") || !strings.Contains(out, "mcpctl recover") {
				t.Fatalf("%s: exit %d, want %d saying production is down and naming mcpctl recover:\n%s", c.name, code, deploy.CodeFailed, out)
			}
		}
		code, out := s.Run("--no-color", "status")
		if code != 0 || !strings.Contains(out, "crash loop: ") || !strings.Contains(out, "DOWN") || !strings.Contains(out, "next try") {
			t.Fatalf("status: exit %d, want the crash loop shown:\n%s", code, out)
		}
		t.Logf("status:\n%s", out)
		code, out = s.Run("--json", "status")
		var view crashLoopStatus
		if err := json.Unmarshal([]byte(out), &view); code != 0 || err != nil || view.CrashLoop == nil || !view.CrashLoop.Down || view.CrashLoop.Starts < units.StartLimitBurst {
			t.Fatalf("status --json: exit %d, %v, want crashLoop down with at least %d starts:\n%s", code, err, units.StartLimitBurst, out)
		}
		// The guardrails' memory half needs the cgroup v2 memory
		// controller: status and verify say when the host has none.
		controllers, _ := s.M.Exec(ctx, "cat", status.CgroupControllers)
		noMemory := !slices.Contains(strings.Fields(string(controllers)), "memory")
		t.Logf("figures: the container's %s: %q", status.CgroupControllers, strings.TrimSpace(string(controllers)))
		for _, args := range [][]string{{"--no-color", "status"}, {"verify", "backend"}} {
			_, out := s.Run(args...)
			if warned := strings.Contains(out, "memory guard is off"); warned != noMemory {
				t.Fatalf("%v warns about the memory controller: %v, want %v (controllers %q):\n%s", args, warned, noMemory, controllers, out)
			}
		}
		code, out = s.Run("recover")
		if code != 0 || !strings.Contains(out, "recovered: v1 serves again") {
			t.Fatalf("recover: exit %d, want 0:\n%s", code, out)
		}
		if !s.answersThroughTunnels() {
			t.Fatal("recover exited 0 but production does not answer through both tunnels")
		}
		if a, _ := s.Unit(socket); a != "active" {
			t.Fatalf("%s is %s after recover", socket, a)
		}
		if code, out := s.Run("recover"); code != 0 || !strings.Contains(out, "nothing to recover") {
			t.Fatalf("recover with production up: exit %d, want 0, nothing to recover:\n%s", code, out)
		}
		if code, out := s.Run("rollback", "--last"); code != 0 || !strings.Contains(out, "no-op") {
			t.Fatalf("rollback --last with production up and nothing to restore: exit %d, want 0 no-op:\n%s", code, out)
		}
	})
}

// TestCrashLoopAfterAnUnconfirmedCutoverRollsBack: mcpctl is killed after
// the cutover to v2 verified it (v1 parked beside it, the marker pending,
// the timer armed far off), then v2 crash-loops until systemd gives up.
// The watchdog's round (started by the slot's OnFailure=, nobody acting)
// treats it as a failed verification: v1 serves
// again, the marker is cleared, the timer disarmed, the socket listens,
// the recovery audited. The crash loop failed the socket too, which closed
// its descriptors: the parked v1 held its own copy of the old listener, so
// it cannot simply accept again; it is stopped and v1 started on the
// reopened socket.
func TestCrashLoopAfterAnUnconfirmedCutoverRollsBack(t *testing.T) {
	s := newSite(t, 10*time.Minute)
	s.Pass(s.Builds["v2"])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	old, pid0, _ := s.Prod()
	paused := filepath.Join(s.Dir, "paused")
	cmd := s.Command(ctx, "cutover", "--build", s.Builds["v2"], "--arm-rollback")
	cmd.Env = append(cmd.Env, deploy.PauseEnv+"="+deploy.PauseParked+"="+paused)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(90 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(paused); err == nil {
			break
		}
		if time.Now().After(end) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("mcpctl never paused at %s:\n%s", deploy.PauseParked, out.String())
		}
	}
	killHolder(ctx, t, s, cmd, &out)
	if p, _ := state.Dir(s.Cfg.StateDir).ReadPending(); p == nil {
		t.Fatalf("no pending marker after the killed cutover:\n%s", out.String())
	}
	newSlot := standbySlot(s, old)
	kills := s.crashLoopUnit(ctx, newSlot)
	sock, err := s.M.Client.Unit(ctx, units.Socket(s.Cfg.Backend.Unit))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("figures: %s (v2) failed after %d kills; the socket is %s (%s)", newSlot, kills, sock.ActiveState, sock.Result)
	// Nobody acts: the slot's OnFailure= runs a watchdog round at once.
	failedAt := time.Now()
	for end := time.Now().Add(3 * time.Minute); ; time.Sleep(250 * time.Millisecond) {
		p, _ := state.Dir(s.Cfg.StateDir).ReadPending()
		a, _ := s.Unit(units.WatchdogService)
		if p == nil && a != "activating" && s.answersThroughTunnels() {
			break
		}
		if time.Now().After(end) {
			j, _ := s.M.Exec(context.Background(), "journalctl", "-u", units.WatchdogService, "--no-pager", "-n", "80")
			t.Fatalf("not rolled back %s after %s failed: pending %+v\n%s", time.Since(failedAt).Round(time.Second), newSlot, p, j)
		}
	}
	t.Logf("figures: rolled back to v1, answering through both tunnels, %s after %s failed, nobody acting", time.Since(failedAt).Round(100*time.Millisecond), newSlot)
	s.assertNoRollbackArmed()
	unit, pid, _ := s.Prod() // exactly one production unit runs
	if s.Version() != "v1" || s.Current() != "v1" {
		t.Fatalf("production %s pid %d on %s (current %s), want v1", unit, pid, s.Version(), s.Current())
	}
	if pid == pid0 {
		t.Logf("the parked v1 (pid %d) accepts again", pid0)
	}
	if !s.answersThroughTunnels() {
		t.Fatal("production does not answer through both tunnels after the rollback")
	}
	events, err := state.Dir(s.Cfg.StateDir).Tail(50)
	if err != nil {
		t.Fatal(err)
	}
	var rolled, recovered bool
	for _, e := range events {
		rolled = rolled || (e.Action == state.ActionRolledBack && e.Outcome == state.OutcomeOK && e.ToVersion == "v1")
		recovered = recovered || (e.Action == state.ActionRecover && e.Outcome == state.OutcomeOK && e.Details["by"] == "watchdog")
	}
	if !rolled || !recovered {
		t.Fatalf("audit: rolled back %v, recovered by the watchdog %v; want both: %+v", rolled, recovered, events)
	}
	if code, out := s.Run("verify"); code != 0 {
		t.Fatalf("verify after the rollback: exit %d\n%s", code, out)
	}
}
