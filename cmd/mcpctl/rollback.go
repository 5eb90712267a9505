package main

import (
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/ops/cutover"
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
			env, closeEnv, err := cutoverEnv(c, d, false)
			if err != nil {
				return err
			}
			defer closeEnv()
			wait := time.Duration(0)
			if c.String("nonce") != "" || c.Bool("if-pending") {
				wait = 2 * time.Minute // unattended: outwait a cutover finishing by itself
			}
			rep, err := cutover.Rollback(c.Context, env, cutover.RollbackOptions{
				SnapshotID: c.String("snapshot"), Nonce: c.String("nonce"), IfPending: c.Bool("if-pending"), LockWait: wait,
			})
			printReport(c, d, rep, func(w io.Writer) {
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
			return codeOf(err)
		},
		Subcommands: []*cli.Command{
			{
				Name:  "status",
				Usage: "is a rollback armed, with how much time left, to which snapshot",
				Action: func(c *cli.Context) error {
					cfg, _, err := loadCtlConfig(c)
					if err != nil {
						return err
					}
					p, err := state.ReadPending(cfg.StateDir)
					if err != nil {
						return err
					}
					type status struct {
						Armed   bool           `json:"armed"`
						Pending *state.Pending `json:"pending,omitempty"`
						Left    string         `json:"left,omitempty"`
					}
					st := status{Armed: p != nil, Pending: p}
					if p != nil {
						st.Left = p.Remaining(time.Now()).Round(time.Second).String()
					}
					printReport(c, d, st, func(w io.Writer) {
						if p == nil {
							fmt.Fprintln(w, "no rollback armed, no cutover pending")
							return
						}
						fmt.Fprintf(w, "rollback armed: cutover %s -> %s, snapshot %s, %s left (%s)\n", p.FromVersion, p.ToVersion, p.SnapshotID, st.Left, p.TimerUnit)
					})
					return nil
				},
			},
			{
				Name:  "disarm",
				Usage: "stop the armed rollback timer and clear the pending marker",
				Action: func(c *cli.Context) error {
					env, closeEnv, err := cutoverEnv(c, d, false)
					if err != nil {
						return err
					}
					defer closeEnv()
					if err := cutover.Disarm(c.Context, env); err != nil {
						return codeOf(err)
					}
					fmt.Fprintln(d.stdout, "rollback disarmed")
					return nil
				},
			},
		},
	}
}
