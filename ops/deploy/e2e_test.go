package deploy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/buildinfo"
	"github.com/overdeck/mcp-backend/internal/nspawntest"
	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/release"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/units"
)

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func writeFile(t testing.TB, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
}

// host is a clean host inside a real systemd container: mcpctl, builds and
// all state in one directory bound at the same path inside and out.
type host struct {
	t       testing.TB
	m       *nspawntest.Machine
	cfg     *ctlconfig.Config
	cfgPath string
	mcpctl  string
	bin     string
}

// mcpctl runs mcpctl inside the container as an operator would and returns
// its exit code and stdout.
func (h *host) run(ctx context.Context, args ...string) (int, string, string) {
	h.t.Helper()
	cmd := h.m.Command(ctx, append([]string{h.mcpctl, "--config", h.cfgPath, "--no-color"}, args...)...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errb.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errb.String()
	}
	h.t.Fatalf("mcpctl %v: %v", args, err)
	return -1, "", ""
}

func (h *host) unit(ctx context.Context, name string) (active, load string, pid uint32, inv string) {
	h.t.Helper()
	u, err := h.m.Client.Unit(ctx, name)
	if err != nil {
		h.t.Fatal(err)
	}
	return u.ActiveState, u.LoadState, u.MainPID, u.InvocationID
}

func decode[T any](t testing.TB, out string) *T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("decode %T: %v\n%s", v, err, out)
	}
	return &v
}

// TestInstallAndCanaryInRealSystemd: mcpctl install on a clean host, a
// second install refused, broken candidates refused before anything
// starts, a canary of v2 beside production v1 with production's identity
// unchanged, its status, and its stop.
func TestInstallAndCanaryInRealSystemd(t *testing.T) {
	dir := t.TempDir()
	h := &host{t: t, bin: filepath.Join(dir, "bin")}
	h.mcpctl = filepath.Join(h.bin, "mcpctl")
	nspawntest.CopyExecutable(t, nspawntest.BuildBinary(t, "./cmd/mcpctl", "e2e"), h.mcpctl)
	builds := map[string]string{}
	for _, v := range []string{"v1", "v2"} {
		builds[v] = filepath.Join(h.bin, "mcp-backend-"+v)
		nspawntest.CopyExecutable(t, nspawntest.BuildBinary(t, "./cmd/mcp-backend", v), builds[v])
	}
	noVersion := filepath.Join(h.bin, "no-version")
	writeFile(t, noVersion, []byte("#!/bin/sh\necho 'cannot start' >&2\nexit 1\n"), 0o755)
	badConfig := filepath.Join(h.bin, "bad-config")
	writeFile(t, badConfig, []byte("#!/bin/sh\n[ \"$1\" = --version ] && { echo 'mcp-backend v3'; exit 0; }\necho 'listen: refused by this build' >&2\nexit 2\n"), 0o755)

	port, canaryPort := freePort(t), freePort(t)
	cfg := ctlconfig.Default()
	cfg.Backend.Listen = fmt.Sprintf("127.0.0.1:%d", port)
	cfg.Backend.Config = filepath.Join(dir, "etc", "config.json") // absent: install writes it
	cfg.Canary.Listen = fmt.Sprintf("127.0.0.1:%d", canaryPort)
	cfg.Canary.Config = filepath.Join(dir, "etc", "canary.json")
	cfg.Install.Root = filepath.Join(dir, "root")
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.UnitDir = "/etc/systemd/system" // inside; the harness binds its units dir there
	for i := range cfg.Tunnels {
		tp := freePort(t)
		cfg.Tunnels[i].URL = fmt.Sprintf("http://127.0.0.1:%d", tp)
		cfg.Tunnels[i].Exec = fmt.Sprintf("/usr/bin/socat TCP-LISTEN:%d,bind=127.0.0.1,reuseaddr,fork TCP:127.0.0.1:%d", tp, port)
	}
	h.cfg = cfg
	h.cfgPath = filepath.Join(dir, "mcpctl.json")
	b, _ := json.MarshalIndent(cfg, "", "  ")
	writeFile(t, h.cfgPath, b, 0o644)

	h.m = nspawntest.Boot(t, nspawntest.Options{Binds: []string{dir}})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if _, err := h.m.Exec(ctx, "test", "-x", "/usr/bin/socat"); err != nil {
		t.Skipf("socat is needed for the tunnel units: %v", err)
	}
	store := &release.Store{Root: cfg.Install.Root}

	code, out, stderr := h.run(ctx, "install", "--build", builds["v1"], "--json")
	if code != 0 {
		t.Fatalf("install: exit %d\n%s\n%s", code, out, stderr)
	}
	ir := decode[deploy.InstallReport](t, out)
	if !ir.OK || ir.Version != "v1" || !ir.ConfigWritten || ir.Backend == nil || !ir.Backend.OK() || len(ir.Tunnels) != 2 {
		t.Fatalf("install report: %s", out)
	}
	if cur, err := store.Current(); err != nil || cur != "v1" {
		t.Fatalf("current = %q, %v; want v1", cur, err)
	}
	for _, u := range []string{cfg.Backend.Unit, cfg.Tunnels[0].Unit, cfg.Tunnels[1].Unit, units.WatchdogTimer} {
		if a, _, _, _ := h.unit(ctx, u); a != "active" {
			t.Errorf("%s is %s after install, want active", u, a)
		}
	}

	if code, out, stderr := h.run(ctx, "install", "--build", builds["v2"]); code != 1 || !strings.Contains(out+stderr, "production exists") {
		t.Fatalf("second install: exit %d, want 1 and \"production exists\"\n%s\n%s", code, out, stderr)
	}

	_, _, pid0, inv0 := h.unit(ctx, cfg.Backend.Unit)
	refused := func(t *testing.T, wantMsg string, args ...string) {
		t.Helper()
		code, out, stderr := h.run(ctx, append([]string{"canary", "start"}, args...)...)
		if code != 1 || !strings.Contains(out+stderr, wantMsg) {
			t.Fatalf("exit %d, want 1 and %q\n%s\n%s", code, wantMsg, out, stderr)
		}
		if _, load, _, _ := h.unit(ctx, cfg.Canary.Unit); load != "not-found" {
			t.Errorf("canary unit LoadState = %s after a refusal, want not-found", load)
		}
		if _, err := os.Stat(filepath.Join(h.m.UnitsDir, cfg.Canary.Unit)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("canary unit file written despite the refusal: %v", err)
		}
		if rs, _ := store.List(); len(rs) != 1 {
			t.Errorf("%d releases after a refusal, want only v1", len(rs))
		}
	}
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

	code, out, stderr = h.run(ctx, "canary", "start", "--build", builds["v2"], "--json")
	if code != 0 {
		t.Fatalf("canary start: exit %d\n%s\n%s", code, out, stderr)
	}
	cr := decode[deploy.CanaryReport](t, out)
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
	if _, _, pid, inv := h.unit(ctx, cfg.Backend.Unit); pid != pid0 || inv != inv0 {
		t.Errorf("production now MainPID %d InvocationID %s, was %d %s", pid, inv, pid0, inv0)
	}
	if cur, _ := store.Current(); cur != "v1" {
		t.Errorf("current = %q after the canary, want v1", cur)
	}
	if ok, _, err := state.PassingFor(cfg.StateDir, d2); err != nil || !ok {
		t.Errorf("no passing canary verdict for %s (%v)", d2, err)
	}

	code, out, stderr = h.run(ctx, "canary", "status", "--json")
	if code != 0 {
		t.Fatalf("canary status: exit %d\n%s", code, stderr)
	}
	cs := decode[deploy.CanaryStatus](t, out)
	if cs.ActiveState != "active" || cs.Version != "v2" || cs.Healthz != 200 || cs.Readyz != 200 || cs.Record == nil || !cs.Record.Pass {
		t.Errorf("canary status: %s", out)
	}
	if code, out, _ = h.run(ctx, "canary", "status"); code != 0 || !strings.Contains(out, "active/running") {
		t.Errorf("human canary status: exit %d\n%s", code, out)
	}

	code, out, stderr = h.run(ctx, "canary", "stop", "--json")
	if code != 0 {
		t.Fatalf("canary stop: exit %d\n%s\n%s", code, out, stderr)
	}
	sr := decode[deploy.StopReport](t, out)
	if !sr.WasActive || !sr.ReleaseRemoved || sr.Version != "v2" {
		t.Errorf("stop report: %s", out)
	}
	if a, _, _, _ := h.unit(ctx, cfg.Canary.Unit); a == "active" {
		t.Errorf("canary still active after stop")
	}
	if _, err := store.Get("v2"); !errors.Is(err, release.ErrNotFound) {
		t.Errorf("release v2 after stop: %v, want not found", err)
	}
	if cur, _ := store.Current(); cur != "v1" {
		t.Errorf("current = %q after stop, want v1", cur)
	}
	if _, _, pid, inv := h.unit(ctx, cfg.Backend.Unit); pid != pid0 || inv != inv0 {
		t.Errorf("production changed by canary stop: MainPID %d InvocationID %s, was %d %s", pid, inv, pid0, inv0)
	}
}
