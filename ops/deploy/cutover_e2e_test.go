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

	"github.com/overdeck/mcp-backend/internal/proctest"

	"github.com/overdeck/mcp-backend/internal/buildinfo"
	"github.com/overdeck/mcp-backend/internal/nspawn/nspawntest"
	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/release"
	"github.com/overdeck/mcp-backend/ops/snapshot"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/ops/verify"
	"github.com/overdeck/mcp-backend/units"
)

// site is a production deployment inside a real systemd container: v1
// installed and running, two socat tunnels, mcpctl and the candidate builds
// in a directory bound at the same path inside and out.
type site struct {
	t       testing.TB
	m       *nspawntest.Machine
	dir     string
	cfg     *ctlconfig.Config
	cfgPath string
	mcpctl  string
	builds  map[string]string // version -> binary in dir/bin
	backend string            // http://127.0.0.1:PORT
}

// build returns a mcp-backend build really stamped with version v (built
// once per test binary), copied into the site.
func (s *site) build(v string) string {
	s.t.Helper()
	if p, ok := s.builds[v]; ok {
		return p
	}
	p := filepath.Join(s.dir, "bin", "mcp-backend-"+v)
	nspawntest.CopyExecutable(s.t, nspawntest.BuildBinary(s.t, "./cmd/mcp-backend", v), p)
	s.builds[v] = p
	return p
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

func newSite(t testing.TB, deadline time.Duration) *site {
	t.Helper()
	dir := t.TempDir()
	s := &site{t: t, dir: dir, builds: map[string]string{}}
	s.mcpctl = filepath.Join(dir, "bin", "mcpctl")
	nspawntest.CopyExecutable(t, nspawntest.BuildBinary(t, "./cmd/mcpctl", "e2e"), s.mcpctl)
	for _, v := range []string{"v1", "v2"} {
		s.builds[v] = filepath.Join(dir, "bin", "mcp-backend-"+v)
		nspawntest.CopyExecutable(t, nspawntest.BuildBinary(t, "./cmd/mcp-backend", v), s.builds[v])
	}
	port, canary := proctest.FreePort(t), proctest.FreePort(t)
	s.backend = fmt.Sprintf("http://127.0.0.1:%d", port)
	cfg := ctlconfig.Default()
	cfg.Backend.Listen = fmt.Sprintf("127.0.0.1:%d", port)
	cfg.Backend.Config = filepath.Join(dir, "etc", "config.json")
	cfg.Canary.Listen = fmt.Sprintf("127.0.0.1:%d", canary)
	cfg.Canary.Config = filepath.Join(dir, "etc", "canary.json")
	cfg.Install.Root = filepath.Join(dir, "root")
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.Rollback.Deadline = ctlconfig.Duration(deadline)
	for i := range cfg.Tunnels {
		tp := proctest.FreePort(t)
		cfg.Tunnels[i].URL = fmt.Sprintf("http://127.0.0.1:%d", tp)
		cfg.Tunnels[i].Exec = fmt.Sprintf("/usr/bin/socat TCP-LISTEN:%d,bind=127.0.0.1,reuseaddr,fork TCP:127.0.0.1:%d", tp, port)
	}
	s.cfg = cfg
	s.cfgPath = filepath.Join(dir, "mcpctl.json")
	writeJSON(t, s.cfgPath, cfg)
	writeJSON(t, cfg.Backend.Config, map[string]any{"listen": cfg.Backend.Listen})
	for _, d := range []string{cfg.StateDir, cfg.Install.Root} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	s.m = nspawntest.Boot(t, nspawntest.Options{Binds: []string{dir}})
	cfg.UnitDir = "/etc/systemd/system" // as mcpctl sees it inside
	us, err := units.Render(units.Params{Spec: unitSpec(t, cfg), MCPCtl: s.mcpctl, MCPCtlConfig: s.cfgPath})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range us {
		if err := os.WriteFile(filepath.Join(s.m.UnitsDir, u.Name), u.Content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	store := &release.Store{Root: cfg.Install.Root}
	if _, _, err := store.Install("v1", s.builds["v1"]); err != nil {
		t.Fatal(err)
	}
	if err := store.SetCurrent("v1"); err != nil {
		t.Fatal(err)
	}
	for _, slot := range units.Slots {
		link := units.SlotLink(cfg.Install.Root, slot)
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..", "releases", "v1"), link); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.m.Client.DaemonReload(ctx); err != nil {
		t.Fatal(err)
	}
	for _, u := range append([]string{units.SlotUnit(cfg.Backend.Unit, units.BootSlot)}, cfg.Tunnels[0].Unit, cfg.Tunnels[1].Unit) {
		if err := s.m.Client.Start(ctx, u); err != nil {
			t.Fatalf("start %s: %v", u, err)
		}
	}
	for _, tun := range cfg.Tunnels {
		s.waitHTTP(tun.URL+"/readyz", 10*time.Second)
	}
	return s
}

// writeJSON is nspawntest.WriteJSON: v, indented, to path.
var writeJSON = nspawntest.WriteJSON

func (s *site) waitHTTP(url string, timeout time.Duration) {
	s.t.Helper()
	end := time.Now().Add(timeout)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(end) {
			s.t.Fatalf("%s not ready after %s: %v", url, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pass records passing canary and stress verdicts for a build.
func (s *site) pass(build string) {
	s.t.Helper()
	d, err := buildinfo.FileDigest(build)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, k := range []string{state.KindCanary, state.KindStress} {
		if err := state.Dir(s.cfg.StateDir).RecordVerdict(state.Verdict{Kind: k, Digest: d, Pass: true}); err != nil {
			s.t.Fatal(err)
		}
	}
}

// mcpctl runs mcpctl inside the container as an operator would and returns
// its exit code and output.
func (s *site) mcpctlCmd(ctx context.Context, args ...string) *exec.Cmd {
	return s.m.Command(ctx, append([]string{s.mcpctl, "--config", s.cfgPath}, args...)...)
}

func (s *site) run(args ...string) (int, string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := s.mcpctlCmd(ctx, args...).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	s.t.Fatalf("mcpctl %v: %v\n%s", args, err, out)
	return -1, ""
}

func (s *site) unit(name string) (active, invocation string) {
	s.t.Helper()
	st, err := s.m.Client.Unit(context.Background(), name)
	if err != nil {
		s.t.Fatal(err)
	}
	return st.ActiveState, st.InvocationID
}

// prod is the production unit that runs now (a slot; the legacy unit on a
// site installed before the slots) and its main process and invocation.
func (s *site) prod() (unit string, pid uint32, invocation string) {
	s.t.Helper()
	var running []string
	for _, u := range append([]string{s.cfg.Backend.Unit}, units.SlotUnit(s.cfg.Backend.Unit, units.SlotBlue), units.SlotUnit(s.cfg.Backend.Unit, units.SlotGreen)) {
		st, err := s.m.Client.Unit(context.Background(), u)
		if err != nil {
			s.t.Fatal(err)
		}
		if st.ActiveState != "inactive" && st.ActiveState != "failed" && st.LoadState == "loaded" {
			running = append(running, u)
			unit, pid, invocation = u, st.MainPID, st.InvocationID
		}
	}
	if len(running) != 1 {
		s.t.Fatalf("production units running: %v, want exactly one", running)
	}
	return unit, pid, invocation
}

func (s *site) invocations() map[string]string {
	out := map[string]string{}
	for _, tun := range s.cfg.Tunnels {
		_, out[tun.Name] = s.unit(tun.Unit)
	}
	return out
}

func (s *site) version() string {
	s.t.Helper()
	v, _, err := (&verify.Client{}).SystemInfo(context.Background(), s.backend)
	if err != nil {
		s.t.Fatalf("system.info: %v", err)
	}
	return v
}

func (s *site) current() string {
	s.t.Helper()
	v, err := (&release.Store{Root: s.cfg.Install.Root}).Current()
	if err != nil {
		s.t.Fatal(err)
	}
	return v
}

func (s *site) assertNoRollbackArmed() {
	s.t.Helper()
	gone, err := s.m.Client.Gone(context.Background(), deploy.RollbackTimer, deploy.RollbackService)
	if err != nil || !gone {
		s.t.Fatalf("rollback units still loaded: gone=%v err=%v", gone, err)
	}
	if p, err := state.Dir(s.cfg.StateDir).ReadPending(); err != nil || p != nil {
		s.t.Fatalf("pending marker = %+v, %v; want none", p, err)
	}
}

// hashes maps each file a snapshot covers (as seen from the host) to its
// sha256, "" when absent.
func (s *site) hashes(m *snapshot.Manifest) map[string]string {
	s.t.Helper()
	out := map[string]string{}
	for _, f := range m.Files {
		p := f.Path
		if strings.HasPrefix(p, "/etc/systemd/system/") {
			p = filepath.Join(s.m.UnitsDir, strings.TrimPrefix(p, "/etc/systemd/system/"))
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
		s.t = t
		s.pass(s.builds["v2"])
		before := s.invocations()
		stop := make(chan struct{})
		unavailable := pollHealthz(s.backend+"/healthz", stop)
		start := time.Now()
		code, out := s.run("cutover", "--build", s.builds["v2"], "--arm-rollback")
		took := time.Since(start)
		close(stop)
		if code != 0 {
			t.Fatalf("cutover exit %d:\n%s", code, out)
		}
		t.Logf("figures: cutover %s, longest /healthz outage polled every 50ms %s", took.Round(time.Millisecond), unavailable())
		if v := s.version(); v != "v2" {
			t.Fatalf("production reports %s, want v2", v)
		}
		if after := s.invocations(); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("tunnels restarted: before %v after %v", before, after)
		}
		s.assertNoRollbackArmed()
		s.assertStatus("v2", state.ActionCutover)
		if code, out := s.run("rollback", "--snapshot", snapshotOf(t, s), "--nonce", "0123456789abcdef0123456789abcdef"); code != 0 || !strings.Contains(out, "stale nonce") {
			t.Fatalf("late timer with a stale nonce: exit %d, %s", code, out)
		}
		if v := s.version(); v != "v2" {
			t.Fatalf("stale nonce changed production to %s", v)
		}
	})
	t.Run("operator rollback, then again", func(t *testing.T) {
		s.t = t
		start := time.Now()
		code, out := s.run("rollback", "--last")
		if code != 0 || s.version() != "v1" || s.current() != "v1" {
			t.Fatalf("rollback exit %d, version %s, current %s:\n%s", code, s.version(), s.current(), out)
		}
		t.Logf("figures: operator rollback %s", time.Since(start).Round(time.Millisecond))
		code, out = s.run("rollback", "--last")
		if code != 0 || !strings.Contains(out, "no-op") {
			t.Fatalf("second rollback: exit %d, want a no-op:\n%s", code, out)
		}
	})
	t.Run("--if-pending by hand restarts production", func(t *testing.T) {
		s.t = t
		// Only the boot-time unit (--boot) may leave the backend for systemd
		// to start; an operator's --if-pending must restart and verify it.
		nonce, err := state.NewNonce()
		if err != nil {
			t.Fatal(err)
		}
		if err := state.Dir(s.cfg.StateDir).WritePending(&state.Pending{SnapshotID: snapshotOf(t, s), Nonce: nonce, FromVersion: "v1", ToVersion: "v2",
			ArmedAt: time.Now(), Deadline: time.Now().Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		unit, _, _ := s.prod()
		if err := s.m.Client.Stop(ctx, unit); err != nil {
			t.Fatal(err)
		}
		code, out := s.run("rollback", "--if-pending")
		if unit, _, _ = s.prod(); code != 0 {
			t.Fatalf("exit %d, production %s; want 0 with production started:\n%s", code, unit, out)
		}
		if active, _ := s.unit(unit); active != "active" {
			t.Fatalf("exit %d, backend %s; want 0 with production started:\n%s", code, active, out)
		}
		if v := s.version(); v != "v1" {
			t.Fatalf("production %s, want v1", v)
		}
		s.assertNoRollbackArmed()
	})
	t.Run("--version naming another version", func(t *testing.T) {
		s.t = t
		snaps, _ := snapshot.List(s.cfg.StateDir)
		_, _, inv := s.prod()
		code, out := s.run("cutover", "--build", s.build("v3"), "--version", "v4", "--arm-rollback", "--skip-canary-check", "e2e")
		if code != 2 || !strings.Contains(out, "the build prints version v3; --version v4") {
			t.Fatalf("exit %d, want 2 naming both versions:\n%s", code, out)
		}
		if after, _ := snapshot.List(s.cfg.StateDir); len(after) != len(snaps) {
			t.Fatal("a refused cutover took a snapshot")
		}
		if _, _, now := s.prod(); now != inv || s.current() != "v1" {
			t.Fatal("a refused cutover changed production")
		}
		s.assertNoRollbackArmed()
	})
	t.Run("without --arm-rollback", func(t *testing.T) {
		s.t = t
		if code, out := s.run("cutover", "--build", s.builds["v2"]); code != 2 || !strings.Contains(out, "--arm-rollback") {
			t.Fatalf("exit %d, want 2:\n%s", code, out)
		}
	})
	t.Run("candidate never ready", func(t *testing.T) {
		s.t = t
		// A genuinely broken v3: it answers --version and check-config, but
		// its serve never notifies READY.
		wrapper := writeNeverReady(t, s, s.build("v3"))
		unit, pid, inv := s.prod()
		code, out := s.run("cutover", "--build", wrapper, "--arm-rollback", "--deadline", "30s", "--skip-canary-check", "e2e test")
		if code != 3 {
			t.Fatalf("exit %d, want 3:\n%s", code, out)
		}
		// Started in the idle slot, never in the serving one.
		onlyReason(t, out, "start "+strings.TrimSuffix(s.cfg.Backend.Unit, ".service")+"@")
		if u, p, i := s.prod(); u != unit || p != pid || i != inv {
			t.Fatalf("production %s pid %d %s after a never-ready cutover, want %s pid %d %s untouched", u, p, i, unit, pid, inv)
		}
		if v, c := s.version(), s.current(); v != "v1" || c != "v1" {
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
		s.t = t
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
		_, _, inv := s.prod()
		code, out := s.run("rollback", "--snapshot", snap.ID)
		if code != 4 || !strings.Contains(out, "corrupt") {
			t.Fatalf("exit %d, want 4 naming the corruption:\n%s", code, out)
		}
		if _, _, now := s.prod(); now != inv {
			t.Fatal("a refused restore restarted the backend")
		}
		if b, _ := os.ReadFile(s.cfg.Backend.Config); strings.Contains(string(b), ":1\"") {
			t.Fatal("a refused restore wrote the config")
		}
	})
	t.Run("two cutovers at once", func(t *testing.T) {
		s.t = t
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		first := s.mcpctlCmd(ctx, "cutover", "--build", writeNeverReady(t, s, s.build("v5")), "--arm-rollback", "--deadline", "30s", "--skip-canary-check", "e2e")
		var firstOut strings.Builder
		first.Stdout, first.Stderr = &firstOut, &firstOut
		if err := first.Start(); err != nil {
			t.Fatal(err)
		}
		for end := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if p, _ := state.Dir(s.cfg.StateDir).ReadPending(); p != nil {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("first cutover never armed:\n%s", firstOut.String())
			}
		}
		// Told not to wait, the second is refused at once; a waiting one
		// (the default --lock-wait) would run after the first, alone.
		code, out := s.run("--lock-wait", "0", "cutover", "--build", s.builds["v2"], "--arm-rollback")
		if code != 1 || !strings.Contains(out, "another mcpctl command") {
			t.Fatalf("second cutover: exit %d, want 1:\n%s", code, out)
		}
		err := first.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 {
			t.Fatalf("first cutover: %v, want it to complete its own rollback (exit 3)\n%s", err, firstOut.String())
		}
		if v := s.version(); v != "v1" {
			t.Fatalf("production %s after the first cutover rolled back, want v1", v)
		}
		s.assertNoRollbackArmed()
	})
}

// assertStatus runs mcpctl status --json in the container: production on
// version and active, both tunnels answering, no rollback armed, and the
// newest cutover or rollback record is lastAction.
func (s *site) assertStatus(version, lastAction string) {
	s.t.Helper()
	code, out := s.run("--json", "status")
	if code != 0 {
		s.t.Fatalf("status exit %d:\n%s", code, out)
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
		s.t.Fatalf("status --json: %v\n%s", err, out)
	}
	p := st.Production
	if p.ActiveState != "active" || p.Version != version || p.Healthz != 200 || st.Rollback.Armed || len(st.Tunnels) != 2 ||
		len(st.Events) == 0 || st.Events[0].Action != lastAction {
		s.t.Fatalf("status = %+v, want %s active, no rollback armed, last record %s", st, version, lastAction)
	}
	for _, tun := range st.Tunnels {
		if tun.ActiveState != "active" || tun.Healthz != 200 {
			s.t.Fatalf("status tunnels = %+v", st.Tunnels)
		}
	}
}

// standbySlot is the production slot that is not serving's.
func standbySlot(s *site, serving string) string {
	if serving == units.SlotUnit(s.cfg.Backend.Unit, units.SlotBlue) {
		return units.SlotUnit(s.cfg.Backend.Unit, units.SlotGreen)
	}
	return units.SlotUnit(s.cfg.Backend.Unit, units.SlotBlue)
}

// killCutoverAfterRestart runs a cutover to the gated candidate, waits until
// the candidate's slot has started (held at its start by the gate) beside
// the serving one, SIGKILLs mcpctl inside the container, opens the gate and
// returns what mcpctl printed.
func (s *site) killCutoverAfterRestart(ctx context.Context, t testing.TB, candidate gatedStart, inv0 string) string {
	t.Helper()
	cmd := s.mcpctlCmd(ctx, "cutover", "--build", candidate.wrapper, "--arm-rollback", "--skip-canary-check", "e2e")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	serving, _, _ := s.prod()
	proctest.Eventually(t, "the candidate's slot started", func() bool {
		_, inv := s.unit(standbySlot(s, serving))
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
	if _, err := s.m.Exec(ctx, "kill", "-KILL", fmt.Sprint(h.PID)); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}

func holder(t testing.TB, s *site) *state.Holder {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.cfg.StateDir, state.LockFile))
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
	p := filepath.Join(s.dir, "bin", "never-ready-"+filepath.Base(build))
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
		wrapper: filepath.Join(s.dir, "bin", "gated-"+filepath.Base(build)),
		gate:    filepath.Join(s.dir, "gate-"+filepath.Base(build)),
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
	list, err := snapshot.List(s.cfg.StateDir)
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
	candidate := writeGatedStart(t, s, s.builds["v2"])
	unit0, pid0, inv0 := s.prod()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out := s.killCutoverAfterRestart(ctx, t, candidate, inv0)
	killedAt := time.Now()
	if s.current() != "v2" {
		t.Fatalf("current %s right after the kill, want v2 (killed too late?):\n%s", s.current(), out)
	}
	for end := time.Now().Add(40 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		p, _ := state.Dir(s.cfg.StateDir).ReadPending()
		if p == nil && s.current() == "v1" {
			break
		}
		if time.Now().After(end) {
			j, _ := s.m.Exec(context.Background(), "journalctl", "-u", deploy.RollbackService, "--no-pager")
			t.Fatalf("the timer did not restore: pending %+v current %s\n%s", p, s.current(), j)
		}
	}
	t.Logf("figures: restored %s after the kill (deadline 15s from arming)", time.Since(killedAt).Round(time.Millisecond))
	s.waitHTTP(s.backend+"/readyz", 10*time.Second)
	// Exactly one slot serves v1: the one that never stopped; the
	// candidate's slot, left in standby, was stopped.
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if a, _ := s.unit(standbySlot(s, unit0)); a == "inactive" || a == "failed" || time.Now().After(end) {
			break
		}
	}
	if u, p, i := s.prod(); u != unit0 || p != pid0 || i != inv0 || s.version() != "v1" {
		t.Fatalf("production %s pid %d %s on %s after the timer's rollback, want %s pid %d %s on v1", u, p, i, s.version(), unit0, pid0, inv0)
	}
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if gone, err := s.m.Client.Gone(context.Background(), deploy.RollbackTimer, deploy.RollbackService); err == nil && gone {
			break
		}
		if time.Now().After(end) {
			t.Fatal("rollback units still loaded after the timer ran")
		}
	}
	events, err := state.Dir(s.cfg.StateDir).Tail(20)
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
		s.t = t
		bad := filepath.Join(s.dir, "bin", "rejects-config")
		script := fmt.Sprintf("#!/bin/sh\nif [ \"$1\" = check-config ]; then echo 'listen: not allowed' >&2; exit 1; fi\nexec %s \"$@\"\n", s.build("v9"))
		if err := os.WriteFile(bad, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		files := []string{s.cfg.Backend.Config, filepath.Join(s.m.UnitsDir, units.SlotTemplate(s.cfg.Backend.Unit)), filepath.Join(s.cfg.Install.Root, "current")}
		before := fileHashes(t, files)
		_, _, inv := s.prod()
		code, out := s.run("cutover", "--build", bad, "--arm-rollback", "--skip-canary-check", "e2e")
		if code != 1 {
			t.Fatalf("exit %d, want 1 naming check-config:\n%s", code, out)
		}
		onlyReason(t, out, "check-config")
		if after := fileHashes(t, files); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("files changed by a refused cutover:\nbefore %v\nafter  %v", before, after)
		}
		if _, _, now := s.prod(); now != inv {
			t.Fatal("a refused cutover restarted the backend")
		}
		if list, _ := snapshot.List(s.cfg.StateDir); len(list) != 0 {
			t.Fatalf("a refused cutover took %d snapshots", len(list))
		}
		s.assertNoRollbackArmed()
	})
	t.Run("tunnel down during verification", func(t *testing.T) {
		s.t = t
		// The real v2 build; a drop-in stops the first tunnel as soon as the
		// backend runs v2, so the tunnel is down exactly while the cutover
		// verifies (and not after the rollback to v1).
		tun := s.cfg.Tunnels[0]
		dropin := filepath.Join(s.m.UnitsDir, units.SlotTemplate(s.cfg.Backend.Unit)+".d", "fault.conf")
		if err := os.MkdirAll(filepath.Dir(dropin), 0o755); err != nil {
			t.Fatal(err)
		}
		conf := fmt.Sprintf("[Service]\nExecStartPost=/bin/sh -c 'case \"$$(readlink %s)\" in */v2) systemctl stop --no-block %s;; esac'\n",
			filepath.Join(s.cfg.Install.Root, "current"), tun.Unit)
		if err := os.WriteFile(dropin, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove(dropin) })
		unit, pid, inv := s.prod()
		code, out := s.run("cutover", "--build", s.builds["v2"], "--arm-rollback", "--deadline", "30s", "--skip-canary-check", "e2e")
		if code != 3 {
			t.Fatalf("exit %d, want 3 naming tunnel %s:\n%s", code, tun.Name, out)
		}
		onlyReason(t, out, "tunnel "+tun.Name+" ")
		if v, c := s.version(), s.current(); v != "v1" || c != "v1" {
			t.Fatalf("after rollback production %s current %s, want v1", v, c)
		}
		// The old slot handed off and parked; the rollback made that same
		// process accept again instead of starting one.
		if u, p, i := s.prod(); u != unit || p != pid || i != inv {
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

// unitSpec is cfg's unit spec; the test fails when cfg cannot be rendered.
func unitSpec(t testing.TB, cfg *ctlconfig.Config) *units.Spec {
	t.Helper()
	spec, err := cfg.UnitSpec()
	if err != nil {
		t.Fatal(err)
	}
	return spec
}
