package main

import (
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/ops/deploy"
)

func recoverCommand(d *deps) *cli.Command {
	return &cli.Command{
		Name:  "recover",
		Usage: "start production again after systemd gave up on it (a crash loop failed the slot and its socket)",
		Description: "Resets the failed slot and socket and starts them again (the socket first), or,\n" +
			"right after a cutover not yet confirmed, restores that cutover's snapshot as a\n" +
			"failed verification would. What mcpctl watchdog does by itself, with a backoff.\n" +
			"Exit 0: production answers (also when it was not down); 1: nothing was done\n" +
			"(production as it was); 4: production is still down, a human is needed.",
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageError("recover: takes no arguments, got %q", c.Args().First())
			}
			env, closeEnv, err := deployEnv(c, d, false)
			if err != nil {
				return err
			}
			defer closeEnv()
			rep, err := deploy.Recover(c.Context, env, deploy.RecoverOptions{By: "mcpctl recover"})
			d.out.printText(rep, func(w io.Writer) {
				switch {
				case rep == nil || err != nil:
				case rep.Noop:
					fmt.Fprintf(w, "nothing to recover: %s\n", rep.Reason)
				case rep.Rollback != nil:
					fmt.Fprintf(w, "recovered: rolled back to %s (snapshot %s) in %s: %s\n", rep.Version, rep.Rollback.SnapshotID, rep.Duration.D().Round(time.Millisecond), rep.Reason)
				default:
					fmt.Fprintf(w, "recovered: %s serves again in %s: %s\n", rep.Version, rep.Duration.D().Round(time.Millisecond), rep.Reason)
				}
			})
			return err
		},
	}
}
