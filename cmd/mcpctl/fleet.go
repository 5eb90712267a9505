package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/internal/buildinfo"
	"github.com/overdeck/mcp-backend/ops/fleet"
	"github.com/overdeck/mcp-backend/ops/fleet/agent"
	"github.com/overdeck/mcp-backend/ops/fleet/sshrun"
	"github.com/overdeck/mcp-backend/ops/outcome"
	"github.com/overdeck/mcp-backend/ops/view"
)

func fleetCommand(d *deps) *cli.Command {
	inv := func() cli.Flag {
		return &cli.StringFlag{Name: "inventory", Aliases: []string{"i"}, Value: fleet.DefaultPath, EnvVars: []string{"MCPCTL_FLEET"}, Usage: "fleet inventory `FILE` (the run log and lock live beside it)"}
	}
	return &cli.Command{
		Name:  "fleet",
		Usage: "roll one build out to many hosts over SSH in waves, each host under its own armed rollback",
		Subcommands: []*cli.Command{
			{
				Name:  "plan",
				Usage: "read every host (reachable, host key, version, pending cutover, lock, disk) and print the waves; changes nothing",
				Flags: []cli.Flag{inv(),
					&cli.StringFlag{Name: "build", Usage: "the mcp-backend `PATH` to plan for (hosts already on it are skipped)"},
					&cli.StringFlag{Name: "version", Usage: "its release `V`"}},
				Action: func(c *cli.Context) error { return fleetPlan(c, d) },
			},
			{
				Name:      "rollout",
				Usage:     "per wave, in parallel: upload, canary + stress, cutover --arm-rollback; stop and revert (or halt) on failure",
				UsageText: "mcpctl fleet rollout --build PATH --version V [--inventory FILE]",
				Flags: []cli.Flag{inv(),
					&cli.StringFlag{Name: "build", Usage: "the mcp-backend `PATH` to roll out", Required: true},
					&cli.StringFlag{Name: "version", Usage: "its release `V` (what the build's --version prints)", Required: true}},
				Action: func(c *cli.Context) error { return fleetRollout(c, d) },
			},
			{
				Name:   "status",
				Usage:  "the fleet at a glance: version, health, pending cutover, tunnels per host; the last run",
				Flags:  []cli.Flag{inv()},
				Action: func(c *cli.Context) error { return fleetStatus(c, d) },
			},
			{
				Name:   "resume",
				Usage:  "finish the last run after the controller died or the network dropped: the run log and each host's state decide what is left",
				Flags:  []cli.Flag{inv()},
				Action: func(c *cli.Context) error { return fleetResume(c, d) },
			},
			{
				Name:   "rollback",
				Usage:  "roll the hosts the last run cut over back to the snapshots it took there, newest wave first",
				Flags:  []cli.Flag{inv()},
				Action: func(c *cli.Context) error { return fleetRollback(c, d) },
			},
		},
	}
}

// fleetEnv is what every fleet command shares: the inventory, the SSH
// runner and the executor.
type fleetEnv struct {
	inv    *fleet.Inventory
	ssh    *sshrun.Runner
	runner *fleet.Runner
	view   *view.Fleet
	lock   *fleet.Lock
}

func (e *fleetEnv) close() {
	e.ssh.Close(e.inv.Hosts)
	e.lock.Release()
}

func openFleet(c *cli.Context, d *deps, lock bool) (*fleetEnv, error) {
	inv, err := fleet.Load(c.String("inventory"))
	if err != nil {
		return nil, usageError("inventory: %v", err)
	}
	e := &fleetEnv{inv: inv}
	if lock {
		l, err := fleet.TakeLock(c.Context, inv.LockPath(), "mcpctl fleet "+c.Command.Name, lockWait(c), lockWaiting(d, "fleet lock", lockWait(c)))
		if err != nil {
			return nil, withCode(outcome.Failed, fmt.Errorf("%w; wait for it (`mcpctl fleet status` shows the fleet meanwhile)", err))
		}
		e.lock = l
	}
	e.ssh, err = sshrun.New(inv.SSH)
	if err != nil {
		e.lock.Release()
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		e.close()
		return nil, fmt.Errorf("locate mcpctl: %w", err)
	}
	e.view = view.NewFleet(d.out.w, d.out.json, d.out.Printer, inv)
	e.runner = &fleet.Runner{
		Inv: inv, Remote: e.ssh, Log: &fleet.RunLog{Path: inv.LogPath()}, Logger: d.logger,
		Self: self, SelfDigest: buildinfo.ExecutableDigest(), Emit: e.view.Event,
	}
	if e.runner.SelfDigest == "" {
		e.close()
		return nil, errors.New("cannot read this mcpctl's own binary to upload it")
	}
	return e, nil
}

// buildOf reads --build and --version, checked before any host is
// contacted.
func buildOf(c *cli.Context) (*agent.Build, error) {
	path, err := buildArg(c)
	if err != nil {
		return nil, err
	}
	return agent.CheckBuild(path, c.String("build"), c.String("version"))
}

func fleetPlan(c *cli.Context, d *deps) error {
	e, err := openFleet(c, d, false)
	if err != nil {
		return err
	}
	defer e.close()
	b := &agent.Build{}
	if c.String("build") != "" {
		if b, err = buildOf(c); err != nil {
			return err
		}
	}
	plan := fleet.PlanRollout(e.inv, e.runner.Observe(c.Context), b.Digest, b.Version, b.Size)
	d.out.print(plan, func(w io.Writer, st styles) { e.view.RenderPlan(w, st, plan) })
	if len(plan.Problems) > 0 {
		return withCode(outcome.Failed, fmt.Errorf("%d host(s) would stop a rollout (fix them, then `mcpctl fleet plan` again): %s", len(plan.Problems), strings.Join(plan.Problems, "; ")))
	}
	return nil
}

func fleetRollout(c *cli.Context, d *deps) error {
	b, err := buildOf(c)
	if err != nil {
		return err
	}
	e, err := openFleet(c, d, true)
	if err != nil {
		return err
	}
	defer e.close()
	plan := fleet.PlanRollout(e.inv, e.runner.Observe(c.Context), b.Digest, b.Version, b.Size)
	if len(plan.Problems) > 0 {
		d.out.print(plan, func(w io.Writer, st styles) { e.view.RenderPlan(w, st, plan) })
		return withCode(outcome.Failed, fmt.Errorf("refused, nothing changed on any host (fix these, then `mcpctl fleet plan`): %s", strings.Join(plan.Problems, "; ")))
	}
	e.view.SetPlan(plan)
	rs, err := e.runner.Start(plan, fleet.NewRunID(time.Now()), b.Path)
	if err != nil {
		return err
	}
	return e.finish(d, e.runner.Run(c.Context, rs))
}

func (e *fleetEnv) finish(d *deps, res *fleet.Result) error {
	e.view.Final(res)
	if res.Code == 0 {
		return nil
	}
	msg := res.Message
	if len(res.Commands) > 0 {
		msg += "; next: `" + strings.Join(res.Commands, "` or `") + "`"
	}
	return withCode(res.Code, errors.New(msg))
}

func fleetResume(c *cli.Context, d *deps) error {
	e, err := openFleet(c, d, true)
	if err != nil {
		return err
	}
	defer e.close()
	events, err := e.runner.Log.Read()
	if err != nil {
		return err
	}
	rs, err := fleet.ResumeState(events)
	if err != nil {
		return withCode(outcome.Failed, fmt.Errorf("%w (`mcpctl fleet status` shows the fleet)", err))
	}
	e.view.SetRun(rs)
	if rs.Revert {
		return e.finish(d, e.runner.Revert(c.Context, rs, "resumed the revert of run "+rs.Start.Run))
	}
	if err := fleet.CheckBuild(rs, buildinfo.FileDigest); err != nil {
		return withCode(outcome.Failed, fmt.Errorf("%w (or `mcpctl fleet rollback` to undo the run)", err))
	}
	return e.finish(d, e.runner.Run(c.Context, rs))
}

func fleetRollback(c *cli.Context, d *deps) error {
	e, err := openFleet(c, d, true)
	if err != nil {
		return err
	}
	defer e.close()
	events, err := e.runner.Log.Read()
	if err != nil {
		return err
	}
	rs := fleet.LastRun(events)
	if rs == nil {
		return withCode(outcome.Failed, errors.New("the run log holds no run: nothing to roll back (`mcpctl fleet status` shows the fleet)"))
	}
	e.view.SetRun(rs)
	res := e.runner.Revert(c.Context, rs, "fleet rollback of run "+rs.Start.Run)
	if res.Code == fleet.CodeReverted {
		res.Code = 0
	}
	return e.finish(d, res)
}

func fleetStatus(c *cli.Context, d *deps) error {
	e, err := openFleet(c, d, false)
	if err != nil {
		return err
	}
	defer e.close()
	rep := e.runner.Status(c.Context)
	d.out.print(rep, func(w io.Writer, st styles) { e.view.RenderStatus(w, st, rep) })
	if h := rep.Unreadable(); h != nil {
		return withCode(outcome.Failed, fmt.Errorf("host %s cannot be read (`mcpctl fleet plan` lists why for every host): %s", h.Host, h.Error))
	}
	return nil
}
