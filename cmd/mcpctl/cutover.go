package main

import (
	"context"

	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/deploy"
)

func cutoverCommand(d *deps) *cli.Command {
	return &cli.Command{
		Name:      "cutover",
		Usage:     "replace production with a candidate build under an armed automatic rollback",
		UsageText: "mcpctl cutover --build PATH --arm-rollback [--version V] [--deadline D] [--skip-canary-check REASON]",
		Flags: append(buildFlags("candidate mcp-backend binary"),
			&cli.BoolFlag{Name: "arm-rollback", Usage: "arm the automatic rollback before production restarts, so a bad deploy undoes itself even if this session dies", Required: true},
			&cli.DurationFlag{Name: "deadline", Usage: "roll back automatically unless verified within `D`", DefaultText: "rollback.deadline"},
			&cli.StringFlag{Name: "skip-canary-check", Usage: "cut over without a passing canary and stress on record, for `REASON`"},
		),
		Action: func(c *cli.Context) error {
			if c.IsSet("skip-canary-check") && strings.TrimSpace(c.String("skip-canary-check")) == "" {
				return usageError("--skip-canary-check: give the reason, e.g. --skip-canary-check \"hotfix for incident 42\"")
			}
			build, err := buildArg(c)
			if err != nil {
				return err
			}
			opts := deploy.Options{
				Build: build, Version: c.String("version"), Deadline: c.Duration("deadline"),
				ArmRollback: c.Bool("arm-rollback"), SkipCanaryReason: c.String("skip-canary-check"),
			}
			if err := opts.Validate(); err != nil {
				return err
			}
			env, closeEnv, err := deployEnv(c, d, true)
			if err != nil {
				return err
			}
			defer closeEnv()
			rep, err := deploy.Cutover(c.Context, env, opts)
			if rep != nil {
				rep.OK = err == nil
			}
			d.out.printText(rep, func(w io.Writer) { humanCutover(w, rep, err) })
			return err
		},
	}
}

// buildFlags are --build and --version of the commands that take a build
// (install, canary start, cutover); what says what the binary is for.
func buildFlags(what string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "build", Usage: what + " `PATH`", Required: true},
		&cli.StringFlag{Name: "version", Usage: "release `V`: must equal what the build's --version prints (the default); anything else is refused, exit 2"},
	}
}

// buildArg is --build as an absolute path: the release store and the
// candidate check must not depend on the working directory.
func buildArg(c *cli.Context) (string, error) {
	if strings.TrimSpace(c.String("build")) == "" {
		return "", usageError("--build: give the path of an mcp-backend binary, e.g. --build ./mcp-backend")
	}
	build, err := filepath.Abs(c.String("build"))
	if err != nil {
		return "", usageError("--build %q: %v", c.String("build"), err)
	}
	return build, nil
}

// deployEnv loads mcpctl.json and connects to systemd for the commands that
// act on production; strict as for probeClient.
func deployEnv(c *cli.Context, d *deps, strict bool) (*deploy.Env, func(), error) {
	wait := lockWait(c)
	b, err := connectOps(c, strict, d.logger)
	if err != nil {
		return nil, nil, err
	}
	env := &deploy.Env{Config: b.cfg, Systemd: b.sd, Verify: b.verify, Logger: d.logger, MCPCtl: b.self, MCPCtlConfig: b.cfgPath,
		LockWait: wait, LockWaiting: lockWaiting(d, "mcpctl lock", wait)}
	if wait == 0 {
		env.LockWait = -1 // the flag's 0: do not wait
	}
	if testPause != nil {
		env.Pause = testPause(d)
	}
	return env, b.sd.Close, nil
}

// testPause is the fault matrix's hook into a takeover (deploy.PauseEnv),
// set only in a build with the testhooks tag (testhooks.go): the
// production binary has none.
var testPause func(d *deps) func(ctx context.Context, point string)

// loadCtlConfig loads the config named by --config; the path is returned
// absolute when the operator named one, "" for the default.
func loadCtlConfig(c *cli.Context) (*ctlconfig.Config, string, error) {
	path := c.String("config")
	explicit := c.IsSet("config") && path != ""
	if path == "" {
		path = ctlconfig.DefaultPath
	}
	cfg, err := ctlconfig.Load(path, explicit)
	if err != nil {
		return nil, "", usageError("config: %v", err)
	}
	if !explicit {
		return cfg, "", nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, "", usageError("--config %q: %v", path, err)
	}
	return cfg, abs, nil
}

func humanCutover(w io.Writer, r *deploy.Report, err error) {
	if r == nil {
		return
	}
	for _, s := range r.Warnings {
		fmt.Fprintf(w, "warning: %s\n", s)
	}
	switch {
	case err == nil && r.FiredAtDeadline:
		fmt.Fprintf(w, "cutover %s -> %s done in %s (snapshot %s): verified at the deadline; the rollback timer had fired, and its run finds the cutover confirmed and does nothing\n", r.FromVersion, r.ToVersion, r.Duration.D().Round(time.Millisecond), r.SnapshotID)
	case err == nil:
		fmt.Fprintf(w, "cutover %s -> %s done in %s (snapshot %s, rollback disarmed)\n", r.FromVersion, r.ToVersion, r.Duration.D().Round(time.Millisecond), r.SnapshotID)
	case r.RolledBack:
		fmt.Fprintf(w, "cutover %s -> %s FAILED verification; rolled back to %s in %s\n", r.FromVersion, r.ToVersion, r.FromVersion, r.Rollback.Duration.D().Round(time.Millisecond))
	default:
		return
	}
	if j := r.Jobs; j != nil {
		switch {
		case j.Err != "":
			fmt.Fprintf(w, "jobs: cannot tell: %s\n", j.Err)
		default:
			fmt.Fprintf(w, "jobs: %d running before, %d still running", j.RunningBefore, j.StillRunning)
			if len(j.Ended) > 0 {
				fmt.Fprintf(w, " (ended meanwhile: %s)", strings.Join(j.Ended, " "))
			}
			fmt.Fprintln(w)
		}
	}
	for _, t := range r.Timings {
		fmt.Fprintf(w, "  %-16s %s\n", t.Step, t.Duration.D().Round(time.Millisecond))
	}
}
