package deploy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/buildinfo"
	"github.com/overdeck/mcp-backend/internal/nspawn/nspawntest"
	"github.com/overdeck/mcp-backend/internal/proctest"
	"github.com/overdeck/mcp-backend/internal/sitetest"
	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/release"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/ops/status"
	"github.com/overdeck/mcp-backend/systemd"
	"github.com/overdeck/mcp-backend/units"
)

var _ deploy.Systemd = (*systemd.Client)(nil)

// host is the sitetest harness's clean host, with this package's own
// helpers as methods.
type host struct{ *sitetest.Host }

func (h *host) unit(ctx context.Context, name string) (active, load string, pid uint32, inv string) {
	h.T.Helper()
	u, err := h.M.Client.Unit(ctx, name)
	if err != nil {
		h.T.Fatal(err)
	}
	return u.ActiveState, u.LoadState, u.MainPID, u.InvocationID
}

// variant writes a copy of h's config changed by edit and returns its path.
func (h *host) variant(name string, edit func(*ctlconfig.Config)) string {
	h.T.Helper()
	b, _ := json.Marshal(h.Cfg)
	var c ctlconfig.Config
	if err := json.Unmarshal(b, &c); err != nil {
		h.T.Fatal(err)
	}
	edit(&c)
	p := filepath.Join(filepath.Dir(h.CfgPath), name+".json")
	sitetest.WriteConfig(h.T, p, &c)
	return p
}

// runWith runs mcpctl with another mcpctl.json.
func (h *host) runWith(ctx context.Context, cfgPath string, args ...string) (int, string, string) {
	h.T.Helper()
	saved := h.CfgPath
	h.CfgPath = cfgPath
	defer func() { h.CfgPath = saved }()
	return h.Run(ctx, args...)
}

// assertNotInstalled fails unless the host holds nothing of an install: no
// current link, no release, no backend config, no unit file, no unit
// systemd still knows, the backend's port free.
func (h *host) assertNotInstalled(ctx context.Context, when string) {
	h.T.Helper()
	store := &release.Store{Root: h.Cfg.Install.Root}
	if cur, err := store.Current(); !errors.Is(err, release.ErrNoCurrent) {
		h.T.Errorf("%s: current = %q, %v; want none", when, cur, err)
	}
	if rs, err := store.List(); err != nil || len(rs) != 0 {
		h.T.Errorf("%s: %d releases (%v), want none", when, len(rs), err)
	}
	if _, err := os.Stat(h.Cfg.Backend.Config); !errors.Is(err, os.ErrNotExist) {
		h.T.Errorf("%s: backend config: %v, want absent (it was absent before)", when, err)
	}
	names := []string{units.Socket(h.Cfg.Backend.Unit), units.SlotTemplate(h.Cfg.Backend.Unit), units.BackendSlice(h.Cfg.Backend.Unit), units.WatchdogTimer, units.WatchdogService, units.PendingRollbackService}
	for _, tn := range h.Cfg.Tunnels {
		names = append(names, tn.Unit)
	}
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(h.M.UnitsDir, n)); !errors.Is(err, os.ErrNotExist) {
			h.T.Errorf("%s: unit file %s: %v, want absent", when, n, err)
		}
		switch n {
		case units.SlotTemplate(h.Cfg.Backend.Unit):
			n = units.SlotUnit(h.Cfg.Backend.Unit, units.BootSlot) // a template has no state of its own
		case units.BackendSlice(h.Cfg.Backend.Unit):
			continue // the file is what the undo owns
		}
		if a, load, _, _ := h.unit(ctx, n); a != "inactive" || load != "not-found" {
			h.T.Errorf("%s: %s is %s/%s, want inactive/not-found", when, n, a, load)
		}
	}
	if out, err := h.M.Exec(ctx, "find", "/etc/systemd/system", "-name", "*mcp*"); err != nil || strings.TrimSpace(out) != "" {
		h.T.Errorf("%s: enablement links or units left: %q (%v)", when, out, err)
	}
	if !deploy.PortFree(h.Cfg.Backend.Listen) {
		h.T.Errorf("%s: backend.listen %s is still held", when, h.Cfg.Backend.Listen)
	}
}

// TestInstallAndCanaryInRealSystemd: mcpctl install on a clean host, a
// second install refused, broken candidates refused before anything
// starts, a canary of v2 beside production v1 with production's identity
// unchanged, its status, and its stop.
func TestInstallAndCanaryInRealSystemd(t *testing.T) {
	dir := t.TempDir()
	h := &host{&sitetest.Host{T: t, Bin: filepath.Join(dir, "bin")}}
	h.MCPCtl = filepath.Join(h.Bin, "mcpctl")
	nspawntest.CopyExecutable(t, nspawntest.BuildBinary(t, "./cmd/mcpctl", "e2e"), h.MCPCtl)
	builds := map[string]string{}
	for _, v := range []string{"v1", "v2"} {
		builds[v] = filepath.Join(h.Bin, "mcp-backend-"+v)
		nspawntest.CopyExecutable(t, nspawntest.BuildBinary(t, "./cmd/mcp-backend", v), builds[v])
	}
	noVersion := filepath.Join(h.Bin, "no-version")
	sitetest.WriteFile(t, noVersion, []byte("#!/bin/sh\necho 'cannot start' >&2\nexit 1\n"), 0o755)
	badConfig := filepath.Join(h.Bin, "bad-config")
	sitetest.WriteFile(t, badConfig, []byte("#!/bin/sh\n[ \"$1\" = --version ] && { echo 'mcp-backend v3'; exit 0; }\necho 'listen: refused by this build' >&2\nexit 2\n"), 0o755)

	port, canaryPort := proctest.FreePort(t), proctest.FreePort(t)
	cfg := ctlconfig.Default()
	cfg.Backend.Listen = fmt.Sprintf("127.0.0.1:%d", port)
	cfg.Backend.Config = filepath.Join(dir, "etc", "config.json") // absent: install writes it
	cfg.Canary.Listen = fmt.Sprintf("127.0.0.1:%d", canaryPort)
	cfg.Canary.Config = filepath.Join(dir, "etc", "canary.json")
	cfg.Install.Root = filepath.Join(dir, "root")
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.UnitDir = "/etc/systemd/system" // inside; the harness binds its units dir there
	for i := range cfg.Tunnels {
		tp := proctest.FreePort(t)
		cfg.Tunnels[i].URL = fmt.Sprintf("http://127.0.0.1:%d", tp)
		cfg.Tunnels[i].Exec = fmt.Sprintf("/usr/bin/socat TCP-LISTEN:%d,bind=127.0.0.1,reuseaddr,fork TCP:127.0.0.1:%d", tp, port)
	}
	h.Cfg = cfg
	h.CfgPath = filepath.Join(dir, "mcpctl.json")
	sitetest.WriteConfig(t, h.CfgPath, cfg)

	h.M = nspawntest.Boot(t, nspawntest.Options{Binds: []string{dir}})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if _, err := h.M.Exec(ctx, "test", "-x", "/usr/bin/socat"); err != nil {
		t.Skipf("socat is needed for the tunnel units: %v", err)
	}
	store := &release.Store{Root: cfg.Install.Root}

	t.Run("refuses a --version that is not what the build prints, exit 2", func(t *testing.T) {
		code, out, stderr := h.Run(ctx, "install", "--build", builds["v1"], "--version", "v9")
		if code != 2 || !strings.Contains(out+stderr, "the build prints version v1; --version v9 would name it wrongly") {
			t.Fatalf("exit %d, want 2 naming both versions\n%s\n%s", code, out, stderr)
		}
		h.assertNotInstalled(ctx, "after the refusal")
	})
	t.Run("a tunnel without url is a config error, exit 2", func(t *testing.T) {
		p := h.variant("no-url", func(c *ctlconfig.Config) { c.Tunnels[1].URL = "" })
		code, out, stderr := h.runWith(ctx, p, "install", "--build", builds["v1"])
		if code != 2 || !strings.Contains(out+stderr, "tunnels[1].url") {
			t.Fatalf("exit %d, want 2 naming tunnels[1].url\n%s\n%s", code, out, stderr)
		}
		h.assertNotInstalled(ctx, "after the config error")
	})
	t.Run("an install failing verification is undone, exit 1", func(t *testing.T) {
		// The second tunnel's unit runs, but its URL names a port nobody
		// answers on: verification fails after everything was started.
		dead := fmt.Sprintf("http://127.0.0.1:%d", proctest.FreePort(t))
		p := h.variant("dead-tunnel", func(c *ctlconfig.Config) { c.Tunnels[1].URL = dead })
		code, out, stderr := h.runWith(ctx, p, "install", "--build", builds["v1"], "--json")
		if code != 1 {
			t.Fatalf("exit %d, want 1\n%s\n%s", code, out, stderr)
		}
		ir := sitetest.Decode[deploy.InstallReport](t, out)
		if ir.OK || !ir.UndoOK || len(ir.Undo) == 0 || len(ir.Started) != 5 {
			t.Fatalf("report: ok %v undoOK %v, %d undo steps, started %v; want a failed install after 5 starts (socket, backend, tunnels, timer), fully undone\n%s", ir.OK, ir.UndoOK, len(ir.Undo), ir.Started, out)
		}
		// The dead tunnel is the only reason it failed.
		if ir.Backend == nil || !ir.Backend.OK() || len(ir.Tunnels) != 2 || !ir.Tunnels[0].OK() || ir.Tunnels[1].OK() {
			t.Fatalf("want only tunnel %s to fail verification\n%s", dead, out)
		}
		for _, s := range ir.Steps {
			if !s.OK {
				t.Errorf("step %s failed (%s): want verification the only failure", s.Name, s.Err)
			}
		}
		h.assertNotInstalled(ctx, "after the undone install")
	})

	// The corrected retry: the real config.
	code, out, stderr := h.Run(ctx, "install", "--build", builds["v1"], "--json")
	if code != 0 {
		t.Fatalf("install: exit %d\n%s\n%s", code, out, stderr)
	}
	ir := sitetest.Decode[deploy.InstallReport](t, out)
	if !ir.OK || ir.Version != "v1" || !ir.ConfigWritten || ir.Backend == nil || !ir.Backend.OK() || len(ir.Tunnels) != 2 {
		t.Fatalf("install report: %s", out)
	}
	// Without a cgroup v2 memory controller the guardrails' memory half is
	// not enforced: install says so.
	controllers, _ := h.M.Exec(ctx, "cat", status.CgroupControllers)
	noMemory := !slices.Contains(strings.Fields(controllers), "memory")
	if warned := len(ir.Warnings) == 1 && strings.Contains(ir.Warnings[0], "memory guard is off"); warned != noMemory {
		t.Fatalf("install warnings %q, want a memory-controller warning: %v (controllers %q)", ir.Warnings, noMemory, controllers)
	}
	if cur, err := store.Current(); err != nil || cur != "v1" {
		t.Fatalf("current = %q, %v; want v1", cur, err)
	}
	for _, u := range []string{units.Socket(cfg.Backend.Unit), units.SlotUnit(cfg.Backend.Unit, units.BootSlot), cfg.Tunnels[0].Unit, cfg.Tunnels[1].Unit, units.WatchdogTimer} {
		if a, _, _, _ := h.unit(ctx, u); a != "active" {
			t.Errorf("%s is %s after install, want active", u, a)
		}
	}

	if code, out, stderr := h.Run(ctx, "install", "--build", builds["v2"]); code != 1 || !strings.Contains(out+stderr, "production exists") {
		t.Fatalf("second install: exit %d, want 1 and \"production exists\"\n%s\n%s", code, out, stderr)
	}

	_, _, pid0, inv0 := h.unit(ctx, units.SlotUnit(cfg.Backend.Unit, units.BootSlot))
	refusedCode := func(t *testing.T, wantCode int, wantMsg string, args ...string) {
		t.Helper()
		code, out, stderr := h.Run(ctx, append([]string{"canary", "start"}, args...)...)
		if code != wantCode || !strings.Contains(out+stderr, wantMsg) {
			t.Fatalf("exit %d, want %d and %q\n%s\n%s", code, wantCode, wantMsg, out, stderr)
		}
		if _, load, _, _ := h.unit(ctx, cfg.Canary.Unit); load != "not-found" {
			t.Errorf("canary unit LoadState = %s after a refusal, want not-found", load)
		}
		if _, err := os.Stat(filepath.Join(h.M.UnitsDir, cfg.Canary.Unit)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("canary unit file written despite the refusal: %v", err)
		}
		if rs, _ := store.List(); len(rs) != 1 {
			t.Errorf("%d releases after a refusal, want only v1", len(rs))
		}
		if _, _, pid, inv := h.unit(ctx, units.SlotUnit(cfg.Backend.Unit, units.BootSlot)); pid != pid0 || inv != inv0 {
			t.Errorf("production changed by a refused canary: MainPID %d InvocationID %s, was %d %s", pid, inv, pid0, inv0)
		}
	}
	refused := func(t *testing.T, wantMsg string, args ...string) {
		t.Helper()
		refusedCode(t, 1, wantMsg, args...)
	}
	t.Run("refuses a --version that is not what the build prints, exit 2", func(t *testing.T) {
		refusedCode(t, 2, "the build prints version v2; --version v7 would name it wrongly", "--build", builds["v2"], "--version", "v7")
	})
	t.Run("backend.config not JSON is a config error, exit 2", func(t *testing.T) {
		good, err := os.ReadFile(cfg.Backend.Config)
		if err != nil {
			t.Fatal(err)
		}
		sitetest.WriteFile(t, cfg.Backend.Config, []byte("listen: nope\n"), 0o644)
		defer sitetest.WriteFile(t, cfg.Backend.Config, good, 0o644)
		refusedCode(t, 2, "not a JSON object", "--build", builds["v2"])
	})
	t.Run("backend.config missing is a config error, exit 2", func(t *testing.T) {
		p := h.variant("no-backend-config", func(c *ctlconfig.Config) { c.Backend.Config = filepath.Join(dir, "etc", "absent.json") })
		code, out, stderr := h.runWith(ctx, p, "canary", "start", "--build", builds["v2"])
		if code != 2 || !strings.Contains(out+stderr, "backend.config") {
			t.Fatalf("exit %d, want 2 naming backend.config\n%s\n%s", code, out, stderr)
		}
	})
	t.Run("refuses a build whose --version fails", func(t *testing.T) {
		refused(t, noVersion+": --version", "--build", noVersion)
	})
	t.Run("refuses a build whose check-config fails", func(t *testing.T) {
		refused(t, "check-config", "--build", badConfig)
	})
	t.Run("refuses when the canary port is taken", func(t *testing.T) {
		ln, err := net.Listen("tcp", cfg.Canary.Listen)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		refused(t, "is taken by another process", "--build", builds["v2"])
	})

	code, out, stderr = h.Run(ctx, "canary", "start", "--build", builds["v2"], "--json")
	if code != 0 {
		t.Fatalf("canary start: exit %d\n%s\n%s", code, out, stderr)
	}
	cr := sitetest.Decode[deploy.CanaryReport](t, out)
	d2, _ := buildinfo.FileDigest(builds["v2"])
	if !cr.Pass || cr.Version != "v2" || cr.Digest != d2 || cr.Canary == nil || cr.Canary.Version != "v2" || cr.Canary.Build != d2 {
		t.Fatalf("canary report: %s", out)
	}
	p := cr.Production
	if p.Before.MainPID != pid0 || p.After.MainPID != pid0 || p.Before.InvocationID != inv0 || p.After.InvocationID != inv0 {
		t.Errorf("report: production %+v -> %+v, want MainPID %d and InvocationID %s throughout", p.Before, p.After, pid0, inv0)
	}
	if p.HealthzSamples < 2 || p.HealthzFailures != 0 {
		t.Errorf("production /healthz: %d samples, %d failures; want >= 2 and 0", p.HealthzSamples, p.HealthzFailures)
	}
	if _, _, pid, inv := h.unit(ctx, units.SlotUnit(cfg.Backend.Unit, units.BootSlot)); pid != pid0 || inv != inv0 {
		t.Errorf("production now MainPID %d InvocationID %s, was %d %s", pid, inv, pid0, inv0)
	}
	if cur, _ := store.Current(); cur != "v1" {
		t.Errorf("current = %q after the canary, want v1", cur)
	}
	if ok, _, err := state.Dir(cfg.StateDir).PassingFor(d2); err != nil || !ok {
		t.Errorf("no passing canary verdict for %s (%v)", d2, err)
	}

	code, out, stderr = h.Run(ctx, "canary", "status", "--json")
	if code != 0 {
		t.Fatalf("canary status: exit %d\n%s", code, stderr)
	}
	cs := sitetest.Decode[deploy.CanaryStatus](t, out)
	if cs.ActiveState != "active" || cs.Version != "v2" || cs.Healthz != 200 || cs.Readyz != 200 || cs.Record == nil || !cs.Record.Pass {
		t.Errorf("canary status: %s", out)
	}
	if code, out, _ = h.Run(ctx, "canary", "status"); code != 0 || !strings.Contains(out, "active/running") {
		t.Errorf("human canary status: exit %d\n%s", code, out)
	}

	// The canary listens through its own socket unit, on the canary port.
	if a, _, _, _ := h.unit(ctx, units.Socket(cfg.Canary.Unit)); a != "active" {
		t.Errorf("%s is %s while the canary runs, want active", units.Socket(cfg.Canary.Unit), a)
	}

	code, out, stderr = h.Run(ctx, "canary", "stop", "--json")
	if code != 0 {
		t.Fatalf("canary stop: exit %d\n%s\n%s", code, out, stderr)
	}
	sr := sitetest.Decode[deploy.StopReport](t, out)
	if !sr.WasActive || !sr.ReleaseRemoved || sr.Version != "v2" {
		t.Errorf("stop report: %s", out)
	}
	if a, _, _, _ := h.unit(ctx, cfg.Canary.Unit); a == "active" {
		t.Errorf("canary still active after stop")
	}
	for _, n := range []string{cfg.Canary.Unit, units.Socket(cfg.Canary.Unit)} {
		if _, err := os.Stat(filepath.Join(h.M.UnitsDir, n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after canary stop: %v, want removed", n, err)
		}
	}
	if !deploy.PortFree(cfg.Canary.Listen) {
		t.Errorf("canary.listen %s still held after canary stop (its socket must go too)", cfg.Canary.Listen)
	}
	if _, err := store.Get("v2"); !errors.Is(err, release.ErrNotFound) {
		t.Errorf("release v2 after stop: %v, want not found", err)
	}
	if cur, _ := store.Current(); cur != "v1" {
		t.Errorf("current = %q after stop, want v1", cur)
	}
	if _, _, pid, inv := h.unit(ctx, units.SlotUnit(cfg.Backend.Unit, units.BootSlot)); pid != pid0 || inv != inv0 {
		t.Errorf("production changed by canary stop: MainPID %d InvocationID %s, was %d %s", pid, inv, pid0, inv0)
	}
}
