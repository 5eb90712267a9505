package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/snapshot"
	"github.com/overdeck/mcp-backend/ops/state"
)

func rollbackCommand(d *deps) *cli.Command {
	return &cli.Command{
		Name:      "rollback",
		Usage:     "restore a snapshot (what the armed timer and the boot-time check run)",
		UsageText: "mcpctl rollback [--snapshot ID] [--if-pending] [--nonce N] | rollback status | rollback disarm",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "snapshot", Usage: "snapshot `ID` (default: the pending cutover's, else the newest)"},
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
			env, closeEnv, err := deployEnv(c, d, false)
			if err != nil {
				return err
			}
			defer closeEnv()
			wait := time.Duration(0)
			if c.String("nonce") != "" || c.Bool("if-pending") {
				wait = 2 * time.Minute // unattended: outwait a cutover finishing by itself
			}
			rep, err := deploy.Rollback(c.Context, env, deploy.RollbackOptions{
				SnapshotID: c.String("snapshot"), Nonce: c.String("nonce"), IfPending: c.Bool("if-pending"), Boot: c.Bool("boot"), LockWait: wait,
			})
			d.out.printText(rep, func(w io.Writer) {
				if rep == nil {
					return
				}
				switch {
				case err != nil:
				case rep.Noop:
					fmt.Fprintf(w, "no-op: %s\n", rep.Reason)
				default:
					fmt.Fprintf(w, "rolled back to %s (snapshot %s) in %s\n", rep.Version, rep.SnapshotID, rep.Duration.Round(time.Millisecond))
				}
			})
			return err
		},
		Subcommands: []*cli.Command{
			{
				Name:  "status",
				Usage: "is a rollback armed, with how much time left, to which snapshot",
				Action: func(c *cli.Context) error {
					env, closeEnv, err := deployEnv(c, d, false)
					if err != nil {
						return err
					}
					defer closeEnv()
					// A broken marker is still a status: say what it means
					// and what to run, beside what the timer does.
					p, markerErr := state.Dir(env.Config.StateDir).ReadPending()
					rv := rollbackView{Pending: p}
					if markerErr != nil {
						rv.Err = markerErr.Error()
					}
					// "armed" means the timer counts down, not merely that a
					// marker exists.
					st, err := env.Systemd.Unit(c.Context, deploy.RollbackTimer)
					if err != nil {
						return withCode(deploy.CodeFailed, fmt.Errorf("rollback status: read %s: %w", deploy.RollbackTimer, err))
					}
					if st.LoadState != "not-found" {
						rv.TimerState = st.ActiveState
					}
					rv = planRollbackView(rv, time.Now())
					d.out.printText(rv, func(w io.Writer) {
						fmt.Fprintln(w, "rollback "+rollbackLine(rv, func(s ...string) string { return strings.Join(s, "") }))
					})
					if markerErr != nil {
						return withCode(deploy.CodeFailed, fmt.Errorf("rollback status: %w; run `mcpctl snapshot list`, then `mcpctl rollback --snapshot ID` or `mcpctl rollback disarm`", markerErr))
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
