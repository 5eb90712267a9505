package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/status"
	"github.com/overdeck/mcp-backend/ops/view"
)

func installCommand(d *deps) *cli.Command {
	return &cli.Command{
		Name:  "install",
		Usage: "first install on a clean host: release, current, config, units, tunnels, watchdog",
		Flags: buildFlags("mcp-backend binary to install"),
		Action: func(c *cli.Context) error {
			build, err := buildArg(c)
			if err != nil {
				return err
			}
			env, done, err := deployEnv(c, d, true)
			if err != nil {
				return err
			}
			defer done()
			rep, err := deploy.Install(c.Context, env, deploy.InstallOptions{Build: build, Version: c.String("version")})
			if warn := status.MemoryWarning(status.CgroupControllers); warn != "" && rep != nil {
				rep.Warnings = append(rep.Warnings, warn)
			}
			d.out.print(rep, func(w io.Writer, st styles) { view.Install(w, st, rep, err) })
			if err != nil {
				return fmt.Errorf("install: %w", err)
			}
			return nil
		},
	}
}
