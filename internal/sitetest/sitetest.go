// Package sitetest is the harness the end-to-end tests share that run
// mcpctl and mcp-backend inside a real systemd container: a Site, a
// production deployment (v1 installed and running, two socat tunnels), and
// a Host, a clean host with nothing installed. Both keep mcpctl, the builds
// and all state in one directory bound at the same path inside and out.
// The container tests of deploys and of the backend both use it, so there
// is one copy; every helper takes a testing.TB and fails it.
package sitetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/buildinfo"
	"github.com/overdeck/mcp-backend/internal/nspawn/nspawntest"
	"github.com/overdeck/mcp-backend/internal/proctest"
	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/release"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/ops/verify"
	"github.com/overdeck/mcp-backend/units"
)

// Site is a production deployment inside a real systemd container: v1
// installed and running, two socat tunnels, mcpctl and the candidate builds
// in a directory bound at the same path inside and out.
type Site struct {
	T       testing.TB // the test the helpers fail; a subtest sets its own
	M       *nspawntest.Machine
	Dir     string
	Cfg     *ctlconfig.Config
	CfgPath string
	MCPCtl  string
	Builds  map[string]string // version -> binary in Dir/bin
	Backend string            // http://127.0.0.1:PORT
}

// Build returns a mcp-backend build really stamped with version v (built
// once per test binary), copied into the site.
func (s *Site) Build(v string) string {
	s.T.Helper()
	if p, ok := s.Builds[v]; ok {
		return p
	}
	p := filepath.Join(s.Dir, "bin", "mcp-backend-"+v)
	nspawntest.CopyExecutable(s.T, nspawntest.BuildBinary(s.T, "./cmd/mcp-backend", v), p)
	s.Builds[v] = p
	return p
}

// New boots a container and installs a site in it: v1 current in every
// slot, the boot slot and both tunnels started and answering, a rollback
// deadline of deadline.
func New(t testing.TB, deadline time.Duration) *Site {
	t.Helper()
	dir := t.TempDir()
	s := &Site{T: t, Dir: dir, Builds: map[string]string{}}
	s.MCPCtl = filepath.Join(dir, "bin", "mcpctl")
	nspawntest.CopyExecutable(t, nspawntest.BuildBinary(t, "./cmd/mcpctl", "e2e"), s.MCPCtl)
	for _, v := range []string{"v1", "v2"} {
		s.Builds[v] = filepath.Join(dir, "bin", "mcp-backend-"+v)
		nspawntest.CopyExecutable(t, nspawntest.BuildBinary(t, "./cmd/mcp-backend", v), s.Builds[v])
	}
	port, canary := proctest.FreePort(t), proctest.FreePort(t)
	s.Backend = fmt.Sprintf("http://127.0.0.1:%d", port)
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
	s.Cfg = cfg
	s.CfgPath = filepath.Join(dir, "mcpctl.json")
	nspawntest.WriteJSON(t, s.CfgPath, cfg)
	nspawntest.WriteJSON(t, cfg.Backend.Config, map[string]any{"listen": cfg.Backend.Listen})
	for _, d := range []string{cfg.StateDir, cfg.Install.Root} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	s.M = nspawntest.Boot(t, nspawntest.Options{Binds: []string{dir}})
	cfg.UnitDir = "/etc/systemd/system" // as mcpctl sees it inside
	us, err := units.Render(units.Params{Spec: UnitSpec(t, cfg), MCPCtl: s.MCPCtl, MCPCtlConfig: s.CfgPath})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range us {
		if err := os.WriteFile(filepath.Join(s.M.UnitsDir, u.Name), u.Content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	store := &release.Store{Root: cfg.Install.Root}
	if _, _, err := store.Install("v1", s.Builds["v1"]); err != nil {
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
	if err := s.M.Client.DaemonReload(ctx); err != nil {
		t.Fatal(err)
	}
	for _, u := range append([]string{units.SlotUnit(cfg.Backend.Unit, units.BootSlot)}, cfg.Tunnels[0].Unit, cfg.Tunnels[1].Unit) {
		if err := s.M.Client.Start(ctx, u); err != nil {
			t.Fatalf("start %s: %v", u, err)
		}
	}
	for _, tun := range cfg.Tunnels {
		s.WaitHTTP(tun.URL+"/readyz", 10*time.Second)
	}
	return s
}

// WaitHTTP waits until url answers 200, failing the test after timeout.
func (s *Site) WaitHTTP(url string, timeout time.Duration) {
	s.T.Helper()
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
			s.T.Fatalf("%s not ready after %s: %v", url, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Pass records passing canary and stress verdicts for a build.
func (s *Site) Pass(build string) {
	s.T.Helper()
	d, err := buildinfo.FileDigest(build)
	if err != nil {
		s.T.Fatal(err)
	}
	for _, k := range []string{state.KindCanary, state.KindStress} {
		if err := state.Dir(s.Cfg.StateDir).RecordVerdict(state.Verdict{Kind: k, Digest: d, Pass: true}); err != nil {
			s.T.Fatal(err)
		}
	}
}

// Command is mcpctl with args inside the container, as an operator would
// run it, not started.
func (s *Site) Command(ctx context.Context, args ...string) *exec.Cmd {
	return s.M.Command(ctx, append([]string{s.MCPCtl, "--config", s.CfgPath}, args...)...)
}

// Run runs mcpctl inside the container as an operator would and returns
// its exit code and output.
func (s *Site) Run(args ...string) (int, string) {
	s.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := s.Command(ctx, args...).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	s.T.Fatalf("mcpctl %v: %v\n%s", args, err, out)
	return -1, ""
}

// Unit is the active state and invocation of the unit name.
func (s *Site) Unit(name string) (active, invocation string) {
	s.T.Helper()
	st, err := s.M.Client.Unit(context.Background(), name)
	if err != nil {
		s.T.Fatal(err)
	}
	return st.ActiveState, st.InvocationID
}

// Prod is the production unit that runs now (a slot; the legacy unit on a
// site installed before the slots) and its main process and invocation.
func (s *Site) Prod() (unit string, pid uint32, invocation string) {
	s.T.Helper()
	var running []string
	for _, u := range append([]string{s.Cfg.Backend.Unit}, units.SlotUnit(s.Cfg.Backend.Unit, units.SlotBlue), units.SlotUnit(s.Cfg.Backend.Unit, units.SlotGreen)) {
		st, err := s.M.Client.Unit(context.Background(), u)
		if err != nil {
			s.T.Fatal(err)
		}
		if st.ActiveState != "inactive" && st.ActiveState != "failed" && st.LoadState == "loaded" {
			running = append(running, u)
			unit, pid, invocation = u, st.MainPID, st.InvocationID
		}
	}
	if len(running) != 1 {
		s.T.Fatalf("production units running: %v, want exactly one", running)
	}
	return unit, pid, invocation
}

// Version is the version production reports in system.info.
func (s *Site) Version() string {
	s.T.Helper()
	v, _, err := (&verify.Client{}).SystemInfo(context.Background(), s.Backend)
	if err != nil {
		s.T.Fatalf("system.info: %v", err)
	}
	return v
}

// Current is the release the current link names.
func (s *Site) Current() string {
	s.T.Helper()
	v, err := (&release.Store{Root: s.Cfg.Install.Root}).Current()
	if err != nil {
		s.T.Fatal(err)
	}
	return v
}

// UnitSpec is cfg's unit spec; the test fails when cfg cannot be rendered.
func UnitSpec(t testing.TB, cfg *ctlconfig.Config) *units.Spec {
	t.Helper()
	spec, err := cfg.UnitSpec()
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// Host is a clean host inside a real systemd container: mcpctl, builds and
// all state in one directory bound at the same path inside and out.
type Host struct {
	T       testing.TB
	M       *nspawntest.Machine
	Cfg     *ctlconfig.Config
	CfgPath string
	MCPCtl  string
	Bin     string
}

// Run runs mcpctl inside the container as an operator would and returns
// its exit code, stdout and stderr.
func (h *Host) Run(ctx context.Context, args ...string) (int, string, string) {
	h.T.Helper()
	code, out, errOut, err := h.M.Run(ctx, append([]string{h.MCPCtl, "--config", h.CfgPath, "--no-color"}, args...)...)
	if err != nil {
		h.T.Fatalf("mcpctl %v: %v", args, err)
	}
	return code, out, errOut
}

// WriteFile writes data to path with mode, creating its directory.
func WriteFile(t testing.TB, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
}

// WriteConfig writes cfg, indented, to path.
func WriteConfig(t testing.TB, path string, cfg *ctlconfig.Config) {
	t.Helper()
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	WriteFile(t, path, b, 0o644)
}

// Decode decodes the JSON out into a new T.
func Decode[T any](t testing.TB, out string) *T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("decode %T: %v\n%s", v, err, out)
	}
	return &v
}
