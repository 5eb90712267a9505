package deploy_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/nspawn/nspawntest"
	"github.com/overdeck/mcp-backend/internal/proctest"
	"github.com/overdeck/mcp-backend/internal/sitetest"
	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/snapshot"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/units"
)

// site is the sitetest harness's production deployment, with this
// package's own helpers as methods.
type site struct{ *sitetest.Site }

// newSite is sitetest.New: a site in a fresh container, its rollback
// deadline deadline.
func newSite(t testing.TB, deadline time.Duration) *site {
	t.Helper()
	return &site{sitetest.New(t, deadline)}
}

// failures are the "  - " reason lines of a refused or rolled-back cutover.
func failures(out string) []string {
	var fs []string
	for _, l := range strings.Split(out, "\n") {
		if r, ok := strings.CutPrefix(l, "  - "); ok {
			fs = append(fs, r)
		}
	}
	return fs
}

// onlyReason fails the test unless out lists exactly the reasons that all
// contain want: the injected fault, and nothing else, made it fail.
func onlyReason(t testing.TB, out, want string) {
	t.Helper()
	fs := failures(out)
	if len(fs) == 0 {
		t.Fatalf("no reasons listed, want only %q:\n%s", want, out)
	}
	for _, f := range fs {
		if !strings.Contains(f, want) {
			t.Fatalf("reason %q is not the injected fault %q:\n%s", f, want, out)
		}
	}
}

// writeJSON is nspawntest.WriteJSON: v, indented, to path.
var writeJSON = nspawntest.WriteJSON

func (s *site) invocations() map[string]string {
	out := map[string]string{}
	for _, tun := range s.Cfg.Tunnels {
		_, out[tun.Name] = s.Unit(tun.Unit)
	}
	return out
}

func (s *site) assertNoRollbackArmed() {
	s.T.Helper()
	gone, err := s.M.Client.Gone(context.Background(), deploy.RollbackTimer, deploy.RollbackService)
	if err != nil || !gone {
		s.T.Fatalf("rollback units still loaded: gone=%v err=%v", gone, err)
	}
	if p, err := state.Dir(s.Cfg.StateDir).ReadPending(); err != nil || p != nil {
		s.T.Fatalf("pending marker = %+v, %v; want none", p, err)
	}
}

// hashes maps each file a snapshot covers (as seen from the host) to its
// sha256, "" when absent.
func (s *site) hashes(m *snapshot.Manifest) map[string]string {
	s.T.Helper()
	out := map[string]string{}
	for _, f := range m.Files {
		p := f.Path
		if strings.HasPrefix(p, "/etc/systemd/system/") {
			p = filepath.Join(s.M.UnitsDir, strings.TrimPrefix(p, "/etc/systemd/system/"))
		}
		b, err := os.ReadFile(p)
		if err != nil {
			out[f.Path] = ""
			continue
		}
		h := sha256.Sum256(b)
		out[f.Path] = hex.EncodeToString(h[:])
	}
	return out
}

// pollHealthz polls /healthz every 50ms until stop and returns the longest
// run of failed polls as a duration.
func pollHealthz(url string, stop <-chan struct{}) func() time.Duration {
	var mu sync.Mutex
	var worst time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		c := &http.Client{Timeout: 500 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}
		var downSince time.Time
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			resp, err := c.Get(url)
			ok := err == nil && resp.StatusCode == 200
			if resp != nil {
				resp.Body.Close()
			}
			now := time.Now()
			switch {
			case !ok && downSince.IsZero():
				downSince = now
			case ok && !downSince.IsZero():
				mu.Lock()
				worst = max(worst, now.Sub(downSince))
				mu.Unlock()
				downSince = time.Time{}
			}
		}
	}()
	return func() time.Duration { <-done; mu.Lock(); defer mu.Unlock(); return worst }
}

func TestCutoverInSystemd(t *testing.T) {
	s := newSite(t, 60*time.Second)
	t.Run("happy path", func(t *testing.T) {
		s.T = t
		s.Pass(s.Builds["v2"])
		before := s.invocations()
		stop := make(chan struct{})
		unavailable := pollHealthz(s.Backend+"/healthz", stop)
		start := time.Now()
		code, out := s.Run("cutover", "--build", s.Builds["v2"], "--arm-rollback")
		took := time.Since(start)
		close(stop)
		if code != 0 {
			t.Fatalf("cutover exit %d:\n%s", code, out)
		}
		t.Logf("figures: cutover %s, longest /healthz outage polled every 50ms %s", took.Round(time.Millisecond), unavailable())
		if v := s.Version(); v != "v2" {
			t.Fatalf("production reports %s, want v2", v)
		}
		if after := s.invocations(); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("tunnels restarted: before %v after %v", before, after)
		}
		s.assertNoRollbackArmed()
		s.assertStatus("v2", state.ActionCutover)
		if code, out := s.Run("rollback", "--snapshot", snapshotOf(t, s), "--nonce", "0123456789abcdef0123456789abcdef"); code != 0 || !strings.Contains(out, "stale nonce") {
			t.Fatalf("late timer with a stale nonce: exit %d, %s", code, out)
		}
		if v := s.Version(); v != "v2" {
			t.Fatalf("stale nonce changed production to %s", v)
		}
	})
	t.Run("operator rollback, then again", func(t *testing.T) {
		s.T = t
		start := time.Now()
		code, out := s.Run("rollback", "--last")
		if code != 0 || s.Version() != "v1" || s.Current() != "v1" {
			t.Fatalf("rollback exit %d, version %s, current %s:\n%s", code, s.Version(), s.Current(), out)
		}
		t.Logf("figures: operator rollback %s", time.Since(start).Round(time.Millisecond))
		code, out = s.Run("rollback", "--last")
		if code != 0 || !strings.Contains(out, "no-op") {
			t.Fatalf("second rollback: exit %d, want a no-op:\n%s", code, out)
		}
	})
	t.Run("--if-pending by hand restarts production", func(t *testing.T) {
		s.T = t
		// Only the boot-time unit (--boot) may leave the backend for systemd
		// to start; an operator's --if-pending must restart and verify it.
		nonce, err := state.NewNonce()
		if err != nil {
			t.Fatal(err)
		}
		if err := state.Dir(s.Cfg.StateDir).WritePending(&state.Pending{SnapshotID: snapshotOf(t, s), Nonce: nonce, FromVersion: "v1", ToVersion: "v2",
			ArmedAt: time.Now(), Deadline: time.Now().Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		unit, _, _ := s.Prod()
		if err := s.M.Client.Stop(ctx, unit); err != nil {
			t.Fatal(err)
		}
		code, out := s.Run("rollback", "--if-pending")
		if unit, _, _ = s.Prod(); code != 0 {
			t.Fatalf("exit %d, production %s; want 0 with production started:\n%s", code, unit, out)
		}
		if active, _ := s.Unit(unit); active != "active" {
			t.Fatalf("exit %d, backend %s; want 0 with production started:\n%s", code, active, out)
		}
		if v := s.Version(); v != "v1" {
			t.Fatalf("production %s, want v1", v)
		}
		s.assertNoRollbackArmed()
	})
	t.Run("--version naming another version", func(t *testing.T) {
		s.T = t
		snaps, _ := snapshot.List(s.Cfg.StateDir)
		_, _, inv := s.Prod()
		code, out := s.Run("cutover", "--build", s.Build("v3"), "--version", "v4", "--arm-rollback", "--skip-canary-check", "e2e")
		if code != 2 || !strings.Contains(out, "the build prints version v3; --version v4") {
			t.Fatalf("exit %d, want 2 naming both versions:\n%s", code, out)
		}
		if after, _ := snapshot.List(s.Cfg.StateDir); len(after) != len(snaps) {
			t.Fatal("a refused cutover took a snapshot")
		}
		if _, _, now := s.Prod(); now != inv || s.Current() != "v1" {
			t.Fatal("a refused cutover changed production")
		}
		s.assertNoRollbackArmed()
	})
	t.Run("without --arm-rollback", func(t *testing.T) {
		s.T = t
		if code, out := s.Run("cutover", "--build", s.Builds["v2"]); code != 2 || !strings.Contains(out, "--arm-rollback") {
			t.Fatalf("exit %d, want 2:\n%s", code, out)
		}
	})
	t.Run("candidate never ready", func(t *testing.T) {
		s.T = t
		// A genuinely broken v3: it answers --version and check-config, but
		// its serve never notifies READY.
		wrapper := writeNeverReady(t, s, s.Build("v3"))
		unit, pid, inv := s.Prod()
		code, out := s.Run("cutover", "--build", wrapper, "--arm-rollback", "--deadline", "30s", "--skip-canary-check", "e2e test")
		if code != 3 {
			t.Fatalf("exit %d, want 3:\n%s", code, out)
		}
		// Started in the idle slot, never in the serving one.
		onlyReason(t, out, "start "+strings.TrimSuffix(s.Cfg.Backend.Unit, ".service")+"@")
		if u, p, i := s.Prod(); u != unit || p != pid || i != inv {
			t.Fatalf("production %s pid %d %s after a never-ready cutover, want %s pid %d %s untouched", u, p, i, unit, pid, inv)
		}
		if v, c := s.Version(), s.Current(); v != "v1" || c != "v1" {
			t.Fatalf("after rollback production %s current %s, want v1", v, c)
		}
		snap := lastSnapshotManifest(t, s)
		if snap.Version != "v1" {
			t.Fatalf("newest snapshot is of %s, want v1", snap.Version)
		}
		for _, f := range snap.Files {
			if f.Exists {
				got := s.hashes(snap)[f.Path]
				if got != f.SHA256 {
					t.Errorf("%s: sha256 %s, snapshot %s", f.Path, got, f.SHA256)
				}
			}
		}
		s.assertNoRollbackArmed()
	})
	t.Run("corrupt snapshot", func(t *testing.T) {
		s.T = t
		snap := lastSnapshotManifest(t, s)
		var stored string
		for _, f := range snap.Files {
			if f.Role == snapshot.RoleConfig {
				stored = filepath.Join(snap.Dir, f.Stored)
			}
		}
		if err := os.WriteFile(stored, []byte(`{"listen":"127.0.0.1:1"}`), 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, inv := s.Prod()
		code, out := s.Run("rollback", "--snapshot", snap.ID)
		if code != 4 || !strings.Contains(out, "corrupt") {
			t.Fatalf("exit %d, want 4 naming the corruption:\n%s", code, out)
		}
		if _, _, now := s.Prod(); now != inv {
			t.Fatal("a refused restore restarted the backend")
		}
		if b, _ := os.ReadFile(s.Cfg.Backend.Config); strings.Contains(string(b), ":1\"") {
			t.Fatal("a refused restore wrote the config")
		}
	})
	t.Run("two cutovers at once", func(t *testing.T) {
		s.T = t
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		first := s.Command(ctx, "cutover", "--build", writeNeverReady(t, s, s.Build("v5")), "--arm-rollback", "--deadline", "30s", "--skip-canary-check", "e2e")
		var firstOut strings.Builder
		first.Stdout, first.Stderr = &firstOut, &firstOut
		if err := first.Start(); err != nil {
			t.Fatal(err)
		}
		for end := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if p, _ := state.Dir(s.Cfg.StateDir).ReadPending(); p != nil {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("first cutover never armed:\n%s", firstOut.String())
			}
		}
		// Told not to wait, the second is refused at once; a waiting one
		// (the default --lock-wait) would run after the first, alone.
		code, out := s.Run("--lock-wait", "0", "cutover", "--build", s.Builds["v2"], "--arm-rollback")
		if code != 1 || !strings.Contains(out, "another mcpctl command") {
			t.Fatalf("second cutover: exit %d, want 1:\n%s", code, out)
		}
		err := first.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 {
			t.Fatalf("first cutover: %v, want it to complete its own rollback (exit 3)\n%s", err, firstOut.String())
		}
		if v := s.Version(); v != "v1" {
			t.Fatalf("production %s after the first cutover rolled back, want v1", v)
		}
		s.assertNoRollbackArmed()
	})
}

// assertStatus runs mcpctl status --json in the container: production on
// version and active, both tunnels answering, no rollback armed, and the
// newest cutover or rollback record is lastAction.
func (s *site) assertStatus(version, lastAction string) {
	s.T.Helper()
	code, out := s.Run("--json", "status")
	if code != 0 {
		s.T.Fatalf("status exit %d:\n%s", code, out)
	}
	var st struct {
		Production struct {
			ActiveState string `json:"activeState"`
			Version     string `json:"version"`
			Healthz     int    `json:"healthz"`
		} `json:"production"`
		Tunnels []struct {
			ActiveState string `json:"activeState"`
			Healthz     int    `json:"healthz"`
		} `json:"tunnels"`
		Rollback struct {
			Armed bool `json:"armed"`
		} `json:"rollback"`
		Events []state.Event `json:"events"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &st); err != nil {
		s.T.Fatalf("status --json: %v\n%s", err, out)
	}
	p := st.Production
	if p.ActiveState != "active" || p.Version != version || p.Healthz != 200 || st.Rollback.Armed || len(st.Tunnels) != 2 ||
		len(st.Events) == 0 || st.Events[0].Action != lastAction {
		s.T.Fatalf("status = %+v, want %s active, no rollback armed, last record %s", st, version, lastAction)
	}
	for _, tun := range st.Tunnels {
		if tun.ActiveState != "active" || tun.Healthz != 200 {
			s.T.Fatalf("status tunnels = %+v", st.Tunnels)
		}
	}
}

// standbySlot is the production slot that is not serving's.
func standbySlot(s *site, serving string) string {
	if serving == units.SlotUnit(s.Cfg.Backend.Unit, units.SlotBlue) {
		return units.SlotUnit(s.Cfg.Backend.Unit, units.SlotGreen)
	}
	return units.SlotUnit(s.Cfg.Backend.Unit, units.SlotBlue)
}

// killCutoverAfterRestart runs a cutover to the gated candidate, waits until
// the candidate's slot has started (held at its start by the gate) beside
// the serving one, SIGKILLs mcpctl inside the container, opens the gate and
// returns what mcpctl printed.
func (s *site) killCutoverAfterRestart(ctx context.Context, t testing.TB, candidate gatedStart, inv0 string) string {
	t.Helper()
	cmd := s.Command(ctx, "cutover", "--build", candidate.wrapper, "--arm-rollback", "--skip-canary-check", "e2e")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	serving, _, _ := s.Prod()
	proctest.Eventually(t, "the candidate's slot started", func() bool {
		_, inv := s.Unit(standbySlot(s, serving))
		return inv != inv0 && inv != ""
	})
	killHolder(ctx, t, s, cmd, &out)
	// mcpctl is gone: let the candidate start, as it would have.
	if err := os.WriteFile(candidate.gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// killHolder SIGKILLs the mcpctl holding the lock (cmd, whose output is
// out) and waits for cmd: a cutover's operator gone mid-step.
func killHolder(ctx context.Context, t testing.TB, s *site, cmd *exec.Cmd, out *strings.Builder) {
	t.Helper()
	h := holder(t, s)
	if h == nil {
		t.Fatalf("no lock holder while the cutover runs:\n%s", out.String())
	}
	if _, err := s.M.Exec(ctx, "kill", "-KILL", fmt.Sprint(h.PID)); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}

func holder(t testing.TB, s *site) *state.Holder {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.Cfg.StateDir, state.LockFile))
	if err != nil || len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	var h state.Holder
	if json.Unmarshal(b, &h) != nil || h.PID == 0 {
		return nil
	}
	return &h
}

// writeNeverReady writes a broken candidate around build: it answers
// --version and check-config as build does, but its serve never notifies
// READY, so the restart waits for a third of the deadline, long enough to act
// on a cutover in the middle.
func writeNeverReady(t testing.TB, s *site, build string) string {
	t.Helper()
	p := filepath.Join(s.Dir, "bin", "never-ready-"+filepath.Base(build))
	script := fmt.Sprintf("#!/bin/sh\nif [ \"$1\" = serve ]; then exec sleep infinity; fi\nexec %s \"$@\"\n", build)
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// gatedStart is a candidate around a build whose serve starts the build only
// once the gate file exists: until then mcpctl waits on the restart, however
// slow the machine (a sleep would be a race against it).
type gatedStart struct{ wrapper, gate string }

func writeGatedStart(t testing.TB, s *site, build string) gatedStart {
	t.Helper()
	g := gatedStart{
		wrapper: filepath.Join(s.Dir, "bin", "gated-"+filepath.Base(build)),
		gate:    filepath.Join(s.Dir, "gate-"+filepath.Base(build)),
	}
	script := fmt.Sprintf("#!/bin/sh\nif [ \"$1\" = serve ]; then while [ ! -e %s ]; do sleep 0.05; done; fi\nexec %s \"$@\"\n", g.gate, build)
	if err := os.WriteFile(g.wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return g
}

func snapshotOf(t testing.TB, s *site) string { return lastSnapshotManifest(t, s).ID }

func lastSnapshotManifest(t testing.TB, s *site) *snapshot.Manifest {
	t.Helper()
	list, err := snapshot.List(s.Cfg.StateDir)
	if err != nil || len(list) == 0 || list[0].Manifest == nil {
		t.Fatalf("snapshots: %v, %v", list, err)
	}
	return list[0].Manifest
}

// TestTimerRollsBackAKilledCutover SIGKILLs mcpctl right after the restart:
// the armed timer must restore on its own.
func TestTimerRollsBackAKilledCutover(t *testing.T) {
	s := newSite(t, 15*time.Second)
	// The real v2, held at its start: mcpctl waits on the restart until it
	// is killed in the middle of it.
	candidate := writeGatedStart(t, s, s.Builds["v2"])
	unit0, pid0, inv0 := s.Prod()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out := s.killCutoverAfterRestart(ctx, t, candidate, inv0)
	killedAt := time.Now()
	if s.Current() != "v2" {
		t.Fatalf("current %s right after the kill, want v2 (killed too late?):\n%s", s.Current(), out)
	}
	for end := time.Now().Add(40 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		p, _ := state.Dir(s.Cfg.StateDir).ReadPending()
		if p == nil && s.Current() == "v1" {
			break
		}
		if time.Now().After(end) {
			j, _ := s.M.Exec(context.Background(), "journalctl", "-u", deploy.RollbackService, "--no-pager")
			t.Fatalf("the timer did not restore: pending %+v current %s\n%s", p, s.Current(), j)
		}
	}
	t.Logf("figures: restored %s after the kill (deadline 15s from arming)", time.Since(killedAt).Round(time.Millisecond))
	s.WaitHTTP(s.Backend+"/readyz", 10*time.Second)
	// Exactly one slot serves v1: the one that never stopped; the
	// candidate's slot, left in standby, was stopped.
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if a, _ := s.Unit(standbySlot(s, unit0)); a == "inactive" || a == "failed" || time.Now().After(end) {
			break
		}
	}
	if u, p, i := s.Prod(); u != unit0 || p != pid0 || i != inv0 || s.Version() != "v1" {
		t.Fatalf("production %s pid %d %s on %s after the timer's rollback, want %s pid %d %s on v1", u, p, i, s.Version(), unit0, pid0, inv0)
	}
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if gone, err := s.M.Client.Gone(context.Background(), deploy.RollbackTimer, deploy.RollbackService); err == nil && gone {
			break
		}
		if time.Now().After(end) {
			t.Fatal("rollback units still loaded after the timer ran")
		}
	}
	events, err := state.Dir(s.Cfg.StateDir).Tail(20)
	if err != nil {
		t.Fatal(err)
	}
	var rolled bool
	for _, e := range events {
		rolled = rolled || (e.Action == state.ActionRolledBack && e.Outcome == state.OutcomeOK)
	}
	if !rolled {
		t.Fatalf("no rolled-back record in the audit: %+v", events)
	}
}

// TestCutoverRefusalsAndTunnelFaults: a candidate whose check-config rejects
// the production config is refused in preflight with nothing changed (fault
// 8); a tunnel that stops answering during verification rolls back, exit 3
// (fault 5).
func TestCutoverRefusalsAndTunnelFaults(t *testing.T) {
	s := newSite(t, 60*time.Second)
	t.Run("invalid candidate config", func(t *testing.T) {
		s.T = t
		bad := filepath.Join(s.Dir, "bin", "rejects-config")
		script := fmt.Sprintf("#!/bin/sh\nif [ \"$1\" = check-config ]; then echo 'listen: not allowed' >&2; exit 1; fi\nexec %s \"$@\"\n", s.Build("v9"))
		if err := os.WriteFile(bad, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		files := []string{s.Cfg.Backend.Config, filepath.Join(s.M.UnitsDir, units.SlotTemplate(s.Cfg.Backend.Unit)), filepath.Join(s.Cfg.Install.Root, "current")}
		before := fileHashes(t, files)
		_, _, inv := s.Prod()
		code, out := s.Run("cutover", "--build", bad, "--arm-rollback", "--skip-canary-check", "e2e")
		if code != 1 {
			t.Fatalf("exit %d, want 1 naming check-config:\n%s", code, out)
		}
		onlyReason(t, out, "check-config")
		if after := fileHashes(t, files); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("files changed by a refused cutover:\nbefore %v\nafter  %v", before, after)
		}
		if _, _, now := s.Prod(); now != inv {
			t.Fatal("a refused cutover restarted the backend")
		}
		if list, _ := snapshot.List(s.Cfg.StateDir); len(list) != 0 {
			t.Fatalf("a refused cutover took %d snapshots", len(list))
		}
		s.assertNoRollbackArmed()
	})
	t.Run("tunnel down during verification", func(t *testing.T) {
		s.T = t
		// The real v2 build; a drop-in stops the first tunnel as soon as the
		// backend runs v2, so the tunnel is down exactly while the cutover
		// verifies (and not after the rollback to v1).
		tun := s.Cfg.Tunnels[0]
		dropin := filepath.Join(s.M.UnitsDir, units.SlotTemplate(s.Cfg.Backend.Unit)+".d", "fault.conf")
		if err := os.MkdirAll(filepath.Dir(dropin), 0o755); err != nil {
			t.Fatal(err)
		}
		conf := fmt.Sprintf("[Service]\nExecStartPost=/bin/sh -c 'case \"$$(readlink %s)\" in */v2) systemctl stop --no-block %s;; esac'\n",
			filepath.Join(s.Cfg.Install.Root, "current"), tun.Unit)
		if err := os.WriteFile(dropin, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove(dropin) })
		unit, pid, inv := s.Prod()
		code, out := s.Run("cutover", "--build", s.Builds["v2"], "--arm-rollback", "--deadline", "30s", "--skip-canary-check", "e2e")
		if code != 3 {
			t.Fatalf("exit %d, want 3 naming tunnel %s:\n%s", code, tun.Name, out)
		}
		onlyReason(t, out, "tunnel "+tun.Name+" ")
		if v, c := s.Version(), s.Current(); v != "v1" || c != "v1" {
			t.Fatalf("after rollback production %s current %s, want v1", v, c)
		}
		// The old slot handed off and parked; the rollback made that same
		// process accept again instead of starting one.
		if u, p, i := s.Prod(); u != unit || p != pid || i != inv {
			t.Fatalf("after rollback production is %s pid %d invocation %s, want the parked %s pid %d invocation %s resumed:\n%s", u, p, i, unit, pid, inv, out)
		}
		if !strings.Contains(out, "resumed the parked slot") {
			t.Fatalf("the rollback did not resume the parked slot:\n%s", out)
		}
		s.assertNoRollbackArmed()
	})
}

func fileHashes(t testing.TB, paths []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range paths {
		if l, err := os.Readlink(p); err == nil {
			out[p] = "-> " + l
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256(b)
		out[p] = hex.EncodeToString(h[:])
	}
	return out
}
