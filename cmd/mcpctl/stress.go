package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
	"github.com/tsenart/vegeta/v12/lib/plot"
	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/internal/millis"
	"github.com/overdeck/mcp-backend/ops/outcome"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/ops/verify"
	"github.com/overdeck/mcp-backend/stress"
	"github.com/overdeck/mcp-backend/systemd"
)

func stressCommand(d *deps) *cli.Command {
	return &cli.Command{
		Name:  "stress",
		Usage: "overload the canary with vegeta; assert bounded concurrency and clean OVERLOADED",
		Description: "Offers MCP tools/call traffic (shell.exec, file and control tools) above the target's capacity,\n" +
			"samples /metrics, /healthz, the unit and production's /healthz, measures shell concurrency from the\n" +
			"commands' own clocks, and checks every bound. Exit 1 when any check fails. The verdict is recorded\n" +
			"in stateDir for the digest of the build the unit runs.",
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "target", Usage: "backend base `URL`; steady: repeat it, one per tunnel", DefaultText: "http://<canary.listen>; steady: every tunnels[].url"},
			&cli.StringFlag{Name: "production", Usage: "production base `URL` whose /healthz is sampled; empty disables (default: http://<backend.listen>)"},
			&cli.StringFlag{Name: "profile", Value: string(stress.Overload), Usage: "`overload`, spike, soak, or steady (a load well under capacity through the tunnels, e.g. during a cutover)"},
			&cli.DurationFlag{Name: "timeout", Value: stress.DefaultSteadyTimeout, Usage: "steady: how long one call may take before it counts as a transport failure"},
			&cli.BoolFlag{Name: "keepalive", Usage: "steady: reuse connections between calls (default: one connection per call)"},
			&cli.DurationFlag{Name: "duration", Usage: "attack duration", DefaultText: "20s overload, 30s spike, 10m soak"},
			&cli.Float64Flag{Name: "rate", Usage: "offered requests/s (peak for spike); 0 derives it from the target's limits"},
			&cli.StringFlag{Name: "unit", Usage: "systemd unit running the target; empty disables (default: canary.unit unless --target is given)"},
			&cli.IntFlag{Name: "pid", Usage: "sample this process instead of a unit (a backend run outside systemd)"},
			&cli.BoolFlag{Name: "faults", Usage: "also inject faults: disconnects, grandchildren, floods, oversized bodies, slow clients"},
			&cli.StringFlag{Name: "plot", Usage: "write vegeta's HTML latency plot to `FILE`"},
			&cli.StringFlag{Name: "results", Usage: "write vegeta-encoded results to `FILE` (for `vegeta report`)"},
			&cli.StringFlag{Name: "mix", Value: "5:3:2", Usage: "weights `SHELL:NORMAL:CONTROL` of the offered tool classes"},
			&cli.DurationFlag{Name: "shell-sleep", Value: 500 * time.Millisecond, Usage: "how long each offered shell.exec sleeps"},
			&cli.DurationFlag{Name: "control-p99", Value: time.Second, Usage: "bound on the p99 latency of control calls"},
			&cli.Int64Flag{Name: "response-bytes", Value: 6 << 20, Usage: "the target's limits.responseBytes (floods must stay within)"},
			&cli.Float64Flag{Name: "memory-growth", Value: 0.5, Usage: "allowed growth of the unit's memory, last third over first third (0.5 = 50%)"},
		},
		Action: func(c *cli.Context) error { return runStressCommand(c, d) },
	}
}

// stressSamplerFunc connects a sampler of unit and returns it with the
// unit's MemoryHigh (0 when infinite) and a close func: deps.stressSampler,
// systemdStressSampler when nil.
type stressSamplerFunc func(ctx context.Context, unit string) (stress.UnitSampler, uint64, func(), error)

// The real client is what units are sampled through.
var _ stress.Units = (*systemd.Client)(nil)

// systemdStressSampler connects to the system bus and returns a sampler of
// unit, the unit's MemoryHigh (0 when infinite) and a close func.
func systemdStressSampler(ctx context.Context, unit string) (stress.UnitSampler, uint64, func(), error) {
	cl, err := systemd.Connect(ctx, systemd.Options{})
	if err != nil {
		return nil, 0, nil, err
	}
	s, high, err := stress.OpenUnit(ctx, cl, unit)
	if err != nil {
		cl.Close()
		return nil, 0, nil, err
	}
	return s, high, cl.Close, nil
}

func runStressCommand(c *cli.Context, d *deps) error {
	cfg, _, err := loadCtlConfig(c)
	if err != nil {
		return err
	}
	if stress.Profile(c.String("profile")) == stress.Steady {
		return runSteadyCommand(c, d, cfg)
	}
	targets := c.StringSlice("target")
	if len(targets) > 1 {
		return usageError("--target given %d times: only the steady profile runs through several targets", len(targets))
	}
	target := ""
	if len(targets) == 1 {
		target = targets[0]
	}
	if !c.IsSet("target") {
		target = "http://" + cfg.Canary.Listen
	}
	if err := stress.CheckLoopback(target); err != nil {
		return usageError("--target: %v", err)
	}
	if stress.SameHostPort(target, cfg.Backend.Listen) {
		return usageError("--target %s is production (backend.listen %s): stress the canary, never production", target, cfg.Backend.Listen)
	}
	production := "http://" + cfg.Backend.Listen
	if c.IsSet("production") {
		production = c.String("production")
	}
	if production != "" {
		if err := stress.CheckLoopback(production); err != nil {
			return usageError("--production: %v", err)
		}
	}
	unit := c.String("unit")
	if !c.IsSet("unit") && !c.IsSet("target") {
		unit = cfg.Canary.Unit
	}
	profile := stress.Profile(c.String("profile"))
	if !profile.Known() {
		return usageError("--profile %q: must be overload, spike, soak or steady", profile)
	}
	mix, err := stress.ParseMix(c.String("mix"))
	if err != nil {
		return usageError("--mix: %v", err)
	}
	if c.Duration("shell-sleep") <= 0 || c.Duration("control-p99") <= 0 || c.Int64("response-bytes") <= 0 || c.Float64("memory-growth") < 0 {
		return usageError("--shell-sleep, --control-p99 and --response-bytes must be positive, --memory-growth not negative")
	}
	if r := c.Float64("rate"); r < 0 || r > stress.MaxRate {
		return usageError("--rate %g: must be 0 (derive) up to %g", r, stress.MaxRate)
	}
	if c.Duration("duration") < 0 {
		return usageError("--duration %s: must not be negative", c.Duration("duration"))
	}
	ctx := c.Context

	th := stress.DefaultThresholds()
	th.ControlP99 = millis.Duration(c.Duration("control-p99"))
	th.ResponseBytes = c.Int64("response-bytes")
	th.MemoryGrowth = c.Float64("memory-growth")

	var sampler stress.UnitSampler
	if pid := c.Int("pid"); pid != 0 {
		if c.IsSet("unit") && unit != "" {
			return usageError("--pid and --unit exclude each other")
		}
		if pid < 0 {
			return usageError("--pid %d: must be a process id", pid)
		}
		unit = "pid " + strconv.Itoa(pid)
		sampler = &stress.ProcSampler{PID: pid}
	} else if unit != "" {
		connect := d.stressSampler
		if connect == nil {
			connect = systemdStressSampler
		}
		s, high, closeFn, err := connect(ctx, unit)
		if err != nil {
			return withCode(outcome.Failed, fmt.Errorf("unit %s: %w (pass --unit '' to stress without unit checks)", unit, err))
		}
		defer closeFn()
		sampler, th.MemoryHigh = s, high
	}
	// Production that is already down cannot be hurt by the stress: say so
	// instead of failing on it.
	var notes []string
	if production != "" {
		if code, err := stress.NewClient(production, 2*time.Second).Health(ctx); err != nil || code != 200 {
			notes = append(notes, fmt.Sprintf("production %s not healthy before the stress (%v, HTTP %d): not sampled", production, err, code))
			production = ""
		}
	}

	run := stress.Config{
		Target: target, Production: production, Profile: profile,
		Duration: c.Duration("duration"), Rate: c.Float64("rate"), Mix: mix, ShellSleep: c.Duration("shell-sleep"),
		Faults: c.Bool("faults"), Unit: sampler, UnitName: unit, Thresholds: th, Logger: d.logger,
	}
	var sinks []func(*vegeta.Result) error
	var closers []func() error
	defer func() {
		for _, f := range closers {
			_ = f()
		}
	}()
	if path := c.String("results"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return withCode(outcome.Usage, fmt.Errorf("--results: %w", err))
		}
		closers = append(closers, f.Close)
		enc := vegeta.NewEncoder(f)
		sinks = append(sinks, enc.Encode)
	}
	var pl *plot.Plot
	if c.String("plot") != "" {
		pl = plot.New(plot.Title("mcpctl stress "+target+" ("+string(profile)+")"), plot.Label(stress.OutcomeLabel))
		sinks = append(sinks, pl.Add)
	}
	var prog *stressProgress
	if !d.out.json {
		total := c.Duration("duration")
		if total == 0 {
			total = stress.DefaultDuration(profile)
		}
		prog = newStressProgress(d.stderr, isTerminal(d.stderr), total)
		sinks = append(sinks, func(r *vegeta.Result) error { prog.add(r); return nil })
		prog.start()
		defer prog.finish()
	}
	if len(sinks) > 0 {
		run.OnResult = func(r *vegeta.Result) error {
			for _, s := range sinks {
				if err := s(r); err != nil {
					return err
				}
			}
			return nil
		}
	}

	rep, err := stress.Run(ctx, run)
	if prog != nil {
		prog.finish()
	}
	if errors.Is(err, stress.ErrInterrupted) && rep != nil {
		// Ctrl-C: what the calls so far showed, recorded for no build.
		rep.Build = &stress.Build{Note: "the run was interrupted: a partial report"}
		if d.out.json {
			_ = rep.WriteJSON(d.stdout)
		} else {
			_ = rep.RenderWidth(d.stdout, d.out.Color, d.out.Width())
		}
		return withCode(outcome.Failed, fmt.Errorf("stress interrupted after %.1fs: the partial report above is not recorded; run the same `mcpctl stress` again for a verdict", rep.AttackSeconds))
	}
	if err != nil {
		return withCode(outcome.Failed, fmt.Errorf("stress: %w", err))
	}
	if pl != nil {
		pl.Close()
		if err := stressWritePlot(c.String("plot"), pl); err != nil {
			return withCode(outcome.Failed, err)
		}
	}
	for _, n := range notes {
		rep.Checks = append(rep.Checks, stress.Check{Name: "note", Status: stress.Skip, Detail: n})
	}
	who, err := verify.ForBackend(cfg.Canary.Config)
	if err != nil {
		who = &verify.Client{} // system.info of a tokenless target still answers
	}
	recErr := stress.RecordVerdict(ctx, state.Dir(cfg.StateDir), rep, who)

	if d.out.json {
		if err := rep.WriteJSON(d.stdout); err != nil {
			return withCode(outcome.Failed, err)
		}
	} else {
		if err := rep.RenderWidth(d.stdout, d.out.Color, d.out.Width()); err != nil {
			return withCode(outcome.Failed, err)
		}
		if rep.Build != nil && rep.Build.Recorded && rep.Build.Note != "" {
			fmt.Fprintln(d.stdout, rep.Build.Note)
		}
	}
	if recErr != nil {
		return withCode(outcome.Failed, fmt.Errorf("record the stress verdict: %w", recErr))
	}
	if !rep.Pass {
		var failed []string
		for _, ch := range rep.Checks {
			if ch.Status == stress.Fail {
				failed = append(failed, ch.Name)
			}
		}
		return withCode(outcome.Failed, fmt.Errorf("stress FAILED: %s", strings.Join(failed, ", ")))
	}
	return nil
}

func stressWritePlot(path string, pl *plot.Plot) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	if _, err := pl.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("--plot: %w", err)
	}
	return f.Close()
}
