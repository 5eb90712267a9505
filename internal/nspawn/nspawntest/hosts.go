package nspawntest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/buildinfo"
	"github.com/overdeck/mcp-backend/internal/proctest"
	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/release"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/units"
)

// Host is one host of a multi-host test (a fleet, an Ansible inventory): a
// real systemd container with its own mcpctl.json, backend ports and tunnels
// on loopback, and sshd on its own loopback port. Everything of it lives in
// Dir, bound at the same path inside and out.
type Host struct {
	Name    string
	Dir     string
	Machine *Machine
	SSHD    *SSHD
	Cfg     *ctlconfig.Config
	CfgPath string
}

// HostOptions configure Hosts.
type HostOptions struct {
	// PublicKey is the controller's public key line, authorized on every
	// host.
	PublicKey string
	// AuthorizedKey, when set, returns host i's authorized_keys line
	// instead of PublicKey (a key restricted to a forced command).
	AuthorizedKey func(i int, h *Host) string
	// Mcpctl, when set, is copied to every host's Mcpctl().
	Mcpctl string
	// Install, when set, is copied to every host's bin/ and installed
	// there by its mcpctl (`mcpctl install`, run inside as an operator
	// would); Mcpctl must be set. Without it nothing is installed.
	Install string
}

// smallLimits keep the backends' capacity small, so that the canary stress
// of several hosts at once stays modest on a small machine.
var smallLimits = map[string]int{"maxActive": 12, "reservedControl": 2, "maxShell": 4, "maxQueue": 8, "queueWaitMs": 1000}

// Hosts boots n hosts, named host1..hostN, each configured, with sshd
// listening and, with opts.Install, the build installed; the containers go
// when t ends.
func Hosts(t testing.TB, n int, opts HostOptions) []*Host {
	t.Helper()
	RequireSSH(t)
	if opts.Install != "" && opts.Mcpctl == "" {
		t.Fatal("nspawntest.Hosts: Install needs Mcpctl")
	}
	hosts := make([]*Host, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		h := &Host{Name: fmt.Sprintf("host%d", i+1), Dir: t.TempDir()}
		hosts[i] = h
		if opts.Mcpctl != "" {
			CopyExecutable(t, opts.Mcpctl, h.Mcpctl())
		}
		build := ""
		if opts.Install != "" {
			build = filepath.Join(h.Dir, "bin", filepath.Base(opts.Install))
			CopyExecutable(t, opts.Install, build)
		}
		h.configure(t)
		auth := opts.PublicKey
		if opts.AuthorizedKey != nil {
			auth = opts.AuthorizedKey(i, h)
		}
		h.Machine = Boot(t, Options{Binds: []string{h.Dir}, TTL: 30 * time.Minute})
		if build != "" {
			// The installs run while the next hosts boot.
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = h.install(build)
			}()
		}
		h.SSHD = StartSSHD(t, h.Machine, filepath.Join(h.Dir, "ssh"), proctest.FreePort(t), auth)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return hosts
}

// Mcpctl is the host's mcpctl.
func (h *Host) Mcpctl() string { return filepath.Join(h.Dir, "bin", "mcpctl") }

// FleetDir is the host's fleet dir: uploads and the steps' outcomes (the
// collection's step dir).
func (h *Host) FleetDir() string { return filepath.Join(h.Dir, "fleet") }

// configure writes the host's mcpctl.json and backend config: every port
// a free one on loopback, the tunnels socat between them.
func (h *Host) configure(t testing.TB) {
	t.Helper()
	port := proctest.FreePort(t)
	cfg := ctlconfig.Default()
	cfg.Backend.Listen = fmt.Sprintf("127.0.0.1:%d", port)
	cfg.Backend.Config = filepath.Join(h.Dir, "etc", "config.json")
	cfg.Canary.Listen = fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	cfg.Canary.Config = filepath.Join(h.Dir, "etc", "canary.json")
	cfg.Install.Root = filepath.Join(h.Dir, "root")
	cfg.StateDir = filepath.Join(h.Dir, "state")
	cfg.UnitDir = "/etc/systemd/system"
	cfg.Rollback.Deadline = ctlconfig.Duration(45 * time.Second)
	for i := range cfg.Tunnels {
		tp := proctest.FreePort(t)
		cfg.Tunnels[i].URL = fmt.Sprintf("http://127.0.0.1:%d", tp)
		cfg.Tunnels[i].Exec = fmt.Sprintf("/usr/bin/socat TCP-LISTEN:%d,bind=127.0.0.1,reuseaddr,fork TCP:127.0.0.1:%d", tp, port)
	}
	h.Cfg = cfg
	h.CfgPath = filepath.Join(h.Dir, "mcpctl.json")
	WriteJSON(t, h.CfgPath, cfg)
	WriteJSON(t, cfg.Backend.Config, map[string]any{"listen": cfg.Backend.Listen, "concurrency": smallLimits})
}

// install runs `mcpctl install` inside the container, as an operator would.
func (h *Host) install(build string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	code, out, errOut, err := h.Machine.Run(ctx, h.Mcpctl(), "--config", h.CfgPath, "--no-color", "install", "--build", build)
	if err != nil || code != 0 {
		return fmt.Errorf("%s: mcpctl install: exit %d %v\n%s\n%s", h.Name, code, err, out, errOut)
	}
	return nil
}

// Observed is what a host runs, read by the test itself (never through
// the program under test).
type Observed struct {
	// Version and Digest are the current release's and its binary's; ""
	// while nothing is installed.
	Version, Digest string
	Pending         bool // a cutover's pending marker
	// Production is the unit that serves (a slot, or the unit before
	// slots); Active and Backend are its ActiveState and InvocationID.
	// Tunnels are the tunnels' InvocationIDs.
	Production, Active, Backend string
	Tunnels                     []string
}

// Observe reads what h runs.
func (h *Host) Observe(t testing.TB) Observed {
	t.Helper()
	var s Observed
	v, err := (&release.Store{Root: h.Cfg.Install.Root}).Current()
	switch {
	case errors.Is(err, release.ErrNoCurrent):
	case err != nil:
		t.Fatalf("%s: current: %v", h.Name, err)
	default:
		s.Version = v
		if s.Digest, err = buildinfo.FileDigest(units.CurrentBinary(h.Cfg.Install.Root)); err != nil {
			t.Fatal(err)
		}
	}
	p, err := state.Dir(h.Cfg.StateDir).ReadPending()
	if err != nil {
		t.Fatal(err)
	}
	s.Pending = p != nil
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := h.Machine.Client
	s.Production = deploy.ServingUnit(ctx, c, h.Cfg.Backend.Unit)
	u, err := c.Unit(ctx, s.Production)
	if err != nil {
		t.Fatal(err)
	}
	s.Active, s.Backend = u.ActiveState, u.InvocationID
	for _, tn := range h.Cfg.Tunnels {
		u, err := c.Unit(ctx, tn.Unit)
		if err != nil {
			t.Fatal(err)
		}
		s.Tunnels = append(s.Tunnels, u.InvocationID)
	}
	return s
}

// FailCutoverOn makes production of h fail to start on the given version
// (a drop-in whose ExecStartPre refuses while current points to it), so
// that a cutover to it fails verification on this host only and the host
// rolls itself back; the canary, another unit, is unaffected. The returned
// func removes the drop-in.
func (h *Host) FailCutoverOn(t testing.TB, version string) func() {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	remove, err := h.Machine.AddDropIn(ctx, units.SlotTemplate(h.Cfg.Backend.Unit), "fault", fmt.Sprintf("[Service]\nExecStartPre=/bin/sh -c '! readlink %s | grep -q /%s$'\n",
		filepath.Join(h.Cfg.Install.Root, "current"), version))
	if err != nil {
		t.Fatal(err)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := remove(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// WriteJSON writes v, indented, to path (creating its directory).
func WriteJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
