package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/overdeck/mcp-backend/internal/buildinfo"
	"github.com/overdeck/mcp-backend/internal/loopport"
	"github.com/overdeck/mcp-backend/internal/nspawn"
	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/release"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/ops/verify"
	"github.com/overdeck/mcp-backend/stress"
	"github.com/overdeck/mcp-backend/units"
)

// demoConcurrency keeps the backend's limits small, so that a short attack
// at a modest rate overloads it on two cores.
var demoConcurrency = map[string]int{"maxActive": 12, "reservedControl": 2, "maxShell": 4, "maxQueue": 8, "queueWaitMs": 1000}

// site is the demo's host: a work directory bound at the same path inside
// the container (binaries, configs, releases, state), the container, and
// what the steps learned.
type site struct {
	opts Options
	v    *view
	res  *Result

	work    string
	bin     string
	mcpctl  string
	builds  map[string]string // version -> binary
	cfg     *ctlconfig.Config
	cfgPath string
	backend string // http://127.0.0.1:PORT
	m       *nspawn.Machine
	// extra are the fleet step's other hosts, torn down with m.
	extra []*nspawn.Machine
}

// build builds mcpctl and two versions of mcp-backend from this source.
func (s *site) build(ctx context.Context) error {
	s.bin = filepath.Join(s.work, "bin")
	s.builds = map[string]string{}
	g, gctx := errgroup.WithContext(ctx)
	var ctl string
	g.Go(func() (err error) {
		ctl, err = nspawn.BuildBinary(gctx, "./cmd/mcpctl", "demo", s.bin)
		return err
	})
	paths := make([]string, 2)
	for i, ver := range []string{"v1", "v2"} {
		g.Go(func() (err error) {
			paths[i], err = nspawn.BuildBinary(gctx, "./cmd/mcp-backend", ver, s.bin)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	s.mcpctl, s.builds["v1"], s.builds["v2"] = ctl, paths[0], paths[1]
	for _, ver := range []string{"v1", "v2"} {
		d, err := buildinfo.FileDigest(s.builds[ver])
		if err != nil {
			return err
		}
		s.v.say("mcp-backend %s  %s  %s", ver, s.builds[ver], d[:19]+"...")
	}
	s.v.say("mcpctl         %s", s.mcpctl)
	return nil
}

// install writes mcpctl.json, boots the container and runs `mcpctl
// install` inside it.
func (s *site) install(ctx context.Context) error {
	ports, err := freePorts(4)
	if err != nil {
		return err
	}
	cfg := ctlconfig.Default()
	cfg.Backend.Listen = fmt.Sprintf("127.0.0.1:%d", ports[0])
	cfg.Backend.Config = filepath.Join(s.work, "etc", "config.json")
	cfg.Canary.Listen = fmt.Sprintf("127.0.0.1:%d", ports[1])
	cfg.Canary.Config = filepath.Join(s.work, "etc", "canary.json")
	cfg.Install.Root = filepath.Join(s.work, "opt")
	cfg.StateDir = filepath.Join(s.work, "state")
	cfg.UnitDir = "/etc/systemd/system" // inside the container
	cfg.Rollback.Deadline = ctlconfig.Duration(30 * time.Second)
	for i := range cfg.Tunnels {
		// socat stands in for the tunnel programs: its own unit, its own
		// URL, forwarding to the backend.
		cfg.Tunnels[i].URL = fmt.Sprintf("http://127.0.0.1:%d", ports[2+i])
		cfg.Tunnels[i].Exec = fmt.Sprintf("/usr/bin/socat TCP-LISTEN:%d,bind=127.0.0.1,reuseaddr,fork TCP:127.0.0.1:%d", ports[2+i], ports[0])
	}
	s.cfg, s.backend = cfg, "http://"+cfg.Backend.Listen
	s.cfgPath = filepath.Join(s.work, "etc", "mcpctl.json")
	if err := writeJSON(s.cfgPath, cfg); err != nil {
		return err
	}
	// The backend config, before install (which keeps an existing one):
	// small limits so that overload comes quickly.
	if err := writeJSON(cfg.Backend.Config, map[string]any{"listen": cfg.Backend.Listen, "concurrency": demoConcurrency}); err != nil {
		return err
	}
	s.v.say("mcpctl.json: backend %s, canary %s, tunnels %s and %s (socat), rollback deadline %s",
		cfg.Backend.Listen, cfg.Canary.Listen, cfg.Tunnels[0].URL, cfg.Tunnels[1].URL, time.Duration(cfg.Rollback.Deadline))
	s.v.say("backend config: concurrency %v", demoConcurrency)

	t0 := time.Now()
	m, err := nspawn.Boot(ctx, nspawn.Options{Binds: []string{s.work, s.res.ResultsDir}, TTL: 15 * time.Minute})
	if err != nil {
		return err
	}
	s.m = m
	st, _ := m.Client.SystemState(ctx)
	s.v.say("container %s booted in %s (systemd %s; tmpfs root, host /usr read-only, $WORK bound in)", m.Name, round(time.Since(t0)), st)

	code, out, errOut, err := s.run(ctx, "install", "--build", s.builds["v1"], "--json")
	if err != nil {
		return err
	}
	var ir deploy.InstallReport
	if jerr := json.Unmarshal([]byte(out), &ir); jerr != nil {
		s.v.block(out + errOut)
		return fmt.Errorf("mcpctl install: exit %d, no JSON report: %w", code, jerr)
	}
	for _, st := range ir.Steps {
		mark := "ok"
		if !st.OK {
			mark = "FAILED " + st.Err
		}
		s.v.block(fmt.Sprintf("%-40s %s (%.0fms)", st.Name, mark, st.DurationMs))
	}
	if code != deploy.CodeOK || !ir.OK || ir.Version != "v1" {
		s.v.block(errOut)
		return fmt.Errorf("mcpctl install: exit %d, ok %v, version %q (want 0, true, v1)", code, ir.OK, ir.Version)
	}
	s.res.InstalledVersion = ir.Version

	names := []string{deploy.ServingUnit(ctx, s.m.Client, cfg.Backend.Unit), cfg.Tunnels[0].Unit, cfg.Tunnels[1].Unit, units.WatchdogTimer}
	rows := [][]string{}
	var problems []string
	for _, n := range names {
		id, err := s.identity(ctx, n)
		if err != nil {
			return err
		}
		rows = append(rows, []string{n, id.ActiveState, fmt.Sprint(id.MainPID), short(id.InvocationID)})
		if id.ActiveState != "active" {
			problems = append(problems, n+" is "+id.ActiveState)
		}
	}
	s.v.table([]string{"unit", "state", "MainPID", "InvocationID"}, rows)
	for _, t := range cfg.Tunnels {
		ver, err := s.probe(ctx, t.URL)
		if err != nil {
			problems = append(problems, fmt.Sprintf("tunnel %s: %v", t.Name, err))
			continue
		}
		s.v.say("tunnel %-12s %s -> /readyz 200, system.info says %s", t.Name, t.URL, ver)
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// canary starts v2 as the canary, stresses it and stops it.
func (s *site) canary(ctx context.Context) error {
	code, out, errOut, err := s.run(ctx, "canary", "start", "--build", s.builds["v2"], "--json")
	if err != nil {
		return err
	}
	var cr deploy.CanaryReport
	if jerr := json.Unmarshal([]byte(out), &cr); jerr != nil {
		s.v.block(out + errOut)
		return fmt.Errorf("mcpctl canary start: exit %d, no JSON report: %w", code, jerr)
	}
	p := cr.Production
	s.v.block(fmt.Sprintf("canary %s at %s: pass %v", cr.Version, cr.URL, cr.Pass))
	s.v.block(fmt.Sprintf("production %s: MainPID %d -> %d, InvocationID %s -> %s, /healthz %d samples, %d failures",
		p.Unit, p.Before.MainPID, p.After.MainPID, short(p.Before.InvocationID), short(p.After.InvocationID), p.HealthzSamples, p.HealthzFailures))
	if code != deploy.CodeOK || !cr.Pass || cr.Version != "v2" {
		s.v.block(strings.Join(cr.Problems, "\n") + errOut)
		return fmt.Errorf("mcpctl canary start: exit %d, pass %v, version %q (want 0, true, v2)", code, cr.Pass, cr.Version)
	}
	s.res.CanaryVersion = cr.Version

	plot := filepath.Join(s.res.ResultsDir, "canary-stress.html")
	rep, code, err := s.stress(ctx, plot, "--duration", s.opts.CanaryStress.String())
	if err != nil {
		return err
	}
	s.res.CanaryStress = rep.Pass
	if code != deploy.CodeOK || !rep.Pass {
		return fmt.Errorf("mcpctl stress of the canary: exit %d, failed checks: %s", code, failedChecks(rep))
	}
	if err := nonEmpty(plot); err != nil {
		return err
	}
	s.res.CanaryPlot = plot
	s.v.say("latency plot written to %s", plot)
	d, err := buildinfo.FileDigest(s.builds["v2"])
	if err != nil {
		return err
	}
	canaryOK, stressOK, err := state.Dir(s.cfg.StateDir).PassingFor(d)
	if err != nil || !canaryOK || !stressOK {
		return fmt.Errorf("verdicts on record for v2 (%s): canary %v, stress %v, %v", d, canaryOK, stressOK, err)
	}
	s.v.say("passing canary and stress verdicts recorded for v2's digest: cutover may install it")

	code, out, errOut, err = s.run(ctx, "canary", "stop")
	if err != nil {
		return err
	}
	s.v.block(out + errOut)
	if code != deploy.CodeOK {
		return fmt.Errorf("mcpctl canary stop: exit %d", code)
	}
	return nil
}

// cutover installs v2 into production with an armed rollback.
func (s *site) cutover(ctx context.Context) error {
	before, err := s.identities(ctx, s.tunnelUnits()...)
	if err != nil {
		return err
	}
	var code int
	var out, errOut string
	s.res.SteadyCutover, err = s.underSteadyLoad(ctx, func() (err error) {
		code, out, errOut, err = s.run(ctx, "cutover", "--build", s.builds["v2"], "--arm-rollback")
		return err
	})
	if err != nil {
		return err
	}
	s.v.block(out + errOut)
	if code != deploy.CodeOK {
		return fmt.Errorf("mcpctl cutover: exit %d, want 0", code)
	}
	after, err := s.identities(ctx, s.tunnelUnits()...)
	if err != nil {
		return err
	}
	s.res.TunnelsCutover = [2][]Identity{before, after}
	var problems []string
	ver, err := s.probe(ctx, s.backend)
	s.res.VersionAfterCutover = ver
	if err != nil || ver != "v2" {
		problems = append(problems, fmt.Sprintf("production reports %q (%v), want v2", ver, err))
	}
	for _, t := range s.cfg.Tunnels {
		if ver, err := s.probe(ctx, t.URL); err != nil || ver != "v2" {
			problems = append(problems, fmt.Sprintf("tunnel %s reports %q (%v), want v2", t.Name, ver, err))
		}
	}
	problems = append(problems, s.desiredState(ctx, "v2")...)
	problems = append(problems, changedUnits(before, after)...)
	s.v.say("tunnels across the cutover:")
	s.v.identities(before, after)
	problems = append(problems, s.steadyProblems("the cutover", s.res.SteadyCutover)...)

	code, out, errOut, err = s.run(ctx, "verify", "all")
	if err != nil {
		return err
	}
	s.v.block(out + errOut)
	if code != deploy.CodeOK {
		problems = append(problems, fmt.Sprintf("mcpctl verify all: exit %d", code))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	s.v.say("production on v2, verified on the backend and through both tunnels; rollback disarmed, no pending marker")
	return nil
}

// overload attacks production through the first tunnel's URL.
func (s *site) overload(ctx context.Context) error {
	prod := deploy.ServingUnit(ctx, s.m.Client, s.cfg.Backend.Unit)
	names := append([]string{prod}, s.tunnelUnits()...)
	before, err := s.identities(ctx, names...)
	if err != nil {
		return err
	}
	tun := s.cfg.Tunnels[0]
	s.v.say("attacking production through tunnel %s (%s) well above its capacity", tun.Name, tun.URL)
	plot := filepath.Join(s.res.ResultsDir, "overload-through-tunnel.html")
	rep, code, err := s.stress(ctx, plot, "--target", tun.URL, "--unit", prod, "--duration", s.opts.Overload.String())
	if err != nil {
		return err
	}
	s.res.OverloadPlot = plot
	for _, byOutcome := range rep.Outcomes {
		s.res.Overloaded += byOutcome[stress.OutcomeOverloaded]
	}
	after, err := s.identities(ctx, names...)
	if err != nil {
		return err
	}
	s.res.OverloadIdentities = [2][]Identity{before, after}
	s.v.say("units across the overload:")
	s.v.identities(before, after)

	var problems []string
	if s.res.Overloaded == 0 {
		problems = append(problems, "no OVERLOADED answers: the attack did not overload production")
	}
	if code != deploy.CodeOK || !rep.Pass {
		if timed := timedOnly(rep, s.opts.Timed); code == deploy.CodeFailed && timed != "" {
			s.v.say("timed checks failed on this machine, shown and not counted: %s", timed)
		} else {
			problems = append(problems, fmt.Sprintf("mcpctl stress through the tunnel: exit %d, failed checks: %s", code, failedChecks(rep)))
		}
	}
	problems = append(problems, changedUnits(before, after)...)
	if status, _, err := verify.Readyz(ctx, tun.URL); err != nil || status != 200 {
		problems = append(problems, fmt.Sprintf("after the attack %s/readyz = %d (%v), want 200", tun.URL, status, err))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	s.v.say("%d OVERLOADED answers, all structured tool results in HTTP 200; backend and tunnels not restarted; ready again", s.res.Overloaded)
	return nil
}

// badCutover tries to cut over to a build that never becomes ready.
func (s *site) badCutover(ctx context.Context) error {
	v3 := filepath.Join(s.bin, "mcp-backend-v3")
	script := fmt.Sprintf(`#!/bin/sh
# A bad build: answers --version and check-config like the real one, but its
# serve never notifies READY.
case "$1" in
--version) echo "mcp-backend version v3"; exit 0 ;;
serve) exec sleep infinity ;;
esac
exec %s "$@"
`, s.builds["v2"])
	if err := os.WriteFile(v3, []byte(script), 0o755); err != nil {
		return err
	}
	s.v.say("v3 answers --version and check-config, but its serve never becomes ready: its canary and stress cannot pass")
	names := append([]string{deploy.ServingUnit(ctx, s.m.Client, s.cfg.Backend.Unit)}, s.tunnelUnits()...)
	before, err := s.identities(ctx, names...)
	if err != nil {
		return err
	}
	var problems []string

	// Without a passing canary on record the cutover refuses up front.
	code, out, errOut, err := s.run(ctx, "cutover", "--build", v3, "--arm-rollback")
	if err != nil {
		return err
	}
	s.v.block(out + errOut)
	s.res.UngatedExit = code
	if code != deploy.CodeFailed {
		problems = append(problems, fmt.Sprintf("cutover of v3 without a canary on record: exit %d, want 1", code))
	}
	mid, err := s.identities(ctx, names...)
	if err != nil {
		return err
	}
	problems = append(problems, changedUnits(before, mid)...)

	// Forced: it must roll itself back, under load through both tunnels.
	s.res.SteadyBadCutover, err = s.underSteadyLoad(ctx, func() (err error) {
		code, out, errOut, err = s.run(ctx, "cutover", "--build", v3, "--arm-rollback", "--deadline", "15s", "--skip-canary-check", "demo: bad build")
		return err
	})
	if err != nil {
		return err
	}
	s.v.block(out + errOut)
	s.res.BadCutoverExit = code
	if code != deploy.CodeRolledBack {
		problems = append(problems, fmt.Sprintf("forced cutover of v3: exit %d, want 3 (rolled back)", code))
	}
	after, err := s.identities(ctx, names...)
	if err != nil {
		return err
	}
	s.res.TunnelsBadCutover = [2][]Identity{before[1:], after[1:]}
	s.v.say("units across the failed cutover (v3 started in the idle slot beside production and was stopped there):")
	s.v.identities(before, after)
	// The serving process was never touched: same unit, PID and invocation.
	problems = append(problems, changedUnits(before, after)...)
	problems = append(problems, s.steadyProblems("the failed cutover and its rollback", s.res.SteadyBadCutover)...)
	if c := s.res.SteadyBadCutover; c != nil && c.Tool > 0 {
		problems = append(problems, fmt.Sprintf("during the failed cutover callers saw tool errors %v, want none: production was never stopped", c.ToolByCode))
	}
	ver, err := s.probe(ctx, s.backend)
	s.res.VersionAfterBadCutover = ver
	if err != nil || ver != "v2" {
		problems = append(problems, fmt.Sprintf("production reports %q (%v) after the rollback, want v2", ver, err))
	}
	s.res.CurrentAfterBadCutover, _ = (&release.Store{Root: s.cfg.Install.Root}).Current()
	problems = append(problems, s.desiredState(ctx, "v2")...)
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	s.v.say("exit 3: rolled back; production kept serving v2 in the same process, current -> v2, tunnels untouched, rollback disarmed")

	// The operator's screen afterwards (shown, not judged).
	if _, out, errOut, err := s.run(ctx, "status"); err == nil {
		s.v.block(out + errOut)
	}
	return nil
}

// desiredState checks what a finished cutover or rollback must leave: the
// current link on version, no rollback timer, no pending marker.
func (s *site) desiredState(ctx context.Context, version string) []string {
	var problems []string
	if cur, err := (&release.Store{Root: s.cfg.Install.Root}).Current(); err != nil || cur != version {
		problems = append(problems, fmt.Sprintf("current -> %q (%v), want %s", cur, err, version))
	}
	if gone, err := s.m.Client.Gone(ctx, deploy.RollbackTimer, deploy.RollbackService); err != nil || !gone {
		problems = append(problems, fmt.Sprintf("rollback timer still armed (gone %v, %v)", gone, err))
	}
	if p, err := state.Dir(s.cfg.StateDir).ReadPending(); err != nil || p != nil {
		problems = append(problems, fmt.Sprintf("pending-cutover marker %+v (%v), want none", p, err))
	}
	return problems
}

// stress runs `mcpctl stress --json` inside, shows its table and returns
// the report and exit code.
func (s *site) stress(ctx context.Context, plot string, args ...string) (*stress.Report, int, error) {
	if s.opts.ControlP99 > 0 {
		args = append(args, "--control-p99", s.opts.ControlP99.String())
	}
	code, out, errOut, err := s.run(ctx, append([]string{"--json", "stress", "--plot", plot}, args...)...)
	if err != nil {
		return nil, code, err
	}
	var rep stress.Report
	if jerr := json.Unmarshal([]byte(out), &rep); jerr != nil {
		s.v.block(out + errOut)
		return nil, code, fmt.Errorf("mcpctl stress: exit %d, no JSON report: %w", code, jerr)
	}
	var b bytes.Buffer
	if err := rep.Render(&b, s.opts.Color); err != nil {
		return nil, code, err
	}
	s.v.block(b.String())
	return &rep, code, nil
}

// run runs mcpctl inside the container, as an operator would, and returns
// its exit code and output; err only when it could not run at all.
func (s *site) run(ctx context.Context, args ...string) (int, string, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	s.v.command(append([]string{"mcpctl"}, args...))
	argv := append([]string{s.mcpctl, "--config", s.cfgPath, "--no-color"}, args...)
	return s.m.Run(ctx, argv...)
}

func (s *site) tunnelUnits() []string {
	out := make([]string, 0, len(s.cfg.Tunnels))
	for _, t := range s.cfg.Tunnels {
		out = append(out, t.Unit)
	}
	return out
}

func (s *site) identity(ctx context.Context, unit string) (Identity, error) {
	u, err := s.m.Client.Unit(ctx, unit)
	if err != nil {
		return Identity{}, fmt.Errorf("unit %s: %w", unit, err)
	}
	return Identity{Unit: unit, ActiveState: u.ActiveState, MainPID: u.MainPID, InvocationID: u.InvocationID, NRestarts: u.NRestarts}, nil
}

func (s *site) identities(ctx context.Context, unitNames ...string) ([]Identity, error) {
	out := make([]Identity, 0, len(unitNames))
	for _, n := range unitNames {
		id, err := s.identity(ctx, n)
		if err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, nil
}

// probe checks baseURL/readyz and returns the version system.info reports.
func (s *site) probe(ctx context.Context, baseURL string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if status, _, err := verify.Readyz(ctx, baseURL); err != nil || status != 200 {
		return "", fmt.Errorf("%s/readyz = %d (%v), want 200", baseURL, status, err)
	}
	v, _, err := (&verify.Client{}).SystemInfo(ctx, baseURL)
	return v, err
}

// teardown stops the container and proves nothing of it is left: its
// cgroups, processes naming it or the work dir, the tunnels' socat
// processes, listeners on the demo's ports.
func (s *site) teardown() error {
	defer s.cleanupDirs()
	for _, m := range s.extra {
		_ = m.Close()
	}
	s.extra = nil
	if s.m == nil {
		s.v.say("no container was booted")
		return nil
	}
	name, cgroups := s.m.Name, s.m.Cgroups()
	var problems []string
	if err := s.m.Close(); err != nil {
		problems = append(problems, err.Error())
	}
	s.m = nil
	for _, cg := range cgroups {
		if _, err := os.Stat(cg); !errors.Is(err, os.ErrNotExist) {
			problems = append(problems, "cgroup "+cg+" left")
		}
	}
	needles := []string{"--machine=" + name, s.work}
	var ports []string
	if s.cfg != nil {
		ports = []string{s.cfg.Backend.Listen, s.cfg.Canary.Listen}
		for _, t := range s.cfg.Tunnels {
			ports = append(ports, strings.TrimPrefix(t.URL, "http://"))
			if i := strings.Index(t.Exec, "TCP-LISTEN:"); i >= 0 {
				needles = append(needles, strings.SplitN(t.Exec[i:], ",", 2)[0]+",")
			}
		}
	}
	problems = append(problems, processesMatching(needles)...)
	for _, addr := range ports {
		if ln, err := net.Listen("tcp", addr); err != nil {
			problems = append(problems, fmt.Sprintf("%s still taken: %v", addr, err))
		} else {
			ln.Close()
		}
	}
	s.res.Leftovers = problems
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	s.v.say("container %s stopped; its cgroups removed; no nspawn, backend or socat process left; ports %s free",
		name, strings.Join(ports, ", "))
	return nil
}

// processesMatching lists processes (other than this one) whose command
// line contains any needle.
func processesMatching(needles []string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cmdline := strings.ReplaceAll(string(b), "\x00", " ")
		for _, n := range needles {
			if strings.Contains(cmdline, n) {
				out = append(out, fmt.Sprintf("process %d left: %s", pid, strings.TrimSpace(cmdline)))
				break
			}
		}
	}
	return out
}

// unchanged lists units whose identity changed between before and after.
func changedUnits(before, after []Identity) []string {
	var out []string
	for i, b := range before {
		if i >= len(after) || !b.Same(after[i]) {
			a := Identity{}
			if i < len(after) {
				a = after[i]
			}
			out = append(out, fmt.Sprintf("%s changed: %s pid %d inv %s restarts %d -> %s pid %d inv %s restarts %d",
				b.Unit, b.ActiveState, b.MainPID, short(b.InvocationID), b.NRestarts, a.ActiveState, a.MainPID, short(a.InvocationID), a.NRestarts))
		}
	}
	return out
}

// timedOnly returns the failed checks when every one of them is named in
// timed, and "" otherwise (or when none failed).
func timedOnly(rep *stress.Report, timed []string) string {
	var out []string
	for _, c := range rep.Checks {
		if c.Status != stress.Fail {
			continue
		}
		if !slices.Contains(timed, c.Name) {
			return ""
		}
		out = append(out, c.Name+" ("+c.Detail+")")
	}
	return strings.Join(out, ", ")
}

func failedChecks(rep *stress.Report) string {
	var out []string
	for _, c := range rep.Checks {
		if c.Status == stress.Fail {
			out = append(out, c.Name+" ("+c.Detail+")")
		}
	}
	if len(out) == 0 {
		return "none"
	}
	// What the calls that failed got, so a failure says why.
	var got []string
	for class, outcomes := range rep.Outcomes {
		for o, n := range outcomes {
			if o != stress.OutcomeOK {
				got = append(got, fmt.Sprintf("%s %s %d", class, o, n))
			}
		}
	}
	slices.Sort(got)
	for _, o := range slices.Sorted(maps.Keys(rep.Examples)) {
		got = append(got, fmt.Sprintf("e.g. %s: %s", o, rep.Examples[o]))
	}
	return strings.Join(out, ", ") + "; not ok: " + strings.Join(got, "; ")
}

func nonEmpty(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if st.Size() == 0 {
		return fmt.Errorf("plot %s is empty", path)
	}
	return nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// freePorts returns n distinct free loopback ports (the container shares
// the host's network namespace), reserved until the demo's process exits:
// the tunnels bind theirs only minutes later, after the container boots.
func freePorts(n int) ([]int, error) {
	out := make([]int, 0, n)
	for range n {
		p, _, err := loopport.Reserve(loopport.Dir(), time.Now().UnixNano())
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		out = append(out, p)
	}
	return out, nil
}

// demoSteadyRate is the steady load through both tunnels while production
// restarts: well under the demo's small limits (4 shell slots at 0.3 s a
// call hold about 13 shell calls/s; half of 10 calls/s are shell).
const demoSteadyRate = 10.0

// underSteadyLoad runs f while a steady load goes through both tunnels and
// returns the counts of every call that load made: what ChatGPT
// conversations behind the tunnels would have seen.
func (s *site) underSteadyLoad(ctx context.Context, f func() error) (*stress.SteadyCounts, error) {
	var targets []string
	for _, t := range s.cfg.Tunnels {
		targets = append(targets, t.URL)
	}
	stop := make(chan struct{})
	type outcome struct {
		rep *stress.SteadyReport
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		rep, err := stress.RunSteady(ctx, stress.SteadyConfig{Targets: targets, Rate: demoSteadyRate, Duration: 10 * time.Minute, Stop: stop})
		done <- outcome{rep, err}
	}()
	ferr := f()
	close(stop)
	o := <-done
	if ferr != nil {
		return nil, ferr
	}
	if o.err != nil {
		return nil, fmt.Errorf("steady load through the tunnels: %w", o.err)
	}
	c := o.rep.Total
	return &c, nil
}

// steadyProblems judges the steady load's counts: callers may get tool
// results (UNAVAILABLE from a restart, OVERLOADED after a stall) but never
// a transport failure, an HTTP error or a JSON-RPC error.
func (s *site) steadyProblems(what string, c *stress.SteadyCounts) []string {
	s.v.say("steady load through both tunnels during %s: %s", what, steadyLine(c))
	for _, sample := range c.Samples {
		s.v.say("  %s", sample)
	}
	var problems []string
	if c.Calls == 0 {
		problems = append(problems, "no call of the steady load completed during "+what)
	}
	if !c.Clean() {
		problems = append(problems, fmt.Sprintf("during %s callers saw %d transport failures, %d HTTP errors, %d JSON-RPC errors, %d unreadable replies",
			what, c.Transport, c.HTTP, c.JSONRPC, c.BadReply))
	}
	return problems
}

// steadyLine is one line of steady counts.
func steadyLine(c *stress.SteadyCounts) string {
	if c == nil {
		return "not run"
	}
	codes := ""
	for _, k := range stress.Codes(c.ToolByCode) {
		codes += fmt.Sprintf(" %s %d", k, c.ToolByCode[k])
	}
	if codes != "" {
		codes = " (" + strings.TrimSpace(codes) + ")"
	}
	return fmt.Sprintf("%d calls: %d ok, %d transport failures, %d HTTP errors, %d JSON-RPC errors, %d tool errors%s; longest wait %.0f ms (p99 %.0f ms)",
		c.Calls, c.OK, c.Transport, c.HTTP, c.JSONRPC, c.Tool, codes, c.Wait.MaxMs, c.Wait.P99Ms)
}
