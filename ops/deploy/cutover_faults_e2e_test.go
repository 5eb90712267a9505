package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/proctest"
	"github.com/overdeck/mcp-backend/internal/sitetest"
	"github.com/overdeck/mcp-backend/mcpwire"
	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/snapshot"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/ops/verify"
	"github.com/overdeck/mcp-backend/units"
)

// writeUnit writes a unit (or drop-in, when name has a directory) into the
// container's unit dir and reloads systemd.
func (s *site) writeUnit(name, content string) {
	s.T.Helper()
	p := filepath.Join(s.M.UnitsDir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		s.T.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		s.T.Fatal(err)
	}
	if err := s.M.Client.DaemonReload(context.Background()); err != nil {
		s.T.Fatal(err)
	}
}

// untouched asserts a refused cutover changed nothing: production still on
// v1 with the same unit invocation, no snapshot, no rollback armed.
func (s *site) untouched(inv string) {
	s.T.Helper()
	if _, _, now := s.Prod(); now != inv {
		s.T.Fatal("a refused cutover restarted the backend")
	}
	if v, c := s.Version(), s.Current(); v != "v1" || c != "v1" {
		s.T.Fatalf("production %s, current %s after a refused cutover, want v1", v, c)
	}
	if list, _ := snapshot.List(s.Cfg.StateDir); len(list) != 0 {
		s.T.Fatalf("a refused cutover took %d snapshots", len(list))
	}
	s.assertNoRollbackArmed()
}

// TestCutoverRefusesDuplicateSupervisors: a second unit running production's
// binary, or a second watchdog, makes cutover refuse (exit 1) with nothing
// changed (issue 6, preflight). The second unit listens on another port, so
// only the unit check can catch it.
func TestCutoverRefusesDuplicateSupervisors(t *testing.T) {
	s := newSite(t, 60*time.Second)
	s.Pass(s.Builds["v2"])
	_, _, inv := s.Prod()

	t.Run("second unit on the same binary", func(t *testing.T) {
		s.T = t
		addr := proctest.FreeAddr(t)
		legacyCfg := filepath.Join(s.Dir, "etc", "legacy.json")
		writeJSON(t, legacyCfg, map[string]any{"listen": addr})
		s.writeUnit("legacy-mcp.service", fmt.Sprintf("[Service]\nType=simple\nExecStart=%s serve --config %s --listen %s\n",
			units.CurrentBinary(s.Cfg.Install.Root), legacyCfg, addr))
		if err := s.M.Client.Start(context.Background(), "legacy-mcp.service"); err != nil {
			t.Fatal(err)
		}
		s.WaitHTTP("http://"+addr+"/healthz", 10*time.Second)
		code, out := s.Run("cutover", "--build", s.Builds["v2"], "--arm-rollback")
		if code != 1 || !strings.Contains(out, "duplicate supervisor: legacy-mcp.service") {
			t.Fatalf("exit %d, want 1 naming legacy-mcp.service:\n%s", code, out)
		}
		s.untouched(inv)
		if err := s.M.Client.Stop(context.Background(), "legacy-mcp.service"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("second watchdog under another name", func(t *testing.T) {
		s.T = t
		s.writeUnit("other-watchdog.service", fmt.Sprintf("[Service]\nType=oneshot\nExecStart=%s --config %s watchdog\n", s.MCPCtl, s.CfgPath))
		s.writeUnit("other-watchdog.timer", "[Timer]\nOnActiveSec=1h\n")
		if err := s.M.Client.Start(context.Background(), "other-watchdog.timer"); err != nil {
			t.Fatal(err)
		}
		code, out := s.Run("cutover", "--build", s.Builds["v2"], "--arm-rollback")
		if code != 1 || !strings.Contains(out, "other-watchdog.service") || strings.Contains(out, "legacy-mcp") {
			t.Fatalf("exit %d, want 1 naming other-watchdog.service only (legacy-mcp is stopped):\n%s", code, out)
		}
		s.untouched(inv)
		if err := s.M.Client.Stop(context.Background(), "other-watchdog.timer"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("with both stopped the cutover goes through", func(t *testing.T) {
		s.T = t
		if code, out := s.Run("cutover", "--build", s.Builds["v2"], "--arm-rollback"); code != 0 {
			t.Fatalf("exit %d, want 0 (stopped units supervise nothing):\n%s", code, out)
		}
		if v := s.Version(); v != "v2" {
			t.Fatalf("production %s, want v2", v)
		}
	})
}

// showMono reads a monotonic timestamp property of a unit inside the
// container.
func (s *site) showMono(unit, prop string) uint64 {
	s.T.Helper()
	out, err := s.M.Exec(context.Background(), "systemctl", "show", "-P", prop, unit)
	if err != nil {
		s.T.Fatal(err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(out), 10, 64)
	if err != nil || n == 0 {
		s.T.Fatalf("%s %s = %q: want a timestamp", unit, prop, out)
	}
	return n
}

// TestBootRollsBackAPendingCutover is fault 4: mcpctl is SIGKILLed right
// after restarting production onto a new build, with a deadline long enough
// that the timer cannot fire first, and the machine reboots (the transient
// timer is gone). The enabled boot-time unit must restore the previous
// release before the backend starts, so the new build never serves again.
func TestBootRollsBackAPendingCutover(t *testing.T) {
	s := newSite(t, 10*time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	us, err := units.Render(units.Params{Spec: sitetest.UnitSpec(t, s.Cfg), MCPCtl: s.MCPCtl, MCPCtlConfig: s.CfgPath})
	if err != nil {
		t.Fatal(err)
	}
	var enable []string
	for _, u := range us {
		if u.Enable {
			enable = append(enable, u.Name)
		}
	}
	if err := s.M.Client.Enable(ctx, enable...); err != nil {
		t.Fatal(err)
	}

	// The real v2 build, held at its start in the idle slot: mcpctl is
	// killed while it waits on that start, so v2 comes up in standby and
	// never takes over; the cutover is still pending and current names v2.
	_, _, inv0 := s.Prod()
	out := s.killCutoverAfterRestart(ctx, t, writeGatedStart(t, s, s.Builds["v2"]), inv0)
	s.WaitHTTP(s.Backend+"/healthz", 10*time.Second)
	p, err := state.Dir(s.Cfg.StateDir).ReadPending()
	if err != nil || p == nil || s.Current() != "v2" || s.Version() != "v1" {
		t.Fatalf("before the reboot: pending %+v (%v), current %s, serving %s; want a pending cutover to v2, v1 serving:\n%s",
			p, err, s.Current(), s.Version(), out)
	}

	s.M.Reboot(t)
	s.WaitHTTP(s.Backend+"/readyz", 30*time.Second)
	if v, c := s.Version(), s.Current(); v != "v1" || c != "v1" {
		t.Fatalf("after the reboot production serves %s, current %s; want v1", v, c)
	}
	if p, err := state.Dir(s.Cfg.StateDir).ReadPending(); err != nil || p != nil {
		t.Fatalf("pending marker after the boot-time rollback = %+v, %v; want none", p, err)
	}
	st, err := s.M.Client.Unit(ctx, units.PendingRollbackService)
	if err != nil {
		t.Fatal(err)
	}
	if st.Result != "success" || st.ExecMainStatus != 0 {
		t.Fatalf("%s: result %s status %d", units.PendingRollbackService, st.Result, st.ExecMainStatus)
	}
	unit, _, _ := s.Prod()
	be, err := s.M.Client.Unit(ctx, unit)
	if err != nil {
		t.Fatal(err)
	}
	// Started once this boot, after the restore finished: the new build
	// never served after the reboot.
	if be.ActiveState != "active" || be.NRestarts != 0 {
		t.Fatalf("backend %s with %d restarts, want active, started once", be.ActiveState, be.NRestarts)
	}
	restored := s.showMono(units.PendingRollbackService, "ExecMainExitTimestampMonotonic")
	started := s.showMono(unit, "ExecMainStartTimestampMonotonic")
	if restored > started {
		t.Fatalf("backend started (%d us) before the boot-time rollback finished (%d us)", started, restored)
	}
	events, err := state.Dir(s.Cfg.StateDir).Tail(20)
	if err != nil {
		t.Fatal(err)
	}
	var rolled bool
	for _, e := range events {
		rolled = rolled || (e.Action == state.ActionRolledBack && e.Outcome == state.OutcomeOK && e.ToVersion == "v1")
	}
	if !rolled {
		t.Fatalf("no rolled-back record to v1 in the audit: %+v", events)
	}
	s.assertStatus("v1", state.ActionRolledBack)
}

// watchdogRun runs one mcpctl watchdog round in the container and returns
// the tunnels it restarted.
func (s *site) watchdogRun() []string {
	s.T.Helper()
	code, out := s.Run("--json", "watchdog")
	if code != 0 {
		s.T.Fatalf("watchdog exit %d:\n%s", code, out)
	}
	var rep struct {
		Skipped   string   `json:"skipped"`
		BackendOK bool     `json:"backendOK"`
		Restarted []string `json:"restarted"`
	}
	if i := strings.Index(out, "{"); i < 0 || json.Unmarshal([]byte(out[i:strings.LastIndex(out, "}")+1]), &rep) != nil || rep.Skipped != "" || !rep.BackendOK {
		s.T.Fatalf("watchdog report: %s", out)
	}
	return rep.Restarted
}

// identities are the InvocationIDs of the backend and both tunnels.
func (s *site) identities() map[string]string {
	out := s.invocations()
	_, _, out["backend"] = s.Prod()
	return out
}

// TestWatchdogInSystemd is fault 9: a tunnel whose unit stays active but
// does not forward is restarted after three consecutive failed rounds, and
// nothing else is; a saturated backend (/readyz 503) restarts nothing.
func TestWatchdogInSystemd(t *testing.T) {
	s := newSite(t, 60*time.Second)
	broken, healthy := s.Cfg.Tunnels[0], s.Cfg.Tunnels[1]
	dropIn := broken.Unit + ".d/broken.conf"

	t.Run("a tunnel that does not forward", func(t *testing.T) {
		s.T = t
		_, port, _ := strings.Cut(strings.TrimPrefix(broken.URL, "http://"), ":")
		// Listens, accepts, and closes every connection: active, useless.
		s.writeUnit(dropIn, fmt.Sprintf("[Service]\nExecStart=\nExecStart=/usr/bin/socat TCP-LISTEN:%s,bind=127.0.0.1,reuseaddr,fork EXEC:/bin/false\n", port))
		if err := s.M.Client.Restart(context.Background(), broken.Unit); err != nil {
			t.Fatal(err)
		}
		before := s.identities()
		for round := 1; round < 3; round++ {
			if got := s.watchdogRun(); len(got) != 0 {
				t.Fatalf("round %d restarted %v, want nothing before 3 failures", round, got)
			}
			if now := s.identities(); fmt.Sprint(now) != fmt.Sprint(before) {
				t.Fatalf("round %d changed units: %v -> %v", round, before, now)
			}
		}
		if got := s.watchdogRun(); fmt.Sprint(got) != fmt.Sprint([]string{broken.Name}) {
			t.Fatalf("round 3 restarted %v, want [%s]", got, broken.Name)
		}
		after := s.identities()
		if after[broken.Name] == before[broken.Name] {
			t.Fatalf("%s InvocationID unchanged after the watchdog restarted it", broken.Unit)
		}
		if after[healthy.Name] != before[healthy.Name] || after["backend"] != before["backend"] {
			t.Fatalf("the watchdog restarted more than %s: %v -> %v", broken.Unit, before, after)
		}
		if st, _ := s.Unit(broken.Unit); st != "active" {
			t.Fatalf("%s is %s after the restart", broken.Unit, st)
		}
	})

	t.Run("a saturated backend restarts nothing", func(t *testing.T) {
		s.T = t
		if err := os.Remove(filepath.Join(s.M.UnitsDir, dropIn)); err != nil {
			t.Fatal(err)
		}
		if err := s.M.Client.DaemonReload(context.Background()); err != nil {
			t.Fatal(err)
		}
		// One shell slot and a queue of one: two sleeping shell.exec calls
		// fill it, and /readyz answers 503 while /healthz stays 200.
		writeJSON(t, s.Cfg.Backend.Config, map[string]any{"listen": s.Cfg.Backend.Listen,
			"concurrency": map[string]any{"maxActive": 2, "reservedControl": 1, "maxShell": 1, "maxQueue": 1, "queueWaitMs": 120000}})
		prod, _, _ := s.Prod()
		for _, u := range []string{broken.Unit, prod} {
			if err := s.M.Client.Restart(context.Background(), u); err != nil {
				t.Fatal(err)
			}
		}
		for _, url := range []string{s.Backend, broken.URL, healthy.URL} {
			s.WaitHTTP(url+"/readyz", 10*time.Second)
		}
		s.watchdogRun() // a passing round clears the broken tunnel's record

		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		defer func() { cancel(); wg.Wait() }()
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _, _ = (&verify.Client{}).CallTool(ctx, s.Backend, "shell.exec", map[string]any{"command": "sleep 120", "timeoutMs": 150000})
			}()
		}
		status := func(url string) int {
			resp, err := http.Get(url)
			if err != nil {
				return 0
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		proctest.Eventually(t, "/readyz 503 with the queue full", func() bool { return status(s.Backend+"/readyz") == http.StatusServiceUnavailable })
		before := s.identities()
		for round := 1; round <= 4; round++ {
			if got := s.watchdogRun(); len(got) != 0 {
				t.Fatalf("round %d restarted %v while the backend was only busy", round, got)
			}
		}
		for _, tun := range s.Cfg.Tunnels {
			if c := status(tun.URL + "/readyz"); c != http.StatusServiceUnavailable {
				t.Fatalf("%s /readyz = %d through the tunnel, want 503: the backend must still be saturated", tun.Name, c)
			}
		}
		if after := s.identities(); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("a saturated backend made the watchdog restart units: %v -> %v", before, after)
		}
	})
}

// TestFailedTimerRollbackThenCutover: the armed timer's rollback fails (its
// snapshot is corrupt) after mcpctl was killed. The failed run must not
// block what comes next: `rollback status` says a human is needed (pending,
// not armed), `rollback disarm` clears the marker, and the next cutover runs
// without anyone running systemctl reset-failed.
func TestFailedTimerRollbackThenCutover(t *testing.T) {
	s := newSite(t, 15*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, _, inv0 := s.Prod()
	s.killCutoverAfterRestart(ctx, t, writeGatedStart(t, s, s.Build("v3")), inv0)
	// Corrupt the snapshot the timer will restore: its run refuses, exit 4.
	snap := lastSnapshotManifest(t, s)
	for _, f := range snap.Files {
		if f.Role == snapshot.RoleConfig {
			if err := os.WriteFile(filepath.Join(snap.Dir, f.Stored), []byte(`{"listen":"127.0.0.1:1"}`), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	var failed bool
	for end := time.Now().Add(60 * time.Second); !failed; time.Sleep(200 * time.Millisecond) {
		events, _ := state.Dir(s.Cfg.StateDir).Tail(50)
		for _, e := range events {
			failed = failed || e.Action == state.ActionRollbackFailed
		}
		if time.Now().After(end) {
			t.Fatalf("the timer's rollback never failed: %+v", events)
		}
	}
	// The failed run is not left loaded as failed.
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if gone, err := s.M.Client.Gone(ctx, deploy.RollbackTimer, deploy.RollbackService); err == nil && gone {
			break
		}
		if time.Now().After(end) {
			st, _ := s.M.Client.Unit(ctx, deploy.RollbackService)
			t.Fatalf("the failed rollback run is still loaded: %+v", st)
		}
	}
	code, status := s.Run("rollback", "status")
	if code != 0 || !strings.Contains(status, "NOT ARMED") || !strings.Contains(status, "a human is needed") {
		t.Fatalf("rollback status: exit %d, want pending, NOT armed:\n%s", code, status)
	}
	if code, out := s.Run("rollback", "disarm"); code != 0 {
		t.Fatalf("rollback disarm after a failed timer run: exit %d:\n%s", code, out)
	}
	s.WaitHTTP(s.Backend+"/readyz", 15*time.Second)
	s.Pass(s.Builds["v2"])
	if code, out := s.Run("cutover", "--build", s.Builds["v2"], "--arm-rollback"); code != 0 {
		t.Fatalf("the next cutover: exit %d:\n%s", code, out)
	}
	if v := s.Version(); v != "v2" {
		t.Fatalf("production %s after the next cutover, want v2", v)
	}
	s.assertNoRollbackArmed()
}

// TestTimerRollsBackACutoverKilledInTheHandoff extends the fault matrix to
// the slots' last step: mcpctl is SIGKILLed while the old slot hands off
// (it stopped accepting and still finishes a long call it accepted) and the
// new slot serves unconfirmed. The armed timer must end with exactly one
// slot serving the snapshot's release, nothing pending, and the call the
// old slot had accepted must have finished.
func TestTimerRollsBackACutoverKilledInTheHandoff(t *testing.T) {
	s := newSite(t, 15*time.Second)
	s.Pass(s.Builds["v2"])
	old, _, _ := s.Prod()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	long := make(chan error, 1)
	go func() {
		_, code, err := (&verify.Client{}).CallTool(ctx, s.Backend, "shell.exec", map[string]any{"command": "sleep 6; echo done", "timeoutMs": 30000})
		if err == nil && code != "" {
			err = fmt.Errorf("tool error %s", code)
		}
		long <- err
	}()
	time.Sleep(500 * time.Millisecond) // the old slot has accepted it
	cmd := s.Command(ctx, "cutover", "--build", s.Builds["v2"], "--arm-rollback")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, "the old slot hands off", func() bool {
		st, err := s.M.Client.Unit(ctx, old)
		return err == nil && st.StatusText == mcpwire.SlotHandingOff
	})
	killHolder(ctx, t, s, cmd, &out)
	killedAt := time.Now()
	if err := <-long; err != nil {
		t.Errorf("the call the old slot accepted: %v, want it finished by the handoff", err)
	}
	for end := time.Now().Add(40 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		p, _ := state.Dir(s.Cfg.StateDir).ReadPending()
		gone, _ := s.M.Client.Gone(ctx, deploy.RollbackTimer, deploy.RollbackService)
		if p == nil && gone && s.Current() == "v1" {
			break
		}
		if time.Now().After(end) {
			j, _ := s.M.Exec(context.Background(), "journalctl", "-u", deploy.RollbackService, "--no-pager")
			t.Fatalf("the timer did not restore: pending %+v current %s\n%s\n%s", p, s.Current(), out.String(), j)
		}
	}
	t.Logf("figures: restored %s after the kill in the handoff (deadline 15s from arming)", time.Since(killedAt).Round(time.Millisecond))
	s.WaitHTTP(s.Backend+"/readyz", 10*time.Second)
	if u, _, _ := s.Prod(); s.Version() != "v1" {
		t.Fatalf("production %s serves %s after the timer's rollback, want v1", u, s.Version())
	}
	s.assertNoRollbackArmed()
}

// TestTimerRollsBackACutoverKilledInTheTakeover extends the fault matrix to
// the takeover's middle windows, reached by deploy.PauseEnv: mcpctl is
// SIGKILLed with the new slot verified but still in standby, with both
// slots accepting before the old one hands off, and with the cutover
// verified and the old slot parked before the confirmation. In each the armed timer
// must leave exactly one slot serving the snapshot's release, the one that
// never stopped (same MainPID and InvocationID), and nothing pending: no
// standby or handing-off unit, no timer, no marker.
func TestTimerRollsBackACutoverKilledInTheTakeover(t *testing.T) {
	s := newSite(t, 15*time.Second)
	s.Pass(s.Builds["v2"])
	for _, c := range []struct {
		name, point string
		// The statuses of the old and the new slot at the kill.
		old, new string
	}{
		{"verified, before SIGUSR1", deploy.PauseVerified, mcpwire.SlotAccepting, mcpwire.SlotStandby},
		{"took over, before SIGUSR2", deploy.PauseTookOver, mcpwire.SlotAccepting, mcpwire.SlotAccepting},
		// The old slot is parked: the rollback resumes it, nothing starts.
		{"parked, before the confirmation", deploy.PauseParked, mcpwire.SlotParked, mcpwire.SlotAccepting},
	} {
		t.Run(c.name, func(t *testing.T) {
			s.T = t
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			old, pid0, inv0 := s.Prod()
			paused := filepath.Join(s.Dir, "paused-"+c.point)
			cmd := s.Command(ctx, "cutover", "--build", s.Builds["v2"], "--arm-rollback")
			cmd.Env = append(cmd.Env, deploy.PauseEnv+"="+c.point+"="+paused)
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			for end := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				if _, err := os.Stat(paused); err == nil {
					break
				}
				if time.Now().After(end) {
					_ = cmd.Process.Kill()
					_ = cmd.Wait()
					t.Fatalf("mcpctl never paused at %s:\n%s", c.point, out.String())
				}
			}
			// The window is the one named: both slots run, in these states.
			oldSt, err := s.M.Client.Unit(ctx, old)
			if err != nil {
				t.Fatal(err)
			}
			newSt, err := s.M.Client.Unit(ctx, standbySlot(s, old))
			if err != nil {
				t.Fatal(err)
			}
			if oldSt.StatusText != c.old || newSt.StatusText != c.new || newSt.ActiveState != "active" {
				killHolder(ctx, t, s, cmd, &out)
				t.Fatalf("at %s: old slot %q, new slot %s %q; want %q and active %q", c.point, oldSt.StatusText, newSt.ActiveState, newSt.StatusText, c.old, c.new)
			}
			// mcpctl status shows both: one as production, the other beside.
			code, js := s.Run("status", "--json")
			var view struct {
				Production struct{ Unit string }
				Beside     []struct{ Unit, Status string }
			}
			if err := json.Unmarshal([]byte(js), &view); code != 0 || err != nil || len(view.Beside) != 1 {
				killHolder(ctx, t, s, cmd, &out)
				t.Fatalf("status --json at %s: exit %d, %v, want one unit beside production:\n%s", c.point, code, err, js)
			}
			want := map[string]string{old: c.old, standbySlot(s, old): c.new}
			if b := view.Beside[0]; view.Production.Unit == b.Unit || want[view.Production.Unit] == "" || want[b.Unit] != b.Status {
				killHolder(ctx, t, s, cmd, &out)
				t.Fatalf("status at %s: production %s, beside %s %q; want the slots %v", c.point, view.Production.Unit, b.Unit, b.Status, want)
			}
			killHolder(ctx, t, s, cmd, &out)
			killedAt := time.Now()
			for end := time.Now().Add(40 * time.Second); ; time.Sleep(200 * time.Millisecond) {
				p, _ := state.Dir(s.Cfg.StateDir).ReadPending()
				gone, _ := s.M.Client.Gone(ctx, deploy.RollbackTimer, deploy.RollbackService)
				a, _ := s.Unit(standbySlot(s, old))
				if p == nil && gone && s.Current() == "v1" && (a == "inactive" || a == "failed") {
					break
				}
				if time.Now().After(end) {
					j, _ := s.M.Exec(context.Background(), "journalctl", "-u", deploy.RollbackService, "--no-pager")
					t.Fatalf("the timer did not restore: pending %+v current %s, new slot %s\n%s\n%s", p, s.Current(), a, out.String(), j)
				}
			}
			t.Logf("figures: restored %s after the kill at %s (deadline 15s from arming)", time.Since(killedAt).Round(time.Millisecond), c.point)
			unit, pid, inv := s.Prod() // exactly one production unit runs
			st, err := s.M.Client.Unit(ctx, unit)
			if err != nil {
				t.Fatal(err)
			}
			if unit != old || pid != pid0 || inv != inv0 || st.StatusText != mcpwire.SlotAccepting || s.Version() != "v1" {
				t.Fatalf("production %s pid %d %s %q on %s after the timer's rollback, want %s pid %d %s accepting on v1",
					unit, pid, inv, st.StatusText, s.Version(), old, pid0, inv0)
			}
			if code, out := s.Run("verify"); code != 0 {
				t.Fatalf("verify after the timer's rollback: exit %d\n%s", code, out)
			}
			s.assertNoRollbackArmed()
		})
	}
}
