package main

import (
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/ops/status"
	"github.com/overdeck/mcp-backend/ops/view"
	"github.com/overdeck/mcp-backend/systemd"
)

func statusCommand(d *deps) *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "one screen: production, canary, tunnels, an armed rollback, the last cutovers and rollbacks",
		Action: func(c *cli.Context) error {
			b, err := connectOpsDegraded(c, false, d.logger)
			if err != nil {
				return err
			}
			var sd status.UnitReader = noSystemd{b.sdErr}
			if b.sd != nil {
				defer b.sd.Close()
				sd = b.sd
			}
			rep := status.Gather(c.Context, b.cfg, sd, b.verify, time.Now())
			if b.sdErr != nil {
				rep.SystemdErr = b.sdErr.Error()
			}
			d.out.print(rep, func(w io.Writer, st styles) { view.Status(w, st, rep, d.out.Width()) })
			return nil
		},
	}
}

// The real client is what status reads units through.
var _ status.UnitReader = (*systemd.Client)(nil)
