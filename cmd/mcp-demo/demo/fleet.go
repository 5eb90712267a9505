package demo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/overdeck/mcp-backend/internal/buildinfo"
	"github.com/overdeck/mcp-backend/internal/nspawn"
	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/fleet"
	"github.com/overdeck/mcp-backend/ops/release"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/units"
)

// fleetHost is one host of the demo's fleet: the demo's own container and
// two more, each with its own mcpctl.json, ports, state and sshd.
type fleetHost struct {
	name    string
	m       *nspawn.Machine
	cfg     *ctlconfig.Config
	cfgPath string
	sshd    *nspawn.SSHD
	dir     string
}

// fleetStep: two more hosts beside the demo's own (v2 installed by `mcpctl
// install`), each with sshd on its own loopback port; from this machine,
// `mcpctl fleet rollout` of a real v4 in waves [1, "50%", "100%"] over SSH.
// v4 cannot start on the third host (the demo makes its production unit
// refuse it, as a host where the build breaks): that host rolls itself back,
// the wave fails, and the fleet reverts the hosts it had cut over. Every
// host ends on v2, with no cutover pending and its tunnels untouched, as the
// demo checks itself.
func (s *site) fleetStep(ctx context.Context) error {
	if reason := nspawn.SSHUnavailable(); reason != "" {
		return errors.New(reason)
	}
	dir := filepath.Join(s.work, "fleet")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	_, pub, err := nspawn.SSHKey(dir, "id_fleet")
	if err != nil {
		return err
	}
	hosts := []*fleetHost{{name: "overdeck", m: s.m, cfg: s.cfg, cfgPath: s.cfgPath, dir: s.work}}
	var v4 string
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		v4, err = nspawn.BuildBinary(gctx, "./cmd/mcp-backend", "v4", filepath.Join(dir, "bin"))
		return err
	})
	for _, name := range []string{"overdeck-vm", "lab"} {
		h := &fleetHost{name: name, dir: filepath.Join(s.work, "hosts", name)}
		hosts = append(hosts, h)
		g.Go(func() error { return s.fleetInstall(gctx, h) })
	}
	err = g.Wait()
	for _, h := range hosts[1:] {
		if h.m != nil {
			s.extra = append(s.extra, h.m)
		}
	}
	if err != nil {
		return err
	}
	ports, err := freePorts(len(hosts))
	if err != nil {
		return err
	}
	var known strings.Builder
	for i, h := range hosts {
		if h.sshd, err = nspawn.StartSSHD(ctx, h.m, filepath.Join(h.dir, "ssh"), ports[i], pub); err != nil {
			return err
		}
		known.WriteString(h.sshd.KnownHost + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "known_hosts"), []byte(known.String()), 0o600); err != nil {
		return err
	}
	lab := hosts[2]
	if _, err := lab.m.AddDropIn(ctx, units.SlotTemplate(lab.cfg.Backend.Unit), "demo-fault", fmt.Sprintf("[Service]\nExecStartPre=/bin/sh -c '! readlink %s | grep -q /v4$'\n",
		filepath.Join(lab.cfg.Install.Root, "current"))); err != nil {
		return err
	}
	inv := map[string]any{
		"ssh": map[string]any{"knownHosts": "known_hosts", "identity": "id_fleet", "connectTimeout": "5s"},
		"rollout": map[string]any{"waves": []any{1, "50%", "100%"}, "parallelism": 4, "onFailure": "revert",
			"stress": map[string]any{"profile": "overload", "duration": "3s"}},
	}
	var hs []map[string]any
	for _, h := range hosts {
		hs = append(hs, map[string]any{"name": h.name, "address": "127.0.0.1", "port": h.sshd.Port,
			"config": h.cfgPath, "agent": s.mcpctl, "fleetDir": filepath.Join(h.dir, "fleet-agent")})
	}
	inv["hosts"] = hs
	invPath := filepath.Join(dir, "mcpctl-fleet.json")
	if err := writeJSON(invPath, inv); err != nil {
		return err
	}
	s.v.say("three hosts, each its own container, tunnels and sshd on 127.0.0.1:%d, :%d, :%d; v4 cannot start on lab", ports[0], ports[1], ports[2])

	before := map[string][]Identity{}
	for _, h := range hosts {
		if before[h.name], err = fleetIdentities(ctx, h); err != nil {
			return err
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	args := []string{"--no-color", "fleet", "rollout", "--inventory", invPath, "--build", v4, "--version", "v4"}
	s.v.command(append([]string{"mcpctl"}, args[1:]...))
	cmd := exec.CommandContext(rctx, s.mcpctl, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		s.res.FleetExit = 0
	case errors.As(err, &ee):
		s.res.FleetExit = ee.ExitCode()
	default:
		return fmt.Errorf("mcpctl fleet rollout: %w", err)
	}
	s.v.block(fleetSummary(string(out)))

	var problems []string
	// The story, from the run log: lab rolled itself back, the hosts cut
	// over before it were reverted.
	evs, err := (&fleet.RunLog{Path: (&fleet.Inventory{Path: invPath}).LogPath()}).Read()
	if err != nil {
		return err
	}
	s.res.FleetOutcomes = map[string]fleet.Outcome{}
	for _, e := range evs {
		if e.Type == fleet.EvHostEnd || e.Type == fleet.EvRevertHost {
			s.res.FleetOutcomes[e.Host] = e.Outcome
		}
	}
	if o := s.res.FleetOutcomes["lab"]; o != fleet.RolledBack {
		problems = append(problems, fmt.Sprintf("lab: %q, want rolled-back", o))
	}
	if o := s.res.FleetOutcomes["overdeck"]; o != fleet.Reverted {
		problems = append(problems, fmt.Sprintf("overdeck (wave 1): %q, want reverted", o))
	}
	if s.res.FleetExit != fleet.CodeReverted {
		problems = append(problems, fmt.Sprintf("fleet rollout exited %d, want %d (reverted: the fleet as it was)", s.res.FleetExit, fleet.CodeReverted))
	}
	d2, err := buildinfo.FileDigest(s.builds["v2"])
	if err != nil {
		return err
	}
	s.res.FleetVersions = map[string]string{}
	rows := [][]string{}
	for _, h := range hosts {
		cur, _ := (&release.Store{Root: h.cfg.Install.Root}).Current()
		dg, _ := buildinfo.FileDigest(units.CurrentBinary(h.cfg.Install.Root))
		p, perr := state.Dir(h.cfg.StateDir).ReadPending()
		after, err := fleetIdentities(ctx, h)
		if err != nil {
			return err
		}
		s.res.FleetVersions[h.name] = cur
		tunnels := "untouched"
		for i := 1; i < len(after); i++ {
			if !before[h.name][i].Same(after[i]) {
				tunnels = "RESTARTED"
				problems = append(problems, fmt.Sprintf("%s: %s restarted", h.name, after[i].Unit))
			}
		}
		if cur != "v2" || dg != d2 {
			problems = append(problems, fmt.Sprintf("%s runs %s (%s), want v2", h.name, cur, short(strings.TrimPrefix(dg, "sha256:"))))
		}
		if p != nil || perr != nil {
			problems = append(problems, fmt.Sprintf("%s: a cutover is pending (%v)", h.name, perr))
		}
		backend := "same instance"
		if !before[h.name][0].Same(after[0]) {
			backend = "restarted (cut over, then back)"
		}
		rows = append(rows, []string{h.name, cur, short(strings.TrimPrefix(dg, "sha256:")), fmt.Sprint(p != nil), backend, tunnels})
	}
	s.v.table([]string{"host", "current", "digest", "pending", "backend", "tunnels"}, rows)
	// The two extra hosts go now; the demo's own host stays for the
	// teardown step. Nothing of them may be left.
	for _, h := range hosts[1:] {
		cgroups := h.m.Cgroups()
		if err := h.m.Close(); err != nil {
			problems = append(problems, err.Error())
		}
		for _, cg := range cgroups {
			if _, err := os.Stat(cg); !errors.Is(err, os.ErrNotExist) {
				problems = append(problems, "cgroup "+cg+" left")
			}
		}
		addrs := []string{h.cfg.Backend.Listen, h.cfg.Canary.Listen, fmt.Sprintf("127.0.0.1:%d", h.sshd.Port)}
		for _, t := range h.cfg.Tunnels {
			addrs = append(addrs, strings.TrimPrefix(t.URL, "http://"))
		}
		for _, a := range addrs {
			if ln, err := net.Listen("tcp", a); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %s still taken after its container stopped", h.name, a))
			} else {
				ln.Close()
			}
		}
	}
	s.extra = nil
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// fleetSummary keeps the controller's per-host table and its verdict:
// the step lines before them are the same story in detail.
func fleetSummary(out string) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "revert:") || strings.HasPrefix(lines[i], "wave ") && strings.Contains(lines[i], ": revert,") {
			return strings.Join(lines[i:], "\n")
		}
	}
	return out
}

func fleetIdentities(ctx context.Context, h *fleetHost) ([]Identity, error) {
	names := []string{deploy.ServingUnit(ctx, h.m.Client, h.cfg.Backend.Unit)}
	for _, t := range h.cfg.Tunnels {
		names = append(names, t.Unit)
	}
	out := []Identity{}
	for _, n := range names {
		u, err := h.m.Client.Unit(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("%s: unit %s: %w", h.name, n, err)
		}
		out = append(out, Identity{Unit: n, ActiveState: u.ActiveState, MainPID: u.MainPID, InvocationID: u.InvocationID, NRestarts: u.NRestarts})
	}
	return out, nil
}

// fleetInstall boots one more host and installs v2 there with `mcpctl
// install`, as the demo's first host was.
func (s *site) fleetInstall(ctx context.Context, h *fleetHost) error {
	ports, err := freePorts(4)
	if err != nil {
		return err
	}
	cfg := ctlconfig.Default()
	cfg.Backend.Listen = fmt.Sprintf("127.0.0.1:%d", ports[0])
	cfg.Backend.Config = filepath.Join(h.dir, "etc", "config.json")
	cfg.Canary.Listen = fmt.Sprintf("127.0.0.1:%d", ports[1])
	cfg.Canary.Config = filepath.Join(h.dir, "etc", "canary.json")
	cfg.Install.Root = filepath.Join(h.dir, "opt")
	cfg.StateDir = filepath.Join(h.dir, "state")
	cfg.UnitDir = "/etc/systemd/system"
	cfg.Rollback.Deadline = ctlconfig.Duration(30 * time.Second)
	for i := range cfg.Tunnels {
		cfg.Tunnels[i].URL = fmt.Sprintf("http://127.0.0.1:%d", ports[2+i])
		cfg.Tunnels[i].Exec = fmt.Sprintf("/usr/bin/socat TCP-LISTEN:%d,bind=127.0.0.1,reuseaddr,fork TCP:127.0.0.1:%d", ports[2+i], ports[0])
	}
	h.cfg, h.cfgPath = cfg, filepath.Join(h.dir, "etc", "mcpctl.json")
	if err := writeJSON(h.cfgPath, cfg); err != nil {
		return err
	}
	if err := writeJSON(cfg.Backend.Config, map[string]any{"listen": cfg.Backend.Listen, "concurrency": demoConcurrency}); err != nil {
		return err
	}
	m, err := nspawn.Boot(ctx, nspawn.Options{Binds: []string{s.work}, TTL: 15 * time.Minute})
	if err != nil {
		return err
	}
	h.m = m
	code, out, errOut, err := m.Run(ctx, s.mcpctl, "--config", h.cfgPath, "--no-color", "install", "--build", s.builds["v2"])
	if err != nil || code != 0 {
		return fmt.Errorf("%s: mcpctl install: exit %d %v\n%s%s", h.name, code, err, out, errOut)
	}
	return nil
}
