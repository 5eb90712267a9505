package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/outcome"
	"github.com/overdeck/mcp-backend/ops/snapshot"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/ops/status"
	"github.com/overdeck/mcp-backend/ops/view"
)

func rollbackCommand(d *deps) *cli.Command {
	return &cli.Command{
		Name:  "rollback",
		Usage: "restore a snapshot (what the armed timer and the boot-time check run)",
		UsageText: "mcpctl rollback --snapshot ID | --last [--dry-run]   (restore)\n" +
			"   mcpctl rollback --if-pending | --snapshot ID --nonce N   (what the boot-time unit and the armed timer run)\n" +
			"   mcpctl rollback status | disarm",
		Description: "A rollback restores files, restarts the backend and verifies it: it needs an\n" +
			"explicit target. --dry-run prints the plan and every file it would change, and\n" +
			"changes nothing.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "snapshot", Usage: "restore snapshot `ID` (see mcpctl snapshot list)"},
			&cli.BoolFlag{Name: "last", Usage: "restore the pending cutover's snapshot, else the newest"},
			&cli.BoolFlag{Name: "dry-run", Usage: "print the plan and the file changes; change nothing"},
			&cli.BoolFlag{Name: "if-pending", Usage: "act only when a cutover is pending (the boot-time check)"},
			&cli.StringFlag{Name: "nonce", Usage: "act only if `N` names the pending cutover (the armed timer)"},
			// Only the boot-time unit, ordered before the backend, passes
			// --boot: it restores files without starting the backend.
			&cli.BoolFlag{Name: "boot", Hidden: true, Usage: "run by the boot-time unit: restore without starting the backend"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageError("rollback: unknown subcommand %q: want status or disarm", c.Args().First())
			}
			if id := c.String("snapshot"); id != "" {
				if err := snapshot.ValidateID(id); err != nil {
					return usageError("--snapshot: %v", err)
				}
			}
			if c.Bool("boot") && !c.Bool("if-pending") {
				return usageError("--boot: only with --if-pending (the boot-time check)")
			}
			if c.String("snapshot") != "" && c.Bool("last") {
				return usageError("rollback: --snapshot ID and --last name two targets: give one")
			}
			opts := deploy.RollbackOptions{
				SnapshotID: c.String("snapshot"), Nonce: c.String("nonce"), IfPending: c.Bool("if-pending"), Boot: c.Bool("boot"),
			}
			targeted := opts.SnapshotID != "" || c.Bool("last") || opts.IfPending || opts.Nonce != ""
			if !targeted || c.Bool("dry-run") {
				return rollbackPreview(c, d, opts, targeted)
			}
			env, closeEnv, err := deployEnv(c, d, false)
			if err != nil {
				return err
			}
			defer closeEnv()
			wait := time.Duration(0)
			if c.String("nonce") != "" || c.Bool("if-pending") {
				wait = 2 * time.Minute // unattended: outwait a cutover finishing by itself
			}
			opts.LockWait = wait
			rep, err := deploy.Rollback(c.Context, env, opts)
			d.out.printText(rep, func(w io.Writer) {
				if rep == nil {
					return
				}
				switch {
				case err != nil:
				case rep.Noop:
					fmt.Fprintf(w, "no-op: %s\n", rep.Reason)
				default:
					fmt.Fprintf(w, "rolled back to %s (snapshot %s) in %s\n", rep.Version, rep.SnapshotID, rep.Duration.D().Round(time.Millisecond))
				}
			})
			return err
		},
		Subcommands: []*cli.Command{
			{
				Name:  "status",
				Usage: "is a rollback armed, with how much time left, to which snapshot",
				Action: func(c *cli.Context) error {
					// Without systemd the marker is still worth showing; the
					// timer's state is then unknown, and so is "armed".
					b, err := connectOpsDegraded(c, false, d.logger)
					if err != nil {
						return err
					}
					// A broken marker is still a status: say what it means
					// and what to run, beside what the timer does.
					p, markerErr := state.Dir(b.cfg.StateDir).ReadPending()
					rv := status.RollbackView{Pending: p}
					if markerErr != nil {
						rv.Err = markerErr.Error()
					}
					if b.sd == nil {
						rv.TimerState = "unknown"
						rv = status.PlanRollback(rv, time.Now())
						d.out.printText(rv, func(w io.Writer) {
							fmt.Fprintf(w, "rollback timer unknown (needs systemd, not reachable); pending cutover: %s\n", pendingLine(rv.Pending, rv.Err))
						})
						return withCode(outcome.Failed, fmt.Errorf("rollback status: whether %s is armed needs systemd, not reachable: %w", deploy.RollbackTimer, b.sdErr))
					}
					defer b.sd.Close()
					// "armed" means the timer counts down, not merely that a
					// marker exists.
					st, err := b.sd.Unit(c.Context, deploy.RollbackTimer)
					if err != nil {
						return withCode(outcome.Failed, fmt.Errorf("rollback status: read %s: %w", deploy.RollbackTimer, err))
					}
					if st.LoadState != "not-found" {
						rv.TimerState = st.ActiveState
					}
					rv = status.PlanRollback(rv, time.Now())
					d.out.printText(rv, func(w io.Writer) {
						fmt.Fprintln(w, "rollback "+rv.Line(func(s ...string) string { return strings.Join(s, "") }))
					})
					if markerErr != nil {
						return withCode(outcome.Failed, fmt.Errorf("rollback status: %w; run `mcpctl snapshot list`, then `mcpctl rollback --snapshot ID` or `mcpctl rollback disarm`", markerErr))
					}
					return nil
				},
			},
			{
				Name:  "disarm",
				Usage: "stop the armed rollback timer and clear the pending marker",
				Action: func(c *cli.Context) error {
					env, closeEnv, err := deployEnv(c, d, false)
					if err != nil {
						return err
					}
					defer closeEnv()
					if err := deploy.Disarm(c.Context, env); err != nil {
						return err
					}
					fmt.Fprintln(d.stdout, "rollback disarmed")
					return nil
				},
			},
		},
	}
}

// rollbackPreview is rollback without a target (its help and what --last
// would do, exit 2) and with --dry-run (the plan and the file changes, exit
// 0): neither takes the lock, needs systemd or changes anything.
func rollbackPreview(c *cli.Context, d *deps, opts deploy.RollbackOptions, targeted bool) error {
	cfg, _, err := loadCtlConfig(c)
	if err != nil {
		return err
	}
	if !targeted {
		if err := cli.ShowSubcommandHelp(c); err != nil {
			return err
		}
	}
	p, perr := deploy.PreviewRollback(cfg.StateDir, cfg.Backend.Unit, opts)
	if !targeted {
		fmt.Fprintln(d.stdout)
		switch {
		case perr != nil:
			fmt.Fprintf(d.stdout, "`mcpctl rollback --last` would fail now: %v\n", perr)
		case p.Act:
			fmt.Fprintf(d.stdout, "`mcpctl rollback --last` would restore snapshot %s (%s): %s\n", p.SnapshotID, view.VersionOrNone(p.Version), p.Reason)
		default:
			fmt.Fprintf(d.stdout, "`mcpctl rollback --last` would do nothing: %s\n", p.Reason)
		}
		return usageError("rollback: name what to restore: --snapshot ID or --last (--dry-run shows the plan first)")
	}
	if perr != nil {
		return perr
	}
	d.out.printText(p, func(w io.Writer) {
		if !p.Act {
			fmt.Fprintf(w, "dry run: would do nothing: %s\n", p.Reason)
			return
		}
		fmt.Fprintf(w, "dry run: would restore snapshot %s (%s): %s\n", p.SnapshotID, view.VersionOrNone(p.Version), p.Reason)
		for _, ch := range p.Changes {
			fmt.Fprintf(w, "  %-9s %s\n", ch.Action, ch.Path)
		}
		fmt.Fprintf(w, "then: %s\nnothing was changed\n", strings.Join(p.Then, ", "))
	})
	return nil
}

// pendingLine describes the pending-cutover marker alone (no timer state).
func pendingLine(p *state.Pending, markerErr string) string {
	switch {
	case markerErr != "":
		return "marker unreadable (" + markerErr + ")"
	case p == nil:
		return "none"
	}
	return fmt.Sprintf("%s -> %s, snapshot %s", p.FromVersion, p.ToVersion, p.SnapshotID)
}
